package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// TestBadFlags checks that every bad flag is refused with exit 2 and a
// message that names the problem and the fix, before anything is built
// or mounted.
func TestBadFlags(t *testing.T) {
	workdir := filepath.Join(t.TempDir(), "work")
	out := filepath.Join(t.TempDir(), "out")
	base := []string{"--workdir", workdir, "--out", out, "--fs", "native"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--runs", "0"}, "--runs 0: must be at least 1"},
		{[]string{"--warmup", "-1"}, "--warmup -1: must be 0 or more"},
		{[]string{"--only", "find,bogus"}, `unknown workload "bogus"; choose from git-status,find,`},
		{[]string{"--fs", "native,zfs"}, `unknown filesystem "zfs"; choose from native,overlayfs,fuse-overlayfs,agentfs`},
		{[]string{"--fs", "agentfs"}, "must include native: every figure is a ratio to it"},
		{[]string{"--fs", "native,agentfs", "--agentfs", "/nonexistent/agentfs"}, "not an executable file: build it (make build)"},
		{[]string{"--fs", "native,agentfs-baseline"}, "agentfs-baseline needs --baseline PATH, the agentfs binary to compare with"},
		{[]string{"--fs", "native,agentfs-baseline", "--baseline", "/nonexistent/agentfs"}, "--baseline /nonexistent/agentfs: not an executable file"},
		{[]string{"--baseline", "/nonexistent/agentfs"}, "--fs native leaves it out; add agentfs-baseline to --fs (or drop --fs)"},
		{[]string{"--out", ""}, "--out is empty"},
		{[]string{"--out", filepath.Join(workdir, "results")}, "overlap: keep the results out of the work directory"},
		{[]string{"--frobnicate"}, "unknown flag: --frobnicate"},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
	} {
		var stdout, stderr bytes.Buffer
		args := append(append([]string{}, base...), tc.args...)
		if code := run(args, &stdout, &stderr); code != exitUsage {
			t.Errorf("agentfs-bench %s: exit %d, want %d (stderr %q)", strings.Join(tc.args, " "), code, exitUsage, stderr.String())
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("agentfs-bench %s: stderr %q, want it to contain %q", strings.Join(tc.args, " "), stderr.String(), tc.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("the output directory %s was made by a refused run", out)
	}
}

func TestWorkdirOnTmpfsRefused(t *testing.T) {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		testenv.Skip(t, testenv.DevShmTmpfs, "no tmpfs at /dev/shm to refuse")
	}
	dir := "/dev/shm/agentfs-bench-test-never-made"
	var stderr bytes.Buffer
	if code := run([]string{"--workdir", dir, "--fs", "native"}, &bytes.Buffer{}, &stderr); code != exitUsage {
		t.Fatalf("exit %d, want %d (stderr %q)", code, exitUsage, stderr.String())
	}
	if want := "is on tmpfs"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want it to contain %q", stderr.String(), want)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s was made though it was refused", dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing it: %v", err)
		}
	}
}

func TestHelp(t *testing.T) {
	var stdout bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &bytes.Buffer{}); code != exitOK {
		t.Fatalf("exit %d, want %d", code, exitOK)
	}
	for _, want := range []string{"Usage:", "Examples:", "Exit codes:", "--runs", "--quick", "--workdir"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help does not mention %q", want)
		}
	}
}

