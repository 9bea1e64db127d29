package backstore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// idLen is the length of an object id: 8 random bytes in hex.
const idLen = 16

// maxCreateTries bounds the retries on an id collision, which with 64
// random bits means something else is wrong.
const maxCreateTries = 8

func newID() string {
	var b [idLen / 2]byte
	rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

// shardOf returns the shard of id, or -1 when id is not an object id.
func shardOf(id string) int {
	if len(id) != idLen {
		return -1
	}
	v := 0
	for i := 0; i < idLen; i++ {
		c := id[i]
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		default:
			return -1
		}
		if i < 2 {
			v = v<<4 | d
		}
	}
	return v
}

// Loc returns the fd-relative location of an object, making a deferred
// object first (deferred.go; one that cannot be made gives
// {Dirfd: -1}). For a string that is not an object id it returns
// {Dirfd: -1, Name: ""}, on which every *at syscall fails (ENOENT or
// EBADF) instead of reaching some other file.
func (s *Store) Loc(id string) Loc {
	if s.made(id) != nil {
		return Loc{Dirfd: -1}
	}
	return s.locNoMake(id)
}

// locNoMake is Loc without making a deferred object: its location
// holds no name until it is made.
func (s *Store) locNoMake(id string) Loc {
	sh := shardOf(id)
	if sh < 0 {
		return Loc{Dirfd: -1}
	}
	p := s.main
	if s.spill != nil && s.isSpilled(id) {
		p = s.spill
	}
	// A shard not made yet holds no object: making it here keeps Loc
	// simple for callers (a lookup of a missing object fails ENOENT).
	fd, _ := p.shard(sh)
	return Loc{Dirfd: fd, Name: id}
}

// loc is Loc with an error for bad ids, and for a deferred object that
// cannot be made.
func (s *Store) loc(id string) (Loc, error) {
	if err := s.made(id); err != nil {
		return Loc{Dirfd: -1}, err
	}
	return s.locNoMakeErr(id)
}

// locNoMakeErr is locNoMake with an error for bad ids.
func (s *Store) locNoMakeErr(id string) (Loc, error) {
	l := s.locNoMake(id)
	if l.Dirfd < 0 {
		return l, fmt.Errorf("object %q: %w", id, ErrBadID)
	}
	return l, nil
}

func (s *Store) isSpilled(id string) bool {
	s.mu.Lock()
	_, ok := s.spilled[id]
	s.mu.Unlock()
	return ok
}

// partFor returns where a new object of the given size goes.
func (s *Store) partFor(size int64) *part {
	if s.spill != nil && size > s.opts.SpillThreshold {
		return s.spill
	}
	return s.main
}

// create makes a new object in p with mk, retrying with a new id when
// mk fails with EEXIST. what names the kind of object for errors.
func (s *Store) create(p *part, what string, mk func(dirfd int, name string) error) (string, error) {
	for try := 0; ; try++ {
		id := newID()
		if s.Deferred(id) {
			continue // a deferred object's, which has no name yet
		}
		dirfd, err := p.shard(shardOf(id))
		if err != nil {
			return "", fmt.Errorf("backstore: new %s: %w", what, err)
		}
		err = mk(dirfd, id)
		if err == unix.EEXIST && try < maxCreateTries {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("backstore: new %s: %w", what, err)
		}
		if p == s.spill {
			s.mu.Lock()
			s.spilled[id] = struct{}{}
			s.mu.Unlock()
		}
		return id, nil
	}
}

// undo removes an object whose creation failed half way.
func (s *Store) undo(id string) {
	_ = s.Remove(id) // best effort: the error that matters is the caller's
}

// CreateFile creates an empty regular file object and returns it open
// O_RDWR. Its mode is exactly mode&07777 (the umask does not apply);
// the owner is uid:gid when running as root and the caller's otherwise.
func (s *Store) CreateFile(mode uint32, uid, gid int) (string, *os.File, error) {
	return s.createFile(s.main, mode, uid, gid)
}

