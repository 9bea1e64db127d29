package overlay

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # Hard-linked lower files in an Apply
//
// Names that are one file in the view become one file in the lower tree
// (writeRegular links them), and names that are different files in the
// view must not stay one lower inode that the apply changes: a lower
// file of several names, one of which the view shows as another file
// (made anew at that name, and equal to the lower file, so no change),
// is changed in place (mode, owner, xattrs, or a new name linked to it
// and given the view's attributes) only when no such name stays;
// otherwise the apply writes a new file where it would have changed the
// shared one, and the name that stays keeps the old inode as it is. A
// lower file whose names show an upper copy of another file
// (FS.hardlinks) counts as shared so, whatever names it has left.
//
// Diff compares no link identity: a name of a file the apply writes may
// be no change, its lower file equal to the view's, and yet another
// lower inode than the one the apply links the file's names to (a name
// linked in the view to an equal file, or one a partial apply wrote
// alone), and so may every name of a file none of whose names is a
// change. Once the changes are written, such names of each file are
// linked to the one written, or to the first that may be, too
// (relinkNames), where they are selected.
//
// The names of a hard-linked lower inode are found by a walk of the
// lower tree (as Diff does), once for all the inodes the apply's
// changes start from (before anything is written), and again for an
// inode met later. What the view shows at the names of files of several
// names is looked up before anything is written too (captureViewNames):
// the view reads the lower tree, which the writes change.

// lowerNamesOfInode returns the lower names of the hard-linked lower
// file st, from the walk made for the apply's inodes, or a walk of its
// own (nil on an error: no name is known, so none is taken for the same
// file).
func (a *applier) lowerNamesOfInode(st *unix.Stat_t) []string {
	ino := a.v.mapIno(st)
	if names, ok := a.lowerLinks[ino]; ok {
		return names
	}
	byIno, err := a.v.lowerNamesByIno(map[uint64]int{ino: int(st.Nlink)})
	if err != nil {
		a.v.log.Warn("apply: looking for the lower names of a hard-linked file", "err", err)
	}
	a.lowerLinks[ino] = byIno[ino]
	return byIno[ino]
}

// findLowerLinks walks the lower tree once for the names of the
// hard-linked lower files that the changes to apply start from: the
// lower files at their paths, those that lower-only files of the view
// show (their data), and those that copied-up files came from (origins).
func (a *applier) findLowerLinks() {
	want := map[uint64]int{}
	add := func(st *unix.Stat_t) {
		if sharedLower(st) {
			want[a.v.mapIno(st)] = int(st.Nlink)
		}
	}
	for _, it := range a.items {
		if it.state == stateApply && it.lexists {
			add(&it.lower)
		}
	}
	for _, src := range a.sources {
		if src.mode == unix.S_IFREG && src.entry == nil && src.lower != "" {
			if st, err := a.v.lowerStat(src.lower); err == nil {
				add(&st)
			}
		}
	}
	for _, fd := range a.origins {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			add(&st)
		}
	}
	if len(want) == 0 {
		return
	}
	byIno, err := a.v.lowerNamesByIno(want)
	if err != nil {
		a.v.log.Warn("apply: looking for the lower names of hard-linked files", "err", err)
		return
	}
	for ino := range want {
		a.lowerLinks[ino] = byIno[ino]
	}
}

// sharedWithOtherFile reports whether the lower file st has a name that
// stays in the lower tree through the apply (it neither writes nor
// removes it) and where the view shows another file than its file ino:
// changing that lower inode in place would change that other file too;
// and so when the view has an upper copy of that lower file (shown at
// its names, or carrying its inode number) that is another file. A name the view does not show (removed there, by a change this apply
// does not take) is no other file: the inode is the one it names.
func (a *applier) sharedWithOtherFile(st *unix.Stat_t, ino uint64) bool {
	a.v.mu.RLock()
	h := a.v.hardlinks[a.v.mapIno(st)]
	a.v.mu.RUnlock()
	if h != nil && h.Ino != ino {
		// An upper copy of it, another file, claims its names (also
		// when the apply left it one name so far: a name linked to it
		// would show that copy).
		return true
	}
	if own := a.v.mapIno(st); own != ino && a.entryInos()[own] {
		// Another file of the view (a copy of it, renamed or written)
		// shows its inode number: a name linked to it would show that
		// number for two files.
		return true
	}
	if !sharedLower(st) {
		return false
	}
	for _, q := range a.lowerNamesOfInode(st) {
		if a.replacesLower(q) {
			continue
		}
		vst, shown := a.viewAt(q)
		if !shown {
			continue // not shown: removed in the view (as an unlink of it leaves the inode to its other names)
		}
		if vst.Mode&unix.S_IFMT != unix.S_IFREG || vst.Ino != ino {
			return true
		}
	}
	return false
}

