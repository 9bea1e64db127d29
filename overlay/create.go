package overlay

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// newInodeLocked creates a new upper inode named name in dir, made by
// mk with the owner the caller gets (setgid directories pass on their
// group, and their setgid bit to subdirectories). v.mu is held
// exclusively. It returns the node with one kernel reference.
func (v *FS) newInodeLocked(dir *Node, name string, c Caller, typ branch.Type,
	mk func(uid, gid int) (string, error)) (*Node, unix.Stat_t, error) {
	r, err := v.resolveLocked(dir, name)
	if err != nil {
		return nil, unix.Stat_t{}, err
	}
	if r.exists() {
		return nil, unix.Stat_t{}, unix.EEXIST
	}
	t := v.newTx()
	if err := v.copyUpDirLocked(t, dir); err != nil {
		return nil, unix.Stat_t{}, t.fail(err)
	}
	if err := v.needFilesLocked(); err != nil {
		return nil, unix.Stat_t{}, t.fail(err)
	}
	uid, gid := int(c.Uid), int(c.Gid)
	dst, err := v.objs.Lstat(t.objectOf(dir))
	if err != nil {
		return nil, unix.Stat_t{}, t.fail(err)
	}
	if dst.Mode&unix.S_ISGID != 0 {
		gid = int(dst.Gid)
	}
	id, err := mk(uid, gid)
	if err != nil {
		return nil, unix.Stat_t{}, t.fail(err)
	}
	t.made(id)
	if typ == branch.TypeDir && dst.Mode&unix.S_ISGID != 0 {
		st, err := v.objs.Lstat(id)
		if err == nil {
			loc := v.objs.Loc(id)
			err = unix.Fchmodat(loc.Dirfd, loc.Name, st.Mode&07777|unix.S_ISGID, 0)
		}
		if err != nil {
			return nil, unix.Stat_t{}, t.fail(err)
		}
	}
	ino, err := v.cfg.AllocIno()
	if err != nil {
		return nil, unix.Stat_t{}, t.fail(err)
	}
	e := &branch.Entry{Type: typ, Ino: ino, Object: id, Opaque: typ == branch.TypeDir}
	t.put(r.path, e) // replaces a whiteout in the same batch
	t.touch(dir)
	if err := t.commit(); err != nil {
		return nil, unix.Stat_t{}, err
	}
	n := v.nodeForEntryLocked(dir, name, e, true)
	if typ == branch.TypeFile {
		n.caps.Store(1) // a new object has no extended attributes
	}
	st, err := v.statLocked(n)
	if err != nil {
		v.forgetLocked(n, 1)
		return nil, st, err
	}
	return n, st, nil
}

// Mkdir creates a directory (opaque: nothing from lower shows through).
func (v *FS) Mkdir(dir *Node, name string, mode uint32, c Caller) (*Node, unix.Stat_t, error) {
	defer v.enterChange(dir, name, nil, "")()
	return v.mkdir(dir, name, mode, c)
}

// mkdir is Mkdir inside the change gate (gate.go).
func (v *FS) mkdir(dir *Node, name string, mode uint32, c Caller) (*Node, unix.Stat_t, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.newInodeLocked(dir, name, c, branch.TypeDir, func(uid, gid int) (string, error) {
		return v.objs.Mkdir(mode&07777, uid, gid)
	})
}

// Mknod creates a fifo, socket or device node (or a regular file).
func (v *FS) Mknod(dir *Node, name string, mode uint32, rdev uint64, c Caller) (*Node, unix.Stat_t, error) {
	defer v.enterChange(dir, name, nil, "")()
	return v.mknod(dir, name, mode, rdev, c)
}

