package workspace

import (
	"errors"
	"fmt"
	"math"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// Merge merges branch a.Branch (theirs) into a.Into (ours; the caller's
// branch by default), three-way from the snapshot both come from
// (mergeBaseLocked; a.Base names another), as overlay.PlanMerge
// decides: what one side changed is taken, text both changed is merged
// line by line, the rest are conflicts that keep ours (or take a side
// where a.Ours or a.Theirs says so).
//
// The merge is one change of the target branch, made whole or not at
// all: it first takes a safety snapshot of the target (restoring it
// undoes the merge), plans against that snapshot (a program writing
// the branch meanwhile does not change what is merged), and makes the
// plan's changes; if one fails, the plan's paths are taken back from
// the safety snapshot (undoMergeLocked; the whole branch restored to it
// only if that fails too) and the error says nothing was merged. What the kernel
// cached of the paths the merge changed is then dropped, so that every
// process bound to the branch sees the merge at once (and only that:
// a process working in a directory of the branch keeps it). With
// a.DryRun it answers the plan and changes nothing. A path the plan
// changes that a program wrote after the safety snapshot fails the
// merge before anything is changed (overlay.ErrMergeStale), and is
// kept: the caller merges again; from that check to its last change
// the apply holds the plan's paths in the target view (overlay/gate.go),
// so that no program's change of them lands in between. opMu keeps
// every other operation (restore, merge, branch changes) out for the
// whole run. The reply's Unresolved counts the conflicts that remain.
func (w *Workspace) Merge(c ctl.Caller, a ctl.MergeArgs) (ctl.MergeReply, error) {
	return locked(w, func() (ctl.MergeReply, error) {
		if !a.DryRun {
			if err := w.writable("merging branch " + a.Branch); err != nil {
				return ctl.MergeReply{}, err
			}
		}
		var err error
		if a.Branch == "" {
			return ctl.MergeReply{}, errorf(ErrInvalid, "no branch to merge given: name one (agentfs branch list shows them)")
		}
		if a.Ours, err = cleanPaths("merge --ours", a.Ours); err != nil {
			return ctl.MergeReply{}, err
		}
		if a.Theirs, err = cleanPaths("merge --theirs", a.Theirs); err != nil {
			return ctl.MergeReply{}, err
		}
		theirsL, err := w.branchLayer(a.Branch)
		if err != nil {
			return ctl.MergeReply{}, err
		}
		into := a.Into
		if into == "" {
			into = w.callerView(c).Layer().Name()
		}
		oursL, err := w.branchLayer(into)
		if err != nil {
			return ctl.MergeReply{}, err
		}
		if oursL == theirsL || into == a.Branch {
			return ctl.MergeReply{}, errorf(ErrInvalid, "branch %q cannot be merged into itself: name another branch, or --into another target", a.Branch)
		}
		reply := ctl.MergeReply{Branch: a.Branch, Into: into, Changes: []ctl.MergeChange{}, Conflicts: []ctl.MergeConflict{}}
		base, err := w.mergeBaseLocked(a.Base, oursL, theirsL)
		if err != nil {
			return ctl.MergeReply{}, err
		}
		defer base.close()
		reply.Base = LowerRef
		if base.snap != nil {
			reply.Base = base.snap.ID
			si := snapshotInfo(*base.snap, w.tags())
			reply.BaseSnapshot = &si
		}
		theirs, err := w.openRefLocked(a.Branch)
		if err != nil {
			return ctl.MergeReply{}, err
		}
		defer theirs.close()
		target, err := w.viewOf(oursL)
		if err != nil {
			return ctl.MergeReply{}, err
		}
		opts := overlay.MergeOptions{Ours: a.Ours, Theirs: a.Theirs, OursLabel: into, BaseLabel: reply.Base, TheirsLabel: a.Branch}
		if a.DryRun {
			plan, err := overlay.PlanMerge(base.fs, target, theirs.fs, opts)
			if err != nil {
				return ctl.MergeReply{}, eioErrorf(err, "merging branch %q into %q: %v: nothing was merged", a.Branch, into, err)
			}
			w.closePlan(plan)
			return mergeReply(reply, plan), nil
		}
		safety, err := target.Snapshot(fmt.Sprintf("before merging %s", a.Branch), branch.KindSafety)
		if err != nil {
			w.dropSnapshotLocked(safety.ID, "merge of "+a.Branch)
			return ctl.MergeReply{}, storeError(err, fmt.Sprintf("merging branch %q: taking the safety snapshot of branch %q (nothing was merged)", a.Branch, into))
		}
		si := snapshotInfo(safety, nil)
		reply.Safety = &si
		// Theirs is merged as a snapshot shows it: what the plan saw is
		// what is taken, whatever programs bound to it write meanwhile,
		// and merging it again later from that snapshot takes only what
		// changed since.
		merged, err := theirs.fs.Snapshot(fmt.Sprintf("merged into %s", into), branch.KindSafety)
		if err != nil {
			w.dropSnapshotLocked(safety.ID, "merge of "+a.Branch)
			w.dropSnapshotLocked(merged.ID, "merge of "+a.Branch)
			return ctl.MergeReply{}, storeError(err, fmt.Sprintf("merging branch %q: taking a snapshot of it (nothing was merged)", a.Branch))
		}
		mi := snapshotInfo(merged, nil)
		reply.Merged = &mi
		theirsSnap, err := w.openRefLocked(merged.ID)
		if err != nil {
			w.dropSnapshotLocked(safety.ID, "merge of "+a.Branch)
			w.dropSnapshotLocked(merged.ID, "merge of "+a.Branch)
			return ctl.MergeReply{}, err
		}
		defer theirsSnap.close()
		plan, err := w.planAgainst(base.fs, safety, theirsSnap.fs, opts)
		if err != nil {
			w.dropSnapshotLocked(safety.ID, "merge of "+a.Branch)
			w.dropSnapshotLocked(merged.ID, "merge of "+a.Branch)
			return ctl.MergeReply{}, eioErrorf(err, "merging branch %q into %q: %v: nothing was merged", a.Branch, into, err)
		}
		defer w.closePlan(plan)
		w.mergeGate(plan)
		if err := w.beginMergeJournal(into, safety.ID, plan); err != nil {
			w.dropSnapshotLocked(safety.ID, "merge of "+a.Branch)
			w.dropSnapshotLocked(merged.ID, "merge of "+a.Branch)
			return ctl.MergeReply{}, storeError(err, fmt.Sprintf("merging branch %q into %q: recording the merge (nothing was merged)", a.Branch, into))
		}
		stale, applyErr := applyMerge(target, plan)
		if errors.Is(applyErr, overlay.ErrMergeStale) {
			// Nothing was changed, and a restore would undo what the
			// program wrote.
			w.dropMergeJournal(a.Branch, into)
			w.dropSnapshotLocked(safety.ID, "merge of "+a.Branch)
			w.dropSnapshotLocked(merged.ID, "merge of "+a.Branch)
			return ctl.MergeReply{}, errorf(ErrBusy, "merging branch %q into %q: %v (a program bound to %q wrote it meanwhile): nothing was merged, and what it wrote is kept: merge again", a.Branch, into, applyErr, into)
		}
		if applyErr != nil {
			w.log.Error("merge failed: taking its paths back from the safety snapshot", "branch", a.Branch, "into", into, "safety", safety.ID, "err", applyErr)
			w.dropSnapshotLocked(merged.ID, "merge of "+a.Branch)
			err := w.undoMergeLocked(target, safety, plan)
			if err != nil {
				// The whole branch back, then: what programs wrote to
				// other paths since the safety snapshot goes with it.
				w.log.Error("taking a failed merge back path by path failed: restoring the safety snapshot", "branch", a.Branch, "into", into, "err", err)
				var restored []overlay.Stale
				restored, err = target.Restore(safety)
				w.invalidate(restored)
			}
			if err == nil {
				w.dropMergeJournal(a.Branch, into)
			}
			if err != nil {
				return ctl.MergeReply{}, storeError(err, fmt.Sprintf("merging branch %q into %q failed (%v), and so did undoing it: the state before is in snapshot %s: agentfs restore %s", a.Branch, into, applyErr, safety.ID, safety.ID))
			}
			return ctl.MergeReply{}, eioErrorf(applyErr, "merging branch %q into %q: %v: nothing was merged (the branch is as it was, snapshot %s)", a.Branch, into, applyErr, safety.ID)
		}
		if err := w.endMergeJournal(); err != nil {
			// The record stays: the next daemon would take the merge
			// back. Better now, while the caller hears of it.
			w.log.Error("dropping the record of a merge made: taking it back", "branch", a.Branch, "into", into, "err", err)
			restored, rerr := target.Restore(safety)
			w.invalidate(append(stale, restored...))
			return ctl.MergeReply{}, storeError(errors.Join(err, rerr), fmt.Sprintf("merging branch %q into %q: the merge was made but its record could not be dropped, so it was undone (the state before is snapshot %s)", a.Branch, into, safety.ID))
		}
		w.invalidate(stale)
		reply = mergeReply(reply, plan)
		w.log.Info("branch merged", "branch", a.Branch, "into", into, "base", reply.Base, "safety", safety.ID,
			"changes", len(reply.Changes), "conflicts", reply.Unresolved, "pid", c.Pid)
		return reply, nil
	})
}

// undoMergeLocked takes a merge of plan into target that failed half
// way back, path by path, from snapshot safety (overlay.UndoMerge, as
// recoverMerge does after a crash): what programs wrote to other paths
// of the branch meanwhile (a merge holds only its own paths) is kept.
// opMu is held.
func (w *Workspace) undoMergeLocked(target *overlay.FS, safety branch.Snapshot, plan *overlay.MergePlan) error {
	paths, err := plan.UndoPaths()
	if err != nil {
		return err
	}
	before, err := w.readView(nil, w.meta.SnapshotView(safety))
	if err != nil {
		return err
	}
	defer w.closer(before, "snapshot "+safety.ID)()
	err = target.UndoMerge(before, paths)
	w.invalidate(target.MergeStale(plan))
	return err
}

// closePlan removes the merged texts plan holds.
func (w *Workspace) closePlan(plan *overlay.MergePlan) {
	if err := plan.Close(); err != nil {
		w.log.Warn("removing a merge's temporary files", "err", err)
	}
}

// applyMerge makes a merge's plan (a variable: tests make it fail
// halfway).
var applyMerge = (*overlay.FS).ApplyMerge

// planAgainst plans the merge with ours read from snapshot ours.
func (w *Workspace) planAgainst(base *overlay.FS, ours branch.Snapshot, theirs *overlay.FS, o overlay.MergeOptions) (*overlay.MergePlan, error) {
	// With the hide rules of every other view: a hidden project file is
	// no file of ours either.
	v, err := w.readView(nil, w.meta.SnapshotView(ours))
	if err != nil {
		return nil, err
	}
	defer w.closer(v, "snapshot "+ours.ID)()
	return overlay.PlanMerge(base, v, theirs, o)
}

func mergeReply(r ctl.MergeReply, p *overlay.MergePlan) ctl.MergeReply {
	for _, c := range p.Changes {
		r.Changes = append(r.Changes, ctl.MergeChange{Path: c.Path, Action: string(c.Action)})
	}
	for _, c := range p.Conflicts {
		r.Conflicts = append(r.Conflicts, ctl.MergeConflict{Path: c.Path, Kind: string(c.Kind), Detail: c.Detail, Markers: c.Markers, Resolved: c.Resolved})
	}
	r.Unresolved = p.Unresolved()
	return r
}

// branchLayer returns branch name's layer, or an error naming the fix.
func (w *Workspace) branchLayer(name string) (*branch.Layer, error) {
	l, err := w.meta.Layer(name)
	if errors.Is(err, branch.ErrNotFound) {
		return nil, errorf(ErrNotFound, "no branch %q: agentfs branch list shows them", name)
	}
	if err != nil {
		return nil, storeError(err, fmt.Sprintf("opening branch %q", name))
	}
	return l, nil
}

// ancestor is one point of a branch's history: a layer, and the commit
// timestamp up to which the branch shares it (math.MaxUint64: the
// layer itself, as it is now), with the snapshot it was forked at.
type ancestor struct {
	layer uint64
	ts    uint64
	snap  *branch.Snapshot
}

// ancestry lists where branch l comes from: l itself, the snapshot it
// was created from, the snapshot that one's branch was created from,
// and so on, as far as the snapshots and branches still exist.
func (w *Workspace) ancestry(l branch.LayerInfo, infos map[uint64]branch.LayerInfo) []ancestor {
	out := []ancestor{{layer: l.ID, ts: math.MaxUint64}}
	origin := l.Origin
	for range 1000 { // a bound, should a store ever hold a cycle
		if origin == "" {
			break
		}
		snap, err := w.meta.Snapshot(origin)
		if err != nil {
			break // deleted: the history is not known further
		}
		// The branch went on from the snapshot's frozen layer in a new
		// one: its lineage is the branch's layer id.
		layer := w.meta.Lineage(snap.Layer)
		out = append(out, ancestor{layer: layer, ts: snap.Ts, snap: &snap})
		info, ok := infos[layer]
		if !ok {
			break // its branch was deleted
		}
		origin = info.Origin
	}
	return out
}

// mergeBaseLocked opens the state a merge of theirs into ours compares
// both with: the one ref names, or else the latest snapshot in the
// history of both (where the nearer of theirs' forks meets ours'
// history, the earlier of the two points), or else the project itself
// (every branch starts from it). A restore rewrites a branch's history
// without recording it: after one, ref may name a better base.
func (w *Workspace) mergeBaseLocked(ref string, ours, theirs *branch.Layer) (refView, error) {
	if ref != "" {
		if ref != LowerRef {
			if _, err := w.meta.Layer(ref); err == nil {
				return refView{}, errorf(ErrInvalid, "the base of a merge is a snapshot (or lower), and %q is a branch: name one of its snapshots (agentfs snapshot list)", ref)
			}
		}
		return w.openRefLocked(ref)
	}
	list, err := w.meta.LayerInfos()
	if err != nil {
		return refView{}, storeError(err, "listing branches")
	}
	infos, byName := map[uint64]branch.LayerInfo{}, map[string]branch.LayerInfo{}
	for _, li := range list {
		infos[li.ID], byName[li.Name] = li, li
	}
	ourHistory := w.ancestry(byName[ours.Name()], infos)
	for _, t := range w.ancestry(byName[theirs.Name()], infos) {
		for _, o := range ourHistory {
			if o.layer != t.layer {
				continue
			}
			base := t.snap
			if o.ts < t.ts {
				base = o.snap
			}
			if base != nil {
				return w.openRefLocked(base.ID)
			}
		}
	}
	return w.openRefLocked(LowerRef)
}
