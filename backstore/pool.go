package backstore

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// # Pool
//
// Making the inode is the slow part of making an object, and a FUSE
// create or mkdir waits for it: on ext4 it takes from 10 µs to nearly a
// millisecond (the allocator scans past recently freed inodes, which an
// ext4 without a journal will not reuse for some seconds, and the
// shards are spread over many block groups). Adding a name to a
// directory costs as much again on some machines: a linkat or a rename
// between directories took 24-38 µs on ext4 where an fstat took 1. So
// the store keeps idle objects: empty regular files and directories
// that lie in their shards under their ids like any object, but that
// nothing refers to, ready to be handed out as new objects.
//
//   - Made ahead: a goroutine, started by the first regular file object
//     (directory object) made in the main part, keeps at least poolSize
//     idle files (dirPoolSize idle directories), making new ones in
//     their shards under new ids.
//   - Recycled: a removed regular file or directory object of the main
//     part (Recycle) is emptied (truncated, stripped of its extended
//     attributes) and stays where it is, idle.
//
// A new object takes the last idle object of its kind (a recycled file
// before one made ahead) and keeps its id: no inode is made or freed and
// no name is added or removed. At most maxIdle objects of each kind are
// kept, the first idleFds files open. A new object gets the times of
// its creation, whatever its source. When nothing is idle (a burst
// outran the goroutine), the object is made on the spot. Against the
// spares this replaced (moved into a spare directory and back, a rename
// each way, and files made ahead unnamed, O_TMPFILE, then linked), untar
// of 11,478 files took 3.74 s instead of 4.64 s and 5,000 small files
// 2.18 s instead of 2.27 s (make bench, the two builds interleaved).
//
// Idle objects are no objects: Objects (and so Collect, Usage and
// fsck) skips them, and Close removes them. A daemon that dies leaves
// them as what they then are, empty objects that nothing refers to; the
// next Open says so (Crashed), and the daemon collects them before it
// serves. Open removes the spare directory a store made before idle
// objects may hold.
//
// Locking: pool.mu guards the flags, the idle lists and the set of
// idle ids. The goroutine holds no lock while it makes something.

// poolSize is how many idle files the goroutine keeps at least.
const poolSize = 64

// poolRefill: the goroutine is woken to make files again once fewer
// than this are idle. Waking it at every file taken would cost a thread
// switch per create; in batches it costs one per poolSize-poolRefill
// creates.
const poolRefill = poolSize / 2

// poolMode is the mode files are made ahead with (less the daemon's
// umask): that of most new files (0666 less a umask of 022), which then
// need no chmod.
const poolMode = 0644

// dirPoolSize is how many idle directories the goroutine keeps at least.
const dirPoolSize = 32

// maxIdle bounds the idle objects kept, of each kind. It is large
// because what a build or an installer removes it makes again (rm -rf
// node_modules, then npm install): each object reused is an inode
// neither freed nor allocated, and on a filesystem that is slow to
// reuse freed inodes an allocation costs far more than the emptying.
// An idle object costs an empty inode.
const maxIdle = 8192

// idleFds is how many idle files are kept open; the others are opened
// again by name when taken.
const idleFds = 256

// legacySpareDir is where stores made before idle objects kept their
// spares.
const legacySpareDir = "spare"

// poolRetry is how long the pool waits after failing to make a file
// (ENOSPC, EMFILE) before it tries again.
const poolRetry = 100 * time.Millisecond

// idleFile is an idle regular file: its id, a descriptor open O_RDWR
// (or -1: opened again by name when taken), and its mode and owner as
// far as known (known false: not known).
type idleFile struct {
	id       string
	fd       int
	known    bool
	mode     uint32 // with the file type bits
	uid, gid uint32
	made     bool // made ahead, not recycled
}

