package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// handleSnapshots registers the snapshot and tag operations.
func (d *daemon) handleSnapshots(s *ctl.Server) {
	s.Handle(ctl.OpSnapshotCreate, serialized(d, ctl.OpSnapshotCreate, d.snapshotCreate))
	s.Handle(ctl.OpSnapshotList, serialized(d, ctl.OpSnapshotList, d.snapshotList))
	s.Handle(ctl.OpSnapshotDelete, serialized(d, ctl.OpSnapshotDelete, d.snapshotDelete))
	s.Handle(ctl.OpTagSet, serialized(d, ctl.OpTagSet, d.tagSet))
	s.Handle(ctl.OpTagDelete, serialized(d, ctl.OpTagDelete, d.tagDelete))
	s.Handle(ctl.OpGC, serialized(d, ctl.OpGC, d.gc))
	s.Handle(ctl.OpFsck, serialized(d, ctl.OpFsck, d.fsck))
}

// snapshotCreate takes a manual snapshot of the current branch (or a
// pre-run one, for agentfs run). When it returns, the snapshot is
// durable: it survives kill -9 of the daemon.
func (d *daemon) snapshotCreate(c ctl.Caller, args ctl.SnapshotCreateArgs) (any, error) {
	kind := branch.KindManual
	switch args.Kind {
	case "", branch.KindManual:
	case branch.KindPreRun:
		kind = branch.KindPreRun
	default:
		return nil, ctl.Errorf(syscall.EINVAL, "a snapshot of kind %q cannot be asked for: only %s and %s", args.Kind, branch.KindManual, branch.KindPreRun)
	}
	v := d.callerView(c)
	if args.Branch != "" {
		l, err := d.meta.Layer(args.Branch)
		if errors.Is(err, branch.ErrNotFound) {
			return nil, ctl.Errorf(syscall.ENOENT, "no branch %q: agentfs branch list shows them", args.Branch)
		}
		if err != nil {
			return nil, storeError(err, fmt.Sprintf("opening branch %q", args.Branch))
		}
		if v, err = d.viewOf(l); err != nil {
			return nil, err
		}
	}
	snap, err := v.Snapshot(args.Label, kind)
	if err != nil {
		if snap.ID == "" {
			return nil, storeError(err, "taking a snapshot")
		}
		// Taken, but not synced (or the files open for writing could
		// not be given back): it exists, say so.
		d.log.Error("snapshot taken with an error", "id", snap.ID, "err", err)
		return nil, ctl.Errorf(syscall.EIO, "snapshot %s was taken, but it may not survive a crash: %v", snap.ID, err)
	}
	d.log.Info("snapshot taken", "id", snap.ID, "branch", snap.Branch, "label", snap.Label, "pid", c.Pid)
	return snapshotInfo(snap, nil), nil
}

// snapshotList lists every snapshot with its tags and size added.
func (d *daemon) snapshotList(ctl.Caller, noArgs) (any, error) {
	snaps, err := d.meta.Snapshots()
	if err != nil {
		return nil, storeError(err, "listing snapshots")
	}
	added, err := d.sizesAdded(snaps)
	if err != nil {
		// The list is still worth having without sizes.
		d.log.Warn("computing the sizes added by snapshots", "err", err)
	}
	tags := d.tags()
	list := ctl.SnapshotList{Snapshots: []ctl.SnapshotInfo{}}
	for _, snap := range snaps {
		info := snapshotInfo(snap, tags)
		info.SizeAdded = added[snap.ID]
		list.Snapshots = append(list.Snapshots, info)
	}
	return list, nil
}