// mknod is Mknod inside the change gate (gate.go).
func (v *FS) mknod(dir *Node, name string, mode uint32, rdev uint64, c Caller) (*Node, unix.Stat_t, error) {
	typ := modeType(mode)
	if typ == branch.TypeDir || typ == branch.TypeSymlink || typ == branch.TypeWhiteout {
		return nil, unix.Stat_t{}, unix.EINVAL
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.newInodeLocked(dir, name, c, typ, func(uid, gid int) (string, error) {
		if typ == branch.TypeFile {
			id, f, err := v.objs.CreateFile(mode&07777, uid, gid)
			if err == nil {
				f.Close()
			}
			return id, err
		}
		return v.objs.Mknod(mode, rdev, uid, gid)
	})
}

// Symlink creates a symbolic link to target.
func (v *FS) Symlink(dir *Node, name, target string, c Caller) (*Node, unix.Stat_t, error) {
	defer v.enterChange(dir, name, nil, "")()
	return v.symlink(dir, name, target, c)
}

// symlink is Symlink inside the change gate (gate.go).
func (v *FS) symlink(dir *Node, name, target string, c Caller) (*Node, unix.Stat_t, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.newInodeLocked(dir, name, c, branch.TypeSymlink, func(uid, gid int) (string, error) {
		return v.objs.Symlink(target, uid, gid)
	})
}

// Create creates and opens a regular file. When the name exists and
// O_EXCL is not set, it opens the existing file instead.
func (v *FS) Create(dir *Node, name string, flags int, mode uint32, c Caller) (*Node, *File, unix.Stat_t, error) {
	defer v.enterChange(dir, name, nil, "")()
	return v.create(dir, name, flags, mode, c)
}

// create is Create inside the change gate (gate.go).
func (v *FS) create(dir *Node, name string, flags int, mode uint32, c Caller) (*Node, *File, unix.Stat_t, error) {
	v.mu.Lock()
	var f *os.File
	n, st, err := v.newInodeLocked(dir, name, c, branch.TypeFile, func(uid, gid int) (string, error) {
		id, file, err := v.objs.CreateFile(mode&07777, uid, gid)
		f = file
		return id, err
	})
	if err == nil {
		// Still under v.mu: a snapshot must see this file as open for
		// writing (and give itself a clone), or not see it at all.
		if flags&unix.O_ACCMODE == unix.O_RDONLY {
			// The object was created read-write; a read-only handle
			// must not be able to write through passthrough.
			f.Close()
			if f, err = v.objs.Open(n.object, unix.O_RDONLY); err != nil {
				v.mu.Unlock()
				v.Forget(n, 1)
				return nil, nil, st, err
			}
		}
		file := v.newFile(n, f, true, flags)
		v.mu.Unlock()
		return n, file, st, nil
	}
	v.mu.Unlock()
	if err == unix.EEXIST && flags&unix.O_EXCL == 0 {
		var n *Node
		if n, _, err = v.Lookup(dir, name); err != nil {
			return nil, nil, unix.Stat_t{}, err
		}
		file, err := v.open(n, flags&^(unix.O_CREAT|unix.O_EXCL))
		if err != nil {
			v.Forget(n, 1)
			return nil, nil, unix.Stat_t{}, err
		}
		st, err := v.Getattr(n)
		return n, file, st, err
	}
	if f != nil {
		f.Close()
	}
	return nil, nil, st, err
}

// Adopt makes name in dir a new regular file whose object is id, a
// regular file object the caller made for it with its owner, mode,
// size and times (a deferred one: backstore.Store.Defer). The view
// owns id from the call on: when the name cannot be made, id is
// removed. Unlike Create, the owner is the object's, whatever dir's
// setgid bit says.
func (v *FS) Adopt(dir *Node, name string, id string) (*Node, unix.Stat_t, error) {
	defer v.enterChange(dir, name, nil, "")()
	v.mu.Lock()
	defer v.mu.Unlock()
	n, st, err := v.newInodeLocked(dir, name, Caller{}, branch.TypeFile, func(int, int) (string, error) {
		return id, nil
	})
	if err != nil {
		// Removed already when newInodeLocked failed after mk; a
		// missing object is no error.
		if rerr := v.objs.Remove(id); rerr != nil {
			v.log.Warn("removing object", "object", id, "err", rerr)
		}
	}
	return n, st, err
}

// AdoptFiles is Adopt for many new names in dir (names[i] gets object
// ids[i]) in one commit, dir's times touched once; it makes no node (a
// lookup makes one). On an error none of the names is made and every
// id is removed.
func (v *FS) AdoptFiles(dir *Node, names, ids []string) error {
	if len(names) != len(ids) {
		return unix.EINVAL
	}
	defer v.enterChanges(dir, names)()
	v.mu.Lock()
	err := v.adoptFilesLocked(dir, names, ids)
	v.mu.Unlock()
	if err != nil {
		for _, id := range ids { // a missing object is no error
			if rerr := v.objs.Remove(id); rerr != nil {
				v.log.Warn("removing object", "object", id, "err", rerr)
			}
		}
	}
	return err
}

// adoptFilesLocked is AdoptFiles under v.mu, held exclusively.
func (v *FS) adoptFilesLocked(dir *Node, names, ids []string) error {
	paths := make([]string, len(names))
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		r, err := v.resolveLocked(dir, name)
		if err != nil {
			return err
		}
		if r.exists() || seen[name] {
			return unix.EEXIST
		}
		seen[name], paths[i] = true, r.path
	}
	if l := v.quota.limits.Files; l > 0 && v.quota.files.Load()+int64(len(names)) > l {
		return errFilesQuota
	}
	t := v.newTx()
	if err := v.copyUpDirLocked(t, dir); err != nil {
		return t.fail(err)
	}
	var epoch uint64
	if v.layer != nil {
		epoch = v.layer.Epoch() // a new object belongs to no snapshot
	}
	for i, p := range paths {
		ino, err := v.cfg.AllocIno()
		if err != nil {
			return t.fail(err)
		}
		t.put(p, &branch.Entry{Type: branch.TypeFile, Ino: ino, Object: ids[i], Epoch: epoch})
	}
	for _, id := range ids { // after the puts, which look for each in t.created
		t.made(id)
	}
	t.touch(dir)
	return t.commit()
}

