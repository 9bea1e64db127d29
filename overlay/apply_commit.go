package overlay

import (
	"fmt"
	"maps"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// After an Apply wrote the lower tree: the branch's entries at the
// applied paths go, where the view stays as it was (see "What becomes
// of the branch" in apply.go), and the nodes follow.

// seenState is an entry as the apply saw it before reading the view,
// to tell an entry or a file changed while the apply ran.
type seenState struct {
	entry *branch.Entry
	ctime unix.Timespec // of a regular file's object
}

// captureEntries records every entry, and the ctime of every regular
// file's object, and holds the lower files that hard-linked entries came
// from (origins).
func (a *applier) captureEntries() {
	v := a.v
	v.mu.RLock()
	v.eachEntryLocked(func(p string, e *branch.Entry) { a.seen[p] = seenState{entry: e} })
	v.mu.RUnlock()
	for p, s := range a.seen {
		e := s.entry
		if e.Type == branch.TypeFile && e.Object != "" {
			if st, err := v.objs.Lstat(e.Object); err == nil {
				s.ctime = st.Ctim
				a.seen[p] = s
			}
		}
		if e.Type == branch.TypeFile && e.Origin != "" && a.origins[e.Origin] == 0 {
			fd, err := unix.Openat(v.lowerFd, lowerRel(e.Origin), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			var st unix.Stat_t
			if err == nil && (unix.Fstat(fd, &st) != nil || !sharedLower(&st) || v.mapIno(&st) != e.Ino) {
				unix.Close(fd)
				continue
			}
			if err == nil {
				a.origins[e.Origin] = fd
			}
		}
	}
}

// closeOrigins closes the lower files captureEntries and watchLower
// held.
func (a *applier) closeOrigins() {
	for p, fd := range a.origins {
		unix.Close(fd)
		delete(a.origins, p)
	}
	for ino, fd := range a.watched {
		unix.Close(fd)
		delete(a.watched, ino)
	}
}

// watchLower holds the lower inode st at lower path p (opened O_PATH)
// before the apply removes or replaces that name, when an entry carries
// its number (a copy of it, or a directory or file renamed from it): the
// apply may free it (see renumberFreedLocked).
func (a *applier) watchLower(p string, st *unix.Stat_t) {
	ino := a.v.mapIno(st)
	if _, ok := a.watched[ino]; ok || !a.entryInos()[ino] {
		return
	}
	fd, err := unix.Openat(a.v.lowerFd, lowerRel(p), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	var held unix.Stat_t
	if unix.Fstat(fd, &held) != nil || held.Dev != st.Dev || held.Ino != st.Ino {
		unix.Close(fd)
		return
	}
	a.watched[ino] = fd
}

// entryInos returns the inode numbers the entries carry (whiteouts
// left out), made at the first call.
func (a *applier) entryInos() map[uint64]bool {
	if a.inos == nil {
		a.inos = map[uint64]bool{}
		for _, s := range a.seen {
			if !s.entry.IsWhiteout() && s.entry.Ino != 0 {
				a.inos[s.entry.Ino] = true
			}
		}
	}
	return a.inos
}

// renumberFreedLocked gives a new inode number to every entry that
// carries the number of a lower inode the apply freed (it removed or
// replaced its last name: a copy of a file written anew, a renamed file
// or directory whose old name it removed): the filesystem may give
// that number to a file it makes, in this apply or later, which the
// view would show with the number of another file. The names of one
// object get one number; an anchor of that inode (no lower name joins
// it any more) goes. v.mu is held.
func (a *applier) renumberFreedLocked(t *tx) error {
	v := a.v
	freed := map[uint64]bool{}
	for ino, fd := range a.watched {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Nlink == 0 {
			freed[ino] = true
		}
	}
	for _, fd := range a.origins {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Nlink == 0 {
			freed[v.mapIno(&st)] = true
		}
	}
	if len(freed) == 0 {
		return nil
	}
	type named struct {
		p string
		e *branch.Entry
	}
	var found []named
	v.eachEntryLocked(func(p string, e *branch.Entry) {
		if !e.IsWhiteout() && freed[e.Ino] {
			found = append(found, named{p, e})
		}
	})
	slices.SortFunc(found, func(x, y named) int { return comparePaths(x.p, y.p) })
	renumbered := map[string]uint64{} // by object, or by path for an entry without one
	for _, f := range found {
		if isBelow(f.p, internalDir+"/links") {
			t.del(f.p)
			continue
		}
		key := f.e.Object
		if key == "" {
			key = "/" + f.p
		}
		ino, ok := renumbered[key]
		if !ok {
			var err error
			if ino, err = v.cfg.AllocIno(); err != nil {
				return err
			}
			renumbered[key] = ino
		}
		ne := *f.e
		ne.Ino = ino
		t.put(f.p, &ne)
	}
	return nil
}

// joinedName returns a lower name that the copied-up hard-linked file
// of entry e still joins after the apply wrote the lower tree: its
// Origin when that still is the same lower inode, else, when the apply
// removed or replaced that name but the inode has other names left
// (held in origins, it cannot have been reused), one of those (a walk of
// the lower tree, as Diff does for such files). "" when no lower name
// joins it any more; for a metacopy (an internal anchor's), "" once its
// Origin is not that inode. Of the other names, one where the view has
// an entry of another file (or a whiteout) joins nothing: the view does
// not show the lower file there. v.mu is held.
func (a *applier) joinedName(e *branch.Entry) string {
	v := a.v
	if st, err := v.lowerStat(e.Origin); err == nil && sharedLower(&st) && v.mapIno(&st) == e.Ino {
		return e.Origin
	}
	if e.Metacopy {
		return ""
	}
	if q, ok := a.joined[e.Ino]; ok {
		return q
	}
	a.joined[e.Ino] = ""
	fd, ok := a.origins[e.Origin]
	var held unix.Stat_t
	if !ok || unix.Fstat(fd, &held) != nil || held.Nlink == 0 {
		return ""
	}
	names, err := v.lowerNamesOf(map[uint64]int{e.Ino: int(held.Nlink)})
	if err != nil {
		v.log.Warn("apply: looking for the lower names of a hard-linked file", "origin", e.Origin, "err", err)
		return ""
	}
	slices.SortFunc(names, comparePaths)
	for _, q := range names {
		other := v.indexGet(q)
		shown := other == nil || other.Object == e.Object
		if st, err := v.lowerStat(q); err == nil && st.Dev == held.Dev && st.Ino == held.Ino && shown {
			a.joined[e.Ino] = q
			return q
		}
	}
	return ""
}

// eachEntryLocked calls fn with every entry of the index, internal ones
// included, in no order. v.mu is held.
func (v *FS) eachEntryLocked(fn func(p string, e *branch.Entry)) {
	if v.rootEntry != nil {
		fn("", v.rootEntry)
	}
	for dir, m := range v.dirs {
		for name, e := range m {
			fn(joinPath(dir, name), e)
		}
	}
}

// commitState is what commit works out before it changes anything.
type commitState struct {
	a         *applier
	pending   map[string]bool // a change not written at or below the path
	doneBelow map[string]bool // a change written at or below the path
	converted map[string]*branch.Entry
	straight  map[string]bool // memo of straightLocked
}

// commit drops, converts and re-bases the entries of the paths written,
// in one commit, and brings the nodes in line. It returns the nodes the
// kernel must forget or refresh.
func (a *applier) commit() ([]Stale, error) {
	v := a.v
	v.mu.Lock()
	defer v.mu.Unlock()
	c := &commitState{a: a, pending: map[string]bool{}, doneBelow: map[string]bool{},
		converted: map[string]*branch.Entry{}, straight: map[string]bool{}}
	for _, it := range a.items {
		m := c.pending
		if it.state == stateDone {
			m = c.doneBelow
		}
		m[it.Path] = true
		for _, d := range ancestors(it.Path) {
			m[d] = true
		}
	}
	if len(c.doneBelow) == 0 {
		return nil, nil
	}
	var paths []string
	byObj := map[string][]string{}
	v.eachEntryLocked(func(p string, e *branch.Entry) {
		if e.Type != branch.TypeDir && e.Object != "" {
			byObj[e.Object] = append(byObj[e.Object], p)
		}
		paths = append(paths, p)
	})
	slices.SortFunc(paths, comparePaths)

	// A renamed or made directory whose whole subtree was written
	// merges its own lower directory from now on: unless the lower
	// directory it merges still holds hard-linked files whose names
	// show an upper copy (those names in it would show the lower files
	// the apply wrote instead, apart from the copy's other names).
	for _, p := range paths {
		e := v.indexGet(p)
		if e.Type != branch.TypeDir || isInternal(p) || c.pending[p] || !c.inScope(p) || a.seen[p].entry != e {
			continue
		}
		lp, ok := redirectOf(e)
		if ok && lp == p || ok && v.showsUpperCopiesBelowLocked(lp) {
			continue
		}
		if st, err := v.lowerStat(p); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		ce := *e
		ce.Opaque, ce.Redirect = false, redirectFor(p)
		c.converted[p] = &ce
	}

	drop := map[string]bool{}
	for _, p := range paths {
		if e := v.indexGet(p); e.Type != branch.TypeDir && c.canDropLocked(p, e) {
			drop[p] = true
		}
	}
	// An object's names go together, or stay together.
	for _, ps := range byObj {
		if !allOf(ps, drop) {
			for _, p := range ps {
				delete(drop, p)
			}
		}
	}
	// Directories, deepest first: when no entry stays below them.
	keep := map[string]bool{}
	for i := len(paths) - 1; i >= 0; i-- {
		p := paths[i]
		e := v.indexGet(p)
		if e.Type == branch.TypeDir && !keep[p] && c.canDropDirLocked(p, e) {
			drop[p] = true
		}
		if !drop[p] {
			keep[p] = true
			for _, d := range ancestors(p) {
				keep[d] = true
			}
		}
	}

	t := v.newTx()
	dropped := map[string]*branch.Entry{}
	for p := range drop {
		dropped[p] = v.indexGet(p)
		t.del(p)
	}
	for p, ce := range c.converted {
		if !drop[p] {
			t.put(p, ce)
		}
	}
	// A renamed lower file kept as a metacopy whose own lower path
	// has its data now (written by this apply, or equal already) reads
	// it there, so that its old name is free to change: unless it
	// still joins the other names of a hard-linked lower file. One
	// whose old name this apply removed does so also where it is not
	// selected (no change there: its lower file is equal already).
	rebased := map[string]*branch.Entry{}
	removed := func(lp string) bool {
		it := a.byPath[lp]
		return it != nil && it.state == stateDone && (it.Kind == Deleted || it.Kind == TypeChanged)
	}
	v.eachEntryLocked(func(p string, e *branch.Entry) {
		if drop[p] || isInternal(p) || e.Type != branch.TypeFile || !e.Metacopy || e.Origin == p || c.pending[p] {
			return
		}
		if !c.inScope(p) && !removed(e.Origin) {
			return
		}
		if st, err := v.lowerStat(e.Origin); err == nil && sharedLower(&st) && v.mapIno(&st) == e.Ino {
			return
		}
		if st, err := v.lowerStat(p); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			rebased[p] = e
		}
	})
	for p, e := range rebased {
		ne := *e
		ne.Origin = p
		t.put(p, &ne)
	}
	for _, it := range a.items {
		if it.state != stateDone || drop[it.Path] {
			continue
		}
		b, err := v.lowerBase(it.Path)
		if err != nil {
			return nil, t.fail(fmt.Errorf("apply: the project was written, but %v", err))
		}
		if b.Exists || v.indexGet(it.Path) != nil {
			t.b.SetBase(it.Path, b)
		} else {
			t.b.DeleteBase(it.Path)
		}
	}
	// Writing or removing one name of a hard-linked lower file changed
	// the link count (and ctime) of its other names: the apply's own
	// doing, not a conflict for the next apply.
	relinked := map[[2]uint64]bool{}
	for _, it := range a.items {
		if it.state == stateDone && it.lexists && sharedLower(&it.lower) {
			relinked[[2]uint64{it.lower.Dev, it.lower.Ino}] = true
		}
	}
	for q := range a.resident { // a new name linked to it
		if st, err := v.lowerStat(q); err == nil {
			relinked[[2]uint64{st.Dev, st.Ino}] = true
		}
	}
	for _, it := range a.items {
		if it.state != stateDone && it.lexists && relinked[[2]uint64{it.lower.Dev, it.lower.Ino}] {
			if b, err := v.lowerBase(it.Path); err == nil {
				t.b.SetBase(it.Path, b)
			}
		}
	}
	// A copied-up hard-linked lower file whose lower inode the apply
	// replaced joins no lower names any more: its old inode number may
	// be reused by another lower file, which must not show this copy.
	// One whose Origin the apply removed or replaced while the inode
	// kept other names still joins those: its Origin becomes one of
	// them (else they would show the lower file, and the view change).
	// A lower file of one name left joins nothing by its inode (only
	// the names of a file of several are looked up in FS.hardlinks):
	// that name becomes a name of the upper copy, as a copy-up makes it.
	unjoined := map[string]*branch.Entry{}
	rejoined := map[string]string{}
	v.eachEntryLocked(func(p string, e *branch.Entry) {
		if drop[p] || e.Type != branch.TypeFile || e.Metacopy || e.Origin == "" {
			return
		}
		switch q := a.joinedName(e); q {
		case e.Origin:
		case "":
			unjoined[p] = e
		default:
			rejoined[p] = q
		}
	})
	for p, q := range rejoined {
		ne := *v.indexGet(p)
		ne.Origin = q
		t.put(p, &ne)
		if st, err := v.lowerStat(q); err == nil && st.Nlink == 1 && v.indexGet(q) == nil && !drop[q] && c.straightLocked(parentOf(q)) {
			qe := ne
			t.put(q, &qe)
			if b, err := v.lowerBase(q); err == nil {
				t.b.SetBase(q, b)
			}
		}
	}
	for p, e := range unjoined {
		ne := *e
		ne.Origin = ""
		t.put(p, &ne)
		if h := v.hardlinks[e.Ino]; h != nil && h.Object == e.Object {
			delete(v.hardlinks, e.Ino)
		}
	}
	a.keepNamesOfCopiesLocked(t)
	if err := a.renumberFreedLocked(t); err != nil {
		return nil, t.fail(fmt.Errorf("apply: the project was written, but %v", err))
	}
	for p, e := range dropped {
		t.b.DeleteBase(p)
		if e.Object == "" || v.frozenLocked(e) || e.Type != branch.TypeDir && v.links[e.Object] > 0 {
			continue
		}
		v.nodesMu.Lock()
		held := v.byObject[e.Object] != nil
		v.nodesMu.Unlock()
		if !held {
			t.doomed = append(t.doomed, e.Object)
		}
	}
	err := t.commit()
	if err == nil {
		// Written before apply reports it: a kill -9 right after must
		// not leave the applied paths showing as changes.
		err = v.settle()
	}
	if err != nil {
		return nil, fmt.Errorf("apply: the project was written, but the branch could not be updated (the applied paths still show as changes; nothing is lost): %w", err)
	}
	stale, orphans := v.reconcileNodesLocked(byObj)
	for _, e := range orphans {
		if !v.frozenLocked(e) && v.links[e.Object] == 0 {
			v.forgetCtime(e.Object)
			if err := v.objs.Remove(e.Object); err != nil {
				v.log.Warn("removing an applied object", "object", e.Object, "err", err)
			}
		}
	}
	v.lowerSubdirsMu.Lock()
	clear(v.lowerSubdirs)
	v.lowerSubdirsMu.Unlock()
	return stale, nil
}

// keepNamesOfCopiesLocked gives an entry of its own to each name that
// the view showed, without one, as the upper copy of a hard-linked lower
// file (a lower name of that file, joined to the copy), where that name
// would show a lower file now: the apply wrote another file at it (a
// name of the copy that it applied without the others), or left that
// lower file one name, or replaced it. It becomes a name of the upper
// copy, as a copy-up makes it, and the view stays as it was. The names
// are those captureViewNames looked up; v.mu is held.
func (a *applier) keepNamesOfCopiesLocked(t *tx) {
	v := a.v
	byIno := map[uint64]*branch.Entry{} // the view's st_ino of each upper file still named → an entry of it now
	for p, s := range a.seen {
		if s.entry.Type != branch.TypeFile || s.entry.Object == "" {
			continue
		}
		if e := v.indexGet(p); e != nil && e.Object == s.entry.Object {
			byIno[e.Ino] = e
		}
	}
	for _, q := range slices.Sorted(maps.Keys(a.looks)) {
		l := a.looks[q]
		e := byIno[l.st.Ino]
		if !l.shown || l.st.Mode&unix.S_IFMT != unix.S_IFREG || e == nil || isInternal(q) || v.indexGet(q) != nil {
			continue
		}
		if lp, ok := v.lowerPositionLocked(q); ok {
			if st, err := v.lowerStat(lp); err == nil && sharedLower(&st) {
				if h := v.hardlinks[v.mapIno(&st)]; h != nil && h.Object == e.Object {
					continue // still joined to the copy
				}
			}
		}
		ne := *e
		t.put(q, &ne)
		if b, err := v.lowerBase(q); err == nil {
			t.b.SetBase(q, b)
		}
	}
}

// showsUpperCopiesBelowLocked reports whether lower directory lp holds,
// at any depth, a hard-linked regular file whose lower inode shows an
// upper copy (FS.hardlinks). v.mu is held.
func (v *FS) showsUpperCopiesBelowLocked(lp string) bool {
	if len(v.hardlinks) == 0 {
		return false
	}
	ents, err := v.lowerNames(lp)
	if err != nil {
		return false
	}
	for _, de := range ents {
		p := joinPath(lp, de.Name)
		var st unix.Stat_t
		switch {
		case de.Mode == unix.S_IFDIR:
			if v.showsUpperCopiesBelowLocked(p) {
				return true
			}
		case de.Mode != unix.S_IFREG && de.Mode != 0:
		case unix.Fstatat(v.lowerFd, lowerRel(p), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && sharedLower(&st) && v.hardlinks[v.mapIno(&st)] != nil:
			return true
		}
	}
	return false
}

func allOf(ps []string, set map[string]bool) bool {
	for _, p := range ps {
		if !set[p] {
			return false
		}
	}
	return true
}

func isInternal(p string) bool { return p != "" && isBelow(p, internalDir) }

// inScope reports whether the apply may change the entry at p: it is
// selected, or a change at or below it was written.
func (c *commitState) inScope(p string) bool { return c.a.selected(p) || c.doneBelow[p] }

// straightLocked reports whether directory d of the view merges the
// lower directory of its own path once the commit is done.
func (c *commitState) straightLocked(d string) bool {
	if s, ok := c.straight[d]; ok {
		return s
	}
	var s bool
	switch e := c.a.v.indexGet(d); {
	case e != nil && c.converted[d] != nil:
		s = true
	case e != nil:
		lp, ok := redirectOf(e)
		s = ok && lp == d
	case d == "":
		s = true
	default:
		s = c.straightLocked(parentOf(d))
	}
	c.straight[d] = s
	return s
}

// lowerStat stats lower path p.
func (v *FS) lowerStat(p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := fstatatLong(v.lowerFd, lowerRel(p), &st)
	return st, err
}

// canDropLocked decides for a non-directory entry or a whiteout.
func (c *commitState) canDropLocked(p string, e *branch.Entry) bool {
	a, v := c.a, c.a.v
	if isInternal(p) {
		return c.canDropAnchorLocked(p, e)
	}
	if !c.inScope(p) || c.pending[p] || a.seen[p].entry != e || !c.straightLocked(parentOf(p)) {
		return false
	}
	lst, lerr := v.lowerStat(p)
	if e.IsWhiteout() {
		return lerr == unix.ENOENT || lerr == unix.ENOTDIR
	}
	if lerr != nil || modeType(lst.Mode) != e.Type || e.Object == "" {
		return false
	}
	v.nodesMu.Lock()
	n := v.byObject[e.Object]
	writing := n != nil && n.writers > 0
	v.nodesMu.Unlock()
	if writing {
		return false // its writes go on: it stays a change
	}
	ost, err := v.objs.Lstat(e.Object)
	if err != nil || e.Type == branch.TypeFile && ost.Ctim != a.seen[p].ctime {
		return false // changed while the apply ran
	}
	if e.Origin != "" {
		if st, err := v.lowerStat(e.Origin); err == nil && sharedLower(&st) && v.mapIno(&st) == e.Ino {
			return false // other lower names show this upper file
		}
	}
	if a.byPath[p] == nil && ost.Mtim != lst.Mtim {
		return false // not a change, but its times differ: keep them
	}
	return true
}

// canDropAnchorLocked decides for an internal entry: an anchor, which
// keeps the upper copy of a hard-linked lower file for the lower names
// joined to it (see anchorPath), may go once no lower name joins it
// (joinedName: the apply replaced or removed every name of that lower
// file), together with the other names of its object (which go
// together or stay together): else the names the apply linked to one
// lower file would show it, and those kept for the anchor's sake the
// upper copy, two files where the view had one.
func (c *commitState) canDropAnchorLocked(p string, e *branch.Entry) bool {
	if !isBelow(p, internalDir+"/links") || e.Type != branch.TypeFile || e.Origin == "" || c.a.seen[p].entry != e {
		return false
	}
	return c.a.joinedName(e) == ""
}

// canDropDirLocked decides for a directory entry with no entry kept
// below it.
func (c *commitState) canDropDirLocked(p string, e *branch.Entry) bool {
	v := c.a.v
	if isInternal(p) || !c.inScope(p) || c.pending[p] || c.a.seen[p].entry != e {
		return false
	}
	if p != "" && !c.straightLocked(parentOf(p)) {
		return false
	}
	if c.converted[p] == nil {
		if lp, ok := redirectOf(e); !ok || lp != p {
			return false
		}
	}
	st, err := v.lowerStat(p)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || v.mapIno(&st) != e.Ino {
		return false
	}
	if e.Object == "" {
		return true
	}
	// Names made and removed again in it (no change for Diff) moved
	// its mtime, which the apply did not write: keep them, as a file's.
	ost, err := v.objs.Lstat(e.Object)
	return err == nil && ost.Mtim == st.Mtim
}

// reconcileNodesLocked brings every node the kernel holds in line with
// the index after entries were dropped or converted: a node still
// resolving to the same upper object takes its (possibly converted)
// entry; a file's node whose name no longer shows it, while the index
// still names its object, takes its object's entry (it stands for the
// object, whichever name the kernel looked it up by: its name may have
// been removed in the view, its directory with it, or replaced by the
// apply); a node now resolving to the lower inode of the same number
// and type becomes that lower node in place (directories always, files
// when not open); any other node is cut loose, as unlink does. names
// are the names of each object before the commit. It returns the nodes
// for the kernel (Stale: with a name for those cut loose, and for a
// name that no longer shows a node that stays; without for those
// changed in place), and the entries of the objects no node holds any
// more. v.mu is held exclusively.
func (v *FS) reconcileNodesLocked(names map[string][]string) ([]Stale, []*branch.Entry) {
	v.nodesMu.Lock()
	set := map[*Node]bool{}
	for _, m := range []map[string]*Node{v.byObject, v.byLower} {
		for _, n := range m {
			set[n] = true
		}
	}
	for _, n := range v.byLowerIno {
		set[n] = true
	}
	v.nodesMu.Unlock()
	type byDepth struct {
		n     *Node
		depth int
	}
	var nodes []byDepth
	var nameless []*Node       // files whose name went with a directory removed in the view
	dirs := map[string]*Node{} // the directories by path, before anything changes
	for n := range set {
		if n == v.root || n.unlinked || n.stale {
			continue
		}
		p, ok := n.pathLocked()
		if !ok {
			if n.entry != nil && n.mode != unix.S_IFDIR {
				nameless = append(nameless, n)
			}
			continue
		}
		if n.mode == unix.S_IFDIR {
			dirs[p] = n
		}
		nodes = append(nodes, byDepth{n, len(pathNames(p))})
	}
	dirs[""] = v.root
	slices.SortFunc(nodes, func(x, y byDepth) int { return x.depth - y.depth })

	var stale []Stale
	var orphans []*branch.Entry
	// adopt gives node n the entry e of its object: with its inode
	// number, which the apply may have changed (renumberFreedLocked).
	adopt := func(n *Node, e *branch.Entry) {
		v.promoteLocked(n, e)
		if n.ino != e.Ino && e.Ino != 0 {
			v.nodesMu.Lock()
			n.ino = e.Ino
			v.nodesMu.Unlock()
		}
	}
	// dropNames gives the kernel the names of n's object before the
	// commit, but its own (given with it), to drop: none shows n now.
	dropNames := func(n *Node, own string) {
		if n.object == "" || n.mode == unix.S_IFDIR {
			return
		}
		for _, q := range names[n.object] {
			if d := dirs[parentOf(q)]; d != nil && q != own && !isInternal(q) {
				_, name := splitPath(q)
				stale = append(stale, Stale{Node: n, Parent: d, Name: name})
			}
		}
	}
	cut := func(n *Node) {
		own, _ := n.pathLocked()
		s := Stale{Node: n, Parent: n.parent, Name: n.name}
		n.unlinked, n.parent = true, nil
		v.nodesMu.Lock()
		v.dropLowerLocked(n)
		v.nodesMu.Unlock()
		stale = append(stale, s)
		dropNames(n, own)
	}
	// A name of each object in the index: the first in path order,
	// internal ones last.
	objNames := map[string]string{}
	v.eachEntryLocked(func(p string, e *branch.Entry) {
		if e.Type == branch.TypeDir || e.Object == "" {
			return
		}
		q, ok := objNames[e.Object]
		if !ok || isInternal(q) && !isInternal(p) || isInternal(q) == isInternal(p) && comparePaths(p, q) < 0 {
			objNames[e.Object] = p
		}
	})
	// livesOn keeps file node n, whose name (if named, n.parent and
	// n.name) no longer shows it, for its object while the index names
	// that: with the object's entry; its name goes from the kernel.
	livesOn := func(n *Node, named bool) bool {
		q, ok := objNames[n.object]
		if n.mode == unix.S_IFDIR || n.entry == nil || !ok {
			return false
		}
		s := Stale{Node: n}
		if named {
			s.Parent, s.Name = n.parent, n.name
		}
		if e := v.indexGet(q); n.entry != e {
			adopt(n, e)
		}
		stale = append(stale, s)
		return true
	}
	root := v.root
	if e := v.rootEntry; e == nil && root.entry != nil {
		orphans = append(orphans, root.entry)
		v.nodesMu.Lock()
		if v.byObject[root.object] == root {
			delete(v.byObject, root.object)
		}
		root.entry, root.object, root.lower, root.hasLower = nil, "", "", true
		v.nodesMu.Unlock()
		stale = append(stale, Stale{Node: root})
	} else if e != nil && e != root.entry {
		v.promoteLocked(root, e)
		stale = append(stale, Stale{Node: root})
	}
	for _, it := range nodes {
		n := it.n
		p, ok := n.pathLocked()
		if !ok {
			if !livesOn(n, false) {
				cut(n) // its directory was cut loose just now
			}
			continue
		}
		if e := v.indexGet(p); e != nil {
			switch {
			case !e.IsWhiteout() && n.entry != nil && n.object == e.Object:
				if n.entry != e {
					adopt(n, e)
					stale = append(stale, Stale{Node: n})
				}
			case !livesOn(n, true):
				cut(n)
			}
			continue
		}
		parent := n.parent
		if !parent.hasLower {
			if !livesOn(n, true) {
				cut(n)
			}
			continue
		}
		lp := joinPath(parent.lower, n.name)
		st, err := v.lowerStat(lp)
		if err != nil || st.Mode&unix.S_IFMT != n.mode || v.mapIno(&st) != n.ino {
			// Another file now (the apply wrote a new inode at the
			// path of a lower node the kernel held), or none.
			if !livesOn(n, true) {
				cut(n)
			}
			continue
		}
		if h := v.hardlinks[n.ino]; h != nil && sharedLower(&st) {
			// The name shows the upper copy of a hard-linked lower
			// file (as resolve finds it), not the lower file.
			if n.object != h.Object && !livesOn(n, true) {
				cut(n)
			}
			continue
		}
		if n.entry == nil && n.hasLower && n.lower == lp {
			continue // the same lower file as before
		}
		if livesOn(n, true) {
			continue // the name shows a lower file, the node its object
		}
		v.nodesMu.Lock()
		open := n.opens > 0
		if n.mode != unix.S_IFDIR && open {
			// Its open files go on with the object (passthrough may
			// have it as the inode's backing file): a new node.
			v.nodesMu.Unlock()
			cut(n)
			continue
		}
		if n.entry != nil {
			orphans = append(orphans, n.entry)
			if v.byObject[n.object] == n {
				delete(v.byObject, n.object)
			}
		}
		v.dropLowerLocked(n)
		n.entry, n.object, n.lower, n.hasLower = nil, "", lp, true
		v.byLower[lp] = n
		if sharedLower(&st) && v.byLowerIno[n.ino] == nil {
			v.byLowerIno[n.ino] = n
		}
		v.nodesMu.Unlock()
		stale = append(stale, Stale{Node: n})
	}
	for _, n := range nameless {
		if livesOn(n, false) {
			continue
		}
		// No name of its object is left: it goes, as unlink leaves it.
		n.unlinked, n.parent = true, nil
		v.nodesMu.Lock()
		v.dropLowerLocked(n)
		v.nodesMu.Unlock()
		stale = append(stale, Stale{Node: n})
		dropNames(n, "")
	}
	return stale, orphans
}
