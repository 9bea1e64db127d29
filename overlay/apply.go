package overlay

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # Apply
//
// The apply*.go files (this one, apply_write.go, apply_commit.go,
// apply_links.go, apply_hold.go) are the one writer of the project: no
// other code of agentfs writes the lower directory (see "Who writes the
// lower directory" in doc.go; lowerwrites_test.go holds the rest of the
// package to it), and Apply, their entry, is reached only by `agentfs
// apply`.
//
// Apply takes the differences of a branch view (Diff from the lower
// tree to the view) into the lower tree, so that each applied path
// there is what the view shows (type, data, mode, owner as root,
// xattrs, atime and mtime), and the view then shows the lower path
// again: applied paths stop being differences.
//
// It writes only through the view's O_PATH descriptor of the lower
// directory, with *at system calls, and resolves directories below it
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS): never by path
// string (in `agentfs run` the lower path is covered by the mount), and
// never through a symlink or out of the tree.
//
// # How each change is written
//
//   - Files, symlinks, fifos, sockets and device nodes that are created,
//     modified or change type are made complete under a temporary name in
//     their directory (an O_TMPFILE for regular files where the
//     filesystem has it), with their data fsync'ed, then renamed over the
//     name: a reader of the lower tree sees the old file or the new one,
//     never a part. Names that are one file in the view (hard links) are
//     linked to the first one written, or, when another name of that
//     file holds it in the lower tree already and the apply does not
//     write it (it is unchanged, or changed in mode, owner or xattrs
//     only), to that one (residentName). A lower file of several names
//     one of which the view shows as another file is not changed in
//     place: the apply writes a new file instead (apply_links.go).
//   - A renamed or moved file is written at its new name and removed at
//     the old one. When its data is still the lower file at the old name
//     (nothing changed it but the rename), and that name is removed by
//     the same apply and has no other link, the new name is a hard link
//     of it (no data copied), so the lower file keeps its inode.
//   - Mode, owner and xattr changes are made in place, then the times.
//   - Directories are made with mkdirat; their mode, owner, xattrs and
//     times are set after their contents, as is the mtime of every
//     directory whose names the apply changed.
//   - Removals go deepest first; a directory is removed with rmdir, so
//     a name that appears in it from outside meanwhile stops the
//     removal (the directory is then reported as skipped).
//   - Finally the directories written in are fsync'ed.
//
// Nothing is atomic across files: a failure (a full disk, a permission
// denied) stops the apply, the paths written so far stay written and
// stop being differences, the rest stay differences; running apply
// again continues.
//
// # Conflicts
//
// A change is a conflict, and is not applied unless Force, when its
// lower path changed since the branch first shadowed it (see base.go).
// "Changed" compares the base with the lower path now:
//
//   - nothing there then, something now: a file appeared;
//   - something then, nothing now: it was deleted;
//   - a different device, inode number or file type: it was replaced;
//   - for a directory: a different mode or owner (names appearing or
//     going inside change its times, and count against those names);
//   - for anything else: a different size, mtime or ctime (ctime moves
//     with every change of data, mode, owner, xattrs or link count).
//
// A path with no base of its own (its entry's parent was renamed, or it
// shows another name's upper copy of a hard-linked lower file) is
// judged by its nearest ancestor that has one: below a path that held
// nothing, or a non-directory, there was nothing; below a directory, a
// lower path that exists changed when its ctime is not older than that
// base. A store written by an agentfs that did not record bases has
// none, and its changes are never conflicts.
//
// # Which changes go together
//
// Paths selects subtrees of the view; a path with no change at or below
// it is an error (ErrNoChange). A selected change also applies the
// creation of the directories it needs (created, or replacing another
// file type). A change whose directory is not applied (a conflict) is
// skipped, and so is the removal of a lower directory when any change
// below it is not applied.
//
// # What becomes of the branch
//
// Once the lower tree is written, the branch's entries at the applied
// paths are dropped in one commit, where that leaves the view as it
// was, so the view shows the lower files; other entries stay, with
// their bases refreshed so that the next apply does not take the
// apply's own writes for conflicts:
//
//   - a file's entry is dropped unless the file is open for writing, its
//     object has other names that stay, it changed while the apply ran,
//     or it is a hard-linked lower file whose other names show it;
//   - an internal anchor (the upper copy of a hard-linked lower file
//     kept for its lower names) is dropped with the other names of its
//     object once no lower name joins it; an entry whose Origin the
//     apply removed, while the lower file kept other names, joins one of
//     those instead (the last one left becomes a name of the upper copy);
//     a lower name that showed such a copy without an entry of its own
//     and would show a lower file now (the apply wrote another file at
//     it, or left the lower file one name) becomes a name of the copy;
//   - a whiteout is dropped once the lower name it hid is gone;
//   - a directory's entry is dropped when no entry stays below it and
//     its lower directory is the same inode with the view's mtime (a
//     name made and removed again in it is no change, and moved only
//     the view's mtime); a directory made in the view
//     (opaque) or renamed (redirected) whose whole subtree was applied
//     becomes a plain merged directory of its own lower path instead,
//     keeping its inode number (but see below);
//   - an entry whose only difference was its times (not a change for
//     Diff) is dropped only when the times are equal;
//   - an entry that stays and shows the inode number of a lower inode
//     the apply freed (removed or replaced its last name: a renamed
//     file or directory whose old name it removed, a copy whose lower
//     file it wrote anew) gets a new number, as the kernel node holding
//     it does: the filesystem may give that number to a file it makes,
//     which the view would show with the number of another file. The
//     apply holds those inodes open while it runs, so that none is
//     reused before.
//
// Dropped objects are removed unless a snapshot shares them (frozen),
// an open file or the kernel holds them (then they go when it lets go).
// The nodes the kernel holds are brought in line: a directory stays the
// same node (a shell inside it keeps working); a file that is now a
// different lower inode becomes a new node, and the old one is returned
// as Stale with its names, for the caller to drop from the kernel's
// caches (fs.Server.Invalidate); a file's node stands for its object,
// whichever name the kernel looked it up by, and stays while the
// branch still names the object (only that name goes from the kernel).

