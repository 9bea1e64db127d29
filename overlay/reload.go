package overlay

import (
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
	// BelowCut: an ancestor of the node is cut loose (a kept directory
	// dropped whole does not count): the node's name leads nowhere once
	// the kernel checks that ancestor's name again, so a kernel told
	// only that names expired (fs.Server.Invalidate after a Restore)
	// needs no word of it.
	BelowCut bool
	// Open: a file of the node is open, whose holder may ask the kernel
	// for its attributes (a cut node's go to nlink 0).
	Open bool
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
// reloadLocked. paths, when not nil, holds every path whose entry may
// have changed (branch.Layer.Difference): only those are compared. v.mu
// is held exclusively.
func (v *FS) reloadChangedLocked(paths map[string]bool) ([]Stale, error) {
	oldDirs, oldRoot := v.dirs, v.rootEntry
	if err := v.loadLocked(); err != nil {
		return nil, err
	}
	if !sameEntry(oldRoot, v.rootEntry) && !sameDir(oldRoot, v.rootEntry) {
		return v.reloadFromIndexLocked()
	}
	ch := newChangeSet(len(paths), 2*len(paths))
	if !sameEntry(oldRoot, v.rootEntry) {
		ch.retarget[""] = true
	}
	if paths != nil {
		for p := range paths {
			if p == "" {
				continue // compared above
			}
			dir, name := splitPath(p)
			if e, ce := oldDirs[dir][name], v.dirs[dir][name]; !sameEntry(e, ce) {
				ch.note(p, dir, name, e, ce)
			}
		}
	} else {
		for dir, m := range oldDirs {
			cur := v.dirs[dir]
			for name, e := range m {
				if ce := cur[name]; !sameEntry(e, ce) {
					ch.note(joinPath(dir, name), dir, name, e, ce)
				}
			}
		}
		for dir, m := range v.dirs {
			old := oldDirs[dir]
			for name, e := range m {
				if old[name] == nil {
					ch.note(joinPath(dir, name), dir, name, nil, e)
				}
			}
		}
	}
	for p := range ch.changed {
		if isInternal(p) {
			return v.reloadFromIndexLocked()
		}
	}
	return v.cutChangedLocked(ch, false), nil
}

// pathEntry is a path whose entry a restore may change, with its new
// entry (nil: none).
type pathEntry struct {
	path string
	e    *branch.Entry
}

// reloadPathsLocked is reloadChangedLocked for a restore whose
// possible changes are known, with their new entries, in path order
// (branch.Layer.Difference): it updates the index in place, so that
// its cost grows with the changes rather than with the branch. A
// change it cannot apply in place (the root's, an internal entry's, a
// hard-linked copy's) falls back to reloadChangedLocked, before the
// index is touched. The paths come in path order, so the names of one
// directory mostly follow each other: its map is looked up once for
// them. v.mu is held exclusively.
func (v *FS) reloadPathsLocked(diff []pathEntry) ([]Stale, error) {
	type change struct {
		p, dir, name string
		old, cur     *branch.Entry
	}
	changes := make([]change, 0, len(diff))
	var dirs dirCursor
	for _, d := range diff {
		p, cur := d.path, d.e
		var dir, name string
		var old *branch.Entry
		if p == "" {
			old = v.rootEntry
		} else {
			dir, name = splitPath(p)
			old = dirs.of(v, dir)[name]
		}
		if sameEntry(old, cur) {
			continue
		}
		if p == "" || isInternal(p) || old != nil && old.Origin != "" || cur != nil && cur.Origin != "" {
			paths := make(map[string]bool, len(diff))
			for _, d := range diff {
				paths[d.path] = true
			}
			return v.reloadChangedLocked(paths)
		}
		changes = append(changes, change{p, dir, name, old, cur})
	}
	if testHookReloadPaths != nil {
		testHookReloadPaths(len(diff))
	}
	// objs holds only the objects that another entry names too, before
	// or after (a hard link; a directory's, always): any other has no
	// node but the one at its changed path.
	ch := newChangeSet(len(changes), 0)
	dirs = dirCursor{}
	for _, c := range changes {
		m := dirs.of(v, c.dir)
		var oldShared, curShared bool
		if c.old != nil {
			delete(m, c.name)
			oldShared = v.indexCountOut(c.p, c.dir, c.old)
		}
		if c.cur != nil {
			if m == nil {
				m = make(map[string]*branch.Entry)
				v.dirs[c.dir] = m
				dirs.m = m
			}
			m[c.name] = c.cur
			curShared = v.indexCountIn(c.p, c.dir, c.cur)
		} else if len(m) == 0 {
			delete(v.dirs, c.dir)
			dirs.m = nil
		}
		ch.noteObjects(c.p, c.dir, c.name, c.old, c.cur, oldShared, curShared)
	}
	return v.cutChangedLocked(ch, true), nil
}

// dirCursor is the index's map of the directory last asked, which the
// next path in path order most often shares.
type dirCursor struct {
	dir string
	ok  bool
	m   map[string]*branch.Entry
}

// of returns v.dirs[dir] (nil if none).
func (c *dirCursor) of(v *FS, dir string) map[string]*branch.Entry {
	if !c.ok || c.dir != dir {
		c.dir, c.ok, c.m = dir, true, v.dirs[dir]
	}
	return c.m
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
	// lastDir's names in dirs: the next note's directory, most often.
	lastDir   string
	lastNames map[string]bool
}

// newChangeSet makes a changeSet for about hint changes naming about
// objsHint objects.
func newChangeSet(hint, objsHint int) *changeSet {
	return &changeSet{changed: make(map[string]bool, hint), dirs: map[string]map[string]bool{}, objs: make(map[string]bool, objsHint), retarget: map[string]bool{}}
}

// note records that the entry at p (dir/name) went from old to cur.
func (ch *changeSet) note(p, dir, name string, old, cur *branch.Entry) {
	ch.noteObjects(p, dir, name, old, cur, true, true)
}

// noteObjects is note, recording old's object only with withOld, and
// cur's only with withCur. An object that no other entry names, before
// or after, has no node but the one at p, whose path changed: the
// index updated in place leaves those out (reloadPathsLocked).
func (ch *changeSet) noteObjects(p, dir, name string, old, cur *branch.Entry, withOld, withCur bool) {
	if ch.lastNames == nil || ch.lastDir != dir {
		names := ch.dirs[dir]
		if names == nil {
			names = map[string]bool{}
			ch.dirs[dir] = names
		}
		ch.lastDir, ch.lastNames = dir, names
	}
	ch.lastNames[name] = true
	if sameDir(old, cur) {
		ch.retarget[p] = true
		return
	}
	ch.changed[p] = true
	if withOld && old != nil && old.Object != "" {
		ch.objs[old.Object] = true
	}
	if withCur && cur != nil && cur.Object != "" {
		ch.objs[cur.Object] = true
	}
}

// cutChangedLocked cuts loose the nodes of what ch changed in the
// index, which is the new one, and returns them with the kept
// directories (see reloadChangedLocked). inPlace says the index was
// updated in place: the entries that did not change are the ones the
// nodes hold, and a file whose directory holds no change and whose
// object no changed entry names is passed over. v.mu is held
// exclusively.
func (v *FS) cutChangedLocked(ch *changeSet, inPlace bool) []Stale {
	changed, dirs, objs, retarget := ch.changed, ch.dirs, ch.objs, ch.retarget
	if len(changed) == 0 && len(retarget) == 0 {
		return []Stale{{Node: v.root, Kept: true}}
	}
	v.nodesMu.Lock()
	cut := make(map[*Node]bool, len(changed))
	var kept []*Node
	// The paths of the directories met, and whether each is cut loose or
	// below one that is: every node asks its parent, so each path is
	// built once and each ancestor checked once, whatever the depth.
	type dirState struct {
		path string
		ok   bool // a name in the view (not unlinked, nor below an unlinked one)
		cut  bool // cut loose, or below a directory that is
	}
	dirStates := map[*Node]*dirState{v.root: {path: "", ok: true}}
	var stateOf func(d *Node) *dirState
	stateOf = func(d *Node) *dirState {
		if st := dirStates[d]; st != nil {
			return st
		}
		st := &dirState{}
		dirStates[d] = st // a cycle cannot be, but must not recurse forever
		if d.parent != nil && !d.unlinked {
			ps := stateOf(d.parent)
			st.ok, st.cut = ps.ok, ps.cut
			if ps.ok {
				st.path = joinPath(ps.path, d.name)
				st.cut = st.cut || changed[st.path]
			}
		}
		return st
	}
	visit := func(n *Node) {
		if cut[n] || n == v.root {
			return
		}
		if n.parent == nil || n.unlinked {
			cut[n] = true // no name: pathLocked fails
			return
		}
		ps := stateOf(n.parent)
		if !ps.ok || ps.cut {
			cut[n] = true
			return
		}
		if inPlace && !n.IsDir() && dirs[ps.path] == nil && (n.object == "" || !objs[n.object]) {
			return // its entry, if any, is the index's
		}
		p := joinPath(ps.path, n.name)
		if changed[p] || n.object != "" && objs[n.object] {
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
	stale := make([]Stale, 0, len(cut)+len(kept)+1)
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
		s := Stale{Node: n, Open: n.opens > 0}
		if !n.unlinked && n.parent != nil {
			s.Parent, s.Name = n.parent, n.name
			s.Below = below(n, cut, batched)
			s.BelowCut = s.Below && below(n, cut, nil)
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
