package overlay

import (
	"os"

	"golang.org/x/sys/unix"
)

// SetAttr lists the attribute changes of a setattr call; nil fields are
// left alone.
type SetAttr struct {
	Mode     *uint32
	Uid, Gid *uint32
	Size     *uint64
	Atime    *unix.Timespec // Nsec may be UTIME_NOW
	Mtime    *unix.Timespec
	// Ctime asks for a ctime change even when nothing else changes
	// (chown(-1, -1) does that).
	Ctime bool
}

// Setattr changes n's attributes. Metadata changes of lower files make
// a metacopy entry (no data copied); a size change copies the data up
// (none when truncating to zero). file, when not nil, is the handle the
// change came through (ftruncate).
func (v *FS) Setattr(n *Node, in SetAttr, file *File) (unix.Stat_t, error) {
	defer v.enterChange(n, "", nil, "")()
	return v.setattr(n, in, file)
}

// setattr is Setattr inside the change gate (gate.go).
func (v *FS) setattr(n *Node, in SetAttr, file *File) (unix.Stat_t, error) {
	changes := in.Size != nil || in.Mode != nil || in.Uid != nil || in.Gid != nil || in.Atime != nil || in.Mtime != nil || in.Ctime
	viaFile := in.Size != nil && file != nil && file.writable
	for {
		if in.Size != nil {
			if n.mode == unix.S_IFDIR {
				return unix.Stat_t{}, unix.EISDIR
			}
			if n.mode != unix.S_IFREG {
				return unix.Stat_t{}, unix.EINVAL
			}
			if err := v.copyUpData(n, *in.Size != 0); err != nil {
				return unix.Stat_t{}, err
			}
			if viaFile {
				// An open file's object is never shared with a
				// snapshot (Snapshot clones it for itself).
				if err := file.withFd(func(fd int) error { return v.truncate(n, fd, int64(*in.Size)) }); err != nil {
					return unix.Stat_t{}, err
				}
			}
		} else if changes {
			if err := v.copyUpMeta(n); err != nil {
				return unix.Stat_t{}, err
			}
		}
		// The object is changed under v.mu, and only while it is not
		// frozen: a snapshot taken since the thaw above shares it again,
		// and then it is thawed again.
		v.mu.RLock()
		if changes && v.frozenNodeLocked(n) && (!viaFile || in.Mode != nil || in.Uid != nil || in.Gid != nil || in.Atime != nil || in.Mtime != nil) {
			v.mu.RUnlock()
			continue
		}
		st, err := v.setattrLocked(n, in, viaFile)
		v.mu.RUnlock()
		return st, err
	}
}

// setattrLocked applies in to n's object, which is not frozen (the size
// only when not done already through a file: viaFile). v.mu is held.
func (v *FS) setattrLocked(n *Node, in SetAttr, viaFile bool) (unix.Stat_t, error) {
	if n.object == "" {
		return v.statLocked(n)
	}
	if in.Size != nil && !viaFile {
		f, err := v.objs.Open(n.object, unix.O_WRONLY)
		if err != nil {
			return unix.Stat_t{}, err
		}
		err = v.truncateLocked(n, int(f.Fd()), int64(*in.Size))
		f.Close()
		if err != nil {
			return unix.Stat_t{}, err
		}
	}
	loc := v.objs.Loc(n.object)
	if in.Uid != nil || in.Gid != nil {
		uid, gid := -1, -1
		if in.Uid != nil {
			uid = int(*in.Uid)
		}
		if in.Gid != nil {
			gid = int(*in.Gid)
		}
		if err := unix.Fchownat(loc.Dirfd, loc.Name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return unix.Stat_t{}, err
		}
	}
	if in.Mode != nil && n.mode != unix.S_IFLNK {
		if err := unix.Fchmodat(loc.Dirfd, loc.Name, *in.Mode&07777, 0); err != nil {
			return unix.Stat_t{}, err
		}
	}
	if in.Atime != nil || in.Mtime != nil {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if in.Atime != nil {
			ts[0] = *in.Atime
		}
		if in.Mtime != nil {
			ts[1] = *in.Mtime
		}
		if err := unix.UtimesNanoAt(loc.Dirfd, loc.Name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return unix.Stat_t{}, err
		}
	}
	if in.Ctime && in.Mode == nil && in.Uid == nil && in.Gid == nil && in.Atime == nil && in.Mtime == nil && in.Size == nil {
		if err := v.bumpCtime(n.object); err != nil {
			return unix.Stat_t{}, err
		}
	}
	return v.statLocked(n)
}