func TestQuickDefaults(t *testing.T) {
	o := &options{}
	flags := newFlagSet(o)
	if err := flags.Parse([]string{"--quick", "--fs", "native", "--workdir", t.TempDir(), "--out", t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	c, err := o.config(flags)
	if err != nil {
		t.Fatal(err)
	}
	if c.runs != quickRuns || c.bigSize != quickBigSize || c.smallFiles != quickSmallFiles || c.spawns != quickSpawns {
		t.Errorf("--quick: runs %d, big %d, small files %d, spawns %d; want %d, %d, %d, %d",
			c.runs, c.bigSize, c.smallFiles, c.spawns, quickRuns, quickBigSize, quickSmallFiles, quickSpawns)
	}
	if len(c.workloads) != len(workloads) {
		t.Errorf("%d workloads, want all %d", len(c.workloads), len(workloads))
	}

	o = &options{}
	flags = newFlagSet(o)
	if err := flags.Parse([]string{"--quick", "--runs", "4", "--only", "untar, find", "--fs", "native", "--workdir", t.TempDir(), "--out", t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if c, err = o.config(flags); err != nil {
		t.Fatal(err)
	}
	if c.runs != 4 {
		t.Errorf("--quick --runs 4: runs %d, want 4", c.runs)
	}
	var names []string
	for _, w := range c.workloads {
		names = append(names, w.name)
	}
	if got, want := strings.Join(names, ","), "find,untar"; got != want {
		t.Errorf("--only untar,find: workloads %s, want %s (in table order)", got, want)
	}
}

// TestBaselineFilesystems checks where --baseline puts agentfs-baseline:
// after agentfs in the default list, or where --fs names it.
func TestBaselineFilesystems(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agentfs")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--baseline", bin}, "native,overlayfs,fuse-overlayfs,agentfs,agentfs-untraced,agentfs-nohash,agentfs-baseline,agentfs-bound,agentfs-bound-root"},
		{[]string{"--baseline", bin, "--fs", "agentfs-baseline,native,agentfs"}, "native,agentfs,agentfs-baseline"},
		{[]string{"--baseline", bin, "--fs", "native,agentfs-baseline"}, "native,agentfs-baseline"},
		// The remote row's mounts compare with the baseline too.
		{[]string{"--baseline", bin, "--fs", "native,agentfs-baseline,agentfs", "--only", "remote"}, "native,agentfs,agentfs-baseline"},
		{nil, "native,overlayfs,fuse-overlayfs,agentfs,agentfs-untraced,agentfs-nohash,agentfs-bound,agentfs-bound-root"},
	} {
		o := &options{}
		flags := newFlagSet(o)
		args := append([]string{"--agentfs", bin, "--workdir", t.TempDir(), "--out", t.TempDir()}, tc.args...)
		if err := flags.Parse(args); err != nil {
			t.Fatal(err)
		}
		c, err := o.config(flags)
		if err != nil {
			t.Fatalf("agentfs-bench %s: %v", strings.Join(tc.args, " "), err)
		}
		if got := strings.Join(c.filesystems, ","); got != tc.want {
			t.Errorf("agentfs-bench %s: filesystems %s, want %s", strings.Join(tc.args, " "), got, tc.want)
		}
		wantBin := ""
		if tc.args != nil {
			wantBin = bin
		}
		if c.baselineBin != wantBin {
			t.Errorf("agentfs-bench %s: baseline binary %q, want %q", strings.Join(tc.args, " "), c.baselineBin, wantBin)
		}
		if got := c.agentfsBinary(fsAgentfsBaseline); got != wantBin {
			t.Errorf("agentfs-bench %s: agentfsBinary(%s) = %q, want %q", strings.Join(tc.args, " "), fsAgentfsBaseline, got, wantBin)
		}
	}
}

// TestUntracedFilesystem checks agentfs-untraced: agentfs's binary,
// mounted with --trace=false, also without agentfs in --fs; and the
// spawn workload's size, full and --quick.
func TestUntracedFilesystem(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agentfs")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args      []string
		fs        string
		workloads string
		spawns    int
	}{
		{[]string{"--fs", "native,agentfs-untraced,agentfs", "--only", "spawn"}, "native,agentfs,agentfs-untraced", "spawn", fullSpawns},
		{[]string{"--fs", "native,agentfs-untraced", "--only", "spawn,find", "--quick"}, "native,agentfs-untraced", "find,spawn", quickSpawns},
	} {
		o := &options{}
		flags := newFlagSet(o)
		args := append([]string{"--agentfs", bin, "--workdir", t.TempDir(), "--out", t.TempDir()}, tc.args...)
		if err := flags.Parse(args); err != nil {
			t.Fatal(err)
		}
		c, err := o.config(flags)
		if err != nil {
			t.Fatalf("agentfs-bench %s: %v", strings.Join(tc.args, " "), err)
		}
		if got := strings.Join(c.filesystems, ","); got != tc.fs {
			t.Errorf("agentfs-bench %s: filesystems %s, want %s", strings.Join(tc.args, " "), got, tc.fs)
		}
		var names []string
		for _, w := range c.workloads {
			names = append(names, w.name)
		}
		if got := strings.Join(names, ","); got != tc.workloads {
			t.Errorf("agentfs-bench %s: workloads %s, want %s", strings.Join(tc.args, " "), got, tc.workloads)
		}
		if c.spawns != tc.spawns {
			t.Errorf("agentfs-bench %s: spawns %d, want %d", strings.Join(tc.args, " "), c.spawns, tc.spawns)
		}
		if got := c.agentfsBinary(fsAgentfsUntraced); got != bin {
			t.Errorf("agentfs-bench %s: agentfsBinary(%s) = %q, want %q", strings.Join(tc.args, " "), fsAgentfsUntraced, got, bin)
		}
	}
	if !agentfsMount(fsAgentfsUntraced) || boundVariant(fsAgentfsUntraced) {
		t.Errorf("%s: agentfsMount %v, boundVariant %v; want true, false", fsAgentfsUntraced, agentfsMount(fsAgentfsUntraced), boundVariant(fsAgentfsUntraced))
	}
	for filesystem, want := range map[string]string{fsAgentfsUntraced: "--trace=false", fsAgentfsNohash: "--hash=false", fsAgentfs: "", fsAgentfsBaseline: "", fsAgentfsBound: ""} {
		if got := strings.Join(mountFlags(filesystem), " "); got != want {
			t.Errorf("mountFlags(%s) = %q, want %q", filesystem, got, want)
		}
	}
}
