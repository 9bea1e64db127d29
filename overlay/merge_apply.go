package overlay

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// ApplyMerge makes plan p's changes in view v (the branch the plan's
// ours showed), in path order, through v's own operations: each is an
// ordinary change of the branch. A file whose data changes is replaced
// by a new one (unlinked, then made again), as an editor saves: a
// program holding the old one open keeps it, and the kernel's pages of
// it are never served for the new one. It stops at the first error and
// says which path it was at; the caller undoes what was done before
// (the workspace restores the snapshot it took first).
//
// It holds the plan's paths from the check to the last change
// (gate.go): an operation of a program that would change one of them
// meanwhile waits, and the check sees every one made before; the rest
// of the branch stays open to programs.
//
// It returns what the kernel must drop (fs.Server.Invalidate): the
// name of every path it changed in its directory, the node now there
// (attributes), and the directories (their times and listings). The
// other nodes of the view stay as they are: a process whose working
// directory is in the branch keeps it.
func (v *FS) ApplyMerge(p *MergePlan) ([]Stale, error) {
	if v.ReadOnly() {
		return nil, unix.EROFS
	}
	// One change of the branch: no operation changes one of its paths
	// between the check and the last change (gate.go).
	defer v.holdPaths(p.heldPaths())()
	if err := v.checkMergeStamps(p); err != nil {
		return nil, err
	}
	if mergeCheckedHook != nil {
		mergeCheckedHook()
	}
	for i, op := range p.ops {
		if p.Step != nil {
			p.Step(i, len(p.ops))
		}
		var err error
		switch op.action {
		case MergeDelete:
			err = v.removeAllPath(op.path)
		case MergeTake:
			err = v.takePath(p.theirs, op.path)
		case MergeAttrs:
			err = v.setAttrsPath(op.path, op.attrs)
		case MergeLines, MergeMarkers:
			err = v.writePath(op.path, op.data)
		}
		if err != nil {
			return nil, fmt.Errorf("merge: %s (%s): %w", op.path, op.action, err)
		}
	}
	return v.MergeStale(p), nil
}

// heldPaths are the paths p changes, and those it removes or replaces
// whole (deep), for holdPaths.
func (p *MergePlan) heldPaths() (paths, deep []string) {
	for _, op := range p.ops {
		if op.action == MergeDelete || op.action == MergeTake {
			deep = append(deep, op.path)
		} else {
			paths = append(paths, op.path)
		}
	}
	return paths, deep
}

