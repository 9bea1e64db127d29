package backstore

import (
	"os"
	"slices"
	"strconv"
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
// shards are spread over many block groups). So the store makes objects
// ahead of need and reuses removed ones:
//
//   - Unnamed files: a goroutine, started by the first regular file
//     object made in the main part, keeps up to poolSize unnamed files
//     (O_TMPFILE, mode poolMode, open O_RDWR); a new file object takes one
//     and names it in its shard with linkat. They have no name, so a
//     daemon that dies leaves none behind.
//   - Spares: a removed regular file or directory object of the main
//     part (Recycle) is emptied (truncated, stripped of its extended
//     attributes) and moved into the part's spare directory, the first
//     spareFds of them kept open; the same goroutine, once a directory object was made,
//     keeps dirPoolSize empty directories there. A new object takes a
//     spare of its kind first and moves it back into its shard under
//     its id (renameat2 RENAME_NOREPLACE): no inode is made or freed.
//     At most maxSpares of each kind are kept.
//
// The spare directory is no shard, so Objects, Collect and fsck never
// see spares; Close removes them, and Open removes those a daemon that
// died left. A new object gets the times of its creation, whatever its
// source. When nothing is ready (a burst outran the goroutine, or the
// filesystem has no O_TMPFILE), the object is made on the spot.
//
// Locking: pool.mu guards the flags and the spare lists; fds is a
// channel. The goroutine holds no lock while it makes something.

// poolSize is how many unnamed files the pool keeps ready.
const poolSize = 64

// poolRefill: the goroutine is woken to fill the pool up again once it
// holds fewer unnamed files than this. Waking it at every file taken
// would cost a thread switch per create; in batches it costs one per
// poolSize-poolRefill creates.
const poolRefill = poolSize / 2

// poolMode is the mode the pool's unnamed files are made with (less the
// daemon's umask): that of most new files (0666 less a umask of 022),
// which then need no chmod.
const poolMode = 0644

// dirPoolSize is how many empty directories the pool makes ahead.
const dirPoolSize = 32

// maxSpares bounds the recycled objects kept, of each kind. It is large
// because what a build or an installer removes it makes again (rm -rf
// node_modules, then npm install): each spare reused is an inode neither
// freed nor allocated, and on a filesystem that is slow to reuse freed
// inodes an allocation costs far more than the rename. A spare costs an
// empty inode.
const maxSpares = 8192

// spareFds is how many spare files are kept open; the others are
// opened again by name when taken.
const spareFds = 256

// spareDir is the name of a part's spare directory.
const spareDir = "spare"

// poolRetry is how long the pool waits after failing to make a file
// (ENOSPC, EMFILE) before it tries again.
const poolRetry = 100 * time.Millisecond

// spare is an emptied regular file: its name in the spare directory
// (the id it had, and gets again), and a descriptor open O_RDWR.
type spare struct {
	id string
	fd int
}

type pool struct {
	fds      chan int      // unnamed files, open O_RDWR
	wake     chan struct{} // something was taken (capacity 1)
	stop     chan struct{} // closed by close
	done     chan struct{} // closed when fill returns
	used     atomic.Int64  // unnamed files taken (for tests)
	reused   atomic.Int64  // spare files taken (for tests)
	dirsUsed atomic.Int64  // spare directories taken (for tests)

	mu        sync.Mutex
	started   bool
	closed    bool
	files     bool     // a regular file object was made: keep unnamed files
	dirs      bool     // a directory object was made: keep directories
	spares    []spare  // spare files
	spareFds  int      // spares with fd >= 0
	spareDirs []string // spare directories
}

func newPool() *pool {
	return &pool{fds: make(chan int, poolSize), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
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

// take returns an unnamed file of part p, or -1 when there is none
// ready. The first call starts the goroutine that fills the pool.
func (s *Store) take(p *part) int {
	if p != s.main || s.pool == nil {
		return -1
	}
	fd := -1
	select {
	case fd = <-s.pool.fds:
		s.pool.used.Add(1)
	default:
	}
	if fd < 0 || len(s.pool.fds) < poolRefill {
		s.pool.mu.Lock()
		s.wantLocked(true)
		s.pool.mu.Unlock()
	}
	return fd
}

// takeSpare returns a spare file of part p, named again as its id in
// its shard, if one is kept.
func (s *Store) takeSpare(p *part) (spare, bool) {
	if p != s.main || s.pool == nil {
		return spare{}, false
	}
	pl := s.pool
	for {
		pl.mu.Lock()
		n := len(pl.spares)
		if n == 0 {
			pl.mu.Unlock()
			return spare{}, false
		}
		sp := pl.spares[n-1]
		pl.spares = pl.spares[:n-1]
		if sp.fd >= 0 {
			pl.spareFds--
		}
		pl.mu.Unlock()
		if s.unspare(sp.id) == nil {
			if sp.fd < 0 {
				l := s.Loc(sp.id)
				// A spare is a regular file: no O_NONBLOCK (which
				// would make os.NewFile try to poll it).
				fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
				if err != nil {
					s.Remove(sp.id)
					continue
				}
				sp.fd = fd
			}
			pl.reused.Add(1)
			return sp, true
		}
		if sp.fd >= 0 {
			unix.Close(sp.fd)
		}
	}
}

// takeDir returns a spare directory, named again as its id in its
// shard, if one is ready. The first call starts the goroutine that
// makes them.
func (s *Store) takeDir() (string, bool) {
	if s.pool == nil {
		return "", false
	}
	pl := s.pool
	for {
		pl.mu.Lock()
		s.wantLocked(false)
		n := len(pl.spareDirs)
		if n == 0 {
			pl.mu.Unlock()
			return "", false
		}
		id := pl.spareDirs[n-1]
		pl.spareDirs = pl.spareDirs[:n-1]
		pl.mu.Unlock()
		if s.unspare(id) == nil {
			pl.dirsUsed.Add(1)
			return id, true
		}
	}
}

// unspare moves spare id from the main part's spare directory back into
// its shard.
func (s *Store) unspare(id string) error {
	return unix.Renameat2(s.main.sparefd, id, s.main.shards[shardOf(id)], id, unix.RENAME_NOREPLACE)
}

// IsSpare reports whether id is kept as a spare (for tests).
func (s *Store) IsSpare(id string) bool {
	if s.pool == nil {
		return false
	}
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return slices.Contains(s.pool.spareDirs, id) || slices.ContainsFunc(s.pool.spares, func(sp spare) bool { return sp.id == id })
}

// fill keeps the pool full until close: unnamed files in the main
// part's root (once a file object was made; it gives up on them where
// O_TMPFILE is not supported) and empty directories in its spare
// directory (once a directory object was made).
func (s *Store) fill() {
	pl := s.pool
	defer close(pl.done)
	tmpfiles := true
	for {
		pl.mu.Lock()
		wantFile := pl.files && tmpfiles && len(pl.fds) < cap(pl.fds)
		wantDir := pl.dirs && len(pl.spareDirs) < dirPoolSize
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
			var fd int
			fd, err = unix.Openat(s.main.rootfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, poolMode)
			switch err {
			case nil:
				pl.fds <- fd // only fill sends, and there was room
			case unix.EOPNOTSUPP, unix.EISDIR, unix.EINVAL:
				tmpfiles, err = false, nil
			}
		}
		if wantDir && err == nil {
			id := newID()
			if err = unix.Mkdirat(s.main.sparefd, id, 0700); err == nil && !s.keepSpareDir(id) {
				return // closed
			}
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

// keepSpareDir adds directory id of the spare directory to the spares,
// or removes it when the pool is closed or holds maxSpares; it reports
// whether it kept it.
func (s *Store) keepSpareDir(id string) bool {
	pl := s.pool
	pl.mu.Lock()
	kept := !pl.closed && len(pl.spareDirs) < maxSpares
	if kept {
		pl.spareDirs = append(pl.spareDirs, id)
	}
	pl.mu.Unlock()
	if !kept {
		unix.Unlinkat(s.main.sparefd, id, unix.AT_REMOVEDIR)
	}
	return kept
}

// Recycle removes object id as Remove does, but keeps a regular file or
// a directory of the main part, emptied, for the next new object of its
// kind (see the top of this file). The caller guarantees, as for
// Remove, that nothing refers to id any more.
func (s *Store) Recycle(id string) error {
	if s.pool == nil || shardOf(id) < 0 || s.spill != nil && s.isSpilled(id) {
		return s.Remove(id)
	}
	l := s.Loc(id)
	// The type first: opening a device node would run its driver's open
	// (as root), and a fifo's would block.
	var st unix.Stat_t
	if err := unix.Fstatat(l.Dirfd, l.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return s.Remove(id)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return s.recycleDir(id, l)
	case unix.S_IFREG:
	default:
		return s.Remove(id) // a symlink, fifo, socket or device node
	}
	fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return s.Remove(id) // a file the daemon cannot write
	}
	s.pool.mu.Lock()
	room := !s.pool.closed && len(s.pool.spares) < maxSpares
	s.pool.mu.Unlock()
	if !room || !emptyForReuse(fd, l) || unix.Renameat2(l.Dirfd, l.Name, s.main.sparefd, id, unix.RENAME_NOREPLACE) != nil {
		unix.Close(fd)
		return s.Remove(id)
	}
	s.pool.mu.Lock()
	kept := !s.pool.closed && len(s.pool.spares) < maxSpares
	if kept {
		if s.pool.spareFds < spareFds {
			s.pool.spareFds++
		} else {
			unix.Close(fd)
			fd = -1
		}
		s.pool.spares = append(s.pool.spares, spare{id: id, fd: fd})
	}
	s.pool.mu.Unlock()
	if !kept {
		unix.Close(fd)
		unix.Unlinkat(s.main.sparefd, id, 0)
	}
	return nil
}

// recycleDir keeps the directory object id (at l), stripped of its
// extended attributes, for the next Mkdir. Directory objects are always
// empty (objects are never nested).
func (s *Store) recycleDir(id string, l Loc) error {
	fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return s.Remove(id)
	}
	ok := stripXattrs(fd)
	unix.Close(fd)
	if !ok || unix.Renameat2(l.Dirfd, l.Name, s.main.sparefd, id, unix.RENAME_NOREPLACE) != nil {
		return s.Remove(id)
	}
	s.keepSpareDir(id)
	return nil
}

// emptyForReuse truncates the regular file fd (at l) and removes its
// extended attributes; it reports false when fd is not a regular file
// with one name or cannot be emptied.
//
// ext4 (unless mounted noauto_da_alloc) takes a truncate to size 0 for
// the start of a rewrite in place, and makes the next close of the file
// write its data out at once (auto_da_alloc): the new file that takes
// this spare would be written to disk when its writer closes it, as no
// new native file is (even a truncate of an empty file does this). Any
// close of the inode ends that state, so one is made here, of a second
// open of the emptied file.
func emptyForReuse(fd int, l Loc) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return false
	}
	if unix.Ftruncate(fd, 0) != nil {
		return false
	}
	if c, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(c)
	}
	return stripXattrs(fd)
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

// clearSpares removes what the spare directory of p holds: what a
// daemon that died left there, or the spares at Close.
func (p *part) clearSpares() {
	fd, err := unix.Openat(p.sparefd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), p.root+"/"+spareDir)
	names, _ := f.Readdirnames(-1)
	f.Close()
	for _, name := range names {
		if unix.Unlinkat(p.sparefd, name, 0) == unix.EISDIR {
			unix.Unlinkat(p.sparefd, name, unix.AT_REMOVEDIR)
		}
	}
}

