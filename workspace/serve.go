package workspace

import (
	"encoding/json"

	"github.com/agentfs/agentfs/ctl"
)

// Register serves w's operations on the control server s: each request
// decodes its arguments and calls one method; what it changed is
// settled (made durable) before the reply. The daemon adds its own
// (ping, unmount) beside them.
func (w *Workspace) Register(s *ctl.Server) {
	handle(s, ctl.OpSnapshotCreate, w.CreateSnapshot)
	handle(s, ctl.OpSnapshotList, func(_ ctl.Caller, a ctl.SnapshotListArgs) (ctl.SnapshotList, error) { return w.SnapshotsWith(a) })
	handle(s, ctl.OpSnapshotShow, func(c ctl.Caller, a ctl.SnapshotRef) (ctl.SnapshotInfo, error) { return w.ShowSnapshot(c, a.Ref) })
	handle(s, ctl.OpVerify, w.Verify)
	handle(s, ctl.OpSnapshotDelete, func(c ctl.Caller, a ctl.SnapshotRef) (ctl.SnapshotInfo, error) { return w.DeleteSnapshot(c, a.Ref) })
	handle(s, ctl.OpTagSet, func(c ctl.Caller, a ctl.TagArgs) (ctl.SnapshotInfo, error) { return w.SetTag(c, a.Name, a.Ref) })
	handle(s, ctl.OpTagDelete, func(c ctl.Caller, a ctl.TagArgs) (ctl.TagArgs, error) { return w.DeleteTag(c, a.Name) })
	handle(s, ctl.OpSnapshotPrune, w.Prune)
	handle(s, ctl.OpGC, w.GC)
	handle(s, ctl.OpFsck, w.Fsck)

	handle(s, ctl.OpBranchCreate, w.CreateBranch)
	handle(s, ctl.OpBranchList, func(c ctl.Caller, _ struct{}) (ctl.BranchList, error) { return w.Branches(c) })
	handle(s, ctl.OpBranchDelete, func(c ctl.Caller, a ctl.BranchArgs) (ctl.BranchInfo, error) { return w.DeleteBranch(c, a.Name) })
	handle(s, ctl.OpBranchSwitch, func(c ctl.Caller, a ctl.BranchArgs) (ctl.BranchInfo, error) { return w.SwitchBranch(c, a.Name) })
	handle(s, ctl.OpBranchBind, w.Bind)
	handle(s, ctl.OpBranchUnbind, w.Unbind)
	handle(s, ctl.OpBranchCurrent, func(c ctl.Caller, a ctl.BindArgs) (ctl.BindInfo, error) { return w.Current(c, a.Pid) })

	handle(s, ctl.OpDiff, w.Diff)
	handle(s, ctl.OpRestore, w.Restore)
	handle(s, ctl.OpMerge, w.Merge)
	handle(s, ctl.OpExport, w.Export)
	handle(s, ctl.OpApply, w.Apply)
	handle(s, ctl.OpPush, w.Push)
	handle(s, ctl.OpApplyProgress, func(ctl.Caller, struct{}) (ctl.ApplyProgress, error) { return w.ApplyProgress(), nil })
	handle(s, ctl.OpProgress, func(ctl.Caller, struct{}) (ctl.Progress, error) { return w.Progress(), nil })
	handle(s, ctl.OpStatus, func(ctl.Caller, struct{}) (ctl.Status, error) { return w.Status(), nil })
	handle(s, ctl.OpActivity, func(_ ctl.Caller, a ctl.ActivityArgs) (ctl.ActivityReply, error) { return w.Activity(a) })
	s.After(w.Settle)
}

// handle registers fn for op: its arguments decoded from the request.
func handle[A, R any](s *ctl.Server, op ctl.Op, fn func(ctl.Caller, A) (R, error)) {
	s.Handle(op, func(c ctl.Caller, raw json.RawMessage) (any, error) {
		var args A
		if err := ctl.DecodeArgs(op, raw, &args); err != nil {
			return nil, err
		}
		return fn(c, args)
	})
}