type pool struct {
	wake     chan struct{} // something was taken (capacity 1)
	stop     chan struct{} // closed by close
	done     chan struct{} // closed when fill returns
	used     atomic.Int64  // files made ahead taken (for tests)
	reused   atomic.Int64  // recycled files taken (for tests)
	dirsUsed atomic.Int64  // idle directories taken (for tests)

	mu        sync.Mutex
	started   bool
	closed    bool
	files     bool       // a regular file object was made: make files ahead
	dirs      bool       // a directory object was made: make directories ahead
	idleFiles []idleFile // recycled, taken first
	madeFiles []idleFile // made ahead
	openIdle  int        // idle files with fd >= 0
	idleDirs  []string   // idle directories
	ids       map[string]struct{}
	// collecting counts the collections running (Collect): while one
	// runs, Recycle removes what it is given instead of keeping it.
	collecting int
	// prepared counts the goroutines of Prepare; close waits for them.
	prepared sync.WaitGroup
}

func newPool() *pool {
	return &pool{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), ids: map[string]struct{}{}}
}

// wantLocked records that objects of one kind are made (files or
// directories), starts the goroutine that makes them ahead and wakes
// it; pool.mu is held.
func (s *Store) wantLocked(files bool) {
	pl := s.pool
	if files {
		pl.files = true
	} else {
		pl.dirs = true
	}
	if !pl.started && !pl.closed {
		pl.started = true
		go s.fill()
	}
	select {
	case pl.wake <- struct{}{}:
	default:
	}
}

// takeFile returns an idle file of part p, open O_RDWR and with the
// times of now, if one is kept. The first call starts the goroutine
// that makes them ahead.
//
// The file stays idle (unlisted) until its times are new: made or
// emptied a while ago, it would look to a collection running meanwhile
// like old garbage (Collect spares only unreferenced objects changed
// within its grace period, and the new object is unreferenced until the
// caller commits it).
func (s *Store) takeFile(p *part) (idleFile, bool) {
	if p != s.main || s.pool == nil {
		return idleFile{}, false
	}
	pl := s.pool
	for {
		pl.mu.Lock()
		if len(pl.idleFiles)+len(pl.madeFiles) <= poolRefill {
			s.wantLocked(true)
		}
		list := &pl.idleFiles
		if len(*list) == 0 {
			list = &pl.madeFiles
		}
		n := len(*list)
		if n == 0 {
			pl.mu.Unlock()
			return idleFile{}, false
		}
		f := (*list)[n-1]
		*list = (*list)[:n-1]
		if f.fd >= 0 {
			pl.openIdle--
		}
		pl.mu.Unlock()
		if err := s.wakeIdle(&f); err != nil {
			if f.fd >= 0 {
				unix.Close(f.fd)
			}
			// A file left is an empty object that nothing refers to,
			// once out of pool.ids: a collection removes it.
			_ = s.Remove(f.id)
			pl.mu.Lock()
			delete(pl.ids, f.id)
			pl.mu.Unlock()
			continue
		}
		pl.mu.Lock()
		delete(pl.ids, f.id)
		pl.mu.Unlock()
		if f.made {
			pl.used.Add(1)
		} else {
			pl.reused.Add(1)
		}
		return f, true
	}
}

// wakeIdle makes idle file f, taken from the lists, a new object: it is
// opened if it is not, and given the times of now.
func (s *Store) wakeIdle(f *idleFile) error {
	if f.fd < 0 {
		l := s.Loc(f.id)
		// A regular file: no O_NONBLOCK (which would make os.NewFile
		// try to poll it).
		fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f.fd = fd
	}
	now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	return unix.UtimesNanoAt(f.fd, "", now, unix.AT_EMPTY_PATH)
}

// takeDir returns an idle directory, with the times of now, if one is
// kept. The first call starts the goroutine that makes them ahead. As
// takeFile, it keeps the directory idle until its times are new.
func (s *Store) takeDir() (string, bool) {
	if s.pool == nil {
		return "", false
	}
	pl := s.pool
	for {
		pl.mu.Lock()
		n := len(pl.idleDirs)
		if n <= dirPoolSize/2 {
			s.wantLocked(false)
		}
		if n == 0 {
			pl.mu.Unlock()
			return "", false
		}
		id := pl.idleDirs[n-1]
		pl.idleDirs = pl.idleDirs[:n-1]
		pl.mu.Unlock()
		l := s.Loc(id)
		now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
		err := unix.UtimesNanoAt(l.Dirfd, l.Name, now, unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			// As in takeFile: a directory left is garbage that a
			// collection removes.
			_ = s.Remove(id)
		}
		pl.mu.Lock()
		delete(pl.ids, id)
		pl.mu.Unlock()
		if err == nil {
			pl.dirsUsed.Add(1)
			return id, true
		}
	}
}

