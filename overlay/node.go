package overlay

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// Node is one inode of a view, as the kernel sees it.
type Node struct {
	// ID is the FUSE node id: unique across all views for the life of
	// the process.
	ID   uint64
	view *FS
	mode uint32 // S_IFMT bits; fixed for the node's life
	// cutPass is the pass of cutChangedLocked that cut the node loose
	// (FS.cutPasses), under view.mu held exclusively and view.nodesMu.
	cutPass uint32
	ino     uint64 // st_ino

	// Guarded by view.mu.
	parent   *Node
	name     string
	entry    *branch.Entry // upper entry, nil for a lower-only node
	object   string        // upper object (entry.Object, or kept after unlink)
	lower    string        // lower path: data of files, contents of dirs
	hasLower bool
	unlinked bool
	tmpfile  bool // made by O_TMPFILE and not linked yet
	stale    bool // cut loose by Reload: its object is gc's to remove

	// dataGen counts the times the node's data moved to another object
	// (a copy-up, a thaw); read-only files follow it to the new data.
	dataGen atomic.Uint64
	// caps: bit 0 says the inode is known to have no
	// security.capability xattr; the bits above count changes of its
	// xattrs, so that a getxattr that began before a change cannot set
	// bit 0 after it (see knowNoCaps).
	caps atomic.Uint64

	// Guarded by view.nodesMu.
	lookups uint64
	opens   int
	writers int  // open files that may write (a snapshot clones their object)
	pins    int  // open files the kernel reads and writes directly (File.Pin)
	reaped  bool // reapNode took the object: it must not take it again

	copyMu sync.Mutex
	// growMu serializes the changes of the data's size while a byte
	// limit is kept (quota.go): FS.mu → growMu → quota.mu.
	growMu sync.Mutex
}

// FS returns the view the node belongs to.
func (n *Node) FS() *FS { return n.view }

// Mode returns the node's file type bits (S_IFMT).
func (n *Node) Mode() uint32 { return n.mode }

// IsDir reports whether n is a directory.
func (n *Node) IsDir() bool { return n.mode == unix.S_IFDIR }

// Ino returns the st_ino of the node.
func (n *Node) Ino() uint64 { return n.ino }

// pathLocked returns the node's path in the view ("" for the root).
// ok is false for a node that is no longer linked into the tree.
func (n *Node) pathLocked() (p string, ok bool) {
	if n.parent == nil {
		return "", n == n.view.root
	}
	pp, ok := n.parent.pathLocked()
	if !ok || n.unlinked {
		return "", false
	}
	return joinPath(pp, n.name), true
}

// Ref records one more kernel reference (a successful lookup-like reply).
func (v *FS) Ref(n *Node) {
	v.nodesMu.Lock()
	n.lookups++
	v.nodesMu.Unlock()
}

// Forget drops nlookup kernel references. It reports whether the node is
// gone: the caller must not use it again.
func (v *FS) Forget(n *Node, nlookup uint64) bool {
	gone := v.forgetLocked(n, nlookup)
	if gone {
		v.reapNode(n)
	}
	return gone
}

// forgetLocked is Forget without reaping n's object: for a caller that
// holds v.mu (which reapNode takes) and forgets a node it has just
// made or looked up, which is not unlinked.
func (v *FS) forgetLocked(n *Node, nlookup uint64) bool {
	v.nodesMu.Lock()
	if nlookup > n.lookups {
		nlookup = n.lookups
	}
	n.lookups -= nlookup
	gone := n.lookups == 0 && n.opens == 0 && n != v.root
	if gone {
		v.dropLocked(n)
	}
	v.nodesMu.Unlock()
	return gone
}

// dropLocked removes n from the identity tables. v.nodesMu is held.
func (v *FS) dropLocked(n *Node) {
	if n.object != "" && v.byObject[n.object] == n {
		delete(v.byObject, n.object)
	}
	delete(v.staleNodes, n)
	v.dropLowerLocked(n)
}

// dropLowerLocked takes n out of the lower-only tables. v.nodesMu is
// held.
func (v *FS) dropLowerLocked(n *Node) {
	if n.hasLower && v.byLower[n.lower] == n {
		delete(v.byLower, n.lower)
	}
	if v.byLowerIno[n.ino] == n {
		delete(v.byLowerIno, n.ino)
	}
}

// reapNode deletes the object of a node that is unlinked and no longer
// referenced by the kernel or an open file.
func (v *FS) reapNode(n *Node) {
	v.rlockAside()
	obj := ""
	if n.unlinked && !n.stale && n.object != "" && !v.frozenLocked(n.entry) && v.links[n.object] == 0 && !v.objectInUseLocked(n.object) {
		// The kernel's FORGET and the last RELEASE may both find the
		// node gone: the object is recycled once, or the second
		// recycling would empty the new file that took it as a spare.
		v.nodesMu.Lock()
		if !n.reaped {
			n.reaped, obj = true, n.object
		}
		v.nodesMu.Unlock()
	}
	layer := v.layer
	v.mu.RUnlock()
	if obj != "" {
		if err := settleLayer(layer); err != nil {
			v.log.Warn("unlinked object left for gc: the commit that freed it is not written", "object", obj, "err", err)
			return
		}
		v.forgetCtime(obj)
		if err := v.objs.Recycle(obj); err != nil {
			v.log.Warn("removing unlinked object", "object", obj, "err", err)
		}
	}
}

// objectInUseLocked reports whether any entry still names obj (the
// links table only counts regular files).
func (v *FS) objectInUseLocked(obj string) bool {
	if v.links[obj] > 0 {
		return true
	}
	v.nodesMu.Lock()
	_, live := v.byObject[obj]
	v.nodesMu.Unlock()
	return live
}

