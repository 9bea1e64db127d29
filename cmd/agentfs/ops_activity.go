package main

import (
	"fmt"
	"syscall"

	"github.com/agentfs/agentfs/ctl"
)

// handleActivity registers the operations of automatic snapshots.
func (d *daemon) handleActivity(s *ctl.Server) {
	s.Handle(ctl.OpSnapshotPrune, serialized(d, ctl.OpSnapshotPrune, d.snapshotPrune))
}

// snapshotPrune deletes automatic snapshots (never manual, pre-run or
// safety ones, nor those a tag names or a branch was created from): the
// args.Keep newest are kept or, without Keep, those the retention
// policy keeps.
func (d *daemon) snapshotPrune(c ctl.Caller, args ctl.PruneArgs) (any, error) {
	if args.Keep != nil && *args.Keep < 0 {
		return nil, ctl.Errorf(syscall.EINVAL, "--keep %d: keep a count of 0 or more", *args.Keep)
	}
	r, err := d.pruneLocked(args.Keep, args.DryRun)
	d.log.Info("snapshot prune", "deleted", len(r.deleted), "kept", r.kept, "dry_run", args.DryRun, "err", err, "pid", c.Pid)
	if err != nil {
		return nil, storeError(err, fmt.Sprintf("pruning automatic snapshots (%d deleted before the error)", len(r.deleted)))
	}
	reply := ctl.PruneReply{Deleted: []ctl.SnapshotInfo{}, Kept: r.kept, DryRun: args.DryRun, Policy: r.policy}
	for _, s := range r.deleted {
		reply.Deleted = append(reply.Deleted, snapshotInfo(s, nil))
	}
	return reply, nil
}