// idle reports whether id is an idle object (no object: Objects skips
// it).
func (s *Store) idle(id string) bool {
	if s.pool == nil {
		return false
	}
	s.pool.mu.Lock()
	_, ok := s.pool.ids[id]
	s.pool.mu.Unlock()
	return ok
}

// IsIdle reports whether id is kept as an idle object (for tests).
func (s *Store) IsIdle(id string) bool { return s.idle(id) }

// fill keeps the pool full until close: idle files and directories in
// the main part's shards (each kind once an object of it was made).
func (s *Store) fill() {
	pl := s.pool
	defer close(pl.done)
	for {
		pl.mu.Lock()
		wantFile := pl.files && len(pl.idleFiles)+len(pl.madeFiles) < poolSize
		wantDir := pl.dirs && len(pl.idleDirs) < dirPoolSize
		pl.mu.Unlock()
		if !wantFile && !wantDir {
			select {
			case <-pl.wake:
				continue
			case <-pl.stop:
				return
			}
		}
		var err error
		if wantFile {
			err = s.makeIdle(false)
		}
		if wantDir && err == nil {
			err = s.makeIdle(true)
		}
		if err == errPoolClosed {
			return
		}
		if err != nil { // ENOSPC, EMFILE: try again later
			select {
			case <-pl.stop:
				return
			case <-time.After(poolRetry):
			}
		}
	}
}

var errPoolClosed = fmt.Errorf("backstore: the pool is closed")

// makeIdle makes one idle file (or directory) in its shard. Its id is
// idle before the name exists, so that Objects never lists it.
func (s *Store) makeIdle(dir bool) error {
	pl := s.pool
	for try := 0; ; try++ {
		id := newID()
		if s.Deferred(id) {
			continue // a deferred object's, which has no name yet
		}
		pl.mu.Lock()
		if pl.closed {
			pl.mu.Unlock()
			return errPoolClosed
		}
		pl.ids[id] = struct{}{}
		pl.mu.Unlock()
		fd := -1
		dirfd, err := s.main.shard(shardOf(id))
		if err == nil {
			if dir {
				err = unix.Mkdirat(dirfd, id, 0700)
			} else {
				fd, err = unix.Openat(dirfd, id, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, poolMode)
			}
		}
		if err != nil {
			pl.mu.Lock()
			delete(pl.ids, id)
			pl.mu.Unlock()
			if err == unix.EEXIST && try < maxCreateTries {
				continue
			}
			return err
		}
		// Not kept only when the pool closed meanwhile; an object that
		// then cannot be removed is garbage that a collection removes,
		// and this goroutine has no one to tell.
		if dir {
			_ = s.keepIdleDir(id)
			return nil
		}
		f := idleFile{id: id, fd: fd, made: true}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			f.known, f.mode, f.uid, f.gid = true, st.Mode, st.Uid, st.Gid
		}
		_ = s.keepIdleFile(f)
		return nil
	}
}

// keepIdleFile adds f (emptied, named in its shard, its id already in
// pool.ids) to the idle files (recycled or, with f.made, made ahead),
// or removes it when the pool is closed or holds maxIdle files of its
// list, returning the error of that removal.
func (s *Store) keepIdleFile(f idleFile) error {
	pl := s.pool
	list := &pl.idleFiles
	if f.made {
		list = &pl.madeFiles
	}
	pl.mu.Lock()
	kept := !pl.closed && len(*list) < maxIdle
	if kept {
		if f.fd >= 0 && pl.openIdle >= idleFds {
			unix.Close(f.fd)
			f.fd = -1
		}
		if f.fd >= 0 {
			pl.openIdle++
		}
		*list = append(*list, f)
	} else {
		delete(pl.ids, f.id)
	}
	pl.mu.Unlock()
	if !kept {
		if f.fd >= 0 {
			unix.Close(f.fd)
		}
		return s.Remove(f.id)
	}
	return nil
}

