package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentfs/agentfs/config"
	"github.com/agentfs/agentfs/hide"
)

// StartTimeout bounds how long Start waits for the daemon to report.
const StartTimeout = 60 * time.Second

// Start re-executes this agentfs binary as the daemon of p (agentfs
// mount --foreground, in a session of its own, logging to the store's
// agentfs.log) and waits until its mount is ready or it reports why it
// is not. It returns the daemon's process, not waited for. Without a
// store in p, it makes a private one, which the daemon deletes when it
// ends (and Start, when the daemon fails). supervisor, when not nil, is
// the daemon's end of the line to a session's supervisor (see
// supervisor.go), handed to it as a descriptor.
func Start(p *Plan, supervisor *os.File) (*exec.Cmd, error) {
	store, ephemeral := p.Store, false
	if store == "" {
		var err error
		if store, err = MakePrivateStore(p.Lower, p.Mountpoint); err != nil {
			return nil, err
		}
		ephemeral = true
	} else if err := os.MkdirAll(store, 0o700); err != nil {
		return nil, fmt.Errorf("creating the store %s: %w", store, err)
	}
	removePrivate := func() {
		if ephemeral {
			if err := os.RemoveAll(store); err != nil {
				fmt.Fprintf(os.Stderr, "agentfs: removing the private store %s: %v\n", store, err)
			}
		}
	}
	logPath := filepath.Join(store, "agentfs.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		removePrivate()
		return nil, fmt.Errorf("opening the daemon's log in the store: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		removePrivate()
		return nil, fmt.Errorf("starting the daemon: %w", err)
	}
	defer r.Close()
	self, err := os.Executable()
	if err != nil {
		w.Close()
		removePrivate()
		return nil, fmt.Errorf("finding the agentfs binary to start the daemon: %w", err)
	}
	args := daemonArgs(p, store, ephemeral)
	cmd := exec.Command(self)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	if supervisor != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, supervisor)
		args = append(args[:len(args)-1], "--supervisor-fd=4", args[len(args)-1])
	}
	cmd.Args = append(cmd.Args, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	err = cmd.Start()
	w.Close() // the daemon has its copy; ours must go for EOF to show
	if err != nil {
		removePrivate()
		return nil, fmt.Errorf("starting the daemon: %w", err)
	}
	done := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n') // EOF: the daemon exited without a word
		done <- strings.TrimSpace(line)
	}()
	var msg string
	select {
	case msg = <-done:
	case <-time.After(StartTimeout):
		if err := cmd.Process.Kill(); err != nil {
			fmt.Fprintf(os.Stderr, "agentfs: killing the daemon that did not report: %v\n", err)
		}
		msg = fmt.Sprintf("error: the daemon did not report within %v; see %s", StartTimeout, logPath)
	}
	if msg == "ready" {
		return cmd, nil
	}
	_ = cmd.Wait() // its exit status says less than its message
	removePrivate()
	if msg == "" {
		msg = "the daemon exited without saying why; see " + logPath
		if ephemeral {
			msg = "the daemon exited without saying why; run with --foreground to see its log"
		}
	}
	return nil, errors.New(strings.TrimPrefix(msg, "error: "))
}

// daemonArgs are the arguments of the daemon's agentfs mount: the plan,
// every setting spelled out (the configuration files only add the ignore
// patterns there), and the store made for it.
func daemonArgs(p *Plan, store string, ephemeral bool) []string {
	args := []string{"mount", "--foreground", "--ready-fd=3", "--lower", p.Lower, "--store", store, "--backstore", p.Backstore}
	if p.Backstore == "ramdisk" {
		args = append(args, "--ramdisk-size", strconv.FormatInt(p.RamdiskSize, 10))
	}
	for _, f := range []struct {
		on   bool
		flag string
	}{{ephemeral, "--ephemeral"}, {p.Debug, "--debug"}, {p.NoPassthrough, "--no-passthrough"},
		{p.WritebackCache, "--writeback-cache"}, {p.NoIOURing, "--no-io-uring"}, {p.Session, "--session-mount"}} {
		if f.on {
			args = append(args, f.flag)
		}
	}
	if p.TraceCgroup != "" {
		args = append(args, "--trace-cgroup", p.TraceCgroup)
	}
	if p.System {
		args = append(args, "--system-mount")
		for _, h := range p.Exclude {
			args = append(args, "--exclude-path", h)
		}
		for _, s := range p.Seal {
			args = append(args, "--seal", s)
		}
	}
	if p.From != "" {
		args = append(args, "--from", p.From)
	}
	args = append(args, SettingsArgs(p.Activity)...)
	if len(p.MountFlags) > 0 {
		args = append(args, "-o", strings.Join(p.MountFlags, ","))
	}
	return append(args, p.Mountpoint)
}

// SettingsArgs are the flags of agentfs mount (and run) that give a
// daemon exactly the settings s (the configuration files only add the
// ignore patterns there).
func SettingsArgs(s config.Settings) []string {
	args := []string{
		"--auto-snapshot=" + strconv.FormatBool(s.AutoSnapshot),
		"--quiet-period", s.QuietPeriod.String(),
		"--auto-snapshot-keep", strconv.Itoa(s.Keep),
		"--log-size", strconv.FormatInt(s.LogSize, 10),
		"--log-reads=" + strconv.FormatBool(s.LogReads),
		"--trace=" + strconv.FormatBool(s.Trace),
		"--hash=" + strconv.FormatBool(s.Hash),
		"--max-files", maxFilesArg(s.MaxFiles),
		"--max-bytes", s.MaxBytes.String(),
	}
	for _, p := range s.Hide {
		if p.From == hide.FromFlag { // the files' patterns it reads again
			args = append(args, "--hide", p.Pattern)
		}
	}
	return args
}

func maxFilesArg(n int64) string {
	if n == 0 {
		return "off"
	}
	return strconv.FormatInt(n, 10)
}
