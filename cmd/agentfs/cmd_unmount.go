package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentfs/agentfs/ctl"
)

func init() {
	register(&command{
		name:    "unmount",
		summary: "unmount a mount (its changes are discarded unless it has a --store)",
		usage:   "MOUNTPOINT",
		help: `Unmount asks the daemon to unmount and waits for it to exit. Without a
--store, the changes are discarded. If the daemon died, unmount still
clears the dead mount and its private store.

Example:
  agentfs unmount /mnt/ws`,
		run: runUnmount,
	})
}

func runUnmount(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return usagef("unmount takes one MOUNTPOINT, got %d arguments", len(args))
	}
	mp, err := filepath.Abs(args[0])
	if err != nil {
		return err
	}
	if r, err := filepath.EvalSymlinks(mp); err == nil {
		mp = r
	}
	reg, known := readRegistry(mp)
	if !inMountinfo(mp) {
		if known {
			cleanupAfter(reg)
		}
		return fmt.Errorf("%s is not mounted", mp)
	}
	c, err := ctl.Dial(mp)
	if err == nil {
		var rep struct{ Pid int }
		err = c.Do(ctl.OpUnmount, nil, &rep)
		c.Close()
		if err == nil {
			if waitGone(rep.Pid, mp, 10*time.Second) {
				return nil
			}
			syscall.Kill(rep.Pid, syscall.SIGTERM)
			if waitGone(rep.Pid, mp, 5*time.Second) {
				return nil
			}
			return fmt.Errorf("the daemon (pid %d) did not finish unmounting %s: is a process still using it? (fuser -m %s)", rep.Pid, mp, mp)
		}
	}
	// The daemon is gone (or not answering): detach the dead mount.
	if err := unmountOnce(mp, true); err != nil {
		return fmt.Errorf("clearing the dead mount %s: %w", mp, err)
	}
	if known {
		cleanupAfter(reg)
	}
	return nil
}

// waitGone waits until pid has exited and mp is no longer mounted.
func waitGone(pid int, mp string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		alive := pid > 0 && syscall.Kill(pid, 0) == nil
		if !alive && !inMountinfo(mp) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// cleanupAfter removes what a dead daemon left: its private store and
// its registry entry.
func cleanupAfter(e registryEntry) {
	if e.Pid > 0 && syscall.Kill(e.Pid, 0) == nil {
		return // still running
	}
	if e.Ephemeral && e.Store != "" {
		if err := os.RemoveAll(e.Store); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "agentfs unmount: removing the private store %s: %v\n", e.Store, err)
		}
	}
	removeRegistry(e.Mountpoint)
}
