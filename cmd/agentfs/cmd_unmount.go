package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/ctl"
)

// unmountOptions are the flags of agentfs unmount.
type unmountOptions struct {
	timeout time.Duration
	stderr  io.Writer
}

func (o *unmountOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for the daemon to exit before sending it SIGTERM,\na `DURATION` such as 30s")
}

func init() {
	register(&command{
		name:    "unmount",
		summary: "unmount a mount (its changes are discarded unless it has a --store)",
		usage:   "[--timeout DURATION] MOUNTPOINT",
		help: `Unmount asks the mount's daemon to unmount and waits for it to exit.
Without a --store, the changes are discarded. A mount that is still in
use (a shell or program inside it) is detached: those programs lose it.

If the daemon died, unmount clears the dead mount ("transport endpoint
is not connected") and deletes its private store.

Example:
  agentfs unmount /mnt/ws`,
		setup: func(fs *pflag.FlagSet, out streams) runFunc {
			o := &unmountOptions{stderr: out.stderr}
			o.AddFlags(fs)
			return func(ctx context.Context, args []string) error { return runUnmount(ctx, o, args) }
		},
	})
}

func runUnmount(ctx context.Context, o *unmountOptions, args []string) error {
	if len(args) != 1 {
		return usagef("unmount takes one MOUNTPOINT, got %d arguments", len(args))
	}
	mp, err := filepath.Abs(args[0])
	if err != nil {
		return fmt.Errorf("the mountpoint %s: %w", args[0], err)
	}
	// A dead mount cannot be resolved (see ctl.DaemonGone): keep
	// the path as given then.
	if r, err := filepath.EvalSymlinks(mp); err == nil {
		mp = r
	}
	reg, known := readRegistry(mp)
	e, mounted, err := mountAt(mp)
	if err != nil {
		return err
	}
	if !mounted {
		if known && !alive(reg.Pid) {
			cleanupAfter(o.stderr, reg)
			fmt.Fprintf(o.stderr, "agentfs: %s was not mounted; removed what its dead daemon (pid %d) left behind\n", mp, reg.Pid)
			return nil
		}
		return fmt.Errorf("%s is not mounted", mp)
	}
	if e.FsType != agentfsFsType {
		return fmt.Errorf("%s is a %s mount, not an agentfs mount: use umount", mp, e.FsType)
	}
	c, err := ctl.Dial(mp)
	if ctl.DaemonGone(err) {
		return clearDeadMount(o.stderr, mp, reg, known)
	}
	if err != nil {
		return err
	}
	var st ctl.Status
	err = c.Do(ctl.OpStatus, nil, &st)
	if ctl.DaemonGone(err) {
		c.Close()
		return clearDeadMount(o.stderr, mp, reg, known)
	}
	if err != nil {
		c.Close()
		return fmt.Errorf("asking the daemon of %s: %w", mp, err)
	}
	// Hold the daemon's pidfd before asking it to exit, so that waiting
	// cannot mistake a new process with a reused pid for it.
	proc := watchProcess(st.Pid)
	defer proc.close()
	var rep ctl.UnmountReply
	err = c.Do(ctl.OpUnmount, nil, &rep)
	c.Close()
	if err != nil {
		return fmt.Errorf("asking the daemon of %s to unmount: %w", mp, err)
	}
	if proc.wait(o.timeout) {
		return finishUnmount(o.stderr, mp, reg, known)
	}
	fmt.Fprintf(o.stderr, "agentfs: the daemon (pid %d) did not exit within %v; sending it SIGTERM\n", st.Pid, o.timeout)
	proc.signal(syscall.SIGTERM)
	if proc.wait(busyWait + detachGrace + abortWait + 5*time.Second) {
		return finishUnmount(o.stderr, mp, reg, known)
	}
	return fmt.Errorf("the daemon (pid %d) of %s does not exit: kill -9 %d, then run agentfs unmount %s again", st.Pid, mp, st.Pid, mp)
}

