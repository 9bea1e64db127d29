package backstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Options configure a backstore.
type Options struct {
	Kind           string // "hostfs" (default when "") or "ramdisk"
	Dir            string // directory owned by this backstore; Open creates what it needs below it
	RamdiskSize    int64  // ramdisk: tmpfs size limit in bytes (0 = 1 GiB)
	SpillThreshold int64  // ramdisk: objects known at creation to be larger go to Dir/spill (0 = 64 MiB)
}

// Info describes an open backstore.
type Info struct {
	Kind      string // "hostfs" | "ramdisk"
	Mode      string // "dir" (hostfs) | "tmpfs" (mounted ramdisk) | "shm" (/dev/shm fallback)
	Root      string // directory holding the (main) objects
	Reflink   bool   // FICLONE works within the store
	SizeLimit int64  // ramdisk: size of the tmpfs (of /dev/shm in Mode "shm"); 0 for hostfs
}

// Usage is what `agentfs status` reports.
type Usage struct {
	Objects int64 // number of objects
	Bytes   int64 // allocated bytes (st_blocks*512) of all objects
	FsFree  int64 // free bytes of the main backing filesystem (for unprivileged users)
	FsSize  int64 // size of the main backing filesystem
}

// Loc is the fd-relative location of an object: Dirfd is its shard
// directory (an O_PATH fd), Name its id. It is valid until Close.
type Loc struct {
	Dirfd int
	Name  string
}

const (
	defaultRamdiskSize    = 1 << 30
	defaultSpillThreshold = 64 << 20
)

var (
	// ErrBadKind is returned by Open for an unknown Options.Kind.
	ErrBadKind = errors.New("unknown backstore kind")
	// ErrBadID is returned for a string that is not an object id.
	ErrBadID = errors.New("not an object id")
)

// Store is an open backstore.
type Store struct {
	opts    Options
	info    Info
	root    bool  // running as root: set owners, copy all xattrs
	main    *part // where objects go by default
	spill   *part // ramdisk only: objects too big for the tmpfs
	mounted bool  // we mounted (or adopted) the tmpfs at info.Root
	shmDir  string
	pool    *pool       // idle objects in main (pool.go)
	crashed atomic.Bool // main held the open marker at Open, and Recovered was not called

	mu      sync.Mutex          // guards spilled
	spilled map[string]struct{} // ids of objects in spill

	// Pending objects (pending.go, fill.go): source is set before use.
	source Source
	// anyPending: the store has held a pending object since Open; until
	// then an open takes no lock for them (the common case).
	anyPending atomic.Bool
	pendMu     sync.Mutex
	pending    map[string]string      // id → the key of its bytes
	resume     map[string]resumePoint // id → where its next fill starts
	fills      map[string]*fill       // the fills under way
	readers    map[string]int         // id → its open Streams (fill.go)
	wants      map[string]int         // id → its callers waiting for it whole
	// deferred are the objects to be made at their first use
	// (deferred.go); anyDeferred: the store has held one since Open.
	deferred    map[string]*deferredObj
	anyDeferred atomic.Bool
	dev         uint64          // of the main part: a deferred object's st_dev
	blksize     int64           // and st_blksize
	closing     bool            // Close began: no new fill
	fillCtx     context.Context // cancelled at Close
	fillCancel  context.CancelCauseFunc
	fillWG      sync.WaitGroup // the fills' goroutines
	// jmu orders the journal lines of one object's fill and removal
	// (pending.go): taken before pendMu, held across the journal's
	// write.
	jmu sync.Mutex
}

