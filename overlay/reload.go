package overlay

// Stale is a node that a Reload cut loose from the view, with the name
// the kernel knew it by.
type Stale struct {
	Node   *Node
	Parent *Node // nil for a node that had no name (unlinked, or the root's)
	Name   string
}

// Reload rebuilds the view from its layer after the layer's entries
// were replaced underneath it (a restore, a branch switch). Every node
// the kernel holds is cut loose from the view: the caller must drop
// what the kernel cached for each returned node (its name in its
// parent, its attributes and data), after which lookups make new nodes.
// The root stays the root. An open file keeps the file it had opened,
// as if that file had been deleted and replaced; its object is left to
// garbage collection, never removed here.
func (v *FS) Reload() ([]Stale, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reloadLocked()
}

// reloadLocked is Reload with v.mu held exclusively.
func (v *FS) reloadLocked() ([]Stale, error) {
	if err := v.loadLocked(); err != nil {
		return nil, err
	}
	v.nodesMu.Lock()
	seen := map[*Node]bool{v.root: true}
	var stale []Stale
	add := func(n *Node) {
		if seen[n] {
			return
		}
		seen[n] = true
		s := Stale{Node: n}
		if !n.unlinked && n.parent != nil {
			s.Parent, s.Name = n.parent, n.name
		}
		stale = append(stale, s)
	}
	for _, n := range v.byObject {
		add(n)
	}
	kept := map[string]*Node{}
	for lp, n := range v.byLower {
		if v.keepsMountLocked(n) {
			kept[lp] = n
			continue
		}
		add(n)
	}
	for _, n := range v.byLowerIno {
		add(n)
	}
	v.byObject = map[string]*Node{}
	v.byLower = kept
	v.byLowerIno = map[uint64]*Node{}
	for _, s := range stale {
		v.cutLooseLocked(s.Node)
	}
	root := v.root
	root.entry, root.object, root.lower, root.hasLower = nil, "", "", true
	v.nodesMu.Unlock()
	if e := v.rootEntry; e != nil {
		v.promoteLocked(root, e)
	}
	v.ctimeMu.Lock()
	clear(v.copyCtimes)
	v.ctimeMu.Unlock()
	v.lowerSubdirsMu.Lock()
	clear(v.lowerSubdirs)
	v.lowerSubdirsMu.Unlock()
	return stale, nil
}

// cutLooseLocked marks n cut loose from the view, as Reload leaves the
// nodes it returns. v.mu is held exclusively, and v.nodesMu.
func (v *FS) cutLooseLocked(n *Node) {
	n.stale = true
	n.unlinked, n.parent = true, nil
	v.staleNodes[n] = struct{}{}
}

// CutLooseLower cuts loose the node of a project file that changed
// from outside the mount, as Reload does every node: the next lookup of
// its name makes a new node, so a kernel that keeps its own size and
// times of the files it knows (a writeback cache) learns the new ones
// from a new inode. Only a node that still shows the project file
// (no upper entry) is cut loose; it reports whether n was. An open
// file keeps the file it had opened.
func (v *FS) CutLooseLower(n *Node) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nodesMu.Lock()
	defer v.nodesMu.Unlock()
	if n == v.root || n.entry != nil || n.unlinked || n.stale || !n.hasLower {
		return false
	}
	v.dropLowerLocked(n)
	v.cutLooseLocked(n)
	return true
}
