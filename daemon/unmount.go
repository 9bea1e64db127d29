package daemon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/procfs"
)

// Unmount ends the mount at mp, as agentfs unmount does: it asks the
// daemon to unmount and waits up to timeout for it to exit; past that
// it says what the daemon is still doing and waits ExitWait more (a
// signal would not hurry it: the daemon takes one as a request to
// unmount, which it is doing). A mount whose daemon died ("transport
// endpoint is not connected") is cleared, and what the daemon left (its
// private store, its registry entry) removed. What it did beyond the
// plain case is told on notes.
func Unmount(mp string, timeout time.Duration, notes io.Writer) error {
	reg, known := ReadRegistry(mp)
	e, mounted, err := procfs.MountAt(mountinfoPath, mp)
	if err != nil {
		return err
	}
	if !mounted {
		if known && !procfs.Alive(reg.Pid) {
			cleanupAfter(notes, reg)
			fmt.Fprintf(notes, "agentfs: %s was not mounted; removed what its dead daemon (pid %d) left behind\n", mp, reg.Pid)
			return nil
		}
		if known && servesMountpoint(reg.Pid, mp) {
			return fmt.Errorf("%s is unmounted, but its daemon (pid %d) has not exited yet: it is closing the store %s (its log: %s); the store stays in use until it exits",
				mp, reg.Pid, reg.Store, filepath.Join(reg.Store, "agentfs.log"))
		}
		return fmt.Errorf("%s is not mounted", mp)
	}
	if e.FsType != FsType {
		return fmt.Errorf("%s is a %s mount, not an agentfs mount: use umount", mp, e.FsType)
	}
	c, err := ctl.Dial(mp)
	if ctl.DaemonGone(err) {
		return clearDeadMount(notes, mp, reg, known)
	}
	if err != nil {
		return err
	}
	pid, err := daemonPid(c)
	if err != nil {
		// The control file of a mount that failed: its close has
		// nothing to tell.
		_ = c.Close()
		if ctl.DaemonGone(err) {
			return clearDeadMount(notes, mp, reg, known)
		}
		return fmt.Errorf("asking the daemon of %s: %w", mp, err)
	}
	// Hold the daemon's pidfd before asking it to exit, so that waiting
	// cannot mistake a new process with a reused pid for it.
	proc := procfs.Watch(pid)
	defer func() { _ = proc.Close() }() // a pidfd, only waited on
	var rep ctl.UnmountReply
	err = c.Do(ctl.OpUnmount, nil, &rep)
	_ = c.Close() // the daemon is going; what counts is that it exits
	if err != nil {
		return fmt.Errorf("asking the daemon of %s to unmount: %w", mp, err)
	}
	if proc.Wait(timeout) {
		return finishUnmount(notes, mp, reg, known)
	}
	// Slow: say what it is still doing, and give it more time.
	log := "its log"
	if known {
		log = filepath.Join(reg.Store, "agentfs.log")
	}
	if _, mounted, _ := procfs.MountAt(mountinfoPath, mp); mounted {
		fmt.Fprintf(notes, "agentfs: the daemon (pid %d) has not ended the mount within %v; waiting %v more (see %s)\n", pid, timeout, ExitWait, log)
	} else {
		fmt.Fprintf(notes, "agentfs: %s is unmounted; its daemon (pid %d) is still closing the store after %v; waiting %v more (see %s)\n", mp, pid, timeout, ExitWait, log)
	}
	if proc.Wait(ExitWait) {
		return finishUnmount(notes, mp, reg, known)
	}
	return fmt.Errorf("the daemon (pid %d) of %s has not exited %v after it was asked to unmount (see %s); the store stays in use until it does. "+
		"kill -9 %d ends it as a crash would (the next mount resumes the store), then run agentfs unmount %s again",
		pid, mp, timeout+ExitWait, log, pid, mp)
}

// servesMountpoint reports whether process pid is a daemon started for
// mp (its command line ends with it), not another process that got its
// pid.
func servesMountpoint(pid int, mp string) bool {
	args, err := procfs.Cmdline(pid)
	return err == nil && len(args) > 1 && args[len(args)-1] == mp && slices.Contains(args, "--foreground")
}

// daemonPid asks the daemon at the other end of c for its pid: with
// OpDaemon, which costs nothing, or OpStatus from a daemon older than
// that operation.
func daemonPid(c *ctl.Client) (int, error) {
	var info ctl.DaemonInfo
	err := c.Do(ctl.OpDaemon, nil, &info)
	if errors.Is(err, syscall.ENOSYS) {
		var st ctl.Status
		err = c.Do(ctl.OpStatus, nil, &st)
		info.Pid = st.Pid
	}
	return info.Pid, err
}

// finishUnmount checks the mount is gone once its daemon has exited,
// and removes what the daemon might have left.
func finishUnmount(notes io.Writer, mp string, reg RegistryEntry, known bool) error {
	if _, mounted, _ := procfs.MountAt(mountinfoPath, mp); mounted {
		if err := UnmountOnce(mp, true); err != nil {
			return fmt.Errorf("the daemon exited but %s is still mounted: %w", mp, err)
		}
	}
	if known {
		cleanupAfter(notes, reg)
	}
	return nil
}

// clearDeadMount detaches the mount of a daemon that died and deletes
// its private store.
func clearDeadMount(notes io.Writer, mp string, reg RegistryEntry, known bool) error {
	if err := UnmountOnce(mp, true); err != nil {
		return fmt.Errorf("clearing the dead mount %s: %w", mp, err)
	}
	fmt.Fprintf(notes, "agentfs: the daemon of %s had died; cleared the mount\n", mp)
	if !known {
		return nil
	}
	// The kernel reports the daemon gone before the last of its threads
	// has left: one leaving io_uring still holds the store's lock.
	p := procfs.Watch(reg.Pid)
	defer func() { _ = p.Close() }() // a pidfd, only waited on
	if !p.Wait(deadDaemonWait) {
		fmt.Fprintf(notes, "agentfs: the dead daemon (pid %d) is still exiting; run agentfs unmount %s again to remove what it left\n", reg.Pid, mp)
		return nil
	}
	cleanupAfter(notes, reg)
	return nil
}

// deadDaemonWait is how long unmount waits for the threads of a daemon
// whose mount it cleared to exit.
const deadDaemonWait = 10 * time.Second

// cleanupAfter removes what a dead daemon left: its private store (with
// a ramdisk still mounted in it) and its registry entry.
func cleanupAfter(notes io.Writer, e RegistryEntry) {
	if procfs.Alive(e.Pid) {
		return
	}
	if e.Ephemeral && e.Store != "" {
		if IsPrivateStore(e.Store) {
			ramdisk := filepath.Join(e.Store, "ramdisk")
			if _, mounted, _ := procfs.MountAt(mountinfoPath, ramdisk); mounted {
				if err := unix.Unmount(ramdisk, unix.MNT_DETACH); err != nil {
					fmt.Fprintf(notes, "agentfs: detaching the ramdisk %s: %v\n", ramdisk, err)
				}
			}
			if err := DiscardPrivateStore(e.Store); err != nil {
				fmt.Fprintf(notes, "agentfs: %v\n", err)
			}
			// A daemon that died after moving its store aside left
			// its trash with no remover.
			sweepTrash(filepath.Dir(e.Store))
		} else if _, err := os.Stat(e.Store); err == nil {
			fmt.Fprintf(notes, "agentfs: not removing %s: it is not in the private store directory\n", e.Store)
		}
	}
	RemoveRegistry(e.Mountpoint, e.Pid)
}