// checkMergeStamps fails with ErrMergeStale, before anything is
// changed, when a path p changes is not in v as it was in the plan's
// ours: written since, by a program bound to the branch, or, below a
// directory the plan removes, created since. Writing the plan over it
// would lose what the program wrote.
func (v *FS) checkMergeStamps(p *MergePlan) error {
	paths := make([]string, 0, len(p.ops))
	for _, op := range p.ops {
		paths = append(paths, op.path)
	}
	slices.SortFunc(paths, comparePaths)
	paths = slices.Compact(paths)
	stale := func(q string) error { return fmt.Errorf("merge: %s: %w", q, ErrMergeStale) }
	for _, q := range paths {
		want, ok := p.stamps[q]
		if !ok {
			continue // an op stamp left out (nothing done there)
		}
		n, st, err := v.lookupPath(q)
		if err != nil {
			return fmt.Errorf("merge: %s: %w", q, err)
		}
		if stampOf(n, &st) != want {
			v.release(n)
			return stale(q)
		}
		if n != nil && p.deep[q] {
			err = walkStamps(v, n, q, func(q string, c *Node, st *unix.Stat_t) error {
				if want, ok := p.stamps[q]; !ok || stampOf(c, st) != want {
					return stale(q)
				}
				return nil
			})
		}
		v.release(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// MergeStale lists what the kernel must drop after p was applied, or
// undone (UndoMerge): the paths of p as they are now.
func (v *FS) MergeStale(p *MergePlan) []Stale {
	var stale []Stale
	dirs := map[*Node]bool{}
	for _, op := range p.ops {
		dirPath, name := splitPath(op.path)
		dir, _, err := v.lookupPath(dirPath)
		if err != nil || dir == nil {
			continue // gone with a directory removed above it
		}
		n, _, err := v.lookupChild(dir, name)
		if err != nil || n == nil {
			n = dir // removed: its name is dropped, the directory's attributes too
		}
		stale = append(stale, Stale{Node: n, Parent: dir, Name: name})
		if !dirs[dir] {
			dirs[dir] = true
			stale = append(stale, Stale{Node: dir})
		}
		if n != dir {
			v.release(n)
		}
		v.release(dir)
	}
	return stale
}

// parentOf looks up the directory of path p; the caller releases it.
func (v *FS) parentOf(p string) (*Node, string, error) {
	dir, name := splitPath(p)
	n, _, err := v.lookupPath(dir)
	if err != nil {
		return nil, "", err
	}
	if n == nil || n.mode != unix.S_IFDIR {
		v.release(n)
		return nil, "", fmt.Errorf("the directory %q is missing: %w", dir, unix.ENOENT)
	}
	return n, name, nil
}

// removeAllPath removes p and, for a directory, everything in it; a
// path that is not there is no error.
func (v *FS) removeAllPath(p string) error {
	n, _, err := v.lookupPath(p)
	if err != nil || n == nil {
		return err
	}
	isDir := n.mode == unix.S_IFDIR
	var names []string
	if isDir {
		names, err = v.childNames(n)
	}
	v.release(n)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := v.removeAllPath(joinPath(p, name)); err != nil {
			return err
		}
	}
	dir, name, err := v.parentOf(p)
	if err != nil {
		return err
	}
	defer v.release(dir)
	if isDir {
		return v.rmdir(dir, name)
	}
	return v.unlink(dir, name)
}

// takePath makes p in v what it is in theirs: removed, or created (a
// directory's contents are other paths of the plan), or replaced; with
// theirs' mode, owner, times and xattrs.
func (v *FS) takePath(theirs *FS, p string) error {
	tn, tst, err := theirs.lookupPath(p)
	if err != nil {
		return err
	}
	if tn == nil {
		return v.removeAllPath(p)
	}
	defer theirs.release(tn)
	n, _, err := v.lookupPath(p)
	if err != nil {
		return err
	}
	if n != nil && (n.mode != tn.mode || n.mode != unix.S_IFDIR) {
		// Anything but a directory is made anew (see ApplyMerge).
		v.release(n)
		if err := v.removeAllPath(p); err != nil {
			return err
		}
		n = nil
	}
	if n == nil {
		if n, err = v.createLike(theirs, tn, &tst, p); err != nil {
			return err
		}
	}
	defer v.release(n)
	if n.mode == unix.S_IFREG {
		if err := v.copyData(theirs, tn, n); err != nil {
			return err
		}
	}
	if err := v.copyXattrs(theirs, tn, n); err != nil {
		return err
	}
	cur, err := v.Getattr(n)
	if err != nil {
		return err
	}
	in := SetAttr{}
	// Only what differs: a daemon that is not root cannot give an
	// object another owner, and need not when it already has it.
	if mode := tst.Mode; cur.Mode&07777 != mode&07777 {
		in.Mode = &mode
	}
	if uid, gid := tst.Uid, tst.Gid; cur.Uid != uid || cur.Gid != gid {
		in.Uid, in.Gid = &uid, &gid
	}
	if n.mode != unix.S_IFDIR {
		// A directory's times are its contents' business; a file takes
		// theirs' times, as cp -p would.
		at, mt := unix.Timespec(tst.Atim), unix.Timespec(tst.Mtim)
		in.Atime, in.Mtime = &at, &mt
	}
	_, err = v.setattr(n, in, nil)
	return err
}

// createLike creates p in v as the same type as theirs' tn (a regular
// file empty), and returns it with a lookup reference.
func (v *FS) createLike(theirs *FS, tn *Node, tst *unix.Stat_t, p string) (*Node, error) {
	dir, name, err := v.parentOf(p)
	if err != nil {
		return nil, err
	}
	defer v.release(dir)
	c := Caller{Uid: tst.Uid, Gid: tst.Gid}
	var n *Node
	switch tn.mode {
	case unix.S_IFDIR:
		n, _, err = v.mkdir(dir, name, tst.Mode&07777, c)
	case unix.S_IFREG:
		var f *File
		n, f, _, err = v.create(dir, name, unix.O_WRONLY|unix.O_EXCL, tst.Mode&07777, c)
		if err == nil {
			err = f.Release()
		}
	case unix.S_IFLNK:
		var target string
		if target, err = theirs.Readlink(tn); err == nil {
			n, _, err = v.symlink(dir, name, target, c)
		}
	default:
		n, _, err = v.mknod(dir, name, tst.Mode, tst.Rdev, c)
	}
	return n, err
}

// copyData writes theirs' data of tn into regular file n of v.
func (v *FS) copyData(theirs *FS, tn, n *Node) error {
	src, err := theirs.openData(tn)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := v.open(n, unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return err
	}
	_, err = io.Copy(&fileWriter{f: f}, io.NewSectionReader(src, 0, 1<<62))
	return errors.Join(err, f.Release())
}

// fileWriter writes a File from its start, as an io.Writer.
type fileWriter struct {
	f   *File
	off int64
}

// A short write is written on from where it stopped, as write(2)'s
// callers do: the next call says why it stopped (EDQUOT at a quota).
func (w *fileWriter) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		n, err := w.f.WriteAt(b[done:], w.off)
		w.off += int64(n)
		done += n
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, io.ErrShortWrite
		}
	}
	return done, nil
}