// Open opens the backstore in o.Dir, creating what it needs. An
// existing store is reopened with its objects (for a ramdisk: the
// spilled ones, and those of a tmpfs still mounted at Dir/ramdisk).
func Open(o Options) (*Store, error) {
	if o.Kind == "" {
		o.Kind = "hostfs"
	}
	if o.RamdiskSize <= 0 {
		o.RamdiskSize = defaultRamdiskSize
	}
	if o.SpillThreshold <= 0 {
		o.SpillThreshold = defaultSpillThreshold
	}
	if o.Dir == "" {
		return nil, fmt.Errorf("backstore: no directory given: %w", unix.EINVAL)
	}
	if o.Kind != "hostfs" && o.Kind != "ramdisk" {
		return nil, fmt.Errorf("backstore kind %q: %w (use hostfs or ramdisk)", o.Kind, ErrBadKind)
	}
	if err := os.MkdirAll(o.Dir, 0700); err != nil {
		return nil, fmt.Errorf("backstore %s: %w", o.Dir, err)
	}
	s := &Store{opts: o, root: os.Geteuid() == 0, spilled: map[string]struct{}{}, pool: newPool()}
	s.fillCtx, s.fillCancel = context.WithCancelCause(context.Background())
	var err error
	if o.Kind == "hostfs" {
		s.info = Info{Kind: "hostfs", Mode: "dir", Root: filepath.Join(o.Dir, "objects")}
		s.main, err = openPart(s.info.Root)
	} else {
		err = s.openRamdisk()
	}
	if err == nil {
		var crashed bool
		crashed, err = s.main.markOpen()
		s.crashed.Store(crashed)
	}
	if err == nil {
		var st unix.Stat_t
		if err = unix.Fstat(s.main.rootfd, &st); err == nil {
			s.dev, s.blksize = st.Dev, st.Blksize
		}
	}
	if err == nil {
		err = s.loadPending()
	}
	if err != nil {
		_ = s.Close() // undoing what was made: the caller gets err
		return nil, err
	}
	s.info.Reflink = s.probeReflink()
	return s, nil
}

// openMarker is the name of the file that says, in the main part's
// root, that a Store has the part open: from Open to Close.
const openMarker = "open"

// markOpen makes the open marker of p, and reports whether it was there
// already: the Store that had p open last did not close it.
func (p *part) markOpen() (crashed bool, err error) {
	fd, err := unix.Openat(p.rootfd, openMarker, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0600)
	if err == unix.EEXIST {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("backstore %s: %s: %w", p.root, openMarker, err)
	}
	unix.Close(fd)
	return false, nil
}

// Crashed reports whether the store was not closed the last time it was
// open: whoever had it open died. It may then hold objects that nothing
// refers to, which nothing is using either: idle objects of the pool
// (pool.go) and the objects of changes never committed. A collection
// with a grace of -1 (Collect) removes them, before anything else uses
// the store; Recovered then says it is done. Until then the marker
// stays, Close included, so that a failed collection is tried again at
// the next Open.
func (s *Store) Crashed() bool { return s.crashed.Load() }

// Recovered records that what the crash Crashed reports left behind was
// collected: Close may remove the open marker.
func (s *Store) Recovered() { s.crashed.Store(false) }

// Close stops the pool and removes its idle objects and the open
// marker (kept while Crashed), closes the shard dirfds, then unmounts
// the tmpfs the store mounted (detaching it when busy) or removes its
// /dev/shm directory. Closing twice is harmless.
func (s *Store) Close() error {
	s.closeFills()
	s.closePool()
	if s.main != nil && s.main.rootfd >= 0 && !s.crashed.Load() {
		// A marker left makes the next Open report a crash, and its
		// caller collect unreferenced objects at once: safe.
		_ = unix.Unlinkat(s.main.rootfd, openMarker, 0)
	}
	s.main.close()
	s.spill.close()
	return s.closeRamdisk()
}

// Info describes the store.
func (s *Store) Info() Info { return s.info }