// finishUnmount checks the mount is gone once its daemon has exited,
// and removes what the daemon might have left.
func finishUnmount(stderr io.Writer, mp string, reg registryEntry, known bool) error {
	if _, mounted, _ := mountAt(mp); mounted {
		if err := unmountOnce(mp, true); err != nil {
			return fmt.Errorf("the daemon exited but %s is still mounted: %w", mp, err)
		}
	}
	if known {
		cleanupAfter(stderr, reg)
	}
	return nil
}

// clearDeadMount detaches the mount of a daemon that died and deletes
// its private store.
func clearDeadMount(stderr io.Writer, mp string, reg registryEntry, known bool) error {
	if err := unmountOnce(mp, true); err != nil {
		return fmt.Errorf("clearing the dead mount %s: %w", mp, err)
	}
	fmt.Fprintf(stderr, "agentfs: the daemon of %s had died; cleared the mount\n", mp)
	if !known {
		return nil
	}
	// The kernel reports the daemon gone before the last of its threads
	// has left: one leaving io_uring still holds the store's lock.
	p := watchProcess(reg.Pid)
	defer p.close()
	if !p.wait(deadDaemonWait) {
		fmt.Fprintf(stderr, "agentfs: the dead daemon (pid %d) is still exiting; run agentfs unmount %s again to remove what it left\n", reg.Pid, mp)
		return nil
	}
	cleanupAfter(stderr, reg)
	return nil
}

// deadDaemonWait is how long unmount waits for the threads of a daemon
// whose mount it cleared to exit.
const deadDaemonWait = 10 * time.Second

// cleanupAfter removes what a dead daemon left: its private store (with
// a ramdisk still mounted in it) and its registry entry.
func cleanupAfter(stderr io.Writer, e registryEntry) {
	if alive(e.Pid) {
		return
	}
	if e.Ephemeral && e.Store != "" {
		if isPrivateStore(e.Store) {
			ramdisk := filepath.Join(e.Store, "ramdisk")
			if _, mounted, _ := mountAt(ramdisk); mounted {
				unix.Unmount(ramdisk, unix.MNT_DETACH)
			}
			if err := os.RemoveAll(e.Store); err != nil {
				fmt.Fprintf(stderr, "agentfs: removing the private store %s: %v\n", e.Store, err)
			}
		} else if _, err := os.Stat(e.Store); err == nil {
			fmt.Fprintf(stderr, "agentfs: not removing %s: it is not in the private store directory\n", e.Store)
		}
	}
	removeRegistry(e.Mountpoint, e.Pid)
}

// alive reports whether pid is a running process. A zombie (killed, not
// yet reaped by its parent) is not, once all its threads have exited:
// its first thread turns zombie at once, while another may still be
// leaving io_uring, holding the store's lock.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // exited meanwhile
		}
		// "pid (comm) S ...": the state follows the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			switch b[i+2] {
			case 'Z', 'X':
				continue
			}
		}
		return true
	}
	return false
}

// process watches a process's exit, through a pidfd when the kernel has
// them.
type process struct {
	pid   int
	pidfd int
}

func watchProcess(pid int) *process {
	p := &process{pid: pid, pidfd: -1}
	if pid > 0 {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			p.pidfd = fd
		}
	}
	return p
}

// wait waits up to d for the process to exit and reports whether it did.
func (p *process) wait(d time.Duration) bool {
	if p.pid <= 0 {
		return true
	}
	if p.pidfd >= 0 {
		deadline := time.Now().Add(d)
		for {
			ms := int(time.Until(deadline).Milliseconds())
			if ms < 0 {
				ms = 0
			}
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}, ms)
			if err == unix.EINTR {
				continue
			}
			return err == nil && n > 0
		}
	}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !alive(p.pid) {
			return true
		}
	}
	return !alive(p.pid)
}

func (p *process) signal(sig syscall.Signal) {
	if p.pidfd >= 0 {
		unix.PidfdSendSignal(p.pidfd, sig, nil, 0)
		return
	}
	if p.pid > 0 {
		syscall.Kill(p.pid, sig)
	}
}

func (p *process) close() {
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
}
