package overlay

import (
	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
)

// # Views
//
// A view shows one of three things over its lower directory: the live
// branch (Config.Layer), a snapshot (Config.Snapshot, read-only), or
// nothing at all (LowerView, read-only): the lower tree as it is. Any
// two views of the same lower directory can be compared (Diff) and any
// view can be written out as a plain tree (Export). Changes to a
// read-only view fail with EROFS.

// LowerView opens the plain lower tree as a read-only view: no entries,
// so every path shows the lower file. objs is only read (Statfs).
func LowerView(lower string, objs *backstore.Store) (*FS, error) {
	return New(Config{Lower: lower, Objects: objs})
}

// ReadOnly reports whether the view shows a snapshot or the plain
// lower tree (changes fail with EROFS).
func (v *FS) ReadOnly() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.layer == nil
}

// Source returns the entries the view shows: its branch's layer, its
// snapshot, or an empty source for a lower view.
func (v *FS) Source() branch.Source {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.sourceLocked()
}

// sourceLocked is Source with v.mu held.
func (v *FS) sourceLocked() branch.Source {
	switch {
	case v.layer != nil:
		return v.layer
	case v.cfg.Snapshot != nil:
		return v.cfg.Snapshot
	}
	return noEntries{}
}

// noEntries is the source of a lower view.
type noEntries struct{}

func (noEntries) Load(func(string, *branch.Entry) error) error { return nil }
