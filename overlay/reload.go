package overlay

import (
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
		ch.retarget[""] = v.rootEntry
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
	for dir, names := range ch.dirs {
		for name := range names {
			if p := joinPath(dir, name); isInternal(p) && ch.retarget[p] == nil {
				return v.reloadFromIndexLocked()
			}
		}
	}
	stale := v.cutChangedLocked(ch, false, nil)
	ch.clearCachesLocked(v)
	return stale, nil
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
// them.
//
// The nodes are cut loose first, from the changes read against the
// index as it was, and tell (if not nil) is given the list while the
// index is updated: see RestoreKeeping. It reports whether tell was
// given it. v.mu is held exclusively.
func (v *FS) reloadPathsLocked(diff []pathEntry, tell func([]Stale)) ([]Stale, bool, error) {
	type change struct {
		p, dir, name string
		old, cur     *branch.Entry
	}
	changes := make([]change, 0, len(diff))
	ch := newChangeSet(len(diff), 0)
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
			stale, err := v.reloadChangedLocked(paths)
			return stale, false, err
		}
		changes = append(changes, change{p, dir, name, old, cur})
		// ch.objs holds only the objects that another entry names
		// too, before or after (a hard link): any other has no node
		// but the one at its changed path. Read from the index as it
		// is, before the changes, that is the objects named twice
		// there, or named there and by a changed entry.
		oldShared := old != nil && v.multiNamed > 0 && v.links[old.Object] > 1
		ch.noteObjects(p, dir, name, old, cur, oldShared, cur != nil && v.links[cur.Object] > 0)
	}
	if testHookReloadPaths != nil {
		testHookReloadPaths(len(diff))
	}
	stale := v.cutChangedLocked(ch, true, tell)
	dirs = dirCursor{}
	for _, c := range changes {
		m := dirs.of(v, c.dir)
		if c.old != nil {
			if c.cur == nil {
				delete(m, c.name)
			}
			v.indexCountOut(c.p, c.dir, c.old)
		}
		if c.cur != nil {
			if m == nil {
				m = make(map[string]*branch.Entry)
				v.dirs[c.dir] = m
				dirs.m = m
			}
			m[c.name] = c.cur
			v.indexCountIn(c.p, c.dir, c.cur)
		} else if len(m) == 0 {
			delete(v.dirs, c.dir)
			dirs.m = nil
		}
	}
	ch.clearCachesLocked(v)
	return stale, tell != nil, nil
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
	// dirs holds the parents of the paths whose entry changed, each
	// with the names that changed in it (retargeted ones too).
	dirs    map[string]map[string]bool
	changed int // the paths whose entry changed, but those retargeted
	// objs holds the objects of files named by a changed entry, before
	// or after; dirObjs those of directories.
	objs, dirObjs map[string]bool
	// retarget holds the directories whose entry changed in its object
	// only (its attributes: a directory's mtime moves with every name
	// made in it, and a snapshot's directory is cloned then), with the
	// new entry: their nodes stay, given the object, as the tree below
	// them is the same.
	retarget map[string]*branch.Entry
	// lastDir's names in dirs: the next note's directory, most often.
	lastDir   string
	lastNames map[string]bool
}

// newChangeSet makes a changeSet for about hint changes naming about
// objsHint objects.
func newChangeSet(hint, objsHint int) *changeSet {
	return &changeSet{dirs: make(map[string]map[string]bool, hint/64+1), objs: make(map[string]bool, objsHint), dirObjs: map[string]bool{}, retarget: map[string]*branch.Entry{}}
}

// note records that the entry at p (dir/name) went from old to cur.
func (ch *changeSet) note(p, dir, name string, old, cur *branch.Entry) {
	ch.noteObjects(p, dir, name, old, cur, true, true)
}

