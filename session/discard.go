package session

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/ctl"
)

// Discard deletes the store of the session, which must not be running,
// and records it as discarded; the project is not touched. It returns
// the bytes freed.
func (r *Record) Discard() (int64, error) {
	switch r.Live() {
	case StateRunning, StateStarting:
		pid := r.RunPid
		if !r.RunAlive() {
			pid = r.DaemonPid
		}
		return 0, fmt.Errorf("session %s is running (%s, agentfs pid %d): its mount is in use; end the command first (exit it, or kill %d), then discard it", r.ID, r.CommandString(), pid, pid)
	case StateDiscarded:
		if !r.HasStore() {
			return 0, fmt.Errorf("session %s was discarded already", r.ID)
		}
	}
	// Hold the store's lock while deleting, so that no other agentfs
	// command has it open.
	lock, err := os.OpenFile(filepath.Join(r.Store, "lock"), os.O_RDWR, 0)
	if err == nil {
		defer lock.Close()
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return 0, fmt.Errorf("session %s: its store is in use by another agentfs command right now: try again when it has finished", r.ID)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("session %s: %w", r.ID, err)
	}
	size := dirSize(r.Store)
	if err := os.RemoveAll(r.Store); err != nil {
		return 0, fmt.Errorf("session %s: deleting its store %s: %w", r.ID, r.Store, err)
	}
	r.State = StateDiscarded
	return size, r.Save()
}

// dirSize is the allocated size of the files under dir (what cannot be
// read counts nothing).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, _ iofs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}

// Numbers reads, from the session's daemon or its store, how many
// snapshots it has and what it changed. The count is returned even when
// the changes cannot be read.
func (r *Record) Numbers(version string) (snapshots int, changes Summary, err error) {
	c, err := r.Dial(version)
	if err != nil {
		return 0, Summary{}, err
	}
	defer func() {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}()
	snaps, err := c.Snapshots()
	if err != nil {
		return 0, Summary{}, err
	}
	rep, err := c.Diff(ctl.DiffArgs{})
	if err != nil {
		return len(snaps.Snapshots), Summary{}, err
	}
	return len(snaps.Snapshots), Summarize(rep.Changes), nil
}
