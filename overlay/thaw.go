package overlay

import (
	"fmt"

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
// shares. fs.mu is held.
func (fs *FS) frozenLocked(e *branch.Entry) bool {
	if e == nil || e.Object == "" {
		return false
	}
	return fs.layer != nil && e.Epoch < fs.layer.Epoch()
}

// thawLocked gives upper node n an object of its own when its object is
// frozen, and returns n's entry (possibly new). fs.mu is held
// exclusively.
func (fs *FS) thawLocked(t *tx, n *Node) (*branch.Entry, error) {
	e := t.entryOf(n)
	if !fs.frozenLocked(e) {
		return e, nil
	}
	id, err := fs.objs.Clone(e.Object)
	if err != nil {
		return nil, fmt.Errorf("thawing %s: %w", e.Object, err)
	}
	t.made(id)
	ne := *e
	ne.Object = id
	// The node's own name is the only one when it still names this
	// object and nothing else links it; a hard-linked node may still
	// carry a name that was unlinked since: then look every name up.
	var paths []string
	if p, ok := n.pathLocked(); ok && fs.namesObjectLocked(p, e.Object) &&
		(e.Type != branch.TypeFile || fs.links[e.Object] <= 1) {
		paths = []string{p}
	} else {
		paths = fs.pathsOfLocked(e.Object)
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
func (fs *FS) namesObjectLocked(p, obj string) bool {
	if p == "" {
		return fs.rootEntry != nil && fs.rootEntry.Object == obj
	}
	ie := fs.indexGet(p)
	return ie != nil && ie.Object == obj
}

// thaw is thawLocked in a transaction of its own.
func (fs *FS) thaw(n *Node) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !fs.frozenLocked(n.entry) {
		return nil
	}
	t := fs.newTx()
	if _, err := fs.thawLocked(t, n); err != nil {
		return t.fail(err)
	}
	return t.commit()
}