// ErrNoChange is returned when a path given to Apply has no change at
// or below it.
var ErrNoChange = errors.New("no change there")

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// Paths selects the subtrees to apply ("" or "." is the root); all
	// of the view when empty.
	Paths []string
	// DryRun returns what would be done and writes nothing.
	DryRun bool
	// Force applies conflicts too.
	Force bool
	// Progress, when set, is called after each change written.
	Progress func(ApplyProgress)
}

// ApplyProgress says how far an Apply is.
type ApplyProgress struct {
	Done, Total int   // changes
	Bytes       int64 // data bytes written so far
	TotalBytes  int64 // data bytes to write in all
}

// ApplyItem is one change of an Apply and what became of it.
type ApplyItem struct {
	Change
	// Reason says why a conflict or a skipped change was not applied.
	Reason string
	// Bytes is the data written for it (0 for links, directories, ...).
	Bytes int64
	// Implied: not selected, but a selected change needs this directory.
	Implied bool
	// Hide: a conflict of the hide rules (apply_hold.go); Forced: Force
	// would apply it (a file of the view's own at a hidden path), else
	// nothing does (a hidden project file is never changed).
	Hide, Forced bool
}

// ApplyResult lists what Apply did (or would do, for a dry run).
type ApplyResult struct {
	Applied   []ApplyItem // in path order
	Conflicts []ApplyItem // the lower path changed since; not applied
	Skipped   []ApplyItem // not applied because another change was not
	Bytes     int64       // data bytes written (or to write)
	// Stale are nodes the caller must drop from the kernel's caches
	// (fs.Server.Invalidate).
	Stale []Stale
}

// applyState is what the plan says of one change.
type applyState int

const (
	stateUnselected applyState = iota
	stateApply
	stateConflict
	stateSkipped
	stateDone   // written
	stateFailed // writing failed, or not reached after a failure
)

// planned is one change of an Apply.
type planned struct {
	Change
	state   applyState
	reason  string
	implied bool
	hide    bool // held by the hide rules; forced: Force would apply it
	forced  bool
	bytes   int64
	lower   unix.Stat_t // the lower path when planned
	lexists bool
}