// Link makes a new name for n in dir. The file's data is copied up
// first: a hard link always joins two upper names.
func (v *FS) Link(n, dir *Node, name string) (unix.Stat_t, error) {
	defer v.enterChange(dir, name, nil, "")()
	return v.link(n, dir, name)
}

// link is Link inside the change gate (gate.go).
func (v *FS) link(n, dir *Node, name string) (unix.Stat_t, error) {
	if n.mode == unix.S_IFDIR {
		return unix.Stat_t{}, unix.EPERM
	}
	if err := v.copyUpData(n, true); err != nil {
		return unix.Stat_t{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if n.unlinked && v.links[n.object] == 0 && !n.tmpfile {
		return unix.Stat_t{}, unix.ENOENT
	}
	r, err := v.resolveLocked(dir, name)
	if err != nil {
		return unix.Stat_t{}, err
	}
	if r.exists() {
		return unix.Stat_t{}, unix.EEXIST
	}
	if n.unlinked && v.links[n.object] == 0 {
		// An O_TMPFILE file gets its first name: a new object of the
		// branch.
		if err := v.needFilesLocked(); err != nil {
			return unix.Stat_t{}, err
		}
		if err := v.needBytesLocked(n.object); err != nil {
			return unix.Stat_t{}, err
		}
	}
	t := v.newTx()
	if err := v.copyUpDirLocked(t, dir); err != nil {
		return unix.Stat_t{}, t.fail(err)
	}
	e := *n.entry
	t.put(r.path, &e)
	t.touch(dir)
	t.bump(n)
	if err := t.commit(); err != nil {
		return unix.Stat_t{}, err
	}
	if n.unlinked {
		n.unlinked, n.tmpfile, n.parent, n.name = false, false, dir, name
	}
	st, err := v.statLocked(n)
	if err == nil {
		v.Ref(n)
	}
	return st, err
}

// Tmpfile creates an unnamed regular file in dir (O_TMPFILE): it has no
// name until Link gives it one, and goes away when closed without one.
func (v *FS) Tmpfile(dir *Node, flags int, mode uint32, c Caller) (*Node, *File, unix.Stat_t, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if dir.mode != unix.S_IFDIR {
		return nil, nil, unix.Stat_t{}, unix.ENOTDIR
	}
	dp, err := v.objs.Lstat(dir.object)
	if dir.object == "" {
		err = unix.Fstatat(v.lowerFd, lowerRel(dir.lower), &dp, unix.AT_SYMLINK_NOFOLLOW)
	}
	if _, ok := dir.pathLocked(); !ok || err != nil {
		return nil, nil, unix.Stat_t{}, unix.ENOENT
	}
	if err := v.needFilesLocked(); err != nil {
		return nil, nil, unix.Stat_t{}, err
	}
	gid := int(c.Gid)
	if dp.Mode&unix.S_ISGID != 0 {
		gid = int(dp.Gid)
	}
	id, f, err := v.objs.CreateFile(mode&07777, int(c.Uid), gid)
	if err != nil {
		return nil, nil, unix.Stat_t{}, err
	}
	ino, err := v.cfg.AllocIno()
	if err != nil {
		f.Close()
		if rerr := v.objs.Remove(id); rerr != nil {
			v.log.Warn("removing object", "object", id, "err", rerr)
		}
		return nil, nil, unix.Stat_t{}, err
	}
	e := &branch.Entry{Type: branch.TypeFile, Ino: ino, Object: id}
	if v.layer != nil {
		e.Epoch = v.layer.Epoch()
	}
	n := &Node{ID: nextNodeID.Add(1), view: v, mode: unix.S_IFREG, ino: ino,
		entry: e, object: id, unlinked: true, tmpfile: true}
	n.caps.Store(1)
	v.nodesMu.Lock()
	v.byObject[id] = n
	n.lookups++
	v.nodesMu.Unlock()
	st, err := v.statLocked(n)
	return n, v.newFile(n, f, true, flags), st, err
}
