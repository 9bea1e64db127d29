package workspace

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentfs/agentfs/autosnap"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// CreateSnapshot takes a snapshot of the caller's branch (or of
// a.Branch): a manual one, or a pre-run or post-run one for agentfs
// run; with a.IfChanged, only if the branch changed since its newest
// snapshot. When it returns the snapshot is durable: it survives kill
// -9 of the daemon.
func (w *Workspace) CreateSnapshot(c ctl.Caller, a ctl.SnapshotCreateArgs) (ctl.SnapshotInfo, error) {
	return locked(w, func() (ctl.SnapshotInfo, error) { return w.createSnapshotLocked(c, a) })
}

func (w *Workspace) createSnapshotLocked(c ctl.Caller, a ctl.SnapshotCreateArgs) (ctl.SnapshotInfo, error) {
	if err := w.writable("taking a snapshot"); err != nil {
		return ctl.SnapshotInfo{}, err
	}
	kind := branch.KindManual
	switch a.Kind {
	case "", branch.KindManual:
	case branch.KindPreRun, branch.KindPostRun:
		kind = a.Kind
	default:
		return ctl.SnapshotInfo{}, errorf(ErrInvalid, "a snapshot of kind %q cannot be asked for: only %s, %s and %s", a.Kind, branch.KindManual, branch.KindPreRun, branch.KindPostRun)
	}
	v := w.callerView(c)
	if a.Branch != "" {
		l, err := w.meta.Layer(a.Branch)
		if errors.Is(err, branch.ErrNotFound) {
			return ctl.SnapshotInfo{}, errorf(ErrNotFound, "no branch %q: agentfs branch list shows them", a.Branch)
		}
		if err != nil {
			return ctl.SnapshotInfo{}, storeError(err, fmt.Sprintf("opening branch %q", a.Branch))
		}
		if v, err = w.viewOf(l); err != nil {
			return ctl.SnapshotInfo{}, err
		}
	}
	if a.IfChanged {
		changed, err := w.changedSinceSnapshotLocked(v, true)
		if err != nil {
			return ctl.SnapshotInfo{}, err
		}
		if !changed {
			w.log.Info("snapshot not taken: nothing changed since the branch's newest snapshot", "branch", v.BranchName(), "kind", kind, "pid", c.Pid)
			return ctl.SnapshotInfo{}, nil
		}
	}
	snap, err := v.Snapshot(a.Label, kind)
	if err != nil {
		if snap.ID == "" {
			return ctl.SnapshotInfo{}, storeError(err, "taking a snapshot")
		}
		// Taken, but not synced (or the files open for writing could
		// not be given back): it exists, say so.
		w.log.Error("snapshot taken with an error", "id", snap.ID, "err", err)
		return ctl.SnapshotInfo{}, eioErrorf(err, "snapshot %s was taken, but it may not survive a crash: %v", snap.ID, err)
	}
	w.log.Info("snapshot taken", "id", snap.ID, "branch", snap.Branch, "label", snap.Label, "pid", c.Pid)
	w.hashes.Kick()
	return snapshotInfo(snap, nil), nil
}

// Snapshots lists every snapshot, in the order taken, with its tags,
// the size it added and its root (or that it is not computed yet).
func (w *Workspace) Snapshots() (ctl.SnapshotList, error) {
	return w.SnapshotsWith(ctl.SnapshotListArgs{})
}

// SnapshotsWith is Snapshots; with a.WaitRoots, the roots not computed
// yet are computed first.
func (w *Workspace) SnapshotsWith(a ctl.SnapshotListArgs) (ctl.SnapshotList, error) {
	return locked(w, func() (ctl.SnapshotList, error) {
		snaps, err := w.meta.Snapshots()
		if err != nil {
			return ctl.SnapshotList{}, storeError(err, "listing snapshots")
		}
		added, err := w.sizesAdded(snaps)
		if err != nil {
			// The list is still worth having without sizes.
			w.log.Warn("computing the sizes added by snapshots", "err", err)
		}
		tags := w.tags()
		list := ctl.SnapshotList{Snapshots: []ctl.SnapshotInfo{}}
		for _, snap := range snaps {
			info := snapshotInfo(snap, tags)
			info.SizeAdded = added[snap.ID]
			if err := w.rootInfo(&info, snap, a.WaitRoots); err != nil {
				if a.WaitRoots {
					return ctl.SnapshotList{}, hashError(err, fmt.Sprintf("computing the root of snapshot %s", snap.ID))
				}
				w.log.Warn("reading a snapshot's root", "id", snap.ID, "err", err)
			}
			list.Snapshots = append(list.Snapshots, info)
		}
		return list, nil
	})
}