// applier is one run of Apply.
type applier struct {
	v      *FS
	lower  *FS // the plain lower tree (a view of the same fd)
	o      ApplyOptions
	asRoot bool

	items  []*planned
	byPath map[string]*planned
	roots  []string // the selected subtrees, cleaned

	bases map[string]*branch.Base // bases read, nil for none

	// Execution (apply_write.go).
	dirs     map[string]int // lower directory fds (O_PATH) by path
	touched  map[string]bool
	linked   map[uint64]string  // view st_ino → lower path written
	linkedTo map[uint64]*source // and what the view shows there
	used     map[string]bool    // lower files hard-linked to a new name
	resident map[string]bool    // lower files a new name was linked to (residentName)
	progress ApplyProgress
	sources  map[string]*source
	// seen records the entry and object ctime of each path as the apply
	// read it, to tell a change made meanwhile (apply_commit.go).
	seen map[string]seenState
	// origins holds the lower files that copied-up or renamed
	// (metacopy) hard-linked files came from (by Origin), opened O_PATH
	// before anything is written: their inodes cannot be reused while
	// the apply runs, so that a name found for one afterwards is a
	// name of the same file (joinedName, residentName).
	origins map[string]int
	joined  map[uint64]string // joinedName's answers
	// lowerLinks holds the lower names of hard-linked lower files, by
	// st_ino as the view shows it (apply_links.go).
	lowerLinks map[uint64][]string
	// byObject indexes seen's regular files by object (pathsOfObject);
	// looks holds what the view showed at the names of files of several
	// names before anything was written (captureViewNames).
	byObject map[string][]string
	looks    map[string]viewLook
	// watched holds, by st_ino as the view shows it, the lower inodes
	// whose numbers entries carry (copies of them) that the apply may
	// free, opened O_PATH before it writes: none is reused while it
	// runs, and commit renumbers the entries of those it freed
	// (renumberFreedLocked).
	watched map[uint64]int
	inos    map[uint64]bool // entryInos
}

// Apply takes the differences of view v into its lower directory (see
// "Apply" above). On an error after writing began, the result says
// what was written, and the branch is updated for it.
func Apply(v *FS, o ApplyOptions) (ApplyResult, error) {
	if v.Layer() == nil {
		return ApplyResult{}, fmt.Errorf("apply: the view shows a snapshot or the plain lower tree: only a branch can be applied")
	}
	lower, err := v.lowerViewOfSameFd()
	if err != nil {
		return ApplyResult{}, err
	}
	// lower.Close closes a dup of an O_PATH descriptor, which has no
	// write-back to report.
	defer func() { _ = lower.Close() }()
	a := &applier{v: v, lower: lower, o: o, asRoot: unix.Geteuid() == 0, byPath: map[string]*planned{},
		bases: map[string]*branch.Base{}, dirs: map[string]int{}, touched: map[string]bool{},
		linked: map[uint64]string{}, linkedTo: map[uint64]*source{}, used: map[string]bool{}, resident: map[string]bool{}, seen: map[string]seenState{},
		origins: map[string]int{}, joined: map[uint64]string{}, lowerLinks: map[uint64][]string{}, looks: map[string]viewLook{}, watched: map[uint64]int{}}
	defer a.closeDirs()
	defer a.closeOrigins()
	if !o.DryRun {
		v.awaitReleases() // what was just closed is applied whole, not kept
	}
	if err := a.plan(); err != nil {
		return ApplyResult{}, err
	}
	if o.DryRun {
		return a.result(), nil
	}
	werr := a.write()
	stale, cerr := a.commit()
	res := a.result()
	res.Stale = stale
	return res, errors.Join(werr, cerr)
}