// keepIdleDir is keepIdleFile for directory id.
func (s *Store) keepIdleDir(id string) error {
	pl := s.pool
	pl.mu.Lock()
	kept := !pl.closed && len(pl.idleDirs) < maxIdle
	if kept {
		pl.idleDirs = append(pl.idleDirs, id)
	} else {
		delete(pl.ids, id)
	}
	pl.mu.Unlock()
	if !kept {
		return s.Remove(id)
	}
	return nil
}

// Recycle removes object id as Remove does, but keeps a regular file or
// a directory of the main part, emptied and idle, for the next new
// object of its kind (see the top of this file). The caller guarantees,
// as for Remove, that nothing refers to id any more. Recycling an idle
// object again does nothing.
//
// The id is idle (in pool.ids) from the start, so that a collection
// never takes it for garbage once it may be handed out again; and while
// a collection runs, which may have found it garbage already and be
// about to remove it, Recycle removes it itself. The error is that of
// the removal, when the object is removed instead of kept.
func (s *Store) Recycle(id string) (err error) {
	s.forgetPending(id)
	if s.pool == nil || shardOf(id) < 0 || s.spill != nil && s.isSpilled(id) {
		return s.Remove(id)
	}
	pl := s.pool
	pl.mu.Lock()
	_, idle := pl.ids[id]
	keep := !idle && !pl.closed && pl.collecting == 0
	if keep {
		pl.ids[id] = struct{}{}
	}
	pl.mu.Unlock()
	if idle {
		return nil
	}
	if !keep {
		return s.Remove(id)
	}
	handed := false // to keepIdleFile or keepIdleDir, which keep or remove it
	defer func() {
		if !handed {
			err = s.Remove(id) // every return below that does not hand id over returns nil
			pl.mu.Lock()
			delete(pl.ids, id)
			pl.mu.Unlock()
		}
	}()
	l := s.Loc(id)
	// The type first: opening a device node would run its driver's open
	// (as root), and a fifo's would block.
	var st unix.Stat_t
	if err := unix.Fstatat(l.Dirfd, l.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if s.emptyDirForReuse(l) {
			handed = true
			return s.keepIdleDir(id)
		}
		return nil
	case unix.S_IFREG:
	default:
		return nil // a symlink, fifo, socket or device node: removed
	}
	pl.mu.Lock()
	room := len(pl.idleFiles) < maxIdle
	pl.mu.Unlock()
	if !room {
		return nil
	}
	fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil // a file the daemon cannot write: removed
	}
	if !emptyForReuse(fd, l, &st) {
		unix.Close(fd)
		return nil
	}
	handed = true
	return s.keepIdleFile(idleFile{id: id, fd: fd, known: true, mode: st.Mode, uid: st.Uid, gid: st.Gid})
}

// emptyDirForReuse strips the directory object at l of its extended
// attributes, and reports whether it has none left. Directory objects
// are always empty (objects are never nested).
func (s *Store) emptyDirForReuse(l Loc) bool {
	fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return stripXattrs(fd)
}

// beginCollect and endCollect bracket a collection (see Recycle).
func (s *Store) beginCollect() {
	if s.pool != nil {
		s.pool.mu.Lock()
		s.pool.collecting++
		s.pool.mu.Unlock()
	}
}

func (s *Store) endCollect() {
	if s.pool != nil {
		s.pool.mu.Lock()
		s.pool.collecting--
		s.pool.mu.Unlock()
	}
}