// closePool stops the goroutine, closes the unnamed files and removes
// the spares. Closing twice is harmless.
func (s *Store) closePool() {
	pl := s.pool
	if pl == nil {
		return
	}
	pl.close()
	pl.mu.Lock()
	spares := pl.spares
	pl.spares, pl.spareDirs, pl.spareFds = nil, nil, 0
	pl.mu.Unlock()
	for _, sp := range spares {
		if sp.fd >= 0 {
			unix.Close(sp.fd)
		}
	}
	if s.main != nil && s.main.sparefd >= 0 {
		s.main.clearSpares()
	}
}

// close stops the goroutine and closes the files still in the pool.
// Closing twice is harmless.
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
	for {
		select {
		case fd := <-pl.fds:
			unix.Close(fd)
		default:
			return
		}
	}
}

// link names the unnamed file fd name in the directory dirfd. As root
// it links the descriptor itself (AT_EMPTY_PATH needs
// CAP_DAC_READ_SEARCH); otherwise, or where that is refused, through
// its /proc/self/fd link.
func (s *Store) link(fd, dirfd int, name string) error {
	if s.root {
		err := unix.Linkat(fd, "", dirfd, name, unix.AT_EMPTY_PATH)
		if err != unix.EPERM && err != unix.ENOENT {
			return err
		}
	}
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, name, unix.AT_SYMLINK_FOLLOW)
}