// sizesAdded returns, by snapshot id, the allocated bytes of the
// regular files' objects that each snapshot references and its
// predecessor does not (see ctl.SnapshotInfo.SizeAdded). snaps are in
// the order taken. It reads every snapshot's entries once (and a
// branch's origin again): its cost is the number of entries, not the
// size of files.
func (d *daemon) sizesAdded(snaps []branch.Snapshot) (map[string]int64, error) {
	added := map[string]int64{}
	byID := map[string]branch.Snapshot{}
	for _, s := range snaps {
		byID[s.ID] = s
	}
	origins := map[uint64]string{} // layer id → the snapshot it was made from
	if infos, err := d.meta.LayerInfos(); err == nil {
		for _, li := range infos {
			origins[li.ID] = li.Origin
		}
	}
	sizes := map[string]int64{} // object → allocated bytes
	sizeOf := func(obj string) int64 {
		n, ok := sizes[obj]
		if !ok {
			if st, err := d.objs.Lstat(obj); err == nil {
				n = st.Blocks * 512
			}
			sizes[obj] = n
		}
		return n
	}
	last := map[uint64]map[string]bool{} // layer id → objects of its latest snapshot so far
	for _, s := range snaps {
		objs, err := d.snapshotObjects(s)
		if err != nil {
			return added, err
		}
		prev, ok := last[s.Layer]
		if origin, found := byID[origins[s.Layer]]; !ok && found {
			if prev, err = d.snapshotObjects(origin); err != nil {
				return added, err
			}
		}
		for obj := range objs {
			if !prev[obj] {
				added[s.ID] += sizeOf(obj)
			}
		}
		last[s.Layer] = objs
	}
	return added, nil
}

