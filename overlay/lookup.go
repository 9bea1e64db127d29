package overlay

import (
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// resolved is what a name in a directory stands for.
type resolved struct {
	path     string
	entry    *branch.Entry // upper inode (never a whiteout)
	whiteout bool          // the name is hidden by a whiteout
	lower    string        // lower path, when the name is a lower-only inode
	lowerSt  unix.Stat_t
	isLower  bool
}

func (r *resolved) exists() bool { return r.entry != nil || r.isLower }

func (r *resolved) mode() uint32 {
	if r.entry != nil {
		return typeMode(r.entry.Type)
	}
	return r.lowerSt.Mode & unix.S_IFMT
}

// resolveLocked looks name up in dir. v.mu is held.
func (v *FS) resolveLocked(dir *Node, name string) (resolved, error) {
	if dir.mode != unix.S_IFDIR {
		return resolved{}, unix.ENOTDIR
	}
	if len(name) > 255 {
		return resolved{}, unix.ENAMETOOLONG
	}
	dp, ok := dir.pathLocked()
	if !ok {
		return resolved{}, unix.ENOENT
	}
	r := resolved{path: joinPath(dp, name)}
	if e := v.indexGet(r.path); e != nil {
		if e.IsWhiteout() {
			r.whiteout = true
		} else {
			r.entry = e
		}
		return r, nil
	}
	if !dir.hasLower {
		return r, nil
	}
	lp := joinPath(dir.lower, name)
	if err := unix.Fstatat(v.lowerFd, lp, &r.lowerSt, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return r, nil
		}
		return r, err
	}
	if v.hidesLower(lp, &r.lowerSt) {
		r.lowerSt = unix.Stat_t{}
		return r, nil // a hidden project path does not exist in the view
	}
	r.lower, r.isLower = lp, true
	if r.lowerSt.Nlink > 1 && r.lowerSt.Mode&unix.S_IFMT == unix.S_IFREG {
		// Another name of this lower inode was copied up: this name is
		// the same (upper) file.
		if e := v.hardlinks[v.mapIno(&r.lowerSt)]; e != nil {
			r.entry, r.isLower = e, false
		}
	}
	return r, nil
}

// nodeForLocked returns the node for a resolved name, creating it if
// the kernel does not know it yet.
func (v *FS) nodeForLocked(dir *Node, name string, r *resolved, ref bool) *Node {
	if r.entry != nil {
		return v.nodeForEntryLocked(dir, name, r.entry, ref)
	}
	return v.nodeForLowerLocked(dir, name, r.lower, &r.lowerSt, ref)
}

// existingNodeLocked returns the node the kernel may hold for a resolved
// name, or nil.
func (v *FS) existingNodeLocked(r *resolved) *Node {
	v.nodesMu.Lock()
	defer v.nodesMu.Unlock()
	if r.entry != nil {
		return v.byObject[r.entry.Object]
	}
	if r.isLower {
		if n := v.byLower[r.lower]; n != nil || !sharedLower(&r.lowerSt) {
			return n
		}
		if n := v.byLowerIno[v.mapIno(&r.lowerSt)]; n != nil && n.entry == nil && !n.unlinked {
			return n
		}
	}
	return nil
}

// Lookup finds name in dir and returns its node (with one more kernel
// reference) and attributes.
func (v *FS) Lookup(dir *Node, name string) (*Node, unix.Stat_t, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	r, err := v.resolveLocked(dir, name)
	if err != nil {
		return nil, unix.Stat_t{}, err
	}
	if !r.exists() {
		return nil, unix.Stat_t{}, unix.ENOENT
	}
	n := v.nodeForLocked(dir, name, &r, true)
	st, err := v.statLocked(n)
	if err != nil {
		v.forgetLocked(n, 1)
		return nil, st, err
	}
	return n, st, nil
}

// Getattr returns the attributes of n.
func (v *FS) Getattr(n *Node) (unix.Stat_t, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.statLocked(n)
}

// statLocked stats n: the object for upper nodes (with the lower size
// for metacopy files), the lower inode otherwise.
func (v *FS) statLocked(n *Node) (unix.Stat_t, error) {
	var st unix.Stat_t
	var err error
	if n.object != "" {
		st, err = v.objs.Lstat(n.object)
		if err != nil {
			return st, err
		}
		v.shownCtime(n.object, &st)
		var lst unix.Stat_t
		lowerOK := false
		if e := n.entry; e != nil && e.Origin != "" {
			lowerOK = unix.Fstatat(v.lowerFd, lowerRel(e.Origin), &lst, unix.AT_SYMLINK_NOFOLLOW) == nil
		}
		if lowerOK && n.entry.Metacopy {
			st.Size, st.Blocks = lst.Size, lst.Blocks
		}
		switch n.mode {
		case unix.S_IFDIR:
			st.Nlink = v.dirNlinkLocked(n, &st)
		case unix.S_IFREG:
			links := int64(v.links[n.object]) - int64(v.anchors[n.ino])
			nl := links
			if lowerOK && lst.Nlink > 1 && links+int64(v.anchors[n.ino]) > 0 {
				// The lower names of a hard-linked file that still show
				// count too (all but the one copied up and the hidden).
				nl += int64(lst.Nlink) - 1 - int64(v.hiddenLinks[n.ino])
			}
			st.Nlink = uint64(max(nl, links, 0))
		default:
			st.Nlink = uint64(v.links[n.object])
		}
	} else {
		if err := unix.Fstatat(v.lowerFd, lowerRel(n.lower), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return st, err
		}
		if n.unlinked {
			st.Nlink = 0
		} else if st.Nlink > 1 && n.mode == unix.S_IFREG {
			st.Nlink = uint64(max(int64(st.Nlink)-int64(v.hiddenLinks[n.ino]), 1))
		} else if st.Nlink > 2 && n.mode == unix.S_IFDIR {
			st.Nlink = uint64(max(int64(st.Nlink)-int64(v.hiddenSubdirs(n.lower)), 2))
		}
	}
	st.Ino = n.ino
	return st, nil
}