// noteObjects is note, recording old's object (a file's) only with
// withOld, and cur's only with withCur. An object that no other entry
// names, before or after, has no node but the one at p, whose path
// changed: the index updated in place leaves those out
// (reloadPathsLocked). A directory's object is always recorded.
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
		ch.retarget[p] = cur
		return
	}
	ch.changed++
	for _, x := range [2]struct {
		e    *branch.Entry
		with bool
	}{{old, withOld}, {cur, withCur}} {
		switch {
		case x.e == nil || x.e.Object == "":
		case x.e.Type == branch.TypeDir:
			ch.dirObjs[x.e.Object] = true
		case x.with:
			ch.objs[x.e.Object] = true
		}
	}
}

// clearCachesLocked drops v's caches of the lower tree and of copy-ups
// (FS.clearCachesLocked) if anything changed. v.mu is held
// exclusively.
func (ch *changeSet) clearCachesLocked(v *FS) {
	if ch.changed > 0 || len(ch.retarget) > 0 {
		v.clearCachesLocked()
	}
}

// changedName reports whether the entry of name in the directory at
// dir, whose changed names are names (ch.dirs[dir]), changed; isDir
// says the node there is a directory (only a directory is retargeted).
func (ch *changeSet) changedName(dir string, names map[string]bool, name string, isDir bool) bool {
	if !names[name] {
		return false
	}
	if isDir && len(ch.retarget) > 0 {
		return ch.retarget[joinPath(dir, name)] == nil
	}
	return true
}

