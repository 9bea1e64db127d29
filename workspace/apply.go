package workspace

import (
	"cmp"
	"errors"
	"path"
	"strings"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// Apply writes a branch's changes into the project: the only operation
// that writes to the lower directory, and only through overlay.Apply
// (the apply*.go files of overlay), with its conflict checks. The
// caller's branch is the default; a branch in use is applied through
// its live view, so that the kernel's caches of the paths applied are
// dropped; a branch nobody sees through a view of its layer, which
// nothing else writes while opMu is held. a.Paths select subtrees;
// a.DryRun writes nothing; a.Force applies conflicts too.
func (w *Workspace) Apply(c ctl.Caller, a ctl.ApplyArgs) (ctl.ApplyReply, error) {
	paths, err := cleanPaths("apply", a.Paths)
	if err != nil {
		return ctl.ApplyReply{}, err
	}
	return locked(w, func() (ctl.ApplyReply, error) {
		if !a.DryRun {
			if err := w.writable("applying a branch"); err != nil {
				return ctl.ApplyReply{}, err
			}
		}
		name := cmp.Or(a.Branch, w.callerView(c).Layer().Name())
		v, err := w.openRefLocked(name)
		if err != nil {
			return ctl.ApplyReply{}, err
		}
		defer v.close()
		if v.snap != nil || v.fs.ReadOnly() {
			return ctl.ApplyReply{}, errorf(ErrInvalid, "%q is not a branch: only a branch's changes can be applied (agentfs branch list shows them)", name)
		}
		live := w.views[name] == v.fs
		progress, end := w.startProgress("apply", "changes")
		defer end()
		res, err := overlay.Apply(v.fs, overlay.ApplyOptions{Paths: paths, DryRun: a.DryRun, Force: a.Force,
			Progress: func(p overlay.ApplyProgress) {
				progress.set(int64(p.Done), int64(p.Total), p.Bytes, p.TotalBytes)
			}})
		if live {
			w.invalidate(res.Stale)
		}
		lower := w.opts.Lower
		reply := ctl.ApplyReply{Branch: name, Lower: lower, DryRun: a.DryRun, Bytes: res.Bytes,
			Applied: applyItems(res.Applied), Conflicts: applyItems(res.Conflicts), Skipped: applyItems(res.Skipped)}
		w.log.Info("apply", "branch", name, "dry run", a.DryRun, "force", a.Force, "paths", len(paths),
			"applied", len(res.Applied), "conflicts", len(res.Conflicts), "skipped", len(res.Skipped), "bytes", res.Bytes, "err", err, "pid", c.Pid)
		switch {
		case errors.Is(err, overlay.ErrNoChange):
			return ctl.ApplyReply{}, &Error{Kind: ErrNotFound, Err: err, Msg: err.Error() + ": nothing was applied"}
		case err != nil && len(res.Applied) == 0:
			return ctl.ApplyReply{}, ioErrorf(err, "applying branch %q to %s: %v: nothing was applied", name, lower, err)
		case err != nil:
			return ctl.ApplyReply{}, ioErrorf(err, "applying branch %q to %s: %v: %d changes were applied before the error and no longer show in agentfs diff; the others still do: fix the problem and run agentfs apply again",
				name, lower, err, len(res.Applied))
		}
		return reply, nil
	})
}

// cleanPaths checks the paths an operation (op, for the error) was
// given: relative to the mount root, without "..".
func cleanPaths(op string, paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		c := path.Clean(p)
		if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") || strings.IndexByte(c, 0) >= 0 {
			return nil, errorf(ErrInvalid, "%s: %q is not a path inside the mount (relative to its root)", op, p)
		}
		if c == "." {
			c = ""
		}
		out = append(out, c)
	}
	return out, nil
}

// applyItems turns apply items into their protocol form.
func applyItems(items []overlay.ApplyItem) []ctl.ApplyItem {
	out := make([]ctl.ApplyItem, 0, len(items))
	for _, it := range items {
		typ := ""
		if fi := cmp.Or(it.New, it.Old); fi != nil {
			typ = fi.Type
		}
		out = append(out, ctl.ApplyItem{Path: it.Path, Kind: string(it.Kind), Type: typ, Reason: it.Reason, Bytes: it.Bytes, Implied: it.Implied,
			Hide: it.Hide, Forced: it.Forced})
	}
	return out
}
