package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// handleChanges registers restore, diff and export.
func (d *daemon) handleChanges(s *ctl.Server) {
	s.Handle(ctl.OpRestore, serialized(d, ctl.OpRestore, d.restore))
	s.Handle(ctl.OpDiff, serialized(d, ctl.OpDiff, d.diff))
	s.Handle(ctl.OpExport, serialized(d, ctl.OpExport, d.export))
}

// lowerRef names the project itself in diff and export.
const lowerRef = "lower"

// refView is a view that diff or export reads: what ref names.
type refView struct {
	fs    *overlay.FS
	what  string // in words: "the project", "snapshot 1a2b3c4d", "branch main"
	snap  *branch.Snapshot
	close func()
}

// openRef opens a view of what ref names: "lower" (the project as it
// is), a branch, or a snapshot (an id, a prefix, or a tag). The current
// branch is the mount's own view, read live; another branch is read
// through a view of its layer, which nothing writes while opMu is held
// (only the current branch is written, and switching needs opMu); a
// snapshot through a read-only view. A name that is both a branch and
// a tag is refused as ambiguous.
func (d *daemon) openRef(ref string) (refView, error) {
	if ref == lowerRef {
		v, err := overlay.LowerView(d.lowerDir(), d.objs)
		if err != nil {
			return refView{}, ctl.Errorf(syscall.EIO, "opening the project %s: %v", d.plan.lower, err)
		}
		return refView{fs: v, what: "the project (lower)", close: func() { v.Close() }}, nil
	}
	l, err := d.meta.Layer(ref)
	if err == nil {
		if _, tagged := d.tags()[ref]; tagged {
			return refView{}, ctl.Errorf(syscall.EINVAL, "%q names both a branch and a tag: name the tag's snapshot by its id (agentfs snapshot list), or delete the tag", ref)
		}
		what := fmt.Sprintf("branch %s", ref)
		if v := d.views[l.Name()]; v != nil {
			// Live: processes may be writing it.
			return refView{fs: v, what: what, close: func() {}}, nil
		}
		v, err := overlay.New(overlay.Config{Lower: d.lowerDir(), Objects: d.objs, Layer: l, Logger: d.log})
		if err != nil {
			return refView{}, storeError(err, fmt.Sprintf("opening branch %q", ref))
		}
		return refView{fs: v, what: what, close: func() { v.Close() }}, nil
	}
	if !errors.Is(err, branch.ErrNotFound) {
		return refView{}, storeError(err, fmt.Sprintf("opening branch %q", ref))
	}
	snap, err := d.resolveSnapshot(ref)
	if err != nil {
		var ce *ctl.Error
		if errors.As(err, &ce) && ce.Errno == syscall.ENOENT {
			return refView{}, ctl.Errorf(syscall.ENOENT, "%q is neither \"lower\", a branch, a snapshot id nor a tag: agentfs branch list and agentfs snapshot list show them", ref)
		}
		return refView{}, err
	}
	v, err := overlay.New(overlay.Config{Lower: d.lowerDir(), Objects: d.objs, Snapshot: d.meta.SnapshotView(snap), Logger: d.log})
	if err != nil {
		return refView{}, storeError(err, fmt.Sprintf("opening snapshot %s", snap.ID))
	}
	return refView{fs: v, what: "snapshot " + snap.ID, snap: &snap, close: func() { v.Close() }}, nil
}

// changes returns the changes from view a to view b, as overlay.Diff
// reports them.
func changes(a, b *overlay.FS) ([]overlay.Change, error) {
	var out []overlay.Change
	err := overlay.Diff(a, b, func(c overlay.Change) error {
		out = append(out, c)
		return nil
	})
	return out, err
}

// changeInfos turns changes into their protocol form.
func changeInfos(cs []overlay.Change) []ctl.Change {
	out := make([]ctl.Change, 0, len(cs))
	for _, c := range cs {
		out = append(out, ctl.Change{Path: c.Path, Kind: string(c.Kind), Old: fileInfo(c.Old), New: fileInfo(c.New),
			SizeDelta: c.SizeDelta, AttrsChanged: c.AttrsChanged})
	}
	return out
}

// maxPatch bounds the unified diff a diff --patch reply carries.
const maxPatch = 64 << 20

// patchOf returns the unified diff of the data of every changed file.
func patchOf(a, b *overlay.FS, cs []overlay.Change) (string, error) {
	var buf strings.Builder
	for _, c := range cs {
		if err := overlay.Patch(a, b, c, &buf); err != nil {
			return "", fmt.Errorf("%s: %w", c.Path, err)
		}
		if buf.Len() > maxPatch {
			return "", fmt.Errorf("the patch is larger than %d MiB: compare exports instead (agentfs export, then diff -r)", maxPatch>>20)
		}
	}
	return buf.String(), nil
}

func fileInfo(fi *overlay.FileInfo) *ctl.FileInfo {
	if fi == nil {
		return nil
	}
	return &ctl.FileInfo{Type: fi.Type, Mode: fi.Mode, Uid: fi.Uid, Gid: fi.Gid, Size: fi.Size, Rdev: fi.Rdev, Target: fi.Target}
}

