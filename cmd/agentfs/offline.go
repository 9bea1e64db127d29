package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
)

// openOffline opens the store of an ended session in this process, as
// its daemon did (daemon.openStore: the metadata under the store's
// lock, the backstore, the overlay view of its branch), registers the
// daemon's operations on a control server, and returns a client that
// calls that server directly: every operation runs the same code on an
// ended session as on a running one. Nothing is mounted; the store
// stays locked until the client is closed. What the operations log
// goes to the store's agentfs.log, as a daemon's would.
func openOffline(r *sessionRecord) (*ctl.Client, error) {
	logf, err := os.OpenFile(filepath.Join(r.Store, "agentfs.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("session %s: opening its store: %w", r.ID, err)
	}
	logger := slog.New(slog.NewTextHandler(logf, nil)).With("offline", true, "pid", os.Getpid())
	p := &mountPlan{lower: r.Project, mountpoint: r.Mountpoint, store: r.Store, backstore: "hostfs", offline: true}
	d := &daemon{plan: p, log: logger, detached: make(chan struct{})}
	if err := d.openStore(); err != nil {
		d.close()
		logf.Close()
		if errors.Is(err, branch.ErrLocked) {
			return nil, fmt.Errorf("session %s: its store is in use by another agentfs command right now: try again when it has finished (%w)", r.ID, err)
		}
		return nil, fmt.Errorf("session %s (project %s): opening its store: %w", r.ID, r.Project, err)
	}
	srv := ctl.NewServer(uint32(os.Geteuid()), logger)
	d.handle(srv)
	// Nothing is mounted: there is nothing to unmount (and the
	// mountpoint, the project's path, must never be unmounted here).
	srv.Handle(ctl.OpUnmount, func(ctl.Caller, json.RawMessage) (any, error) {
		return nil, ctl.Errorf(syscall.EINVAL, "session %s has ended: nothing is mounted", r.ID)
	})
	caller := ctl.Caller{Pid: uint32(os.Getpid()), Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}
	name := fmt.Sprintf("session %s", r.ID)
	return ctl.NewLocalClient(name, srv, caller, func() error {
		d.close()
		return logf.Close()
	}), nil
}
