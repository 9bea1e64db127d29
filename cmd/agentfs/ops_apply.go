package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"path"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// applyProgress is the progress of the apply running in this daemon
// (there is one daemon per process, and applies are serialized by
// opMu); nil when none runs.
var applyProgress atomic.Pointer[ctl.ApplyProgress]

// handleApply registers apply and its progress. The progress is
// answered without opMu: it is asked while the apply holds it.
func (d *daemon) handleApply(s *ctl.Server) {
	s.Handle(ctl.OpApply, serialized(d, ctl.OpApply, d.apply))
	s.Handle(ctl.OpApplyProgress, func(ctl.Caller, json.RawMessage) (any, error) {
		if p := applyProgress.Load(); p != nil {
			return *p, nil
		}
		return ctl.ApplyProgress{}, nil
	})
}

// apply writes a branch's changes into the project: the only operation
// that writes to the lower directory (see overlay.Apply). The current
// branch (the caller's, by default) is applied through its live view
// when processes see it, so that the kernel's caches of the paths
// applied are dropped; a branch nobody sees through a view of its
// layer, which nothing else writes while opMu is held.
func (d *daemon) apply(c ctl.Caller, args ctl.ApplyArgs) (any, error) {
	name := cmp.Or(args.Branch, d.callerView(c).Layer().Name())
	paths, err := cleanApplyPaths(args.Paths)
	if err != nil {
		return nil, err
	}
	v, err := d.openRef(name)
	if err != nil {
		return nil, err
	}
	defer v.close()
	if v.snap != nil || v.fs.ReadOnly() {
		return nil, ctl.Errorf(syscall.EINVAL, "%q is not a branch: only a branch's changes can be applied (agentfs branch list shows them)", name)
	}
	live := d.views[name] == v.fs
	applyProgress.Store(&ctl.ApplyProgress{Running: true})
	defer applyProgress.Store(nil)
	res, err := overlay.Apply(v.fs, overlay.ApplyOptions{Paths: paths, DryRun: args.DryRun, Force: args.Force,
		Progress: func(p overlay.ApplyProgress) {
			applyProgress.Store(&ctl.ApplyProgress{Running: true, Done: p.Done, Total: p.Total, Bytes: p.Bytes, TotalBytes: p.TotalBytes})
		}})
	if live {
		d.invalidate(res.Stale)
	}
	reply := ctl.ApplyReply{Branch: name, Lower: d.plan.lower, DryRun: args.DryRun, Bytes: res.Bytes,
		Applied: applyItems(res.Applied), Conflicts: applyItems(res.Conflicts), Skipped: applyItems(res.Skipped)}
	d.log.Info("apply", "branch", name, "dry run", args.DryRun, "force", args.Force, "paths", len(paths),
		"applied", len(res.Applied), "conflicts", len(res.Conflicts), "skipped", len(res.Skipped), "bytes", res.Bytes, "err", err, "pid", c.Pid)
	switch {
	case errors.Is(err, overlay.ErrNoChange):
		return nil, ctl.Errorf(syscall.ENOENT, "%v: nothing was applied", err)
	case err != nil && len(res.Applied) == 0:
		return nil, ctl.Errorf(errnoOrEIO(err), "applying branch %q to %s: %v: nothing was applied", name, d.plan.lower, err)
	case err != nil:
		return nil, ctl.Errorf(errnoOrEIO(err), "applying branch %q to %s: %v: %d changes were applied before the error and no longer show in agentfs diff; the others still do: fix the problem and run agentfs apply again",
			name, d.plan.lower, err, len(res.Applied))
	}
	return reply, nil
}

// cleanApplyPaths checks the paths of an apply: relative to the mount
// root, without "..".
func cleanApplyPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		c := path.Clean(p)
		if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") || strings.IndexByte(c, 0) >= 0 {
			return nil, ctl.Errorf(syscall.EINVAL, "apply: %q is not a path inside the mount (relative to its root)", p)
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
		out = append(out, ctl.ApplyItem{Path: it.Path, Kind: string(it.Kind), Type: typ, Reason: it.Reason, Bytes: it.Bytes, Implied: it.Implied})
	}
	return out
}