// dirNlinkLocked is 2 plus the number of subdirectories in the merged
// view. For a merged directory it starts from the lower directory's
// count and corrects it by the upper names that add, hide or replace a
// subdirectory (overlayfs reports 1 here). A lower filesystem that does
// not count subdirectories (nlink 1, as btrfs) keeps reporting 1. The
// kernel asks after every change in a directory, so this is O(1) for
// directories without lower ones; a merged one costs an fstatat of its
// lower directory and a walk of the smaller of its (cached) lower
// subdirectories and its upper entries.
func (v *FS) dirNlinkLocked(n *Node, st *unix.Stat_t) uint64 {
	p, ok := n.pathLocked()
	if !ok {
		return 0
	}
	nl := int64(2) + int64(v.ndirs[p])
	if n.hasLower {
		var lst unix.Stat_t
		if err := unix.Fstatat(v.lowerFd, lowerRel(n.lower), &lst, unix.AT_SYMLINK_NOFOLLOW); err != nil || lst.Nlink < 2 {
			return 1
		}
		nl = int64(lst.Nlink) + int64(v.ndirs[p])
		if upper := v.dirs[p]; len(upper) > 0 {
			// Walk the smaller of the two: the kernel asks after each
			// change, and rm -rf of a big merged directory would
			// otherwise walk all its whiteouts at every unlink.
			subdirs := v.lowerSubdirsOf(n.lower)
			if len(subdirs) < len(upper) {
				for name, shown := range subdirs {
					if _, ok := upper[name]; ok && shown {
						nl-- // hidden or replaced by the upper entry
					}
				}
			} else {
				for name := range upper {
					if subdirs[name] {
						nl--
					}
				}
			}
		}
	}
	if n.hasLower {
		nl -= int64(v.hiddenSubdirs(n.lower))
	}
	return uint64(max(nl, 2))
}

// hiddenSubdirs counts the hidden subdirectories of lower directory lp
// (hide.go), which its st_nlink counts and the view does not show.
func (v *FS) hiddenSubdirs(lp string) int {
	if v.cfg.Hide.Empty() {
		return 0
	}
	k := 0
	for _, shown := range v.lowerSubdirsOf(lp) {
		if !shown {
			k++
		}
	}
	return k
}

// lowerSubdirsOf returns the names of the subdirectories of lower
// directory lp (cached): true for those shown, false for the hidden
// ones (hide.go).
func (v *FS) lowerSubdirsOf(lp string) map[string]bool {
	v.lowerSubdirsMu.Lock()
	defer v.lowerSubdirsMu.Unlock()
	if m, ok := v.lowerSubdirs[lp]; ok {
		return m
	}
	m := map[string]bool{}
	if f, err := v.openLower(lp, unix.O_RDONLY|unix.O_DIRECTORY); err == nil {
		ents, _ := f.ReadDir(-1)
		f.Close()
		for _, e := range ents {
			if e.IsDir() {
				m[e.Name()] = !v.cfg.Hide.Hidden(joinPath(lp, e.Name()), true)
			}
		}
	}
	v.lowerSubdirs[lp] = m
	return m
}

// LowerDirChanged tells the view that lower directory lp (relative to
// the lower root, "." for the root) changed from outside.
func (v *FS) LowerDirChanged(lp string) {
	if lp == "." {
		lp = ""
	}
	v.lowerSubdirsMu.Lock()
	delete(v.lowerSubdirs, lp)
	v.lowerSubdirsMu.Unlock()
}

// LowerDir returns the lower directory (relative to the lower root, "."
// for the root) whose entries show in directory n, if any.
func (v *FS) LowerDir(n *Node) (string, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if n.mode != unix.S_IFDIR || !n.hasLower {
		return "", false
	}
	return lowerRel(n.lower), true
}

// LowerChild reports what name in directory dir stands for, for a
// change to the lower directory made from outside the mount: shown is
// false when an upper entry decides the name (the mount changed it, so
// the lower change does not show); child is the node the kernel holds
// for the name, or nil.
func (v *FS) LowerChild(dir *Node, name string) (child *Node, shown bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	p, ok := dir.pathLocked()
	if !ok {
		return nil, false
	}
	if v.indexGet(joinPath(p, name)) != nil {
		return nil, false
	}
	if dir.hasLower {
		v.nodesMu.Lock()
		n := v.byLower[joinPath(dir.lower, name)]
		v.nodesMu.Unlock()
		if n != nil {
			n.capsUnknown() // its xattrs may have changed too
			return n, true
		}
	}
	r, err := v.resolveLocked(dir, name)
	if err != nil || !r.exists() {
		return nil, true
	}
	return v.existingNodeLocked(&r), true
}