// snapshotObjects returns the objects of the regular files in snap.
func (d *daemon) snapshotObjects(snap branch.Snapshot) (map[string]bool, error) {
	objs := map[string]bool{}
	err := d.meta.SnapshotView(snap).Load(func(_ string, e *branch.Entry) error {
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

// snapshotDelete deletes a snapshot that no tag names.
func (d *daemon) snapshotDelete(c ctl.Caller, args ctl.SnapshotRef) (any, error) {
	snap, err := d.resolveSnapshot(args.Ref)
	if err != nil {
		return nil, err
	}
	tags := d.tags()
	info := snapshotInfo(snap, tags)
	if len(info.Tags) > 0 {
		return nil, ctl.Errorf(syscall.EBUSY, "snapshot %s is tagged %s: a tag keeps its snapshot; delete the tag first (agentfs tag --delete %s)",
			snap.ID, strings.Join(info.Tags, ", "), info.Tags[0])
	}
	if err := d.meta.DeleteSnapshot(snap.ID); err != nil {
		return nil, storeError(err, fmt.Sprintf("deleting snapshot %s", snap.ID))
	}
	d.log.Info("snapshot deleted", "id", snap.ID, "pid", c.Pid)
	return info, nil
}

// tagSet points the tag args.Name at the snapshot args.Ref names,
// creating the tag or moving it.
func (d *daemon) tagSet(c ctl.Caller, args ctl.TagArgs) (any, error) {
	snap, err := d.resolveSnapshot(args.Ref)
	if err != nil {
		return nil, err
	}
	if err := d.meta.SetTag(args.Name, snap.ID); err != nil {
		if errors.Is(err, branch.ErrInvalidName) {
			return nil, invalidName(err, "tag")
		}
		return nil, storeError(err, fmt.Sprintf("tagging snapshot %s", snap.ID))
	}
	d.log.Info("tag set", "tag", args.Name, "id", snap.ID, "pid", c.Pid)
	return snapshotInfo(snap, d.tags()), nil
}

// tagDelete deletes a tag; its snapshot stays.
func (d *daemon) tagDelete(c ctl.Caller, args ctl.TagArgs) (any, error) {
	id, ok := d.tags()[args.Name]
	if !ok {
		return nil, ctl.Errorf(syscall.ENOENT, "no tag %q: agentfs snapshot list shows the tags", args.Name)
	}
	if err := d.meta.DeleteTag(args.Name); err != nil {
		return nil, storeError(err, fmt.Sprintf("deleting tag %q", args.Name))
	}
	d.log.Info("tag deleted", "tag", args.Name, "id", id, "pid", c.Pid)
	return ctl.TagArgs{Name: args.Name, Ref: id}, nil
}

// gc removes the objects that no branch, snapshot or open file refers
// to, except those changed within the grace period (a copy-up in
// progress makes its object before it commits the entry naming it).
func (d *daemon) gc(c ctl.Caller, args ctl.GCArgs) (any, error) {
	grace := args.Grace
	if grace <= 0 {
		grace = backstore.DefaultGCGrace
	}
	r, err := d.objs.Collect(backstore.GCOptions{Referenced: d.meta.ReferencedObjects, InUse: d.inUse(), Grace: grace})
	d.log.Info("gc", "objects", r.Objects, "removed", r.Removed, "freed", r.Freed, "young", r.Young, "in use", r.InUse, "err", err, "pid", c.Pid)
	if err != nil {
		return nil, storeError(err, fmt.Sprintf("collecting garbage (removed %d objects, %d bytes, before the error)", r.Removed, r.Freed))
	}
	return ctl.GCReply{Objects: r.Objects, Removed: r.Removed, Freed: r.Freed, Young: r.Young, InUse: r.InUse, Grace: grace}, nil
}

// inUse returns the InUse function of a collection: whether an open
// file or a node the kernel holds keeps an object. It lists them once,
// at its first call, which comes after the references were read: a
// node holding an object that no reference names was made before.
func (d *daemon) inUse() func(id string) bool {
	var live map[string]bool
	return func(id string) bool {
		if live == nil {
			live = map[string]bool{}
			for _, v := range append(slices.Collect(maps.Values(d.views)), d.retired...) {
				if err := v.LiveObjects(func(id string) error { live[id] = true; return nil }); err != nil {
					d.log.Error("listing the objects open files hold", "branch", v.Layer().Name(), "err", err)
				}
			}
		}
		return live[id]
	}
}

// fsck checks that the entries of every branch and snapshot agree with
// the objects and the project (overlay.Fsck); with args.Repair it
// repairs what it can and shows the repaired branch to every process.
func (d *daemon) fsck(c ctl.Caller, args ctl.FsckArgs) (any, error) {
	r, err := overlay.Fsck(overlay.FsckOptions{Objects: d.objs, Meta: d.meta, Lower: d.lowerDir(), Repair: args.Repair, InUse: d.inUse()})
	d.log.Info("fsck", "repair", args.Repair, "problems", len(r.Problems), "garbage", len(r.Garbage), "err", err, "pid", c.Pid)
	repaired := false
	reply := ctl.FsckReply{Branches: r.Branches, Snapshots: r.Snapshots, Entries: r.Entries, Objects: r.Objects, Repair: r.Repair,
		Problems: []ctl.FsckProblem{}, Garbage: []ctl.FsckGarbage{}, Report: r.String()}
	for _, p := range r.Problems {
		reply.Problems = append(reply.Problems, ctl.FsckProblem{Branch: p.Branch, Snapshot: p.Snapshot, Path: p.Path, Kind: string(p.Kind),
			Object: p.Object, Detail: p.Detail, Repair: p.Repair})
		repaired = repaired || p.Repair != ""
	}
	for _, g := range r.Garbage {
		reply.Garbage = append(reply.Garbage, ctl.FsckGarbage{ID: g.ID, Bytes: g.Bytes, Young: g.Young, Removed: g.Removed})
	}
	if repaired {
		// Repairs write branch entries underneath the views.
		for name, v := range d.views {
			stale, rerr := v.Reload()
			if rerr != nil {
				err = errors.Join(err, fmt.Errorf("showing the repaired branch %q: %w", name, rerr))
			}
			d.invalidate(stale)
		}
	}
	if err != nil {
		return nil, storeError(err, "checking the store")
	}
	return reply, nil
}
