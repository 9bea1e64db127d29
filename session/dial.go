package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/contenthash"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/procfs"
	"github.com/agentfs/agentfs/workspace"
)

// Dial connects to session ref (see Find): to its daemon while it
// runs, else to its store opened in this process. The client serves
// the same operations either way. version is agentfs's, for status.
func Dial(ref, version string) (*workspace.Client, *Record, error) {
	r, err := Find(ref)
	if err != nil {
		return nil, nil, err
	}
	c, err := r.Dial(version)
	return c, r, err
}

// Dial connects to the session (see the package doc).
func (r *Record) Dial(version string) (*workspace.Client, error) {
	switch st := r.Live(); {
	case st == StateDiscarded || !r.HasStore():
		return nil, fmt.Errorf("session %s was discarded: its store is gone (agentfs sessions lists the sessions that have one)", r.ID)
	case st == StateStarting:
		return nil, fmt.Errorf("session %s is starting: try again in a moment", r.ID)
	}
	if r.DaemonAlive() {
		root := filepath.Join("/proc", strconv.Itoa(r.DaemonPid), "root", r.Mountpoint)
		c, err := ctl.Dial(root)
		if err == nil {
			return workspace.NewClient(c), nil
		}
		// The daemon may be unmounting (the command ended): its store
		// is ours once it has exited.
		proc := procfs.Watch(r.DaemonPid)
		gone := proc.Wait(daemon.ShutdownWait)
		_ = proc.Close() // a pidfd, only waited on
		if !gone || r.DaemonAlive() {
			return nil, fmt.Errorf("session %s: reaching its daemon (pid %d) through %s: %w", r.ID, r.DaemonPid, root, err)
		}
	}
	return r.openOffline(version)
}

// openOffline opens the store of the ended session in this process and
// serves its operations to this process: the same code as a daemon's,
// with nothing mounted. The store stays locked (one process at a time)
// until the client is closed. What the operations log goes to the
// store's agentfs.log, as a daemon's would.
func (r *Record) openOffline(version string) (*workspace.Client, error) {
	w, closeStore, err := r.openStore(version)
	if err != nil {
		return nil, err
	}
	// Nothing is mounted: there is nothing to unmount (and the
	// mountpoint, the project's path, must never be unmounted here).
	unmount := func(ctl.Caller, json.RawMessage) (any, error) {
		return nil, ctl.Errorf(syscall.EINVAL, "session %s has ended: nothing is mounted", r.ID)
	}
	return workspace.Local(w, "session "+r.ID, unmount, closeStore), nil
}

// openStore opens the store of the ended session in this process,
// logging to the store's agentfs.log; closeStore closes both.
func (r *Record) openStore(version string) (w *workspace.Workspace, closeStore func() error, err error) {
	logf, err := os.OpenFile(filepath.Join(r.Store, "agentfs.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("session %s: opening its store: %w", r.ID, err)
	}
	logger := slog.New(slog.NewTextHandler(logf, nil)).With("offline", true, "pid", os.Getpid())
	w, err = workspace.Open(workspace.Options{Store: r.Store, Lower: r.Project, Mountpoint: r.Mountpoint,
		Session: true, Version: version, Logger: logger, HashCache: contenthash.UserLowerCachePath()})
	if err != nil {
		logf.Close()
		if errors.Is(err, branch.ErrLocked) {
			return nil, nil, fmt.Errorf("session %s: its store is in use by another agentfs command right now: try again when it has finished (%w)", r.ID, err)
		}
		return nil, nil, fmt.Errorf("session %s (project %s): opening its store: %w", r.ID, r.Project, err)
	}
	return w, func() error { return errors.Join(w.Close(), logf.Close()) }, nil
}
