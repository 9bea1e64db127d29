// Package procgroup holds a command and every process it starts in one
// group that can be stopped whole, whatever the processes do: put
// themselves in the background, double-fork, start sessions of their
// own. It is a cgroup (version 2): the kernel keeps every descendant in
// it, re-parenting cannot take one out, and cgroup.kill ends them all
// at once.
//
// A group is made below the cgroup this process runs in, in the
// version-2 hierarchy wherever it is mounted (/sys/fs/cgroup, or
// /sys/fs/cgroup/unified on a hybrid system); its command is started
// straight into it (clone3 with CLONE_INTO_CGROUP), so that not even its
// first instructions run outside. Making one needs write access there:
// root, or a cgroup delegated to the user. New says plainly when there
// is none.
package procgroup

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

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/procfs"
)

// Group is one cgroup of processes.
type Group struct {
	dir  string // the cgroup's directory in the cgroup file system
	path string // its path in the hierarchy, as /proc/PID/cgroup says it
	fd   int    // an O_PATH descriptor of it, for CLONE_INTO_CGROUP
}

// ErrUnavailable: no cgroup can be made here (no version-2 hierarchy,
// or no write access to it).
var ErrUnavailable = errors.New("no cgroup (version 2) can be made for the command")

// New makes a group named name (a file name) below this process's
// cgroup.
func New(name string) (*Group, error) {
	root, rel, err := ownCgroup()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	dir := filepath.Join(root, rel, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: making %s: %v: run as root, or in a cgroup delegated to you", ErrUnavailable, dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir) // just made, and empty
		return nil, fmt.Errorf("opening the cgroup %s: %w", dir, err)
	}
	return &Group{dir: dir, path: filepath.Join(rel, name), fd: fd}, nil
}

// Dir is the group's directory in the cgroup file system.
func (g *Group) Dir() string { return g.dir }

// Path is the group's path in the hierarchy, as /proc/PID/cgroup
// names it ("0::PATH") for a process in it.
func (g *Group) Path() string { return g.path }

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

// Start starts cmd inside the group.
func (g *Group) Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = g.fd
	return cmd.Start()
}

// Pids lists the processes in the group.
func (g *Group) Pids() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Empty reports whether no process is left in the group.
func (g *Group) Empty() (bool, error) {
	f, err := os.Open(filepath.Join(g.dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "populated "); ok {
			return v == "0", nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return false, fmt.Errorf("%s/cgroup.events has no populated line", g.dir)
}

// killWait bounds how long Stop waits for the processes to be gone
// after cgroup.kill (the kernel ends them at once; their exit takes
// what closing their files takes).
const killWait = 10 * time.Second

// Stop ends every process of the group: SIGTERM to each, up to grace
// for them to exit, then SIGKILL to whatever is left (cgroup.kill, which
// no process can dodge), and it waits until the group is empty. A
// process that is a child of the caller stays a zombie until the caller
// waits for it.
func (g *Group) Stop(grace time.Duration) error {
	pids, err := g.Pids()
	if err != nil {
		return fmt.Errorf("listing the processes of %s: %w", g.dir, err)
	}
	for _, pid := range pids {
		// A process that has exited meanwhile is no error.
		_ = unix.Kill(pid, unix.SIGTERM)
	}
	if g.waitEmpty(grace) {
		return nil
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("killing the processes of %s: %w", g.dir, err)
	}
	if !g.waitEmpty(killWait) {
		left, _ := g.Pids() // for the message only
		return fmt.Errorf("the processes of %s did not end within %v of SIGKILL: %v", g.dir, killWait, left)
	}
	return nil
}

// waitEmpty waits up to d for the group to be empty and reports whether
// it is.
func (g *Group) waitEmpty(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if empty, err := g.Empty(); err == nil && empty {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close stops what is left in the group (no grace) and removes it.
func (g *Group) Close() error {
	var errs []error
	if empty, err := g.Empty(); err != nil || !empty {
		if err := g.Stop(0); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unix.Close(g.fd); err != nil {
		errs = append(errs, err)
	}
	// rmdir of a cgroup fails with EBUSY while a zombie of it is not
	// reaped: try for a moment.
	for i := 0; ; i++ {
		err := os.Remove(g.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			break
		}
		if i == 100 {
			errs = append(errs, fmt.Errorf("removing the cgroup %s: %w", g.dir, err))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.Join(errs...)
}

// ownCgroup returns where the version-2 hierarchy is mounted and this
// process's cgroup in it.
func ownCgroup() (root, rel string, err error) {
	root, err = v2Root()
	if err != nil {
		return "", "", err
	}
	if rel = Of(os.Getpid()); rel == "" {
		return "", "", errors.New("this process is in no version-2 cgroup (/proc/self/cgroup has no 0:: line)")
	}
	return root, rel, nil
}

// v2Root returns where the version-2 cgroup hierarchy is mounted.
func v2Root() (string, error) {
	mounts, err := procfs.Mounts(procfs.MountinfoPath)
	if err != nil {
		return "", err
	}
	for _, m := range mounts {
		if m.FsType == "cgroup2" {
			return m.Mountpoint, nil
		}
	}
	return "", errors.New("no cgroup2 file system is mounted")
}
