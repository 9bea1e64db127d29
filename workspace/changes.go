package workspace

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/hostpath"
	"github.com/agentfs/agentfs/overlay"
)

// LowerRef names the project itself in Diff and Export.
const LowerRef = "lower"

// refView is a view that diff or export reads: what a ref names.
type refView struct {
	fs    *overlay.FS
	what  string // in words: "the project (lower)", "snapshot 1a2b3c4d", "branch main"
	snap  *branch.Snapshot
	close func()
}

// openRefLocked opens a view of what ref names: "lower" (the project as
// it is), a branch, or a snapshot (an id, a prefix, or a tag). A branch
// in use is read through its live view; another branch through a view
// of its layer, which nothing writes while opMu is held (only branches
// in use are written, and putting one in use needs opMu); a snapshot
// through a read-only view. A name that is both a branch and a tag is
// refused as ambiguous. opMu is held.
func (w *Workspace) openRefLocked(ref string) (refView, error) {
	if ref == LowerRef {
		v, err := w.readView(nil, nil)
		if err != nil {
			return refView{}, eioErrorf(err, "opening the project %s: %v", w.opts.Lower, err)
		}
		return refView{fs: v, what: "the project (lower)", close: w.closer(v, "the project")}, nil
	}
	l, err := w.meta.Layer(ref)
	if err == nil {
		if _, tagged := w.tags()[ref]; tagged {
			return refView{}, errorf(ErrInvalid, "%q names both a branch and a tag: name the tag's snapshot by its id (agentfs snapshot list), or delete the tag", ref)
		}
		what := fmt.Sprintf("branch %s", ref)
		if v := w.views[l.Name()]; v != nil {
			// Live: processes may be writing it.
			return refView{fs: v, what: what, close: func() {}}, nil
		}
		v, err := w.readView(l, nil)
		if err != nil {
			return refView{}, storeError(err, fmt.Sprintf("opening branch %q", ref))
		}
		return refView{fs: v, what: what, close: w.closer(v, what)}, nil
	}
	if !errors.Is(err, branch.ErrNotFound) {
		return refView{}, storeError(err, fmt.Sprintf("opening branch %q", ref))
	}
	snap, err := w.resolveSnapshot(ref)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return refView{}, errorf(ErrNotFound, "%q is neither \"lower\", a branch, a snapshot id nor a tag: agentfs branch list and agentfs snapshot list show them", ref)
		}
		return refView{}, err
	}
	v, err := w.readView(nil, w.meta.SnapshotView(snap))
	if err != nil {
		return refView{}, storeError(err, fmt.Sprintf("opening snapshot %s", snap.ID))
	}
	return refView{fs: v, what: "snapshot " + snap.ID, snap: &snap, close: w.closer(v, "snapshot "+snap.ID)}, nil
}

// closer closes a view opened for one operation, logging a failure
// (the operation's outcome stands: the view was only read).
func (w *Workspace) closer(v *overlay.FS, what string) func() {
	return func() {
		if err := v.Close(); err != nil {
			w.log.Warn("closing a view", "of", what, "err", err)
		}
	}
}

// changes returns the changes from view a to view b, as overlay.Diff
// reports them.
func changes(a, b *overlay.FS) ([]overlay.Change, error) { return changesWith(a, b, nil) }

// changesWith is changes, telling progress (when set) how many were
// found so far.
func changesWith(a, b *overlay.FS, progress func(n int)) ([]overlay.Change, error) {
	var out []overlay.Change
	err := overlay.Diff(a, b, func(c overlay.Change) error {
		out = append(out, c)
		if progress != nil {
			progress(len(out))
		}
		return nil
	})
	return out, err
}

// changeInfos turns changes into their protocol form.
func changeInfos(cs []overlay.Change) []ctl.Change {
	out := make([]ctl.Change, 0, len(cs))
	for _, c := range cs {
		out = append(out, ctl.Change{Path: c.Path, Kind: string(c.Kind), Old: fileInfo(c.Old), New: fileInfo(c.New),
			SizeDelta: c.SizeDelta, AttrsChanged: c.AttrsChanged, Hidden: c.Hidden})
	}
	return out
}

func fileInfo(fi *overlay.FileInfo) *ctl.FileInfo {
	if fi == nil {
		return nil
	}
	return &ctl.FileInfo{Type: fi.Type, Mode: fi.Mode, Uid: fi.Uid, Gid: fi.Gid, Size: fi.Size, Rdev: fi.Rdev, Target: fi.Target}
}

