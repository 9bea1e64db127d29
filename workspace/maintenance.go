package workspace

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// GC removes the objects that no branch, snapshot, open file or push
// under way refers to, except those changed within the grace period (a copy-up in
// progress makes its object before it commits the entry naming it).
func (w *Workspace) GC(c ctl.Caller, a ctl.GCArgs) (ctl.GCReply, error) {
	return locked(w, func() (ctl.GCReply, error) {
		if err := w.writable("collecting garbage"); err != nil {
			return ctl.GCReply{}, err
		}
		grace := a.Grace
		if grace <= 0 {
			grace = backstore.DefaultGCGrace
		}
		progress, end := w.startProgress("gc", "objects")
		defer end()
		r, err := w.objs.Collect(backstore.GCOptions{Referenced: w.referencedObjects, InUse: w.inUseLocked(), Grace: grace,
			Progress: func(n int) { progress.set(int64(n), 0, 0, 0) }})
		w.log.Info("gc", "objects", r.Objects, "removed", r.Removed, "freed", r.Freed, "young", r.Young, "in use", r.InUse, "err", err, "pid", c.Pid)
		if err != nil {
			return ctl.GCReply{}, storeError(err, fmt.Sprintf("collecting garbage (removed %d objects, %d bytes, before the error)", r.Removed, r.Freed))
		}
		if r.Removed > 0 {
			if err := w.hashes.ForgetRemoved(); err != nil {
				// Only space in the metadata: the next gc tries again.
				w.log.Warn("dropping the content hashes of removed objects", "err", err)
			}
		}
		return ctl.GCReply{Objects: r.Objects, Removed: r.Removed, Freed: r.Freed, Young: r.Young, InUse: r.InUse, Grace: grace}, nil
	})
}

// inUseLocked returns the InUse function of a collection: whether an
// open file or a node the kernel holds keeps an object. It lists them
// once, at its first call, which comes after the references were read:
// a node holding an object that no reference names was made before.
// opMu is held for as long as the function is used.
func (w *Workspace) inUseLocked() func(id string) bool {
	var live map[string]bool
	return func(id string) bool {
		if live == nil {
			live = map[string]bool{}
			for _, v := range append(slices.Collect(maps.Values(w.views)), w.retired...) {
				if err := v.LiveObjects(func(id string) error { live[id] = true; return nil }); err != nil {
					w.log.Error("listing the objects open files hold", "branch", v.Layer().Name(), "err", err)
				}
			}
		}
		return live[id]
	}
}

// Fsck checks that the entries of every branch and snapshot agree with
// the objects and the project (overlay.Fsck); with a.Repair it repairs
// what it can and shows the repaired branches to every process.
func (w *Workspace) Fsck(c ctl.Caller, a ctl.FsckArgs) (ctl.FsckReply, error) {
	return locked(w, func() (ctl.FsckReply, error) {
		if a.Repair {
			if err := w.writable("repairing the store"); err != nil {
				return ctl.FsckReply{}, err
			}
		}
		progress, end := w.startProgress("fsck", "branches and snapshots")
		defer end()
		r, err := overlay.Fsck(overlay.FsckOptions{Objects: w.objs, Meta: w.meta, Lower: w.opts.LowerDir, Repair: a.Repair, InUse: w.inUseLocked(),
			Progress: func(done, total int) { progress.set(int64(done), int64(total), 0, 0) }})
		w.log.Info("fsck", "repair", a.Repair, "problems", len(r.Problems), "garbage", len(r.Garbage), "err", err, "pid", c.Pid)
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
			for name, v := range w.views {
				stale, rerr := v.Reload()
				if rerr != nil {
					err = errors.Join(err, fmt.Errorf("showing the repaired branch %q: %w", name, rerr))
				}
				w.invalidate(stale)
			}
		}
		if err != nil {
			return ctl.FsckReply{}, storeError(err, "checking the store")
		}
		return reply, nil
	})
}
