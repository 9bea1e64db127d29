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
func (fs *FS) Reload() ([]Stale, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.reloadLocked()
}

// reloadLocked is Reload with fs.mu held exclusively.
func (fs *FS) reloadLocked() ([]Stale, error) {
	if err := fs.loadLocked(); err != nil {
		return nil, err
	}
	fs.nodesMu.Lock()
	seen := map[*Node]bool{fs.root: true}
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
	for _, n := range fs.byObject {
		add(n)
	}
	for _, n := range fs.byLower {
		add(n)
	}
	for _, n := range fs.byLowerIno {
		add(n)
	}
	fs.byObject = map[string]*Node{}
	fs.byLower = map[string]*Node{}
	fs.byLowerIno = map[uint64]*Node{}
	for _, s := range stale {
		fs.cutLooseLocked(s.Node)
	}
	root := fs.root
	root.entry, root.object, root.lower, root.hasLower = nil, "", "", true
	fs.nodesMu.Unlock()
	if e := fs.rootEntry; e != nil {
		fs.promoteLocked(root, e)
	}
	fs.ctimeMu.Lock()
	clear(fs.copyCtimes)
	fs.ctimeMu.Unlock()
	fs.lowerSubdirsMu.Lock()
	clear(fs.lowerSubdirs)
	fs.lowerSubdirsMu.Unlock()
	return stale, nil
}

// cutLooseLocked marks n cut loose from the view, as Reload leaves the
// nodes it returns. fs.mu is held exclusively, and fs.nodesMu.
func (fs *FS) cutLooseLocked(n *Node) {
	n.stale = true
	n.unlinked, n.parent = true, nil
	fs.staleNodes[n] = struct{}{}
}

// CutLooseLower cuts loose the node of a project file that changed
// from outside the mount, as Reload does every node: the next lookup of
// its name makes a new node, so a kernel that keeps its own size and
// times of the files it knows (a writeback cache) learns the new ones
// from a new inode. Only a node that still shows the project file
// (no upper entry) is cut loose; it reports whether n was. An open
// file keeps the file it had opened.
func (fs *FS) CutLooseLower(n *Node) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.nodesMu.Lock()
	defer fs.nodesMu.Unlock()
	if n == fs.root || n.entry != nil || n.unlinked || n.stale || !n.hasLower {
		return false
	}
	fs.dropLowerLocked(n)
	fs.cutLooseLocked(n)
	return true
}