// sizesAdded returns, by snapshot id, the allocated bytes of the
// regular files' objects that each snapshot references and its
// predecessor does not (see ctl.SnapshotInfo.SizeAdded). snaps are in
// the order taken. It reads every snapshot's entries once (and a
// branch's origin again): its cost is the number of entries, not the
// size of files.
func (w *Workspace) sizesAdded(snaps []branch.Snapshot) (map[string]int64, error) {
	added := map[string]int64{}
	byID := map[string]branch.Snapshot{}
	for _, s := range snaps {
		byID[s.ID] = s
	}
	origins := map[uint64]string{} // layer id → the snapshot it was made from
	if infos, err := w.meta.LayerInfos(); err == nil {
		for _, li := range infos {
			origins[li.ID] = li.Origin
		}
	} else {
		// The sizes are still worth having, counted without origins.
		w.log.Warn("listing branches for the sizes added by snapshots", "err", err)
	}
	sizes := map[string]int64{} // object → allocated bytes
	sizeOf := func(obj string) int64 {
		n, ok := sizes[obj]
		if !ok {
			if st, err := w.objs.Lstat(obj); err == nil {
				n = st.Blocks * 512
			}
			sizes[obj] = n
		}
		return n
	}
	last := map[uint64]map[string]bool{} // layer id → objects of its latest snapshot so far
	for _, s := range snaps {
		objs, err := w.snapshotObjects(s)
		if err != nil {
			return added, err
		}
		layer := w.meta.Lineage(s.Layer) // the branch's layer id, unless restored since
		prev, ok := last[layer]
		if origin, found := byID[origins[layer]]; !ok && found {
			if prev, err = w.snapshotObjects(origin); err != nil {
				return added, err
			}
		}
		for obj := range objs {
			if !prev[obj] {
				added[s.ID] += sizeOf(obj)
			}
		}
		last[layer] = objs
	}
	return added, nil
}