// copyXattrs gives n theirs' xattrs of tn (the user's: internal names
// are hidden from both), removing those theirs has not.
func (v *FS) copyXattrs(theirs *FS, tn, n *Node) error {
	want, err := theirs.xattrs(tn)
	if err != nil {
		return err
	}
	return v.setXattrs(n, want)
}

// setXattrs makes n's xattrs want (security.* ones it has are kept).
func (v *FS) setXattrs(n *Node, want map[string]string) error {
	have, err := v.xattrs(n)
	if err != nil {
		return err
	}
	for name, val := range want {
		if cur, ok := have[name]; ok && cur == val {
			continue
		}
		if err := v.setxattr(n, name, []byte(val), 0); err != nil {
			return fmt.Errorf("setting xattr %s: %w", name, err)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok && !strings.HasPrefix(name, "security.") {
			if err := v.removexattr(n, name); err != nil {
				return fmt.Errorf("removing xattr %s: %w", name, err)
			}
		}
	}
	return nil
}

// setAttrsPath sets p's mode, owner and (when a tells them) xattrs to
// a's.
func (v *FS) setAttrsPath(p string, as *attrSet) error {
	a := as.info
	n, _, err := v.lookupPath(p)
	if err != nil {
		return err
	}
	if n == nil {
		return unix.ENOENT
	}
	defer v.release(n)
	if as.x != nil {
		if err := v.setXattrs(n, as.x); err != nil {
			return err
		}
	}
	cur, err := v.Getattr(n)
	if err != nil {
		return err
	}
	in := SetAttr{}
	if mode := a.Mode; cur.Mode&07777 != mode&07777 {
		in.Mode = &mode
	}
	if uid, gid := a.Uid, a.Gid; cur.Uid != uid || cur.Gid != gid {
		in.Uid, in.Gid = &uid, &gid
	}
	if in.Mode == nil && in.Uid == nil {
		return nil
	}
	_, err = v.setattr(n, in, nil)
	return err
}

// writePath replaces regular file p with a new one holding the data of
// file src, with the old one's mode, owner and xattrs.
func (v *FS) writePath(p, src string) error {
	data, err := os.Open(src)
	if err != nil {
		return err
	}
	defer data.Close()
	old, st, err := v.lookupPath(p)
	if err != nil {
		return err
	}
	if old == nil {
		return unix.ENOENT
	}
	xattrs, err := v.xattrs(old)
	v.release(old)
	if err != nil {
		return err
	}
	if err := v.removeAllPath(p); err != nil {
		return err
	}
	dir, name, err := v.parentOf(p)
	if err != nil {
		return err
	}
	defer v.release(dir)
	n, f, _, err := v.create(dir, name, unix.O_WRONLY|unix.O_EXCL, st.Mode&07777, Caller{Uid: st.Uid, Gid: st.Gid})
	if err != nil {
		return err
	}
	defer v.release(n)
	_, err = io.Copy(&fileWriter{f: f}, data)
	if err = errors.Join(err, f.Release()); err != nil {
		return err
	}
	for name, val := range xattrs {
		if err := v.setxattr(n, name, []byte(val), 0); err != nil {
			return fmt.Errorf("setting xattr %s: %w", name, err)
		}
	}
	// The mode exactly (a create may have left out setid bits).
	if cur, err := v.Getattr(n); err != nil || cur.Mode&07777 == st.Mode&07777 {
		return err
	}
	mode := st.Mode
	_, err = v.setattr(n, SetAttr{Mode: &mode}, nil)
	return err
}
