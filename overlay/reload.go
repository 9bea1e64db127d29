package overlay

import (
	"errors"
	"maps"
	"slices"

	"github.com/agentfs/agentfs/branch"
)

// Stale is a node that a Reload or a Restore cut loose from the view,
// with the name the kernel knew it by, or (Kept) a directory a Restore
// kept whose entries changed.
type Stale struct {
	Node   *Node
	Parent *Node // nil for a node that had no name (unlinked, or the root's)
	Name   string
	// Below: an ancestor of the node is cut loose too, with its name:
	// dropping the ancestor's name from the kernel drops the node's, so
	// the node needs no notification of its own.
	Below bool
	// Kept: the node stays in the view (a directory whose entries
	// changed, or whose attributes did): only its cached attributes and
	// listing are dropped, and the negative entries of Names, the names
	// in it whose entries changed; with Parent (a directory with many
	// changed names), also its name, which drops all the kernel cached
	// below it at once (the next lookup finds the same node). A Restore
	// returns at least the root, Kept, so that a kernel cache that is not
	// named is known to stand.
	Kept  bool
	Names map[string]bool
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
	return v.reloadFromIndexLocked()
}

// reloadFromIndexLocked cuts every node loose from the view, whose
// index was just loaded. v.mu is held exclusively.
func (v *FS) reloadFromIndexLocked() ([]Stale, error) {
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
	v.clearCachesLocked()
	return stale, nil
}