// diff compares two of: the project, a snapshot, a branch.
func (d *daemon) diff(c ctl.Caller, args ctl.DiffArgs) (any, error) {
	from, to := cmp.Or(args.From, lowerRef), cmp.Or(args.To, d.callerView(c).Layer().Name())
	a, err := d.openRef(from)
	if err != nil {
		return nil, err
	}
	defer a.close()
	b, err := d.openRef(to)
	if err != nil {
		return nil, err
	}
	defer b.close()
	cs, err := changes(a.fs, b.fs)
	if err != nil {
		return nil, ctl.Errorf(syscall.EIO, "comparing %s with %s: %v", a.what, b.what, err)
	}
	reply := ctl.DiffReply{From: a.what, To: b.what, Changes: changeInfos(cs)}
	if args.Patch {
		if reply.Patch, err = patchOf(a.fs, b.fs, cs); err != nil {
			return nil, ctl.Errorf(syscall.EIO, "diff --patch of %s and %s: %v", a.what, b.what, err)
		}
	}
	return reply, nil
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
	view := d.callerView(c)
	cur := view.Layer().Name()
	reply := ctl.RestoreReply{Snapshot: snapshotInfo(snap, d.tags()), Branch: cur}
	if args.DryRun {
		v, err := d.openRef(snap.ID)
		if err != nil {
			return nil, err
		}
		defer v.close()
		cs, err := changes(view, v.fs)
		if err != nil {
			return nil, ctl.Errorf(syscall.EIO, "comparing branch %q with snapshot %s: %v", cur, snap.ID, err)
		}
		reply.Changes = changeInfos(cs)
		return reply, nil
	}
	safety, err := view.Snapshot(fmt.Sprintf("before restoring %s", snap.ID), branch.KindSafety)
	if err != nil {
		if safety.ID != "" {
			d.meta.DeleteSnapshot(safety.ID)
		}
		return nil, storeError(err, fmt.Sprintf("restoring snapshot %s: taking the safety snapshot of branch %q (nothing was restored)", snap.ID, cur))
	}
	stale, err := view.Restore(snap)
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

// export writes what args.Ref names as a plain directory tree at
// args.To. The current branch is read live (see openRef).
func (d *daemon) export(c ctl.Caller, args ctl.ExportArgs) (any, error) {
	if err := d.checkExportTarget(args.To); err != nil {
		return nil, err
	}
	v, err := d.openRef(args.Ref)
	if err != nil {
		return nil, err
	}
	defer v.close()
	reply := ctl.ExportReply{What: v.what, To: args.To}
	err = overlay.ExportWith(v.fs, args.To, overlay.ExportOptions{Skipped: func(path, why string) {
		reply.Skipped = append(reply.Skipped, path+": "+why)
	}})
	d.log.Info("export", "what", v.what, "to", args.To, "skipped", len(reply.Skipped), "err", err, "pid", c.Pid)
	if err != nil {
		return nil, ctl.Errorf(errnoOrEIO(err), "exporting %s to %s: %v", v.what, args.To, err)
	}
	return reply, nil
}

// checkExportTarget refuses an export target that is not absolute, or
// that is in the project (agentfs never writes there) or in the mount
// (the daemon would write to itself), also when reached through a
// symlink or a bind mount.
func (d *daemon) checkExportTarget(to string) error {
	if !filepath.IsAbs(to) || filepath.Clean(to) != to {
		return ctl.Errorf(syscall.EINVAL, "export target %q is not a clean absolute path", to)
	}
	real := resolveExisting(to)
	existing := real
	for {
		if _, err := os.Lstat(existing); err == nil || existing == "/" {
			break
		}
		existing = filepath.Dir(existing)
	}
	lower, mp := d.plan.lower, d.plan.mountpoint
	// idPath reaches dir for its identity: the lower directory through
	// d.lowerDir (under agentfs run its path shows the mount).
	inside := func(dir, idPath string) bool {
		if real == dir || within(real, dir) {
			return true
		}
		id, err := dirID(idPath)
		if err != nil {
			return false
		}
		eid, err := dirID(existing)
		return err == nil && (eid == id || hasAncestor(existing, id))
	}
	switch {
	case inside(lower, d.lowerDir()):
		return ctl.Errorf(syscall.EINVAL, "export target %s is inside the project %s, which agentfs never writes to: choose a directory outside it", to, lower)
	case inside(mp, mp) || d.onMount(existing):
		return ctl.Errorf(syscall.EINVAL, "export target %s is inside the mount %s: choose a directory outside it", to, mp)
	}
	return nil
}

// onMount reports whether path p is on this mount's filesystem (also
// through a bind mount of it). Offline (an ended session) nothing is
// mounted.
func (d *daemon) onMount(p string) bool {
	if d.plan.offline {
		return false
	}
	var st, mst unix.Stat_t
	return unix.Lstat(p, &st) == nil && unix.Stat(d.plan.mountpoint, &mst) == nil && st.Dev == mst.Dev
}

// errnoOrEIO is the errno in err, or EIO.
func errnoOrEIO(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) && en != 0 {
		return en
	}
	return syscall.EIO
}
