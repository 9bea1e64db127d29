// Package procgroup holds a command and every process it starts in one
// group that can be stopped whole, whatever the processes do: put
// themselves in the background, double-fork, start sessions of their
// own. It is a cgroup (version 2): the kernel keeps every descendant in
// it, re-parenting cannot take one out, and cgroup.kill ends them all
// at once.
//
// # Layout
//
// A group is a directory made below the cgroup this process runs in
// (the top, Dir), in the version-2 hierarchy wherever it is mounted
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid system). Each
// Start makes a fresh leaf below it, run-1, run-2, ..., and starts its
// command straight into the leaf (clone3 with CLONE_INTO_CGROUP), so
// that not even its first instructions run outside. A leaf is never
// started into twice: once cgroup.kill has been written to a cgroup,
// the kernel kills every process later cloned into it (its kill
// sequence no longer matches the parent's), so a command started again
// after a stop that needed SIGKILL must go to a cgroup that was never
// killed. Start removes the leaves of earlier runs once they are empty.
//
// The group is the whole subtree of the top: a process in a cgroup its
// command made below a leaf is in the group (Within), is signalled by
// Stop and is killed with it. Path is the top's path as /proc/PID/cgroup
// names it; a process is in the group when its path is Path or below.
//
// # Limits
//
// A process can still leave the group on purpose, by writing its pid to
// the cgroup.procs of a cgroup outside it: root can, a user can within a
// cgroup delegated to them, and systemd-run --scope asks systemd to. Stop
// does not reach such a process.
//
// # Requirements
//
// Making a group needs write access to this process's cgroup: root, or
// a cgroup delegated to the user. Starting into it needs
// CLONE_INTO_CGROUP (Linux 5.7); New tries it, and says plainly when
// either is missing (ErrUnavailable). cgroup.kill (Linux 5.14) is used
// when there is one; without it Stop freezes the group (cgroup.freeze,
// Linux 5.2) and kills each process.
package procgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Group is one cgroup subtree of processes.
type Group struct {
	dir  string // the top cgroup's directory in the cgroup file system
	path string // its path in the hierarchy, as /proc/PID/cgroup says it
	// canKill: the kernel has cgroup.kill (else Stop kills pid by pid).
	canKill bool

	mu     sync.Mutex // runs, leaves, closed
	closed bool
	runs   int // the leaves made so far (run-N)
	// leaves are the leaves made and not removed yet, oldest first.
	leaves []string
}

// ErrUnavailable: no cgroup can be made here, or started into (no
// version-2 hierarchy, no write access to it, a kernel without
// CLONE_INTO_CGROUP).
var ErrUnavailable = errors.New("no cgroup (version 2) can be made for the command")

// New makes a group named name (a file name) below this process's
// cgroup, and checks that a process can be started into it.
func New(name string) (*Group, error) {
	mountpoint, rel, err := ownCgroup()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	dir := filepath.Join(mountpoint, rel, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: making %s: %v: run as root, or in a cgroup delegated to you", ErrUnavailable, dir, err)
	}
	g := &Group{dir: dir, path: filepath.Join(rel, name)}
	_, err = os.Stat(filepath.Join(dir, "cgroup.kill"))
	g.canKill = err == nil
	if err := g.probe(); err != nil {
		_ = os.Remove(dir) // just made, and nothing runs in it
		return nil, err
	}
	return g, nil
}

// probe checks that the kernel starts a process into the group
// (CLONE_INTO_CGROUP, Linux 5.7, and the right to move a process into
// the cgroup): it clones a process into the top and has it exec a path
// through a file that is no directory (the top's cgroup.procs), which
// fails at once with ENOTDIR. clone3 never returns ENOTDIR, while it
// does return EACCES, EPERM or ENOENT when the migration into the
// cgroup is not permitted (a cgroup delegated wrongly): any error but
// ENOTDIR is the clone's.
func (g *Group) probe() error {
	fd, err := unix.Open(g.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the cgroup %s: %w", g.dir, err)
	}
	defer unix.Close(fd)
	target := filepath.Join(g.dir, "cgroup.procs", "probe")
	_, err = syscall.ForkExec(target, []string{target}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd},
	})
	return probeOutcome(g.dir, err)
}

// probeOutcome says what the probe's ForkExec error err means (see
// probe).
func probeOutcome(dir string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOTDIR):
		return nil
	case err == nil:
		return fmt.Errorf("probing CLONE_INTO_CGROUP: executing %s succeeded", filepath.Join(dir, "cgroup.procs", "probe"))
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%w: starting a process into the cgroup %s was refused: %v: run as root, or in a cgroup delegated to you (its cgroup.procs and the one above writable by you)", ErrUnavailable, dir, err)
	}
	return fmt.Errorf("%w: starting a process into the cgroup %s (clone3 with CLONE_INTO_CGROUP) failed: %v: it needs Linux 5.7 or later (this is %s)", ErrUnavailable, dir, err, kernelRelease())
}