// cutChangedLocked cuts loose the nodes of what ch changed in the index
// and returns them with the kept directories (see
// reloadChangedLocked); tell, if not nil, is given the list as soon
// as it is made (see RestoreKeeping). inPlace says the index is updated
// in place (reloadPathsLocked), and not yet: the entries that did not change are
// the ones the nodes hold, a file whose directory holds no change and
// whose object no changed entry names is passed over, and a directory
// retargeted takes its entry from ch. Otherwise the index is the new
// one. A node cut loose is marked with the pass (Node.cutPass) rather
// than kept in a set, and each directory met is resolved once: the
// work is a few field reads for each node the kernel knows, and map
// operations for the changes only. v.mu is held exclusively.
func (v *FS) cutChangedLocked(ch *changeSet, inPlace bool, tell func([]Stale)) []Stale {
	dirs, objs, dirObjs, retarget := ch.dirs, ch.objs, ch.dirObjs, ch.retarget
	if ch.changed == 0 && len(retarget) == 0 {
		stale := []Stale{{Node: v.root, Kept: true}}
		if tell != nil {
			tell(stale)
		}
		return stale
	}
	v.nodesMu.Lock()
	v.cutPasses++
	pass := v.cutPasses
	var cut []*Node
	markCut := func(n *Node) {
		n.cutPass = pass
		cut = append(cut, n)
	}
	// The directories met: their paths, their changed names, whether
	// each is cut loose or below one that is. Every node asks its
	// parent, so each path is built once and each ancestor checked
	// once, whatever the depth.
	type dirState struct {
		path  string
		names map[string]bool // dirs[path]
		ok    bool            // a name in the view (not unlinked, nor below an unlinked one)
		cut   bool            // its path changed, or it is below a directory whose path did
		// above: whether an ancestor (or the directory itself) goes
		// from the kernel with its name, and is cut loose; known once
		// the cut is.
		aboveKnown, above, aboveCut bool
		batched                     bool // kept, and dropped from the kernel whole with its name
	}
	dirStates := map[*Node]*dirState{v.root: {path: "", ok: true, names: dirs[""]}}
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
				st.names = dirs[st.path]
				st.cut = st.cut || ch.changedName(ps.path, ps.names, d.name, true)
			}
		}
		return st
	}
	type move struct {
		n *Node
		e *branch.Entry
	}
	var moves []move // nodes given another object, once the tables are walked
	var kept []*Node
	visit := func(n *Node) {
		if n.cutPass == pass || n == v.root {
			return
		}
		if n.parent == nil || n.unlinked {
			markCut(n) // no name: pathLocked fails
			return
		}
		ps := stateOf(n.parent)
		if !ps.ok || ps.cut {
			markCut(n)
			return
		}
		isDir := n.IsDir()
		named := n.object != "" && (isDir && dirObjs[n.object] || !isDir && objs[n.object])
		if inPlace && !isDir && ps.names == nil && !named {
			return // its entry, if any, is the index's
		}
		if named || ch.changedName(ps.path, ps.names, n.name, isDir) {
			markCut(n)
			return
		}
		if n.entry == nil && !isDir {
			return
		}
		p := joinPath(ps.path, n.name)
		if n.entry != nil {
			// The same entry, from the index, or a directory's with
			// another object.
			e := retarget[p]
			if e == nil {
				e = v.indexGet(p)
			}
			if e == nil { // cannot be: its path did not change
				markCut(n)
				return
			}
			if n.object != e.Object {
				moves = append(moves, move{n, e})
			}
			n.entry = e
		}
		if isDir && (dirs[p] != nil || retarget[p] != nil) {
			kept = append(kept, n)
		}
	}
	for _, n := range v.byLower {
		visit(n)
	}
	for _, n := range v.byLowerIno {
		if n.cutPass != pass {
			markCut(n) // a hard-linked lower file: its names are not tracked
		}
	}
	for _, n := range v.byObject {
		visit(n)
	}
	for _, m := range moves {
		if v.byObject[m.n.object] == m.n {
			delete(v.byObject, m.n.object)
		}
		m.n.object = m.e.Object
		v.byObject[m.e.Object] = m.n
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
	for _, n := range kept {
		if n.cutPass == pass {
			continue
		}
		st := stateOf(n)
		s := Stale{Node: n, Kept: true, Names: st.names}
		if len(s.Names) >= batchNames {
			s.Parent, s.Name = n.parent, n.name
			st.batched = true
		}
		stale = append(stale, s)
	}
	// above reports whether d or an ancestor goes from the kernel with
	// its name (cut loose, or a kept directory dropped whole), and
	// whether one is cut loose.
	var above func(d *Node) (bool, bool)
	above = func(d *Node) (bool, bool) {
		if d == nil {
			return false, false
		}
		st := dirStates[d]
		if st == nil {
			// Not met as a parent: look further up, unmemoized.
			a, ac := above(d.parent)
			isCut := d.cutPass == pass
			return a || isCut, ac || isCut
		}
		if !st.aboveKnown {
			st.aboveKnown = true
			a, ac := above(d.parent)
			isCut := d.cutPass == pass
			st.above, st.aboveCut = a || isCut || st.batched, ac || isCut
		}
		return st.above, st.aboveCut
	}
	for i := range stale {
		if stale[i].Parent != nil {
			stale[i].Below, _ = above(stale[i].Node.parent)
		}
	}
	for _, n := range cut {
		s := Stale{Node: n, Open: n.opens > 0}
		if !n.unlinked && n.parent != nil {
			s.Parent, s.Name = n.parent, n.name
			s.Below, s.BelowCut = above(n.parent)
		}
		stale = append(stale, s)
	}
	stale = append(stale, Stale{Node: v.root, Kept: true, Names: dirs[""]})
	if tell != nil {
		// What tells the kernel reads the list, and of the nodes only
		// their ids and types, which the rest does not change.
		tell(stale)
	}
	for _, n := range cut {
		v.cutNodeLocked(n)
	}
	v.nodesMu.Unlock()
	return stale
}

// cutNodeLocked takes n, cut loose by a restore, out of the identity
// tables, as dropLocked does, and marks it as cutLooseLocked does.
// v.nodesMu is held.
func (v *FS) cutNodeLocked(n *Node) {
	if n.object != "" && v.byObject[n.object] == n {
		delete(v.byObject, n.object)
	}
	v.dropLowerLocked(n)
	v.cutLooseLocked(n)
}

// batchNames is the number of changed names from which a restore drops
// a kept directory from the kernel whole (Stale.Kept with Parent).
const batchNames = 32

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
