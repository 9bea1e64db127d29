package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// childEnv is the environment of every command the benchmark runs: the
// caller's, with HOME, caches and temporary files moved into the work
// directory (nothing is written elsewhere), no user or system git
// config, the go command offline, and a C locale (grep's speed depends
// on it).
func childEnv(workdir string) []string {
	home := filepath.Join(workdir, "home")
	return withEnv(os.Environ(),
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
		"TMPDIR="+filepath.Join(workdir, "tmp"),
		"LC_ALL=C",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=agentfs-bench",
		"GIT_AUTHOR_EMAIL=agentfs-bench@localhost",
		"GIT_COMMITTER_NAME=agentfs-bench",
		"GIT_COMMITTER_EMAIL=agentfs-bench@localhost",
		"GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=gc.auto",
		"GIT_CONFIG_VALUE_0=0",
		"GIT_CONFIG_KEY_1=maintenance.auto",
		"GIT_CONFIG_VALUE_1=false",
		"GOFLAGS=-mod=mod",
		"GOPROXY=off",
		"GOTOOLCHAIN=local",
		"GOWORK=off",
		"GO111MODULE=on",
		"GOENV=off",
		"GOPATH="+filepath.Join(home, "go"),
		"GOCACHE="+filepath.Join(home, ".cache", "go-build"),
		// agentfs keeps its private stores and its mount registry in the
		// work directory too, on the same disk as the other uppers.
		"AGENTFS_PRIVATE_DIR="+filepath.Join(workdir, "agentfs"),
		"AGENTFS_RUNTIME_DIR="+filepath.Join(workdir, "agentfs", "run"),
	)
}

// withEnv returns env with the KEY=VALUE pairs of set replacing any
// earlier values of the same keys.
func withEnv(env []string, set ...string) []string {
	drop := map[string]bool{}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		drop[k] = true
	}
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out = append(out, kv)
		}
	}
	out = append(out, set...)
	sort.Strings(out)
	return out
}

// commandContext is exec.CommandContext that, on cancellation, signals
// the command's whole process group (tar, go vet and git start
// children) and gives it a moment to exit.
func commandContext(ctx context.Context, dir string, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// commandError describes a failed command with the end of its error output.
func commandError(args []string, err error, stderr string) error {
	// One line, for the table's notes.
	msg := strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(stderr), "\n", " / ")), " ")
	if msg == "" {
		return fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, msg)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }

// lineCounter counts the lines written to it.
type lineCounter struct{ n int }

func (c *lineCounter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b == '\n' {
			c.n++
		}
	}
	return len(p), nil
}