// onlyBelow keeps the changes at or below one of paths (clean, relative
// to the mount root; "" is the root): all of them when paths is empty.
func onlyBelow(cs []overlay.Change, paths []string) []overlay.Change {
	if len(paths) == 0 {
		return cs
	}
	var out []overlay.Change
	for _, c := range cs {
		for _, p := range paths {
			if p == "" || below(c.Path, p) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// MaxPatch bounds the unified diff a Diff with Patch carries.
const MaxPatch = 64 << 20

// patchOf returns the unified diff of the data of every changed file.
// With limit (not 0), it is cut at limit bytes (and at MaxPatch) at the
// start of a character, and reports that it was; it stops at the file
// whose diff crosses the limit. Without, a diff past MaxPatch is an
// error.
func patchOf(a, b *overlay.FS, cs []overlay.Change, limit int) (string, bool, error) {
	bound := MaxPatch
	if limit > 0 {
		bound = min(limit, MaxPatch)
	}
	// One byte past the bound tells a cut that splits a character.
	buf := &boundedBuffer{max: bound + 1}
	for _, c := range cs {
		// A full buffer fails the write, which ends diff(1) early: its
		// error is then the cut's, not one to report.
		if err := overlay.Patch(a, b, c, buf); err != nil && buf.Len() <= bound {
			return "", false, fmt.Errorf("%s: %w", c.Path, err)
		}
		if buf.Len() > bound {
			if limit == 0 {
				return "", false, fmt.Errorf("the patch is larger than %d MiB: compare exports instead (agentfs export, then diff -r)", MaxPatch>>20)
			}
			return ctl.CutAtRune(buf.String(), bound), true, nil
		}
	}
	return buf.String(), false, nil
}

// boundedBuffer keeps the first max bytes written to it; a write past
// them fails with errPatchFull.
type boundedBuffer struct {
	buf strings.Builder
	max int
}

var errPatchFull = errors.New("the patch is at its size limit")

func (b *boundedBuffer) Write(p []byte) (int, error) {
	room := b.max - b.buf.Len()
	if room >= len(p) {
		return b.buf.Write(p)
	}
	b.buf.Write(p[:max(room, 0)])
	return max(room, 0), errPatchFull
}

func (b *boundedBuffer) Len() int       { return b.buf.Len() }
func (b *boundedBuffer) String() string { return b.buf.String() }

// Diff compares two of: the project, a snapshot, a branch (a.From,
// the project by default, with a.To, the caller's branch by default);
// with a.Paths, only the changes at or below those paths.
func (w *Workspace) Diff(c ctl.Caller, a ctl.DiffArgs) (ctl.DiffReply, error) {
	paths, err := cleanPaths("diff", a.Paths)
	if err != nil {
		return ctl.DiffReply{}, err
	}
	return locked(w, func() (ctl.DiffReply, error) {
		from, to := cmp.Or(a.From, LowerRef), cmp.Or(a.To, w.callerView(c).Layer().Name())
		va, err := w.openRefLocked(from)
		if err != nil {
			return ctl.DiffReply{}, err
		}
		defer va.close()
		vb, err := w.openRefLocked(to)
		if err != nil {
			return ctl.DiffReply{}, err
		}
		defer vb.close()
		progress, end := w.startProgress("diff", "changes")
		defer end()
		cs, err := changesWith(va.fs, vb.fs, func(n int) { progress.set(int64(n), 0, 0, 0) })
		if err != nil {
			return ctl.DiffReply{}, eioErrorf(err, "comparing %s with %s: %v", va.what, vb.what, err)
		}
		cs = onlyBelow(cs, paths)
		reply := ctl.DiffReply{From: va.what, To: vb.what, Changes: changeInfos(cs)}
		if a.Patch {
			if reply.Patch, reply.PatchTruncated, err = patchOf(va.fs, vb.fs, cs, max(a.MaxBytes, 0)); err != nil {
				return ctl.DiffReply{}, eioErrorf(err, "diff --patch of %s and %s: %v", va.what, vb.what, err)
			}
		}
		return reply, nil
	})
}

// Export writes what a.Ref names as a plain directory tree at a.To (an
// absolute path outside the project and the mount). A branch in use is
// read live.
func (w *Workspace) Export(c ctl.Caller, a ctl.ExportArgs) (ctl.ExportReply, error) {
	return locked(w, func() (ctl.ExportReply, error) {
		if err := w.checkExportTargetLocked(a.To); err != nil {
			return ctl.ExportReply{}, err
		}
		if a.Manifest {
			if _, err := os.Lstat(a.To + ".manifest.json"); err == nil {
				return ctl.ExportReply{}, errorf(ErrExists, "the manifest %s.manifest.json exists already: export to another directory, or remove it first", a.To)
			}
		}
		v, err := w.openRefLocked(a.Ref)
		if err != nil {
			return ctl.ExportReply{}, err
		}
		defer v.close()
		reply := ctl.ExportReply{What: v.what, To: a.To}
		progress, end := w.startProgress("export", "files")
		defer end()
		err = overlay.ExportWith(v.fs, a.To, overlay.ExportOptions{Skipped: func(path, why string) {
			reply.Skipped = append(reply.Skipped, path+": "+why)
		}, Progress: func(files, bytes int64) { progress.set(files, 0, bytes, 0) }})
		w.log.Info("export", "what", v.what, "to", a.To, "skipped", len(reply.Skipped), "err", err, "pid", c.Pid)
		if err != nil {
			return ctl.ExportReply{}, ioErrorf(err, "exporting %s to %s: %v", v.what, a.To, err)
		}
		if a.Manifest {
			if reply.Manifest, reply.Root, err = w.writeManifest(v, a.To); err != nil {
				return ctl.ExportReply{}, ioErrorf(err, "%s exported to %s, but its manifest could not be written: %v", v.what, a.To, err)
			}
		}
		return reply, nil
	})
}

// checkExportTarget refuses an export target that is not absolute, or
// that is in the project (agentfs never writes there) or in the mount
// (the daemon would write to itself), also when reached through a
// symlink or a bind mount. opMu is held.
func (w *Workspace) checkExportTargetLocked(to string) error {
	if !filepath.IsAbs(to) || filepath.Clean(to) != to {
		return errorf(ErrInvalid, "export target %q is not a clean absolute path", to)
	}
	lower, mp := w.opts.Lower, w.opts.Mountpoint
	switch {
	case hostpath.Inside(to, lower, w.opts.LowerDir):
		return errorf(ErrInvalid, "export target %s is inside the project %s, which agentfs never writes to: choose a directory outside it", to, lower)
	case mp != "" && hostpath.Inside(to, mp, ""), w.attached() != nil && w.attached().Contains(hostpath.Existing(hostpath.ResolveExisting(to))):
		return errorf(ErrInvalid, "export target %s is inside the mount %s: choose a directory outside it", to, mp)
	}
	return nil
}