// changesInPlace reports whether a change of mode, owner or xattrs
// (it, to src) may be made to the lower file in place, else it is
// written anew: not when that lower file has a name that is another
// file in the view, nor when the view's file has other names and the
// lower file is not the one they are linked to (a name written before,
// or one the lower tree holds already: residentName).
func (a *applier) changesInPlace(it *planned, src *source) bool {
	if src.mode != unix.S_IFREG || !it.lexists {
		return true
	}
	if a.sharedWithOtherFile(&it.lower, src.st.Ino) {
		return false
	}
	if src.st.Nlink <= 1 {
		return true
	}
	to := a.linked[src.st.Ino]
	if to == "" {
		to = a.residentName(it, src)
	}
	if to == "" || to == it.Path {
		return true
	}
	st, err := a.v.lowerStat(to)
	return err == nil && st.Dev == it.lower.Dev && st.Ino == it.lower.Ino
}

// replacesLower reports whether the apply puts another file at lower
// path q or removes it (not a change in place): a change at q, or the
// removal or change of type of a directory above it.
func (a *applier) replacesLower(q string) bool {
	applies := func(it *planned) bool {
		return it != nil && (it.state == stateApply || it.state == stateDone)
	}
	if it := a.byPath[q]; applies(it) && it.Kind != ModeChanged {
		return true
	}
	for _, d := range ancestors(q) {
		if it := a.byPath[d]; applies(it) && (it.Kind == TypeChanged || it.Kind == Deleted) {
			return true
		}
	}
	return false
}

// viewNamesOfLower returns the view paths that may show the lower file
// at lp (a lower-only file of the view, with other names): its lower
// names, at their own paths and below each renamed directory of the
// view that merges their directory (each to be looked up: other
// entries may hide them).
func (a *applier) viewNamesOfLower(lp string) []string {
	st, err := a.v.lowerStat(lp)
	if err != nil || !sharedLower(&st) {
		return nil
	}
	return viewPathsOfLower(a.lowerNamesOfInode(&st), a.v.redirects())
}

// linkTo records lower path p as the one the other names of src's file
// (a view file of several names) are linked to.
func (a *applier) linkTo(p string, src *source) {
	a.linked[src.st.Ino] = p
	a.linkedTo[src.st.Ino] = src
}

