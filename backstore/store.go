package backstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Options configure a backstore.
type Options struct {
	Kind           string // "hostfs" (default) or "ramdisk"
	Dir            string // directory owned by the backstore
	RamdiskSize    int64  // ramdisk: tmpfs size limit (default 1 GiB)
	SpillThreshold int64  // ramdisk: larger objects go to disk (default 64 MiB)
}

// Info describes a backstore.
type Info struct {
	Kind      string // hostfs | ramdisk
	Mode      string // dir | tmpfs | shm
	Root      string // where objects live
	Reflink   bool   // FICLONE works within the store
	SizeLimit int64  // ramdisk size limit, 0 for hostfs
}

// Usage is what `agentfs status` reports.
type Usage struct {
	Objects int64
	Bytes   int64 // allocated bytes of all objects
	FsFree  int64 // free bytes of the main backing filesystem
	FsSize  int64
}

// Loc is the fd-relative location of an object.
type Loc struct {
	Dirfd int
	Name  string
}

// part is one directory tree of objects, with a dirfd per shard.
type part struct {
	root   string
	shards [256]int
}

// Store is an open backstore.
type Store struct {
	opts    Options
	info    Info
	main    *part
	spill   *part // ramdisk only
	mounted bool  // we mounted the tmpfs
	shmDir  string

	mu      sync.Mutex
	spilled map[string]bool
}

var ErrBadKind = errors.New("unknown backstore kind")

// Open opens (creating if needed) the backstore in o.Dir.
func Open(o Options) (*Store, error) {
	if o.Kind == "" {
		o.Kind = "hostfs"
	}
	if o.RamdiskSize <= 0 {
		o.RamdiskSize = 1 << 30
	}
	if o.SpillThreshold <= 0 {
		o.SpillThreshold = 64 << 20
	}
	if err := os.MkdirAll(o.Dir, 0700); err != nil {
		return nil, fmt.Errorf("backstore %s: %w", o.Dir, err)
	}
	s := &Store{opts: o, spilled: map[string]bool{}}
	var err error
	switch o.Kind {
	case "hostfs":
		s.info = Info{Kind: "hostfs", Mode: "dir", Root: filepath.Join(o.Dir, "objects")}
		s.main, err = openPart(s.info.Root)
	case "ramdisk":
		err = s.openRamdisk()
	default:
		return nil, fmt.Errorf("backstore kind %q: %w (use hostfs or ramdisk)", o.Kind, ErrBadKind)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	s.info.Reflink = s.probeReflink()
	return s, nil
}

func (s *Store) openRamdisk() error {
	root := filepath.Join(s.opts.Dir, "ramdisk")
	if err := os.MkdirAll(root, 0700); err != nil {
		return err
	}
	mode := "tmpfs"
	data := fmt.Sprintf("size=%d,mode=0700", s.opts.RamdiskSize)
	if err := unix.Mount("agentfs-ramdisk", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		if err != unix.EPERM {
			return fmt.Errorf("mounting the ramdisk at %s: %w", root, err)
		}
		// Not allowed to mount: a private directory in /dev/shm.
		shm, err := os.MkdirTemp("/dev/shm", "agentfs-")
		if err != nil {
			return fmt.Errorf("ramdisk: cannot mount a tmpfs (not root) nor use /dev/shm: %w", err)
		}
		root, mode, s.shmDir = shm, "shm", shm
	} else {
		s.mounted = true
	}
	s.info = Info{Kind: "ramdisk", Mode: mode, Root: root, SizeLimit: s.opts.RamdiskSize}
	var err error
	if s.main, err = openPart(root); err != nil {
		return err
	}
	if s.spill, err = openPart(filepath.Join(s.opts.Dir, "spill")); err != nil {
		return err
	}
	for i := range s.spill.shards {
		names, _ := readNames(s.spill.shards[i])
		for _, n := range names {
			s.spilled[n] = true
		}
	}
	return nil
}

func openPart(root string) (*part, error) {
	p := &part{root: root}
	for i := range p.shards {
		p.shards[i] = -1
	}
	for i := range p.shards {
		dir := filepath.Join(root, fmt.Sprintf("%02x", i))
		if err := os.MkdirAll(dir, 0700); err != nil {
			p.close()
			return nil, fmt.Errorf("backstore %s: %w", root, err)
		}
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("backstore %s: %w", dir, err)
		}
		p.shards[i] = fd
	}
	return p, nil
}

func (p *part) close() {
	if p == nil {
		return
	}
	for i, fd := range p.shards {
		if fd >= 0 {
			unix.Close(fd)
			p.shards[i] = -1
		}
	}
}

// Close closes the store; a tmpfs it mounted is unmounted (lazily when
// busy), a /dev/shm directory removed.
func (s *Store) Close() error {
	s.main.close()
	s.spill.close()
	var err error
	if s.mounted {
		if e := unix.Unmount(s.info.Root, 0); e != nil {
			if e2 := unix.Unmount(s.info.Root, unix.MNT_DETACH); e2 != nil {
				err = fmt.Errorf("unmounting the ramdisk %s: %w", s.info.Root, e2)
			}
		}
		s.mounted = false
	}
	if s.shmDir != "" {
		os.RemoveAll(s.shmDir)
		s.shmDir = ""
	}
	return err
}

// Info describes the store.
func (s *Store) Info() Info { return s.info }

func newID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

func shardOf(id string) int {
	if len(id) < 2 {
		return 0
	}
	var v int
	for _, c := range id[:2] {
		v <<= 4
		switch {
		case c >= '0' && c <= '9':
			v |= int(c - '0')
		case c >= 'a' && c <= 'f':
			v |= int(c-'a') + 10
		}
	}
	return v
}