// Readlink returns a symlink's target.
func (v *FS) Readlink(n *Node) (string, error) {
	if n.mode != unix.S_IFLNK {
		return "", unix.EINVAL
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if n.object != "" {
		loc := v.objs.Loc(n.object)
		return readlinkat(loc.Dirfd, loc.Name)
	}
	return readlinkat(v.lowerFd, lowerRel(n.lower))
}

// xattrLocLocked returns the directory fd and name that name n's inode
// (not following a final symlink) for the *xattrAt calls.
func (v *FS) xattrLocLocked(n *Node) (int, string) {
	if n.object != "" {
		loc := v.objs.Loc(n.object)
		return loc.Dirfd, loc.Name
	}
	return v.lowerFd, lowerRel(n.lower)
}

// Getxattr reads an extended attribute into dest (size only when dest
// is empty).
func (v *FS) Getxattr(n *Node, name string, dest []byte) (int, error) {
	caps := name == capsXattr
	seen := n.caps.Load()
	if caps && seen&1 != 0 {
		return 0, unix.ENODATA
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.unmadeLocked(n) {
		return 0, unix.ENODATA
	}
	dirfd, file := v.xattrLocLocked(n)
	sz, err := getxattrAt(dirfd, file, name, dest)
	if caps && err == unix.ENODATA {
		n.knowNoCaps(seen)
	}
	return sz, err
}

// capsXattr is the xattr the kernel asks for before every write (to
// clear file capabilities): its absence is remembered per node, which
// spares the lookup; setting any xattr forgets it.
const capsXattr = "security.capability"

// Listxattr lists extended attribute names, NUL-separated.
func (v *FS) Listxattr(n *Node, dest []byte) (int, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.unmadeLocked(n) {
		return 0, nil
	}
	dirfd, file := v.xattrLocLocked(n)
	return listxattrAt(dirfd, file, dest)
}

// unmadeLocked reports whether n's object is deferred: not made yet
// (backstore/deferred.go), so with no xattrs. Reading them must not
// make it (ls -l reads two of every file).
func (v *FS) unmadeLocked(n *Node) bool {
	return n.object != "" && n.mode == unix.S_IFREG && v.objs.Deferred(n.object)
}

// Setxattr sets an extended attribute (copying the inode's metadata up).
func (v *FS) Setxattr(n *Node, name string, value []byte, flags int) error {
	defer v.enterChange(n, "", nil, "")()
	return v.setxattr(n, name, value, flags)
}

// setxattr is Setxattr inside the change gate (gate.go).
func (v *FS) setxattr(n *Node, name string, value []byte, flags int) error {
	return v.changeMeta(n, func() error {
		n.capsUnknown()
		defer n.capsUnknown() // a getxattr that raced with the change
		dirfd, file := v.xattrLocLocked(n)
		return setxattrAt(dirfd, file, name, value, flags)
	})
}

// changeMeta copies n's metadata up (thawing a frozen object) and runs
// change with v.mu held shared, once n's object is not frozen: a
// snapshot taken between the thaw and the change shares the object
// again, and then it is thawed again.
func (v *FS) changeMeta(n *Node, change func() error) error {
	for {
		if err := v.copyUpMeta(n); err != nil {
			return err
		}
		v.mu.RLock()
		if v.frozenNodeLocked(n) {
			v.mu.RUnlock()
			continue
		}
		err := change()
		v.mu.RUnlock()
		return err
	}
}

// Removexattr removes an extended attribute. A name the inode does not
// have fails with ENODATA without copying anything up.
func (v *FS) Removexattr(n *Node, name string) error {
	defer v.enterChange(n, "", nil, "")()
	return v.removexattr(n, name)
}

// removexattr is Removexattr inside the change gate (gate.go).
func (v *FS) removexattr(n *Node, name string) error {
	v.mu.RLock()
	if n.object == "" {
		dirfd, file := v.xattrLocLocked(n)
		_, err := getxattrAt(dirfd, file, name, nil)
		if err != nil {
			v.mu.RUnlock()
			return err
		}
	}
	v.mu.RUnlock()
	return v.changeMeta(n, func() error {
		dirfd, file := v.xattrLocLocked(n)
		return removexattrAt(dirfd, file, name)
	})
}

// Statfs reports the backstore's filesystem, where new data goes.
func (v *FS) Statfs() (unix.Statfs_t, error) {
	var st unix.Statfs_t
	err := unix.Statfs(v.objs.Info().Root, &st)
	if st.Namelen == 0 || st.Namelen > 255 {
		st.Namelen = 255
	}
	return st, err
}

var _ = os.Getpid

// A copy-up is not a change of the file: the copy shows the lower
// inode's ctime until something changes it (its own ctime moves on).
// The times live in memory only: after a remount a copied-up file
// shows the ctime of its copy.
type copyTimes struct{ copy, lower unix.Timespec }

// keepCtime records the ctime of object c.id, just made by a copy-up.
// Reading it makes the next change of the object get a distinct
// (fine-grained) timestamp, so a change right after the copy is seen.
func (v *FS) keepCtime(c copyRec) {
	st, err := v.objs.Lstat(c.id)
	if err != nil {
		return
	}
	v.ctimeMu.Lock()
	v.copyCtimes[c.id] = copyTimes{copy: st.Ctim, lower: c.lower}
	v.ctimeMu.Unlock()
}

// shownCtime puts the lower ctime in st, the stat of object id, while
// the object is unchanged since its copy-up.
func (v *FS) shownCtime(id string, st *unix.Stat_t) {
	v.ctimeMu.Lock()
	defer v.ctimeMu.Unlock()
	c, ok := v.copyCtimes[id]
	if !ok {
		return
	}
	if c.copy != st.Ctim {
		delete(v.copyCtimes, id) // changed since: its own ctime shows
		return
	}
	st.Ctim = c.lower
}

// forgetCtime drops what keepCtime recorded for an object that goes.
func (v *FS) forgetCtime(id string) {
	v.ctimeMu.Lock()
	delete(v.copyCtimes, id)
	v.ctimeMu.Unlock()
}