// kernelRelease is uname -r, for messages.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "an unknown kernel"
	}
	return "Linux " + unix.ByteSliceToString(u.Release[:])
}

// Dir is the top of the group in the cgroup file system: every process
// of the group is in it or in a cgroup below it (for a BPF program's
// bpf_current_task_under_cgroup, say).
func (g *Group) Dir() string { return g.dir }

// Path is the top's path in the hierarchy, as /proc/PID/cgroup names it
// ("0::PATH") for a process in it; a process of the group is in Path or
// below it (Within).
func (g *Group) Path() string { return g.path }

// Within reports whether cgroup path p (as Of returns it) is top or
// below it.
func Within(p, top string) bool {
	return p != "" && (p == top || strings.HasPrefix(p, strings.TrimSuffix(top, "/")+"/"))
}

// Of returns the version-2 cgroup path of process pid (as Path), or ""
// when it cannot be read (the process is gone).
func Of(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			return rel
		}
	}
	return ""
}

// Leaf is the name of the leaf the last Start made ("run-N"), "" before
// the first. A process of that start is in it or below it (LeafOf).
func (g *Group) Leaf() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.runs == 0 {
		return ""
	}
	return leafName(g.runs)
}

// leafName is the name of the leaf of the n-th Start.
func leafName(n int) string { return fmt.Sprintf("run-%d", n) }

// LeafOf returns the name of the leaf of group top that cgroup path p
// (as Of returns it) is in or below: which Start's processes it is
// among; "" when p is top itself or not below it.
func LeafOf(p, top string) string {
	rest, ok := strings.CutPrefix(p, strings.TrimSuffix(top, "/")+"/")
	if !ok || p == "" {
		return ""
	}
	leaf, _, _ := strings.Cut(rest, "/")
	return leaf
}

// Start starts cmd inside the group, in a leaf of its own (see Layout),
// and removes the leaves of earlier runs that are empty.
func (g *Group) Start(cmd *exec.Cmd) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("starting %s: the group %s is closed", cmd.Path, g.dir)
	}
	g.removeEmptyLeavesLocked()
	g.runs++
	leaf := filepath.Join(g.dir, leafName(g.runs))
	if err := os.Mkdir(leaf, 0o755); err != nil {
		return fmt.Errorf("making the cgroup %s: %w", leaf, err)
	}
	g.leaves = append(g.leaves, leaf)
	fd, err := unix.Open(leaf, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the cgroup %s: %w", leaf, err)
	}
	defer unix.Close(fd) // the child has it by then
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
	return cmd.Start()
}

// removeEmptyLeavesLocked removes the leaves (and what their processes
// made below them) that no process is in any more. A busy one stays
// whole for a later call: removing the empty cgroups below it would
// take from its processes what they made. g.mu is held.
func (g *Group) removeEmptyLeavesLocked() {
	kept := g.leaves[:0]
	for _, leaf := range g.leaves {
		if populated(leaf) || removeTree(leaf) != nil {
			kept = append(kept, leaf)
		}
	}
	g.leaves = kept
}

// populated reports whether a process is in cgroup dir or below it, as
// its cgroup.events says; when that cannot be read (the cgroup is gone),
// false.
func populated(dir string) bool {
	v, err := event(dir, "populated")
	return err == nil && v == "1"
}

// removeTree removes cgroup dir and the cgroups below it, deepest first.
// A cgroup with a process in it cannot be removed (EBUSY).
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, removeTree(filepath.Join(dir, e.Name())))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing the cgroup %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// Close stops what is left in the group (no grace) and removes it. A
// second call does nothing.
func (g *Group) Close() error {
	g.mu.Lock()
	closed := g.closed
	g.closed = true
	g.mu.Unlock()
	if closed {
		return nil
	}
	var errs []error
	if empty, err := g.Empty(); err != nil || !empty {
		if err := g.Stop(0); err != nil {
			errs = append(errs, err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leaves = nil
	// The group is empty now: Stop waited until no process was left in
	// it, and cgroup v2 stops counting a process when it exits (a zombie
	// not yet reaped is no longer in it). rmdir can still see the group
	// busy for a moment after the last exit: try for a second.
	for i := 0; ; i++ {
		err := removeTree(g.dir)
		if err == nil {
			break
		}
		if i == 100 {
			errs = append(errs, err)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.Join(errs...)
}