// emptyForReuse truncates the regular file fd (at l) and removes its
// extended attributes; it reports false when fd is not a regular file
// with one name or cannot be emptied. It leaves fd's stat, once
// emptied, in st: a truncate by a daemon without CAP_FSETID clears the
// setuid and setgid bits.
//
// ext4 (unless mounted noauto_da_alloc) takes a truncate to size 0 for
// the start of a rewrite in place, and makes the next close of the file
// write its data out at once (auto_da_alloc): the new file that takes
// this object would be written to disk when its writer closes it, as no
// new native file is (even a truncate of an empty file does this). Any
// close of the inode ends that state, so one is made here, of a second
// open of the emptied file.
func emptyForReuse(fd int, l Loc, st *unix.Stat_t) bool {
	if unix.Fstat(fd, st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return false
	}
	if unix.Ftruncate(fd, 0) != nil {
		return false
	}
	if c, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(c)
	}
	return stripXattrs(fd) && unix.Fstat(fd, st) == nil
}

// stripXattrs removes the extended attributes of fd, and reports
// whether it has none left.
func stripXattrs(fd int) bool {
	buf := make([]byte, 1024)
	n, err := unix.Flistxattr(fd, buf)
	if err == unix.ERANGE {
		return false
	}
	if err != nil {
		return err == unix.ENOTSUP
	}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name != "" && unix.Fremovexattr(fd, name) != nil {
			return false
		}
	}
	return true
}

// removeLegacySpares empties and removes the spare directory a store
// made before idle objects may hold (what its daemon left there when it
// died, or all of it).
func (p *part) removeLegacySpares() {
	fd, err := unix.Openat(p.rootfd, legacySpareDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), p.root+"/"+legacySpareDir)
	names, _ := f.Readdirnames(-1)
	for _, name := range names {
		if unix.Unlinkat(fd, name, 0) == unix.EISDIR {
			_ = unix.Unlinkat(fd, name, unix.AT_REMOVEDIR) // best effort, as below
		}
	}
	f.Close()
	// Best effort: the spare directory is outside the shards, so what
	// is left in it is no object, and the next Open tries again.
	_ = unix.Unlinkat(p.rootfd, legacySpareDir, unix.AT_REMOVEDIR)
}

// closePool stops the goroutine and removes the idle objects. Closing
// twice is harmless.
func (s *Store) closePool() {
	pl := s.pool
	if pl == nil {
		return
	}
	pl.close()
	pl.mu.Lock()
	files, dirs := append(pl.idleFiles, pl.madeFiles...), pl.idleDirs
	pl.idleFiles, pl.madeFiles, pl.idleDirs, pl.openIdle = nil, nil, nil, 0
	clear(pl.ids)
	pl.mu.Unlock()
	for _, f := range files {
		if f.fd >= 0 {
			unix.Close(f.fd)
		}
	}
	if s.main == nil {
		return
	}
	// Best effort: an idle object left is an empty object that nothing
	// refers to, garbage that a collection (Collect) removes.
	for _, f := range files {
		_ = s.Remove(f.id)
	}
	for _, id := range dirs {
		_ = s.Remove(id)
	}
}

// close stops the goroutine. Closing twice is harmless.
func (pl *pool) close() {
	if pl == nil {
		return
	}
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		return
	}
	pl.closed = true
	started := pl.started
	pl.mu.Unlock()
	close(pl.stop)
	if started {
		<-pl.done
	}
	pl.prepared.Wait()
}

// Prepare makes up to n idle files ahead (beside the pool's usual few,
// at most maxIdle kept), on workers goroutines, and returns at once: for
// a caller about to make n file objects in a burst (a mount starting
// from a remote snapshot makes one per file), whose creates then take
// them rather than make each inode on the spot, while the goroutines
// make the next ones on the other CPUs.
func (s *Store) Prepare(n, workers int) {
	pl := s.pool
	pl.mu.Lock()
	n = min(n, maxIdle-len(pl.idleFiles)-len(pl.madeFiles))
	if pl.closed || n <= 0 || workers <= 0 {
		pl.mu.Unlock()
		return
	}
	pl.prepared.Add(workers)
	pl.mu.Unlock()
	var left atomic.Int64
	left.Store(int64(n))
	for range workers {
		go func() {
			defer pl.prepared.Done()
			for left.Add(-1) >= 0 {
				if s.makeIdle(false) != nil {
					return // closed, or ENOSPC: creates make their own
				}
			}
		}()
	}
}
