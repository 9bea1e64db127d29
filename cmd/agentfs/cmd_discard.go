package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// discardOptions are the flags of agentfs discard.
type discardOptions struct {
	session string
	stdout  io.Writer
}

func (o *discardOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.session, "session", "s", "", "the `SESSION` to discard (an id, or its start or end)")
}

func init() {
	register(&command{
		name:    "discard",
		summary: "drop an agentfs run session's changes (delete its store)",
		usage:   "-s SESSION",
		help: `Discard deletes the store of an agentfs run session: its changes, its
snapshots and branches are gone; the project is not touched (it never
was). The session stays listed by agentfs sessions --all, as discarded.
A running session cannot be discarded: end its command first.

Example:
  agentfs discard -s 20261121-140305-a3f9`,
		setup: func(fs *pflag.FlagSet, out streams) runFunc {
			o := &discardOptions{stdout: out.stdout}
			o.AddFlags(fs)
			return func(ctx context.Context, args []string) error { return runDiscard(ctx, o, args) }
		},
	})
}

func runDiscard(ctx context.Context, o *discardOptions, args []string) error {
	if len(args) != 0 {
		return usagef("discard takes no arguments: name the session with -s SESSION")
	}
	if o.session == "" {
		return usagef("which session? name it with -s SESSION (agentfs sessions lists them)")
	}
	r, err := findSession(o.session)
	if err != nil {
		return err
	}
	switch r.live() {
	case stateRunning, stateStarting:
		pid := r.RunPid
		if !r.runAlive() {
			pid = r.DaemonPid
		}
		return fmt.Errorf("session %s is running (%s, agentfs pid %d): its mount is in use; end the command first (exit it, or kill %d), then discard it", r.ID, r.commandString(), pid, pid)
	case stateDiscarded:
		if !r.hasStore() {
			return fmt.Errorf("session %s was discarded already", r.ID)
		}
	}
	// Hold the store's lock while deleting, so that no other agentfs
	// command has it open.
	lock, err := os.OpenFile(filepath.Join(r.Store, "lock"), os.O_RDWR, 0)
	if err == nil {
		defer lock.Close()
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return fmt.Errorf("session %s: its store is in use by another agentfs command right now: try again when it has finished", r.ID)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("session %s: %w", r.ID, err)
	}
	size := dirSize(r.Store)
	if err := os.RemoveAll(r.Store); err != nil {
		return fmt.Errorf("session %s: deleting its store %s: %w", r.ID, r.Store, err)
	}
	r.State = stateDiscarded
	if err := r.save(); err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "discarded session %s (%s freed); the project %s was not touched\n", r.ID, humanBytes(size), r.Project)
	return nil
}

// dirSize is the allocated size of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
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
