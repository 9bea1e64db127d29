package overlay

import (
	"fmt"

	"github.com/agentfs/agentfs/branch"
)

// Snapshot takes a snapshot of the view's branch: the branch's entries
// as they are now, sharing its objects (see thaw.go), so its cost does
// not depend on file sizes. The one exception is a file open for
// writing: the kernel may write to its object directly (passthrough)
// at any time, so the snapshot gets its own clone of that object, as
// of this call. Namespace operations wait while it runs.
//
// A file open for writing (or passed through) whose node has no name
// left (unlinked, or O_TMPFILE not yet linked) is in no snapshot, and
// its object is in none either (opening for writing thawed it, and a
// pin refuses a shared object): its entry moves to the new epoch all
// the same. Left behind, it would look shared, and its next change
// (an fchmod before the linkat that names it) would thaw the node onto
// a clone while the descriptor kept writing to the object it left.
func (v *FS) Snapshot(label, kind string) (branch.Snapshot, error) {
	if v.layer == nil {
		return branch.Snapshot{}, fmt.Errorf("a snapshot's view has no branch to snapshot")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	w, err := v.cloneWritingLocked()
	if err != nil {
		return branch.Snapshot{}, err
	}
	snap, snapErr := v.layer.Snapshot(label, kind)
	if err := v.giveBackLocked(w); err != nil {
		return snap, fmt.Errorf("snapshot %s taken, but the files open for writing could not be given back to the branch: %w", snap.ID, err)
	}
	return snap, snapErr
}

// writingFiles is what cloneWritingLocked did before a snapshot: the
// files open for writing whose objects it swapped for clones, and those
// without a name.
type writingFiles struct {
	swaps    []swap
	nameless []*Node
}

// swap is a file open for writing whose paths name a clone of its
// object until giveBackLocked puts live back.
type swap struct {
	n     *Node
	paths []string
	live  *branch.Entry
}

// cloneWritingLocked gets the files open for writing ready for a
// snapshot (see Snapshot): the layer names clones of their objects, in
// one commit, until giveBackLocked. v.mu is held exclusively.
func (v *FS) cloneWritingLocked() (writingFiles, error) {
	var w writingFiles
	v.nodesMu.Lock()
	var open []*Node
	for n := range v.writing {
		if v.byObject[n.object] == n && n.entry != nil && n.entry.Type == branch.TypeFile {
			if !n.unlinked {
				open = append(open, n)
			} else if v.links[n.object] == 0 {
				w.nameless = append(w.nameless, n)
			}
		}
	}
	v.nodesMu.Unlock()

	// The snapshot's entries name clones of the objects being written...
	before := v.newTx()
	for _, n := range open {
		id, err := v.objs.Clone(n.object)
		if err != nil {
			return writingFiles{}, before.fail(fmt.Errorf("snapshot: cloning a file open for writing: %w", err))
		}
		before.made(id)
		ce := *n.entry
		ce.Object = id
		paths := v.pathsOfLocked(n.object)
		for _, p := range paths {
			before.put(p, &ce)
		}
		w.swaps = append(w.swaps, swap{n, paths, n.entry})
	}
	if err := before.commit(); err != nil {
		return writingFiles{}, err
	}
	return w, nil
}

// giveBackLocked gives the branch back the objects being written that
// cloneWritingLocked swapped for clones, once the snapshot is taken (or
// was not), in the layer's epoch: no snapshot shares them. v.mu is held
// exclusively.
func (v *FS) giveBackLocked(w writingFiles) error {
	after := v.newTx()
	for _, s := range w.swaps {
		le := *s.live
		le.Epoch = v.layer.Epoch()
		for _, p := range s.paths {
			after.put(p, &le)
		}
		after.promote(s.n, &le)
	}
	for _, n := range w.nameless {
		le := *n.entry
		le.Epoch = v.layer.Epoch()
		after.promote(n, &le)
	}
	return after.commit()
}

// Restore makes the branch's entries those of snap (the caller takes a
// safety snapshot first) and updates the view, cutting loose only the
// nodes of what changed. What differs, with the snapshot's entries, comes
// from the layers' structure (branch.Layer.Difference) before the branch
// moves, and the index is updated in place (reloadPathsLocked): the cost
// grows with the difference, not with the branch. When the layers
// cannot tell, the index is read again whole (reloadChangedLocked). The
// returned nodes must be dropped from the kernel's caches
// (fs.Server.Invalidate).
func (v *FS) Restore(snap branch.Snapshot) ([]Stale, error) {
	if v.layer == nil {
		return nil, fmt.Errorf("a snapshot's view cannot be restored into")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var diff []pathEntry
	known, err := v.layer.Difference(snap, func(p string, e *branch.Entry) { diff = append(diff, pathEntry{p, e}) })
	if err != nil {
		return nil, err
	}
	if err := v.layer.ResetTo(snap); err != nil {
		return nil, err
	}
	if !known {
		return v.reloadChangedLocked(nil)
	}
	stale, _, err := v.reloadPathsLocked(diff, nil)
	return stale, err
}