// Loc returns the fd-relative location of an object.
func (s *Store) Loc(id string) Loc {
	p := s.main
	if s.spill != nil {
		s.mu.Lock()
		if s.spilled[id] {
			p = s.spill
		}
		s.mu.Unlock()
	}
	return Loc{Dirfd: p.shards[shardOf(id)], Name: id}
}

// partFor returns where a new object of the given size goes.
func (s *Store) partFor(size int64) *part {
	if s.spill != nil && size > s.opts.SpillThreshold {
		return s.spill
	}
	return s.main
}

// create makes a new object with mk, retrying on an id collision.
func (s *Store) create(p *part, mk func(dirfd int, name string) error) (string, error) {
	for {
		id := newID()
		err := mk(p.shards[shardOf(id)], id)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return "", err
		}
		if p == s.spill {
			s.mu.Lock()
			s.spilled[id] = true
			s.mu.Unlock()
		}
		return id, nil
	}
}

func chown(loc Loc, uid, gid int) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return unix.Fchownat(loc.Dirfd, loc.Name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
}

// setOwnerMode sets owner then mode (chown clears setuid/setgid).
func (s *Store) setOwnerMode(id string, mode uint32, uid, gid int) error {
	loc := s.Loc(id)
	if err := chown(loc, uid, gid); err != nil {
		return err
	}
	return unix.Fchmodat(loc.Dirfd, loc.Name, mode&07777, 0)
}

// CreateFile creates an empty regular file object, open read-write.
func (s *Store) CreateFile(mode uint32, uid, gid int) (string, *os.File, error) {
	return s.createFile(s.main, mode, uid, gid)
}

func (s *Store) createFile(p *part, mode uint32, uid, gid int) (string, *os.File, error) {
	var fd int
	id, err := s.create(p, func(dirfd int, name string) error {
		var err error
		fd, err = unix.Openat(dirfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0600)
		return err
	})
	if err != nil {
		return "", nil, err
	}
	f := os.NewFile(uintptr(fd), id)
	if err := s.setOwnerMode(id, mode, uid, gid); err != nil {
		f.Close()
		s.Remove(id)
		return "", nil, err
	}
	return id, f, nil
}

// Mkdir creates a directory object.
func (s *Store) Mkdir(mode uint32, uid, gid int) (string, error) {
	id, err := s.create(s.main, func(dirfd int, name string) error {
		return unix.Mkdirat(dirfd, name, 0700)
	})
	if err != nil {
		return "", err
	}
	if err := s.setOwnerMode(id, mode, uid, gid); err != nil {
		s.Remove(id)
		return "", err
	}
	return id, nil
}

// Symlink creates a symlink object.
func (s *Store) Symlink(target string, uid, gid int) (string, error) {
	id, err := s.create(s.main, func(dirfd int, name string) error {
		return unix.Symlinkat(target, dirfd, name)
	})
	if err != nil {
		return "", err
	}
	if err := chown(s.Loc(id), uid, gid); err != nil {
		s.Remove(id)
		return "", err
	}
	return id, nil
}

// Mknod creates a fifo, socket or device object; mode includes S_IF*.
func (s *Store) Mknod(mode uint32, rdev uint64, uid, gid int) (string, error) {
	id, err := s.create(s.main, func(dirfd int, name string) error {
		return unix.Mknodat(dirfd, name, mode&unix.S_IFMT|0600, int(rdev))
	})
	if err != nil {
		return "", err
	}
	if err := s.setOwnerMode(id, mode, uid, gid); err != nil {
		s.Remove(id)
		return "", err
	}
	return id, nil
}

// Open opens an object.
func (s *Store) Open(id string, flags int) (*os.File, error) {
	loc := s.Loc(id)
	fd, err := unix.Openat(loc.Dirfd, loc.Name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", id, err)
	}
	return os.NewFile(uintptr(fd), id), nil
}

// Lstat stats an object without following symlinks.
func (s *Store) Lstat(id string) (unix.Stat_t, error) {
	var st unix.Stat_t
	loc := s.Loc(id)
	err := unix.Fstatat(loc.Dirfd, loc.Name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// Remove deletes an object; a missing one is not an error.
func (s *Store) Remove(id string) error {
	loc := s.Loc(id)
	err := unix.Unlinkat(loc.Dirfd, loc.Name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(loc.Dirfd, loc.Name, unix.AT_REMOVEDIR)
	}
	if err == unix.ENOENT {
		err = nil
	}
	if err == nil && s.spill != nil {
		s.mu.Lock()
		delete(s.spilled, id)
		s.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("object %s: %w", id, err)
	}
	return nil
}

// Objects calls fn with every object id.
func (s *Store) Objects(fn func(id string) error) error {
	for _, p := range []*part{s.main, s.spill} {
		if p == nil {
			continue
		}
		for _, fd := range p.shards {
			names, err := readNames(fd)
			if err != nil {
				return err
			}
			for _, n := range names {
				if err := fn(n); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Usage counts the objects and their allocated bytes.
func (s *Store) Usage() (Usage, error) {
	var u Usage
	err := s.Objects(func(id string) error {
		st, err := s.Lstat(id)
		if err != nil {
			return nil // removed meanwhile
		}
		u.Objects++
		u.Bytes += st.Blocks * 512
		return nil
	})
	var fs unix.Statfs_t
	if e := unix.Statfs(s.info.Root, &fs); e == nil {
		u.FsFree = int64(fs.Bavail) * fs.Bsize
		u.FsSize = int64(fs.Blocks) * fs.Bsize
	}
	return u, err
}

func readNames(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "shard")
	defer f.Close()
	return f.Readdirnames(-1)
}