// clearCachesLocked drops what the view cached of the lower tree and of
// copy-ups after its index was reloaded. v.mu is held exclusively.
func (v *FS) clearCachesLocked() {
	v.ctimeMu.Lock()
	clear(v.copyCtimes)
	v.ctimeMu.Unlock()
	v.lowerSubdirsMu.Lock()
	clear(v.lowerSubdirs)
	v.lowerSubdirsMu.Unlock()
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

// reloadChangedLocked is reloadLocked for a Restore: it rebuilds the
// index from the layer, and cuts loose only the nodes whose entry
// changed, those below a directory whose entry changed, and those of
// an object a changed entry names; every other node stays, with the
// kernel's caches of it. Directories whose entries changed come back
// Kept. The work on nodes grows with what changed, not with what the
// kernel knows. A change the kernel's names cannot be tied to (the
// root's entry, the internal entries of hard links) falls back to
// reloadLocked. v.mu is held exclusively.
func (v *FS) reloadChangedLocked() ([]Stale, error) {
	oldDirs, oldRoot := v.dirs, v.rootEntry
	if err := v.loadLocked(); err != nil {
		return nil, err
	}
	if !sameEntry(oldRoot, v.rootEntry) && !sameDir(oldRoot, v.rootEntry) {
		return v.reloadFromIndexLocked()
	}
	ch := newChangeSet()
	if !sameEntry(oldRoot, v.rootEntry) {
		ch.retarget[""] = true
	}
	for dir, m := range oldDirs {
		cur := v.dirs[dir]
		for name, e := range m {
			if ce := cur[name]; !sameEntry(e, ce) {
				ch.note(dir, name, e, ce)
			}
		}
	}
	for dir, m := range v.dirs {
		old := oldDirs[dir]
		for name, e := range m {
			if old[name] == nil {
				ch.note(dir, name, nil, e)
			}
		}
	}
	for p := range ch.changed {
		if isInternal(p) {
			return v.reloadFromIndexLocked()
		}
	}
	return v.cutChangedLocked(ch), nil
}

// fewChanges: a restore that may change at most 1/fewChanges of the
// entries reads only those (reloadPathsLocked); one that may change
// more reads them all (reloadChangedLocked), which is faster then.
const fewChanges = 8

// entriesLocked counts the entries of the index. v.mu is held.
func (v *FS) entriesLocked() int {
	n := 0
	for _, m := range v.dirs {
		n += len(m)
	}
	return n
}

// reloadPathsLocked is reloadChangedLocked for a restore whose possible
// changes are known: it reads the new entries of paths only, and
// updates the index in place, so that its cost grows with paths rather
// than with the branch. A change it cannot apply in place (the root's,
// an internal entry's, a hard-linked copy's) falls back to
// reloadChangedLocked, before the index is touched. v.mu is held
// exclusively.
func (v *FS) reloadPathsLocked(paths map[string]bool) ([]Stale, error) {
	type change struct {
		p        string
		old, cur *branch.Entry
	}
	var changes []change
	for p := range paths {
		cur, err := v.layer.Get(p)
		if errors.Is(err, branch.ErrNotFound) {
			cur, err = nil, nil
		}
		if err != nil {
			return v.reloadChangedLocked() // which reports a store that fails
		}
		old := v.indexGet(p)
		if sameEntry(old, cur) {
			continue
		}
		if p == "" || isInternal(p) || old != nil && old.Origin != "" || cur != nil && cur.Origin != "" {
			return v.reloadChangedLocked()
		}
		changes = append(changes, change{p, old, cur})
	}
	if testHookReloadPaths != nil {
		testHookReloadPaths(len(paths))
	}
	ch := newChangeSet()
	for _, c := range changes {
		if c.cur == nil {
			v.indexDel(c.p)
		} else {
			v.indexPut(c.p, c.cur)
		}
		dir, name := splitPath(c.p)
		ch.note(dir, name, c.old, c.cur)
	}
	return v.cutChangedLocked(ch), nil
}

// testHookReloadPaths, when set, is called by reloadPathsLocked with
// the number of paths it reads, once it applies them.
var testHookReloadPaths func(n int)

// changeSet is what a restore changed in the index.
type changeSet struct {
	changed map[string]bool            // paths whose entry changed
	dirs    map[string]map[string]bool // parents of those paths: their names
	objs    map[string]bool            // objects named by a changed entry, before or after
	// retarget holds the directories whose entry changed in its object
	// only (its attributes: a directory's mtime moves with every name
	// made in it, and a snapshot's directory is cloned then): their
	// nodes stay, given the object, as the tree below them is the same.
	retarget map[string]bool
}

func newChangeSet() *changeSet {
	return &changeSet{changed: map[string]bool{}, dirs: map[string]map[string]bool{}, objs: map[string]bool{}, retarget: map[string]bool{}}
}

// note records that the entry at dir/name went from old to cur.
func (ch *changeSet) note(dir, name string, old, cur *branch.Entry) {
	p := joinPath(dir, name)
	if ch.dirs[dir] == nil {
		ch.dirs[dir] = map[string]bool{}
	}
	ch.dirs[dir][name] = true
	if sameDir(old, cur) {
		ch.retarget[p] = true
		return
	}
	ch.changed[p] = true
	for _, e := range []*branch.Entry{old, cur} {
		if e != nil && e.Object != "" {
			ch.objs[e.Object] = true
		}
	}
}

// cutChangedLocked cuts loose the nodes of what ch changed in the
// index, which is the new one, and returns them with the kept
// directories (see reloadChangedLocked). v.mu is held exclusively.
func (v *FS) cutChangedLocked(ch *changeSet) []Stale {
	changed, dirs, objs, retarget := ch.changed, ch.dirs, ch.objs, ch.retarget
	if len(changed) == 0 && len(retarget) == 0 {
		return []Stale{{Node: v.root, Kept: true}}
	}
	// under reports whether p, or one of its ancestors, changed.
	under := func(p string) bool {
		for {
			if changed[p] {
				return true
			}
			if p == "" {
				return false
			}
			p, _ = splitPath(p)
		}
	}
	v.nodesMu.Lock()
	cut := map[*Node]bool{}
	var kept []*Node
	visit := func(n *Node) {
		if cut[n] || n == v.root {
			return
		}
		p, ok := n.pathLocked()
		if !ok || under(p) || n.object != "" && objs[n.object] {
			cut[n] = true
			return
		}
		if n.entry != nil {
			// The same entry, from the new index, or a directory's
			// with another object.
			e := v.indexGet(p)
			if e == nil { // cannot be: its path did not change
				cut[n] = true
				return
			}
			if n.object != e.Object {
				if v.byObject[n.object] == n {
					delete(v.byObject, n.object)
				}
				n.object = e.Object
				v.byObject[e.Object] = n
			}
			n.entry = e
		}
		if n.IsDir() && (dirs[p] != nil || retarget[p]) {
			kept = append(kept, n)
		}
	}
	for _, n := range v.byLower {
		visit(n)
	}
	for _, n := range v.byLowerIno {
		cut[n] = true // a hard-linked lower file: its names are not tracked
	}
	for _, n := range slices.Collect(maps.Values(v.byObject)) {
		visit(n)
	}
	if e := v.rootEntry; e != nil && v.root.object != e.Object {
		if v.byObject[v.root.object] == v.root {
			delete(v.byObject, v.root.object)
		}
		v.root.object = e.Object
		v.byObject[e.Object] = v.root
	}
	v.root.entry = v.rootEntry
	// A kept directory with many changed names goes from the kernel
	// whole, with its name (the kernel looks it up again and finds the
	// same node): one notification instead of one per name.
	var stale []Stale
	batched := map[*Node]bool{}
	for _, n := range kept {
		if cut[n] {
			continue
		}
		p, _ := n.pathLocked()
		s := Stale{Node: n, Kept: true, Names: dirs[p]}
		if len(s.Names) >= batchNames && !n.unlinked && n.parent != nil {
			s.Parent, s.Name = n.parent, n.name
			batched[n] = true
		}
		stale = append(stale, s)
	}
	for i := range stale {
		if stale[i].Parent != nil {
			stale[i].Below = below(stale[i].Node, cut, batched)
		}
	}
	for n := range cut {
		s := Stale{Node: n}
		if !n.unlinked && n.parent != nil {
			s.Parent, s.Name = n.parent, n.name
			s.Below = below(n, cut, batched)
		}
		stale = append(stale, s)
	}
	for n := range cut {
		v.dropLocked(n)
		v.cutLooseLocked(n)
	}
	v.nodesMu.Unlock()
	stale = append(stale, Stale{Node: v.root, Kept: true, Names: dirs[""]})
	v.clearCachesLocked()
	return stale
}

// batchNames is the number of changed names from which a restore drops
// a kept directory from the kernel whole (Stale.Kept with Parent).
const batchNames = 32

// below reports whether an ancestor of n goes from the kernel with its
// name: cut loose, or a kept directory dropped whole.
func below(n *Node, cut, batched map[*Node]bool) bool {
	for a := n.parent; a != nil; a = a.parent {
		if cut[a] || batched[a] {
			return true
		}
	}
	return false
}

// sameDir reports whether a and b are directory entries that differ in
// their object (and epoch) only: the same inode and the same tree
// below, with other attributes.
func sameDir(a, b *branch.Entry) bool {
	if a == nil || b == nil || a.Type != branch.TypeDir || b.Type != branch.TypeDir {
		return false
	}
	c := *b
	c.Object, c.Epoch = a.Object, a.Epoch
	return *a == c
}

// sameEntry reports whether a and b are the same entry (nil: none).
func sameEntry(a, b *branch.Entry) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