func (s *Store) createFile(p *part, mode uint32, uid, gid int) (string, *os.File, error) {
	if idle, ok := s.takeFile(p); ok {
		var have *unix.Stat_t
		if idle.known {
			have = &unix.Stat_t{Mode: idle.mode, Uid: idle.uid, Gid: idle.gid}
		}
		err := s.setOwnerMode(idle.fd, have, mode, uid, gid)
		f := os.NewFile(uintptr(idle.fd), idle.id)
		if err != nil {
			f.Close()
			s.undo(idle.id)
			return "", nil, fmt.Errorf("object %s: %w", idle.id, err)
		}
		return idle.id, f, nil
	}
	fd := -1
	id, err := s.create(p, "file", func(dirfd int, name string) error {
		var err error
		fd, err = unix.Openat(dirfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0600)
		return err
	})
	if err != nil {
		return "", nil, err
	}
	f := os.NewFile(uintptr(fd), id)
	if err := s.setOwnerMode(fd, nil, mode, uid, gid); err != nil {
		f.Close()
		s.undo(id)
		return "", nil, fmt.Errorf("object %s: %w", id, err)
	}
	return id, f, nil
}

// setOwnerMode gives the new regular file fd the owner uid:gid (as
// root; -1 keeps one) and the mode mode&07777, leaving out the calls
// that would change nothing: an idle file usually has both already.
// have is fd's mode and owner where known (nil: fd is stat'ed).
func (s *Store) setOwnerMode(fd int, have *unix.Stat_t, mode uint32, uid, gid int) error {
	var st unix.Stat_t
	if have != nil {
		st = *have
	} else if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if s.root && (uid >= 0 && uint32(uid) != st.Uid || gid >= 0 && uint32(gid) != st.Gid) {
		if err := unmappedOwner(unix.Fchown(fd, uid, gid)); err != nil {
			return err
		}
		// After chown, which clears setuid and setgid.
		return unix.Fchmod(fd, mode&07777)
	}
	if st.Mode&07777 == mode&07777 {
		return nil
	}
	return unix.Fchmod(fd, mode&07777)
}

// Mkdir creates a directory object with mode mode&07777 and, when
// running as root, owner uid:gid.
func (s *Store) Mkdir(mode uint32, uid, gid int) (string, error) {
	if id, ok := s.takeDir(); ok { // with the times of now
		return id, s.finishNew(id, true, mode, uid, gid)
	}
	id, err := s.create(s.main, "directory", func(dirfd int, name string) error {
		return unix.Mkdirat(dirfd, name, 0700)
	})
	if err != nil {
		return "", err
	}
	return id, s.finishNew(id, true, mode, uid, gid)
}

// Symlink creates a symlink object pointing to target, owned by
// uid:gid when running as root.
func (s *Store) Symlink(target string, uid, gid int) (string, error) {
	id, err := s.create(s.main, "symlink", func(dirfd int, name string) error {
		return unix.Symlinkat(target, dirfd, name)
	})
	if err != nil {
		return "", err
	}
	return id, s.finishNew(id, false, 0, uid, gid)
}

// Mknod creates a fifo, socket or device object; mode includes the
// S_IF* type, rdev is the device number of a device node.
func (s *Store) Mknod(mode uint32, rdev uint64, uid, gid int) (string, error) {
	id, err := s.create(s.main, "node", func(dirfd int, name string) error {
		return unix.Mknodat(dirfd, name, mode&unix.S_IFMT|0600, int(rdev))
	})
	if err != nil {
		return "", err
	}
	return id, s.finishNew(id, true, mode, uid, gid)
}

// finishNew sets the owner and (when chmod) the mode of a new object,
// removing it on failure.
func (s *Store) finishNew(id string, chmod bool, mode uint32, uid, gid int) error {
	l := s.Loc(id)
	var err error
	if s.root && (uid >= 0 || gid >= 0) {
		err = unmappedOwner(unix.Fchownat(l.Dirfd, l.Name, uid, gid, unix.AT_SYMLINK_NOFOLLOW))
	}
	if err == nil && chmod {
		// The object is ours and not a symlink: following is safe.
		err = unix.Fchmodat(l.Dirfd, l.Name, mode&07777, 0)
	}
	if err != nil {
		s.undo(id)
		return fmt.Errorf("object %s: %w", id, err)
	}
	return nil
}