// nodeForEntryLocked (and nodeForLowerLocked) with ref take the kernel's
// reference in the same critical section that finds the node, so that a
// concurrent Forget cannot drop a node a lookup is about to return.
//
// nodeForEntryLocked returns the node of an upper entry found at
// parent/name, creating it when the kernel has none. v.mu is held
// (shared is enough).
func (v *FS) nodeForEntryLocked(parent *Node, name string, e *branch.Entry, ref bool) *Node {
	v.nodesMu.Lock()
	defer v.nodesMu.Unlock()
	if n := v.byObject[e.Object]; n != nil {
		if ref {
			n.lookups++
		}
		return n
	}
	n := &Node{
		ID:     nextNodeID.Add(1),
		view:   v,
		mode:   typeMode(e.Type),
		ino:    e.Ino,
		parent: parent,
		name:   name,
		entry:  e,
		object: e.Object,
	}
	switch {
	case e.Type == branch.TypeDir:
		n.lower, n.hasLower = redirectOf(e)
	case e.Metacopy:
		n.lower, n.hasLower = e.Origin, true
	}
	if ref {
		n.lookups++
	}
	v.byObject[e.Object] = n
	return n
}

// nodeForLowerLocked returns the node of a lower-only file.
func (v *FS) nodeForLowerLocked(parent *Node, name, lp string, st *unix.Stat_t, ref bool) *Node {
	v.nodesMu.Lock()
	defer v.nodesMu.Unlock()
	n := v.byLower[lp]
	if n == nil || n.entry != nil || n.unlinked || n.mode != st.Mode&unix.S_IFMT {
		n = nil
		if shared := sharedLower(st); shared {
			if m := v.byLowerIno[v.mapIno(st)]; m != nil && m.entry == nil && !m.unlinked {
				n = m // another name of a hard-linked lower file
			}
		}
	}
	if n != nil {
		if ref {
			n.lookups++
		}
		return n
	}
	shared := sharedLower(st)
	n = &Node{
		ID:       nextNodeID.Add(1),
		view:     v,
		mode:     st.Mode & unix.S_IFMT,
		ino:      v.mapIno(st),
		parent:   parent,
		name:     name,
		lower:    lp,
		hasLower: true,
	}
	if ref {
		n.lookups++
	}
	v.byLower[lp] = n
	if shared {
		v.byLowerIno[n.ino] = n
	}
	return n
}

// sharedLower reports whether a lower inode is a hard-linked regular
// file, whose names share one node.
func sharedLower(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1
}

// promoteLocked moves a node that just got an upper entry from the lower
// table to the object table. v.mu is held exclusively.
func (v *FS) promoteLocked(n *Node, e *branch.Entry) {
	v.nodesMu.Lock()
	defer v.nodesMu.Unlock()
	v.dropLowerLocked(n)
	if n.object != "" && n.object != e.Object && v.byObject[n.object] == n {
		delete(v.byObject, n.object)
	}
	n.entry = e
	n.object = e.Object
	switch {
	case e.Type == branch.TypeDir:
		n.lower, n.hasLower = redirectOf(e)
	case e.Metacopy:
		n.lower, n.hasLower = e.Origin, true
	default:
		n.lower, n.hasLower = "", false
	}
	if e.Object != "" {
		v.byObject[e.Object] = n
	}
}

func typeMode(t branch.Type) uint32 {
	switch t {
	case branch.TypeFile:
		return unix.S_IFREG
	case branch.TypeDir:
		return unix.S_IFDIR
	case branch.TypeSymlink:
		return unix.S_IFLNK
	case branch.TypeFifo:
		return unix.S_IFIFO
	case branch.TypeSocket:
		return unix.S_IFSOCK
	case branch.TypeChar:
		return unix.S_IFCHR
	case branch.TypeBlock:
		return unix.S_IFBLK
	}
	return 0
}

func modeType(m uint32) branch.Type {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return branch.TypeFile
	case unix.S_IFDIR:
		return branch.TypeDir
	case unix.S_IFLNK:
		return branch.TypeSymlink
	case unix.S_IFIFO:
		return branch.TypeFifo
	case unix.S_IFSOCK:
		return branch.TypeSocket
	case unix.S_IFCHR:
		return branch.TypeChar
	case unix.S_IFBLK:
		return branch.TypeBlock
	}
	return branch.TypeWhiteout
}

// settle waits until the view's commits are written (see "Commits and
// timestamps" in package branch): an object whose last entry a commit
// deleted is removed only then, so that no crash finds an entry whose
// object is gone.
// v.mu is held.
func (v *FS) settle() error { return settleLayer(v.layer) }

func settleLayer(l *branch.Layer) error {
	if l == nil {
		return nil
	}
	return l.Settle()
}

// noCaps reports whether n is known to have no security.capability.
func (n *Node) noCaps() bool { return n.caps.Load()&1 != 0 }

// knowNoCaps records that n has no security.capability, as a getxattr
// found when the state was seen: unless its xattrs changed since.
func (n *Node) knowNoCaps(seen uint64) {
	n.caps.CompareAndSwap(seen&^1, seen|1)
}

// capsUnknown forgets what is known of n's security.capability, and
// counts a change of its xattrs: a getxattr under way cannot record its
// answer. Setxattr calls it before and after the change.
func (n *Node) capsUnknown() {
	for {
		s := n.caps.Load()
		if n.caps.CompareAndSwap(s, (s+2)&^1) {
			return
		}
	}
}
