package overlay

import (
	"errors"
	"fmt"
	"sync"

	"github.com/agentfs/agentfs/branch"
)

// Restored is what RestoreKeeping did.
type Restored struct {
	// Safety is the snapshot of the branch as it was before, which
	// undoes the restore.
	Safety branch.Snapshot
	// Stale are the nodes cut loose and the directories kept, as
	// Restore returns them, for the kernel's caches.
	Stale []Stale
	// Synced waits until the restore, with its safety snapshot, is on
	// disk (it survives a power loss), and returns the sync's error: the
	// sync starts once the commit is written, while the index is
	// updated, so that the caller can tell the kernel meanwhile.
	Synced func() error
}

// RestoreKeeping is Restore with its safety snapshot (labelled label)
// taken in the same commit as the reset (branch.Layer.ResetToKeeping):
// the safety snapshot exists if and only if the branch was reset,
// whatever a crash interrupts, and a restore costs one commit and one
// sync, which runs while the index is updated. A file open for writing
// goes into the safety snapshot as Snapshot puts it (a clone of its
// object, as of this call); its node, whose path the restore changes,
// is cut loose with its object, which neither the restored state nor
// any snapshot names. If the commit fails, nothing was restored and
// the branch goes on with the files open for writing as before.
//
// An error after the commit (updating the index) comes with the safety
// snapshot: the branch was reset.
//
// tell, if not nil, is given Restored.Stale as soon as it is known,
// with the view's lock still held, so that the kernel is told while the
// index is updated: once the nodes are cut loose and before the index
// is, where the changes are applied in place (reloadPathsLocked), else
// at the end; never when the restore fails. tell must hand the list
// to another goroutine and return: the view's lock holder must never
// wait for what tells the kernel, as a notification may wait for a
// LOOKUP the kernel is sending in the same directory, which waits for
// the view's lock (see fs/expire.go). The caller waits for it once
// RestoreKeeping has returned. A request that meets an expired name
// before then waits for the view's lock, and so sees the index
// restored.
func (v *FS) RestoreKeeping(snap branch.Snapshot, label string, tell func([]Stale)) (Restored, error) {
	if v.layer == nil {
		return Restored{}, fmt.Errorf("a snapshot's view cannot be restored into")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	w, err := v.cloneWritingLocked()
	if err != nil {
		return Restored{}, err
	}
	// What differs includes the paths of the files open for writing:
	// their keys were just written in the layer.
	var diff []pathEntry
	known, err := v.layer.Difference(snap, func(p string, e *branch.Entry) { diff = append(diff, pathEntry{p, e}) })
	var safety branch.Snapshot
	if err == nil {
		safety, err = v.layer.ResetToKeeping(snap, label, branch.KindSafety)
	}
	if err != nil {
		if gerr := v.giveBackLocked(w); gerr != nil {
			err = errors.Join(err, fmt.Errorf("giving the files open for writing back to the branch: %w", gerr))
		}
		return Restored{}, err
	}
	synced := make(chan error, 1)
	go func() { synced <- v.cfg.Sync() }()
	r := Restored{Safety: safety, Synced: sync.OnceValue(func() error { return <-synced })}
	told := false
	if !known {
		r.Stale, err = v.reloadChangedLocked(nil)
	} else {
		r.Stale, told, err = v.reloadPathsLocked(diff, tell)
	}
	if err == nil && !told && tell != nil {
		tell(r.Stale)
	}
	return r, err
}