// lowerViewOfSameFd opens the plain lower tree through v's own lower
// descriptor (the lower path itself may be covered by the mount).
func (v *FS) lowerViewOfSameFd() (*FS, error) {
	fd, err := unix.Dup(v.lowerFd)
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	lv, err := newWithFd(Config{Lower: v.cfg.Lower, Objects: v.objs, Logger: v.log,
		Hide: v.cfg.Hide, HiddenInodes: v.cfg.HiddenInodes, Exclude: v.cfg.Exclude, Seal: v.cfg.Seal, DeviceSlot: v.cfg.DeviceSlot}, fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return lv, nil
}

// cleanRoots turns the selected paths into clean view paths.
func cleanRoots(paths []string) ([]string, error) {
	var roots []string
	for _, p := range paths {
		c := path.Clean("/" + p)[1:]
		if strings.IndexByte(p, 0) >= 0 {
			return nil, fmt.Errorf("apply: path %q contains NUL", p)
		}
		if isBelow(c, internalDir) && c != "" {
			return nil, fmt.Errorf("apply: %q: %w", p, ErrNoChange)
		}
		roots = append(roots, c)
	}
	slices.SortFunc(roots, comparePaths)
	return slices.Compact(roots), nil
}

// selected reports whether p is in a selected subtree.
func (a *applier) selected(p string) bool {
	if len(a.roots) == 0 {
		return true
	}
	for _, r := range a.roots {
		if isBelow(p, r) {
			return true
		}
	}
	return false
}

// plan lists the changes and decides what to apply.
func (a *applier) plan() error {
	var err error
	if a.roots, err = cleanRoots(a.o.Paths); err != nil {
		return err
	}
	a.captureEntries()
	err = Diff(a.lower, a.v, func(c Change) error {
		it := &planned{Change: c}
		a.items = append(a.items, it)
		a.byPath[c.Path] = it
		return nil
	})
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	for _, r := range a.roots {
		found := false
		for _, it := range a.items {
			if isBelow(it.Path, r) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("apply: %s: %w (agentfs diff lists the changes)", displayPath(r), ErrNoChange)
		}
	}
	for _, it := range a.items {
		if a.selected(it.Path) {
			it.state = stateApply
		}
		st, err := a.v.lowerStat(it.Path)
		it.lower, it.lexists = st, err == nil
	}
	// A change that writes at its path needs the directories above it
	// that the apply makes.
	for _, it := range a.items {
		if it.state != stateApply || it.New == nil {
			continue
		}
		for _, d := range ancestors(it.Path) {
			if anc := a.byPath[d]; anc != nil && makesDir(anc) && anc.state == stateUnselected {
				anc.state, anc.implied = stateApply, true
			}
		}
	}
	// Hidden project paths (apply_hold.go), then the other conflicts,
	// parents first.
	for _, it := range a.items {
		if it.state != stateApply {
			continue
		}
		if why, forced := a.hiddenConflict(it); why != "" {
			it.state, it.reason, it.hide, it.forced = stateConflict, why, true, forced
		}
	}
	for _, it := range a.items {
		if it.state != stateApply || a.o.Force {
			continue
		}
		changed, why, err := a.lowerChanged(it.Path)
		if err != nil {
			return fmt.Errorf("apply: %s: %w", displayPath(it.Path), err)
		}
		if changed {
			it.state, it.reason = stateConflict, why
		}
	}
	// Then what the changes not applied hold back, until nothing more
	// is.
	deps := a.lowerDeps()
	for held := true; held; {
		held = false
		h := a.newHolds(deps)
		for _, it := range a.items {
			if it.state != stateApply {
				continue
			}
			if why := h.holdBack(it); why != "" {
				it.state, it.reason, held = stateSkipped, why, true
			}
		}
	}
	for _, it := range a.items {
		if it.state == stateApply && writesData(it) {
			a.progress.TotalBytes += it.New.Size
		}
		if it.state == stateApply {
			a.progress.Total++
		}
	}
	return nil
}

// blockedDir returns a directory above p that the apply would have to
// make but does not apply.
func (a *applier) blockedDir(p string) (string, bool) {
	for _, d := range ancestors(p) {
		if anc := a.byPath[d]; anc != nil && makesDir(anc) && anc.state != stateApply {
			return d, true
		}
	}
	return "", false
}

// ancestors returns the directories above p, nearest first, the root
// last (none for the root itself).
func ancestors(p string) []string {
	var out []string
	for p != "" {
		p = parentOf(p)
		out = append(out, p)
	}
	return out
}

// parentOf returns the directory of p ("" for a name in the root).
func parentOf(p string) string {
	d, _ := splitPath(p)
	return d
}

// makesDir reports whether applying c makes a lower directory.
func makesDir(c *planned) bool {
	return c.New != nil && c.New.Type == "dir" && (c.Kind == Created || c.Kind == TypeChanged)
}

// removesDir reports whether applying c removes a lower directory.
func removesDir(c *planned) bool {
	return c.Old != nil && c.Old.Type == "dir" && (c.Kind == Deleted || c.Kind == TypeChanged)
}

// writesData reports whether applying c writes a regular file's data.
func writesData(c *planned) bool {
	return c.New != nil && c.New.Type == "file" && (c.Kind == Created || c.Kind == Modified || c.Kind == TypeChanged)
}

// displayPath shows a view path ("." for the root).
func displayPath(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// base returns the base of p (nil when it has none), cached.
func (a *applier) base(p string) (*branch.Base, error) {
	if b, ok := a.bases[p]; ok {
		return b, nil
	}
	b, err := a.v.Layer().Base(p)
	if errors.Is(err, branch.ErrNotFound) {
		b, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	a.bases[p] = b
	return b, nil
}

// lowerChanged reports whether lower path p changed since the branch
// first shadowed it, and how (see "Conflicts" above).
func (a *applier) lowerChanged(p string) (bool, string, error) {
	var st unix.Stat_t
	exists := true
	switch err := unix.Fstatat(a.v.lowerFd, lowerRel(p), &st, unix.AT_SYMLINK_NOFOLLOW); err {
	case nil:
	case unix.ENOENT, unix.ENOTDIR:
		exists = false
	default:
		return false, "", err
	}
	b, err := a.base(p)
	if err != nil {
		return false, "", err
	}
	if b != nil {
		why := baseChange(b, exists, &st)
		return why != "", why, nil
	}
	for _, q := range ancestors(p) {
		b, err := a.base(q)
		if err != nil {
			return false, "", err
		}
		if b == nil {
			continue
		}
		if !b.Exists || b.Mode&unix.S_IFMT != unix.S_IFDIR {
			if exists {
				return true, "a file appeared in the project since the branch changed " + displayPath(q), nil
			}
			return false, "", nil
		}
		if exists && st.Ctim.Nano() >= b.Seen {
			return true, "changed in the project since the branch changed " + displayPath(q), nil
		}
		return false, "", nil
	}
	return false, "", nil // no base at all: nothing to tell by
}

// baseChange says how the lower inode (st; exists false when there is
// none) differs from base b, or "" when it does not.
func baseChange(b *branch.Base, exists bool, st *unix.Stat_t) string {
	switch {
	case !b.Exists && !exists:
		return ""
	case !b.Exists:
		return "a file appeared there in the project since the branch made it"
	case !exists:
		return "deleted in the project since the branch changed it"
	case b.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT || b.Dev != st.Dev || b.Ino != st.Ino:
		return "replaced in the project since the branch changed it"
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		if b.Mode != st.Mode || b.Uid != st.Uid || b.Gid != st.Gid {
			return "its mode or owner changed in the project since the branch changed it"
		}
		return ""
	case b.Size != st.Size || b.Mtime != st.Mtim.Nano() || b.Ctime != st.Ctim.Nano():
		return "modified in the project since the branch changed it"
	}
	return ""
}

// result lists the items by what became of them.
func (a *applier) result() ApplyResult {
	var r ApplyResult
	for _, it := range a.items {
		item := ApplyItem{Change: it.Change, Reason: it.reason, Bytes: it.bytes, Implied: it.implied, Hide: it.hide, Forced: it.forced}
		switch it.state {
		case stateApply, stateDone:
			if it.state == stateApply && a.o.DryRun && writesData(it) {
				item.Bytes = it.New.Size
			}
			r.Applied = append(r.Applied, item)
			r.Bytes += item.Bytes
		case stateConflict:
			r.Conflicts = append(r.Conflicts, item)
		case stateSkipped, stateFailed:
			r.Skipped = append(r.Skipped, item)
		}
	}
	return r
}