// snapshotObjects returns the objects of the regular files in snap.
func (w *Workspace) snapshotObjects(snap branch.Snapshot) (map[string]bool, error) {
	objs := map[string]bool{}
	err := w.meta.SnapshotView(snap).Load(func(_ string, e *branch.Entry) error {
		if e.Type == branch.TypeFile && e.Object != "" {
			objs[e.Object] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading snapshot %s: %w", snap.ID, err)
	}
	return objs, nil
}

// DeleteSnapshot deletes the snapshot ref names; a tagged one is
// refused (the tag keeps it).
func (w *Workspace) DeleteSnapshot(c ctl.Caller, ref string) (ctl.SnapshotInfo, error) {
	return locked(w, func() (ctl.SnapshotInfo, error) {
		if err := w.writable("deleting a snapshot"); err != nil {
			return ctl.SnapshotInfo{}, err
		}
		snap, err := w.resolveSnapshot(ref)
		if err != nil {
			return ctl.SnapshotInfo{}, err
		}
		info := snapshotInfo(snap, w.tags())
		if len(info.Tags) > 0 {
			return ctl.SnapshotInfo{}, errorf(ErrBusy, "snapshot %s is tagged %s: a tag keeps its snapshot; delete the tag first (agentfs tag --delete %s)",
				snap.ID, strings.Join(info.Tags, ", "), info.Tags[0])
		}
		if err := w.meta.DeleteSnapshot(snap.ID); err != nil {
			return ctl.SnapshotInfo{}, storeError(err, fmt.Sprintf("deleting snapshot %s", snap.ID))
		}
		w.log.Info("snapshot deleted", "id", snap.ID, "pid", c.Pid)
		return info, nil
	})
}

// dropSnapshotLocked deletes a snapshot an operation took for itself
// and does not keep (it failed after taking it); a failure is logged,
// as the operation's own error is what the caller sees.
func (w *Workspace) dropSnapshotLocked(id, why string) {
	if id == "" {
		return
	}
	if err := w.meta.DeleteSnapshot(id); err != nil {
		w.log.Warn("deleting a snapshot taken for an operation that failed", "id", id, "for", why, "err", err)
	}
}

// SetTag points tag name at the snapshot ref names, creating the tag
// or moving it.
func (w *Workspace) SetTag(c ctl.Caller, name, ref string) (ctl.SnapshotInfo, error) {
	return locked(w, func() (ctl.SnapshotInfo, error) {
		if err := w.writable("tagging a snapshot"); err != nil {
			return ctl.SnapshotInfo{}, err
		}
		snap, err := w.resolveSnapshot(ref)
		if err != nil {
			return ctl.SnapshotInfo{}, err
		}
		if err := w.meta.SetTag(name, snap.ID); err != nil {
			if errors.Is(err, branch.ErrInvalidName) {
				return ctl.SnapshotInfo{}, invalidName(err, "tag")
			}
			return ctl.SnapshotInfo{}, storeError(err, fmt.Sprintf("tagging snapshot %s", snap.ID))
		}
		w.log.Info("tag set", "tag", name, "id", snap.ID, "pid", c.Pid)
		return snapshotInfo(snap, w.tags()), nil
	})
}

// DeleteTag deletes tag name; its snapshot stays. It returns the tag
// and the id it named.
func (w *Workspace) DeleteTag(c ctl.Caller, name string) (ctl.TagArgs, error) {
	return locked(w, func() (ctl.TagArgs, error) {
		if err := w.writable("deleting a tag"); err != nil {
			return ctl.TagArgs{}, err
		}
		id, ok := w.tags()[name]
		if !ok {
			return ctl.TagArgs{}, errorf(ErrNotFound, "no tag %q: agentfs snapshot list shows the tags", name)
		}
		if err := w.meta.DeleteTag(name); err != nil {
			return ctl.TagArgs{}, storeError(err, fmt.Sprintf("deleting tag %q", name))
		}
		w.log.Info("tag deleted", "tag", name, "id", id, "pid", c.Pid)
		return ctl.TagArgs{Name: name, Ref: id}, nil
	})
}

// resolveSnapshot returns the snapshot that ref names: an id, an
// unambiguous prefix of at least 4 digits, or a tag.
func (w *Workspace) resolveSnapshot(ref string) (branch.Snapshot, error) {
	if ref == "" {
		return branch.Snapshot{}, errorf(ErrInvalid, "no snapshot given: name one by id, id prefix or tag (agentfs snapshot list shows them)")
	}
	snap, err := w.meta.Snapshot(ref)
	switch {
	case err == nil:
		return snap, nil
	case errors.Is(err, branch.ErrAmbiguous):
		var ids []string
		if snaps, lerr := w.meta.Snapshots(); lerr == nil {
			for _, s := range snaps {
				if strings.HasPrefix(s.ID, ref) {
					ids = append(ids, s.ID)
				}
			}
		}
		slices.Sort(ids)
		return branch.Snapshot{}, errorf(ErrInvalid, "the snapshot id prefix %q is ambiguous: it starts %s: type more digits", ref, strings.Join(ids, " and "))
	case errors.Is(err, branch.ErrNotFound):
		hint := ""
		if isHex(ref) && len(ref) < 4 {
			hint = " (an id prefix needs at least 4 digits)"
		}
		return branch.Snapshot{}, errorf(ErrNotFound, "no snapshot or tag %q%s: agentfs snapshot list shows the ids and tags", ref, hint)
	}
	return branch.Snapshot{}, storeError(err, fmt.Sprintf("finding snapshot %q", ref))
}

// invalidName is the error for a branch or tag name (kind) that
// branch refused with ErrInvalidName: its reason, and the rule.
func invalidName(err error, kind string) error {
	return &Error{Kind: ErrInvalid, Err: err, Msg: fmt.Sprintf("%s: choose a %s name of 1 to 100 bytes without \"/\" or control characters, not starting with \"-\", and not \".\", \"..\" or 4 to 8 hex digits (those read as snapshot ids)",
		strings.TrimSuffix(err.Error(), ": "+branch.ErrInvalidName.Error()), kind)}
}

func isHex(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdef") == ""
}

// snapshotInfo describes snap for a reply.
func snapshotInfo(snap branch.Snapshot, tags map[string]string) ctl.SnapshotInfo {
	info := ctl.SnapshotInfo{ID: snap.ID, Label: snap.Label, Branch: snap.Branch, Kind: snap.Kind, Created: snap.Created, Tags: []string{}}
	for name, id := range tags {
		if id == snap.ID {
			info.Tags = append(info.Tags, name)
		}
	}
	slices.Sort(info.Tags)
	return info
}

// tags returns every tag (name → snapshot id), or none when they
// cannot be read (replies then just show no tags; the error is logged).
func (w *Workspace) tags() map[string]string {
	tags, err := w.meta.Tags()
	if err != nil {
		w.log.Warn("listing tags", "err", err)
	}
	return tags
}

// Prune deletes automatic snapshots (never manual, pre-run or safety
// ones, nor those a tag names or a branch was created from): beyond the
// a.Keep newest or, without Keep, those the retention policy thins out.
func (w *Workspace) Prune(c ctl.Caller, a ctl.PruneArgs) (ctl.PruneReply, error) {
	if a.Keep != nil && *a.Keep < 0 {
		return ctl.PruneReply{}, errorf(ErrInvalid, "--keep %d: keep a count of 0 or more", *a.Keep)
	}
	return locked(w, func() (ctl.PruneReply, error) {
		if !a.DryRun {
			if err := w.writable("pruning automatic snapshots"); err != nil {
				return ctl.PruneReply{}, err
			}
		}
		r, err := w.pruneLocked(a.Keep, a.DryRun)
		w.log.Info("snapshot prune", "deleted", len(r.deleted), "kept", r.kept, "dry_run", a.DryRun, "err", err, "pid", c.Pid)
		if err != nil {
			return ctl.PruneReply{}, storeError(err, fmt.Sprintf("pruning automatic snapshots (%d deleted before the error)", len(r.deleted)))
		}
		reply := ctl.PruneReply{Deleted: []ctl.SnapshotInfo{}, Kept: r.kept, DryRun: a.DryRun, Policy: r.policy}
		for _, s := range r.deleted {
			reply.Deleted = append(reply.Deleted, snapshotInfo(s, nil))
		}
		return reply, nil
	})
}

// pruneResult is what pruneLocked deleted (or would delete).
type pruneResult struct {
	deleted []branch.Snapshot
	kept    int
	policy  string
}

// pruneLocked deletes automatic snapshots: beyond the keep newest when
// keep is set, else those the retention policy thins out. opMu is held.
func (w *Workspace) pruneLocked(keep *int, dryRun bool) (pruneResult, error) {
	snaps, err := w.meta.Snapshots()
	if err != nil {
		return pruneResult{}, err
	}
	// Tagged snapshots and those branches were made from are pinned.
	pinned := map[string]bool{}
	for _, id := range w.tags() {
		pinned[id] = true
	}
	infos, err := w.meta.LayerInfos()
	if err != nil {
		return pruneResult{}, err
	}
	for _, li := range infos {
		pinned[li.Origin] = true
	}
	var list []autosnap.Snap
	byID := map[string]branch.Snapshot{}
	auto := 0
	for _, s := range snaps {
		list = append(list, autosnap.Snap{ID: s.ID, Kind: s.Kind, Created: s.Created, Pinned: pinned[s.ID]})
		byID[s.ID] = s
		if autosnap.Automatic(s.Kind) && !pinned[s.ID] {
			auto++
		}
	}
	var drop []autosnap.Snap
	var r pruneResult
	if keep != nil {
		drop = autosnap.KeepNewest(*keep, list)
		r.policy = fmt.Sprintf("keep the %d newest automatic snapshots", *keep)
	} else {
		drop = w.policy.Prune(time.Now(), list)
		r.policy = fmt.Sprintf("all automatic snapshots of the last hour, then one per hour for a day, then one per day; at most %d", w.policy.Keep)
	}
	var errs []error
	for _, s := range drop {
		if !dryRun {
			if err := w.meta.DeleteSnapshot(s.ID); err != nil {
				errs = append(errs, err)
				continue
			}
			w.log.Info("automatic snapshot deleted", "id", s.ID, "created", s.Created)
		}
		r.deleted = append(r.deleted, byID[s.ID])
	}
	r.kept = auto - len(r.deleted)
	return r, errors.Join(errs...)
}

// AutoSnapshot takes an automatic snapshot of branch name (the branch
// the mount shows, when ""), of an automatic kind (autosnap.Automatic),
// labelled by label (which may read files of the branch's view), then
// thins out automatic snapshots by the retention policy. It is for the
// daemon's triggers; a branch no process sees any more is skipped.
func (w *Workspace) AutoSnapshot(name, kind string, label func(v *overlay.FS) string) {
	if !autosnap.Automatic(kind) {
		w.log.Error("internal: an automatic snapshot of a kind that is not automatic", "kind", kind)
		return
	}
	w.opMu.Lock()
	defer w.opMu.Unlock()
	if w.closed || w.opts.ReadOnly {
		return
	}
	if name == "" {
		name = w.view.BranchName()
	}
	v := w.views[name]
	if v == nil {
		w.log.Warn("automatic snapshot skipped: the branch is not shown by this mount any more", "branch", name)
		return
	}
	if kind == branch.KindBuild || kind == branch.KindIdle {
		// A build that changed nothing, an idle period after one that
		// was snapshotted already: the same state again is no point.
		changed, err := w.changedSinceSnapshotLocked(v, false)
		if err != nil {
			w.log.Error("automatic snapshot: comparing with the newest snapshot", "branch", name, "kind", kind, "err", err)
			return
		}
		if !changed {
			w.log.Info("automatic snapshot not taken: nothing changed since the branch's newest snapshot", "branch", name, "kind", kind)
			return
		}
	}
	snap, err := v.Snapshot(label(v), kind)
	if err != nil {
		w.log.Error("automatic snapshot", "branch", name, "kind", kind, "id", snap.ID, "err", err)
		if snap.ID == "" {
			return
		}
	} else {
		w.log.Info("automatic snapshot taken", "id", snap.ID, "branch", snap.Branch, "kind", kind, "label", snap.Label)
		w.hashes.Kick()
	}
	if _, err := w.pruneLocked(nil, false); err != nil {
		w.log.Error("thinning automatic snapshots", "err", err)
	}
}

// errChanged ends a Diff at its first change.
var errChanged = errors.New("changed")

// changedSinceSnapshotLocked reports whether v's branch differs from
// its newest snapshot (from the project, when it has none); with kept,
// from its newest one that retention never deletes (not automatic:
// the state the caller snapshots must not depend on one that may go).
// opMu is held.
func (w *Workspace) changedSinceSnapshotLocked(v *overlay.FS, kept bool) (bool, error) {
	snaps, err := w.meta.Snapshots()
	if err != nil {
		return false, storeError(err, "listing snapshots")
	}
	ref := LowerRef
	for _, s := range snaps { // in the order taken: the last one wins
		if s.Branch == v.BranchName() && (!kept || !autosnap.Automatic(s.Kind)) {
			ref = s.ID
		}
	}
	base, err := w.openRefLocked(ref)
	if err != nil {
		return false, err
	}
	defer base.close()
	err = overlay.Diff(base.fs, v, func(overlay.Change) error { return errChanged })
	switch {
	case errors.Is(err, errChanged):
		return true, nil
	case err != nil:
		return false, eioErrorf(err, "comparing branch %s with %s: %v", v.BranchName(), base.what, err)
	}
	return false, nil
}
