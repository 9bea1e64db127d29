package overlay

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # Objects shared with snapshots
//
// A snapshot shares the branch's objects by reference: its entries name
// the same objects as the branch's at the time it was taken. Such an
// object is frozen: nothing may change it in place, neither its data nor
// its attributes (which live on the object), and it is never removed by
// the branch (garbage collection removes objects nothing references).
// Before changing a frozen object the branch thaws it: the object is
// cloned (FICLONE where the backstore can, else a copy), and every entry
// of the branch that names it is pointed at the clone, in the same
// commit as the change. The ctime updates that renames and links make
// are skipped for frozen objects, so that a rename after a snapshot
// copies no data.

// frozenLocked reports whether entry e names an object that a snapshot
// shares. v.mu is held.
func (v *FS) frozenLocked(e *branch.Entry) bool {
	if e == nil || e.Object == "" {
		return false
	}
	return v.layer != nil && e.Epoch < v.layer.Epoch()
}

// frozenNodeLocked reports whether n's object is shared with a snapshot
// and must be thawed before it changes. A node a Reload cut loose never
// is: its entry is no longer the view's, and changeStaleLocked decides what
// may change it.
func (v *FS) frozenNodeLocked(n *Node) bool {
	return !n.stale && n.object != "" && n.entry != nil && v.frozenLocked(n.entry)
}

// changeStaleLocked decides a change to n when a Reload cut it loose: a
// file held open across a restore (or another Reload), reached through a
// descriptor or /proc/PID/fd/N. It reports whether n is such a node.
// Its object may then be changed in place only while a file open for
// writing or passed through holds it, since before the Reload: no
// snapshot shares such an object (Snapshot clones it for itself), and
// after the Reload only this and Pin add writers and pins, and only to
// a node that has some. Otherwise the object may be the safety
// snapshot's, and there is no name left to copy it up to: ESTALE, as
// for a file that is gone. v.mu is held (Reload sets n.stale with it
// held exclusively).
func (v *FS) changeStaleLocked(n *Node) (bool, error) {
	if !n.stale {
		return false, nil
	}
	v.nodesMu.Lock()
	own := n.object != "" && (n.entry == nil || !n.entry.Metacopy) && (n.writers > 0 || n.pins > 0)
	v.nodesMu.Unlock()
	if !own {
		return true, unix.ESTALE
	}
	return true, nil
}

// thawLocked gives upper node n an object of its own when its object is
// frozen, and returns n's entry (possibly new). v.mu is held
// exclusively.
func (v *FS) thawLocked(t *tx, n *Node) (*branch.Entry, error) {
	e := t.entryOf(n)
	if !v.frozenLocked(e) {
		return e, nil
	}
	id, err := v.objs.Clone(e.Object)
	if err != nil {
		return nil, fmt.Errorf("thawing %s: %w", e.Object, err)
	}
	t.made(id)
	ne := *e
	ne.Object = id
	// The clone belongs to no snapshot, named or not: a node without a
	// name (unlinked while held) has no put to say so, and a frozen
	// entry would have its change thaw it again, for ever.
	if v.layer != nil {
		ne.Epoch = v.layer.Epoch()
	}
	// The node's own name is the only one when it still names this
	// object and nothing else links it; a hard-linked node may still
	// carry a name that was unlinked since: then look every name up.
	var paths []string
	if p, ok := n.pathLocked(); ok && v.namesObjectLocked(p, e.Object) &&
		(e.Type != branch.TypeFile || v.links[e.Object] <= 1) {
		paths = []string{p}
	} else {
		paths = v.pathsOfLocked(e.Object)
	}
	for _, p := range paths {
		t.put(p, &ne)
	}
	// Read-only files still open on the frozen object follow the node to
	// the clone, so they see the change (as after a copy-up).
	t.moveData(n, &ne)
	return &ne, nil
}

// namesObjectLocked reports whether the entry at p names object obj.
func (v *FS) namesObjectLocked(p, obj string) bool {
	if p == "" {
		return v.rootEntry != nil && v.rootEntry.Object == obj
	}
	ie := v.indexGet(p)
	return ie != nil && ie.Object == obj
}

// thaw is thawLocked in a transaction of its own.
func (v *FS) thaw(n *Node) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.frozenLocked(n.entry) {
		return nil
	}
	t := v.newTx()
	if _, err := v.thawLocked(t, n); err != nil {
		return t.fail(err)
	}
	return t.commit()
}
