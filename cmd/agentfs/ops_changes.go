package main

import (
	"fmt"
	"syscall"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
)

// handleChanges registers restore, diff and export.
func (d *daemon) handleChanges(s *ctl.Server) {
	s.Handle(ctl.OpRestore, serialized(d, ctl.OpRestore, d.restore))
}

// restore makes the current branch the state of a snapshot, for every
// process at once: first a safety snapshot of the current state (which
// undoes the restore), then the branch's entries are reset to the
// snapshot's and the kernel's caches of the old state dropped.
// Processes that hold files open keep those files, as if they had been
// deleted and replaced.
func (d *daemon) restore(c ctl.Caller, args ctl.RestoreArgs) (any, error) {
	snap, err := d.resolveSnapshot(args.Ref)
	if err != nil {
		return nil, err
	}
	cur := d.current.Load().Name()
	reply := ctl.RestoreReply{Snapshot: snapshotInfo(snap, d.tags()), Branch: cur}
	if args.DryRun {
		return nil, ctl.Errorf(syscall.ENOSYS, "restore --dry-run is not available yet")
	}
	safety, err := d.view.Snapshot(fmt.Sprintf("before restoring %s", snap.ID), branch.KindSafety)
	if err != nil {
		if safety.ID != "" {
			d.meta.DeleteSnapshot(safety.ID)
		}
		return nil, storeError(err, fmt.Sprintf("restoring snapshot %s: taking the safety snapshot of branch %q (nothing was restored)", snap.ID, cur))
	}
	stale, err := d.view.Restore(snap)
	if err != nil {
		d.log.Error("restore failed", "snapshot", snap.ID, "safety", safety.ID, "err", err)
		return nil, storeError(err, fmt.Sprintf("restoring snapshot %s into branch %q (the state before is in snapshot %s: agentfs restore %s)", snap.ID, cur, safety.ID, safety.ID))
	}
	d.invalidate(stale)
	si := snapshotInfo(safety, nil)
	reply.Safety = &si
	d.log.Info("snapshot restored", "snapshot", snap.ID, "branch", cur, "safety", safety.ID, "stale nodes", len(stale), "pid", c.Pid)
	return reply, nil
}