// relinkNames links to each file written (linked) its other names in
// the view that the apply does not write and whose lower file is another
// inode (see above), when they are selected.
func (a *applier) relinkNames() error {
	a.linkUnwrittenFiles()
	for ino, to := range a.linked {
		var toSt unix.Stat_t
		if unix.Fstatat(a.v.lowerFd, lowerRel(to), &toSt, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		for _, q := range a.namesOfFile(a.linkedTo[ino]) {
			if q == to || isInternal(q) || a.byPath[q] != nil || !a.selected(q) || a.replacesLower(q) {
				continue
			}
			lst, err := a.v.lowerStat(q)
			if err != nil || lst.Mode&unix.S_IFMT != unix.S_IFREG || lst.Dev == toSt.Dev && lst.Ino == toSt.Ino {
				continue
			}
			if st, ok := a.viewFile(q); !ok || st.Ino != ino {
				continue
			}
			dirfd, name, err := a.parentFd(q)
			if err != nil {
				return fmt.Errorf("apply: %s: %w", displayPath(q), err)
			}
			if err := a.dirSource(parentOf(q)); err != nil {
				return fmt.Errorf("apply: reading %s: %w", displayPath(parentOf(q)), err)
			}
			a.watchLower(q, &lst)
			if err := a.linkOver(to, dirfd, name, nil); err != nil {
				return fmt.Errorf("apply: linking %s to %s: %w", displayPath(q), displayPath(to), err)
			}
			a.touched[parentOf(q)] = true
		}
	}
	return nil
}

// linkUnwrittenFiles chooses, for each file of several names in the
// view none of which is a change written (their lower files have the
// view's data and attributes already, and may yet be different inodes),
// the selected name whose lower file it may link the others to
// (relinkNames): one whose lower file is the view's (its inode number is
// the one the view shows, so the file keeps its inode), else the first.
// Its names are its entries and the lower names of the file they came
// from (namesOfFile: a lower name may show the upper copy of its file)
// where the view showed that file.
func (a *applier) linkUnwrittenFiles() {
	done := map[string]bool{}
	for _, s := range a.seen {
		e := s.entry
		if e.Type != branch.TypeFile || e.Object == "" || done[e.Object] {
			continue
		}
		done[e.Object] = true
		names := slices.DeleteFunc(a.namesOfFile(&source{mode: unix.S_IFREG, entry: e}), func(q string) bool {
			st, ok := a.viewFile(q)
			return isInternal(q) || !ok || st.Ino != e.Ino // not a name of this file in the view
		})
		if len(names) < 2 || slices.ContainsFunc(names, func(q string) bool { it := a.byPath[q]; return it != nil && it.New != nil }) {
			continue
		}
		var to string
		var toSt unix.Stat_t
		for _, q := range names {
			if !a.selected(q) || a.replacesLower(q) {
				continue
			}
			st, ok := a.viewFile(q)
			if !ok || a.linked[st.Ino] != "" {
				continue
			}
			lst, err := a.v.lowerStat(q)
			if err != nil || lst.Mode&unix.S_IFMT != unix.S_IFREG || a.sharedWithOtherFile(&lst, st.Ino) {
				continue
			}
			own := a.v.mapIno(&lst) == st.Ino
			if to == "" || own {
				to, toSt = q, st
			}
			if own {
				break
			}
		}
		if to != "" {
			a.linkTo(to, &source{mode: unix.S_IFREG, st: toSt, entry: e})
		}
	}
}

// namesOfFile returns the view paths that may show src's file: the
// entries of its object and the lower names of the files they came
// from, or, for a lower-only file, its lower names (each to be looked
// up).
func (a *applier) namesOfFile(src *source) []string {
	e := src.entry
	if e == nil {
		if src.lower == "" {
			return nil
		}
		return a.viewNamesOfLower(src.lower)
	}
	var names []string
	for _, p := range a.pathsOfObject(e.Object) {
		names = append(names, p)
		if fd, ok := a.origins[a.seen[p].entry.Origin]; ok {
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && st.Nlink > 0 {
				names = append(names, viewPathsOfLower(a.lowerNamesOfInode(&st), a.v.redirects())...)
			}
		}
	}
	slices.SortFunc(names, comparePaths)
	return slices.Compact(names)
}

// dirSource reads the view's directory d as a source, for finishDirs
// to give the lower directory its times back, when capture did not.
func (a *applier) dirSource(d string) error {
	if a.sources[d] != nil {
		return nil
	}
	n, st, err := a.v.lookupPath(d)
	if n == nil || err != nil {
		return err
	}
	defer a.v.release(n)
	src, err := a.readSource(n, st)
	if err == nil {
		a.sources[d] = src
	}
	return err
}

// pathsOfObject returns the paths of the regular files' entries of
// object obj as the apply found them (seen).
func (a *applier) pathsOfObject(obj string) []string {
	return a.objectIndex()[obj]
}

// objectIndex returns the paths of seen's regular files' entries by
// object, made at the first call.
func (a *applier) objectIndex() map[string][]string {
	if a.byObject == nil {
		a.byObject = map[string][]string{}
		for p, s := range a.seen {
			if s.entry.Type == branch.TypeFile && s.entry.Object != "" {
				a.byObject[s.entry.Object] = append(a.byObject[s.entry.Object], p)
			}
		}
	}
	return a.byObject
}

// viewLook is what the view showed at a path before the apply wrote
// anything (captureViewNames).
type viewLook struct {
	st    unix.Stat_t
	shown bool
}

// captureViewNames looks up, before anything is written, the view's
// names of the files of several names that the apply may link
// (namesOfFile, and the lower names of the lower files its changes
// start from): the view reads the lower tree, which the writes change
// (a name below a renamed directory shows nothing once a change of type
// removed its old lower directory), and a name must be judged by what
// the view showed.
func (a *applier) captureViewNames() {
	var names []string
	hasOrigin := func(p string) bool { _, ok := a.origins[a.seen[p].entry.Origin]; return ok }
	for _, ps := range a.objectIndex() {
		if len(ps) > 1 || slices.ContainsFunc(ps, hasOrigin) {
			names = append(names, a.namesOfFile(&source{mode: unix.S_IFREG, entry: a.seen[ps[0]].entry})...)
		}
	}
	for _, src := range a.sources {
		if src.mode == unix.S_IFREG && src.entry == nil && src.lower != "" {
			names = append(names, a.namesOfFile(src)...)
		}
	}
	for _, ns := range a.lowerLinks {
		names = append(names, ns...)
	}
	slices.SortFunc(names, comparePaths)
	cur := a.v.newCursor()
	defer cur.close()
	for _, q := range slices.Compact(names) {
		if _, ok := a.looks[q]; ok || isInternal(q) {
			continue
		}
		n, st, err := cur.lookup(q)
		if n != nil {
			a.v.release(n)
		}
		a.looks[q] = viewLook{st: st, shown: err == nil && n != nil}
	}
}

// viewAt returns the attributes of what the view shows at path q, and
// whether it shows anything: as before the apply wrote anything where
// captureViewNames looked q up, else as now.
func (a *applier) viewAt(q string) (unix.Stat_t, bool) {
	if l, ok := a.looks[q]; ok {
		return l.st, l.shown
	}
	n, st, err := a.v.lookupPath(q)
	if n != nil {
		a.v.release(n)
	}
	return st, err == nil && n != nil
}

// viewFile returns the attributes of the regular file the view shows at
// q (viewAt), and whether it shows one.
func (a *applier) viewFile(q string) (unix.Stat_t, bool) {
	st, shown := a.viewAt(q)
	return st, shown && st.Mode&unix.S_IFMT == unix.S_IFREG
}
