package overlay

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// # Walking a view for others
//
// Walk hands every path of a view to a caller outside this package
// (the content hashes and Merkle roots of package contenthash), as
// Export sees it: the same names (the control file's left out), the
// same attributes, and for each regular file where its data lives, so
// that the caller can cache what it computes from an object (which a
// snapshot never changes) or from a project file (by its identity).

// WalkEntry is one path of a view, as Walk reports it.
type WalkEntry struct {
	// Path is the path in the view, "" for the root.
	Path string
	// Stat is what the view shows for the path (Getattr).
	Stat unix.Stat_t
	// Target is a symlink's target.
	Target string
	// Object is, for a regular file whose data is an object, its id.
	Object string
	// Lower is, for a regular file whose data is the project's file
	// (not copied up, or a metacopy), that file's lower path, and
	// LowerStat its own lstat (the project's device and inode).
	Lower     string
	LowerStat unix.Stat_t
	// Missing: a snapshot lists the path, but it cannot be looked up
	// (its object is gone from the store); nothing else is set.
	Missing bool

	v *FS
	n *Node
}

// OpenData opens a regular file's data read-only, without changing its
// atime. Valid only during the Walk callback that was given e.
func (e *WalkEntry) OpenData() (*os.File, error) {
	if e.n == nil || e.n.mode != unix.S_IFREG {
		return nil, fmt.Errorf("%s: not a regular file", e.Path)
	}
	return e.v.openData(e.n)
}

// Walk calls fn for every path of view v, parents before their
// children, depth first, the names of a directory in byte order: the
// root first (Path ""). A path removed while the walk runs is skipped;
// in a snapshot, which never changes, a path listed that cannot be
// looked up (its object gone) is reported with Missing set.
func Walk(v *FS, fn func(e *WalkEntry) error) error {
	root, st, err := v.lookupPath("")
	if err != nil {
		return fmt.Errorf("walk: %w", err)
	}
	return v.walkNode(root, &st, "", fn)
}

func (v *FS) walkNode(n *Node, st *unix.Stat_t, p string, fn func(e *WalkEntry) error) error {
	e := &WalkEntry{Path: p, Stat: *st, v: v, n: n}
	switch n.mode {
	case unix.S_IFLNK:
		t, err := v.Readlink(n)
		if err != nil {
			return fmt.Errorf("walk %s: %w", p, err)
		}
		e.Target = t
	case unix.S_IFREG:
		obj, lower := v.dataOf(n)
		if obj != "" {
			e.Object = obj
		} else {
			e.Lower = lower
			if err := unix.Fstatat(v.lowerFd, lowerRel(lower), &e.LowerStat, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("walk %s: the project's file %s: %w", p, lower, err)
			}
		}
	}
	if err := fn(e); err != nil {
		return err
	}
	if n.mode != unix.S_IFDIR {
		return nil
	}
	names, err := v.childNames(n)
	if err != nil {
		return fmt.Errorf("walk %s: %w", p, err)
	}
	for _, name := range names {
		c, cst, err := v.lookupChild(n, name)
		cp := joinPath(p, name)
		if err != nil {
			return fmt.Errorf("walk %s: %w", cp, err)
		}
		if c == nil {
			if v.cfg.Snapshot != nil {
				// A snapshot never changes: a name it lists and cannot
				// look up has lost its object.
				if err := fn(&WalkEntry{Path: cp, Missing: true, v: v}); err != nil {
					return err
				}
			}
			continue // removed meanwhile
		}
		err = v.walkNode(c, &cst, cp, fn)
		v.release(c)
		if err != nil {
			return err
		}
	}
	return nil
}
