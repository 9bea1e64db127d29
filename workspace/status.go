package workspace

import (
	"os"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/ctl"
)

// Status describes the store and, when one is attached, the mount. It
// takes no lock that an operation holds (agentfs status answers while
// an apply runs).
func (w *Workspace) Status() ctl.Status {
	info := w.objs.Info()
	u, err := w.objs.Usage()
	if err != nil {
		w.log.Warn("backstore usage", "err", err)
	}
	st := ctl.Status{
		Version: w.opts.Version, Owner: uint32(os.Geteuid()), Session: w.opts.Session,
		Lower: w.opts.Lower, Mountpoint: w.opts.Mountpoint, Store: w.opts.Store,
		Branch: w.current.Load().Name(), Ephemeral: w.opts.Ephemeral,
		Backstore: info.Kind, BackingMode: info.Mode, BackingRoot: info.Root, SizeLimit: info.SizeLimit,
		Reflink: info.Reflink, Objects: u.Objects, Bytes: u.Bytes, FsFree: u.FsFree,
		Bindings: []ctl.BindInfo{}, Hide: []ctl.HidePattern{},
	}
	for _, p := range w.HidePatterns() {
		st.Hide = append(st.Hide, ctl.HidePattern{Pattern: p.Pattern, From: p.From})
	}
	if v := w.shown.Load(); v != nil {
		u, l := v.Usage(), v.Limits()
		st.BranchFiles, st.BranchBytes = u.Files, u.Bytes
		st.MaxFiles, st.MaxBytes = l.Files, l.Bytes
		st.OpenForWriting = v.Writing()
	}
	// The mount is attached before it serves and never detached: read
	// without opMu.
	if m := w.attached(); m != nil {
		m.Describe(&st)
		st.Bindings = w.bindings()
	} else {
		st.Offline = true
		st.IOMode = "none (not mounted: the store was opened by this command)"
		if st.Session {
			st.IOMode = "none (not mounted: the session has ended)"
		}
		st.Transport = "none"
		st.Trace = activity.LastTrace(w.opts.Store) // what it was when mounted
	}
	return st
}