// part is one tree of objects: a root directory with 256 shards, each
// held open as an O_PATH dirfd once it exists. Open opens the shards a
// store has; a shard is made when the first object that belongs in it
// is (shard). Making all 256 at Open took 33 ms on ext4 here, most of
// a mount, and removing them 45 ms, most of the unmount of a private
// store; a session that changes a few files needs a few shards.
//
// Locking: mu serializes making shards; shards are read without it.
type part struct {
	root   string
	rootfd int
	mu     sync.Mutex
	shards [256]atomic.Int32 // O_PATH dirfd, -1 while the shard does not exist
}

// openPart opens (creating it when missing) root and the shards it
// has.
func openPart(root string) (*part, error) {
	p := &part{root: root, rootfd: -1}
	for i := range p.shards {
		p.shards[i].Store(-1)
	}
	if err := os.MkdirAll(root, 0700); err != nil {
		return nil, fmt.Errorf("backstore %s: %w", root, err)
	}
	var err error
	p.rootfd, err = unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("backstore %s: %w", root, err)
	}
	for i := range p.shards {
		fd, err := unix.Openat(p.rootfd, shardName(i), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			p.close()
			return nil, fmt.Errorf("backstore %s: shard %s: %w", root, shardName(i), err)
		}
		p.shards[i].Store(int32(fd))
	}
	p.removeLegacySpares()
	return p, nil
}

func shardName(i int) string { return fmt.Sprintf("%02x", i) }

// fsTopdirFL is FS_TOPDIR_FL (linux/fs.h), which x/sys/unix lacks.
const fsTopdirFL = 0x00020000

// SpreadChildren asks the filesystem to place each directory made in
// dir in a block group of its own choosing, as ext4 places top-level
// directories (the TOPDIR inode flag of its Orlov allocator), instead
// of in dir's group. Stores made one after another in dir (private
// stores) then do not make their objects where the store before them
// was just removed: ext4 without a journal does not reuse an inode
// freed in the last minute or more, and skips each such inode anew at
// every allocation in its group. A removed private store left some
// ten thousand of them in the group where the next store made all its
// objects, each of which then took 0.7-0.9 ms to make. Best effort:
// other filesystems have no such flag.
func SpreadChildren(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err == nil && flags&fsTopdirFL == 0 {
		_ = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsTopdirFL)) // best effort (above)
	}
}

// shard returns the dirfd of shard i, making the shard if it does not
// exist yet.
func (p *part) shard(i int) (int, error) {
	if fd := p.shards[i].Load(); fd >= 0 {
		return int(fd), nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if fd := p.shards[i].Load(); fd >= 0 {
		return int(fd), nil
	}
	if p.rootfd < 0 {
		return -1, fmt.Errorf("backstore %s: closed", p.root)
	}
	name := shardName(i)
	if err := unix.Mkdirat(p.rootfd, name, 0700); err != nil && err != unix.EEXIST {
		return -1, fmt.Errorf("backstore %s: shard %s: %w", p.root, name, err)
	}
	fd, err := unix.Openat(p.rootfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("backstore %s: shard %s: %w", p.root, name, err)
	}
	p.shards[i].Store(int32(fd))
	return fd, nil
}

func (p *part) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.shards {
		if fd := p.shards[i].Swap(-1); fd >= 0 {
			unix.Close(int(fd))
		}
	}
	if p.rootfd >= 0 {
		unix.Close(p.rootfd)
		p.rootfd = -1
	}
}

// ids lists the object ids in p, skipping names that are not ids.
func (p *part) ids(fn func(id string) error) error {
	for i := range p.shards {
		shard := int(p.shards[i].Load())
		if shard < 0 {
			continue // not made yet: no objects
		}
		fd, err := unix.Openat(shard, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("backstore %s: shard %02x: %w", p.root, i, err)
		}
		f := os.NewFile(uintptr(fd), fmt.Sprintf("%s/%02x", p.root, i))
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return fmt.Errorf("backstore %s: shard %02x: %w", p.root, i, err)
		}
		for _, name := range names {
			if shardOf(name) != i {
				continue
			}
			if err := fn(name); err != nil {
				return err
			}
		}
	}
	return nil
}