// Open opens an object with openat(flags|O_NOFOLLOW|O_CLOEXEC). It
// never creates one: O_CREAT is dropped from flags.
func (s *Store) Open(id string, flags int) (*os.File, error) {
	l, err := s.loc(id)
	if err != nil {
		return nil, err
	}
	if err := s.ready(id); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(l.Dirfd, l.Name, flags&^unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("object %s: open: %w", id, err)
	}
	return os.NewFile(uintptr(fd), id), nil
}

// Lstat stats an object without following symlinks; a deferred object
// not made yet is stat'ed from its record (deferred.go). Errors are the
// bare errno of fstatat (ENOENT for a missing object); a string that
// is not an object id gives an error wrapping ErrBadID.
func (s *Store) Lstat(id string) (unix.Stat_t, error) {
	// A record stands for an object with no name (Open drops those
	// of the objects a crash left made, and a making drops its own once
	// named): no fstatat.
	if d, ok := s.record(id); ok {
		return s.deferredStat(&d), nil
	}
	var st unix.Stat_t
	l, err := s.locNoMakeErr(id)
	if err != nil {
		return st, err
	}
	err = unix.Fstatat(l.Dirfd, l.Name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// Remove deletes an object: unlink, or rmdir for a directory (which is
// always empty: objects are never nested). A missing object is not an
// error.
func (s *Store) Remove(id string) error {
	if err := s.removeName(id); err != nil {
		return err
	}
	s.forgetPending(id)
	return nil
}

// removeName is Remove but for the journal of pending objects.
func (s *Store) removeName(id string) error {
	l, err := s.locNoMakeErr(id)
	if err != nil {
		return err
	}
	err = unix.Unlinkat(l.Dirfd, l.Name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(l.Dirfd, l.Name, unix.AT_REMOVEDIR)
	}
	if err != nil && err != unix.ENOENT {
		return fmt.Errorf("object %s: remove: %w", id, err)
	}
	if s.spill != nil {
		s.mu.Lock()
		delete(s.spilled, id)
		s.mu.Unlock()
	}
	return nil
}

// Objects calls fn with the id of every object, spilled ones and
// deferred ones (deferred.go) included, and stops at the first error fn
// returns. Names in the shards that are not object ids, and idle
// objects (pool.go), are skipped. An object made or removed meanwhile
// may be listed or not, but never twice.
func (s *Store) Objects(fn func(id string) error) error {
	deferred := s.deferredIDs() // before the names: one made meanwhile has one
	for _, p := range []*part{s.main, s.spill} {
		if p == nil {
			continue
		}
		err := p.ids(func(id string) error {
			if s.idle(id) {
				return nil // no object (pool.go)
			}
			delete(deferred, id)
			return fn(id)
		})
		if err != nil {
			return err
		}
	}
	for id := range deferred {
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}

// Usage counts the objects and the bytes they allocate, walking all of
// them, and reports the size and free space of the main backing
// filesystem.
func (s *Store) Usage() (Usage, error) {
	var u Usage
	err := s.ListObjects(func(_ string, bytes int64) error {
		u.Objects++
		u.Bytes += bytes
		return nil
	})
	if err != nil {
		return u, err
	}
	var statfs unix.Statfs_t
	if err := unix.Fstatfs(s.main.rootfd, &statfs); err != nil {
		return u, fmt.Errorf("backstore %s: statfs: %w", s.main.root, err)
	}
	bsize := statfs.Frsize
	if bsize == 0 {
		bsize = statfs.Bsize
	}
	u.FsFree = int64(statfs.Bavail) * bsize
	u.FsSize = int64(statfs.Blocks) * bsize
	return u, nil
}

// FsFree returns the bytes free to an unprivileged user on the file
// system of the store's main part (statfs, cheap: Usage also counts the
// objects).
func (s *Store) FsFree() (int64, error) {
	var statfs unix.Statfs_t
	if err := unix.Fstatfs(s.main.rootfd, &statfs); err != nil {
		return 0, fmt.Errorf("backstore %s: statfs: %w", s.main.root, err)
	}
	bsize := statfs.Frsize
	if bsize == 0 {
		bsize = statfs.Bsize
	}
	return int64(statfs.Bavail) * bsize, nil
}

// SyncData makes object id's data durable (fdatasync).
func (s *Store) SyncData(id string) error {
	f, err := s.Open(id, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("object %s: fdatasync: %w", id, err)
	}
	return nil
}
