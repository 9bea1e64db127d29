package backstore

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// # Pool
//
// Making the inode is the slow part of making a regular file object,
// and a FUSE create waits for it: on ext4 it takes from 10 µs to
// several hundred (the inode allocator scans past recently deleted
// inodes, and the shards are spread over many block groups). So the
// store makes empty files ahead of need: a goroutine, started by the
// first regular file object made in the main part, keeps up to
// poolSize unnamed files (O_TMPFILE, mode 0600, open O_RDWR) there,
// and a new file object takes one and names it in its shard with
// linkat, which costs a directory entry and nothing else. When the
// pool is empty (a burst outran the goroutine) or the filesystem has
// no O_TMPFILE, the object is made on the spot as before. Pooled files
// have no name, so they are no objects: Objects and Collect never see
// them, Close closes them and the kernel frees them, and a daemon that
// dies leaves none behind.
//
// Making the inode of an unnamed file costs the same, and freeing the
// inode of a removed object costs too; on an ext4 without a journal the
// allocator then skips inodes freed within the last seconds, so a burst
// of creates and removes (a test suite's temporary files, a build's
// objects) gets slower the longer it lasts. So a regular file object
// that is removed (Recycle) is emptied instead, truncated and stripped
// of its extended attributes, and kept open and named as a spare; the
// next new file object takes a spare before an unnamed file, resets
// its times, owner and mode, and keeps its id: no inode is made or
// freed, and no directory entry changes. Spares are no objects of the
// view (nothing refers to them); at most maxSpares are kept, and Close
// removes them. After a crash they are unreferenced objects, which
// Collect removes.
//
// Locking: pool.mu guards started, closed and spares; fds is a
// channel. The goroutine holds no lock while it makes a file.

// poolSize is how many unnamed files the pool keeps ready.
const poolSize = 64

// poolRetry is how long the pool waits after failing to make a file
// (ENOSPC, EMFILE) before it tries again.
const poolRetry = 100 * time.Millisecond

// maxSpares is how many emptied objects the pool keeps for reuse.
const maxSpares = 256

// spare is an emptied regular file object: its id, and a descriptor
// open O_RDWR.
type spare struct {
	id string
	fd int
}

type pool struct {
	fds    chan int      // unnamed files, open O_RDWR
	stop   chan struct{} // closed by close
	done   chan struct{} // closed when fill returns
	used   atomic.Int64  // files taken from the pool (for tests)
	reused atomic.Int64  // spares taken (for tests)

	mu      sync.Mutex
	started bool
	closed  bool
	spares  []spare // emptied objects of the main part, at most maxSpares
}

func newPool() *pool {
	return &pool{fds: make(chan int, poolSize), stop: make(chan struct{}), done: make(chan struct{})}
}

// take returns an unnamed file of part p, or -1 when there is none
// ready. The first call starts the goroutine that fills the pool.
func (s *Store) take(p *part) int {
	if p != s.main || s.pool == nil {
		return -1
	}
	select {
	case fd := <-s.pool.fds:
		s.pool.used.Add(1)
		return fd
	default:
	}
	s.pool.mu.Lock()
	if !s.pool.started && !s.pool.closed {
		s.pool.started = true
		go s.fill(p.rootfd)
	}
	s.pool.mu.Unlock()
	return -1
}

// fill keeps the pool full until close, making unnamed files in the
// directory dirfd. It gives up for good where O_TMPFILE is not
// supported.
func (s *Store) fill(dirfd int) {
	defer close(s.pool.done)
	for {
		fd, err := unix.Openat(dirfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0600)
		switch err {
		case nil:
		case unix.EOPNOTSUPP, unix.EISDIR, unix.EINVAL:
			return
		default:
			select {
			case <-s.pool.stop:
				return
			case <-time.After(poolRetry):
				continue
			}
		}
		select {
		case s.pool.fds <- fd:
		case <-s.pool.stop:
			unix.Close(fd)
			return
		}
	}
}

// takeSpare returns an emptied object of part p, if one is kept.
func (s *Store) takeSpare(p *part) (spare, bool) {
	if p != s.main || s.pool == nil {
		return spare{}, false
	}
	pl := s.pool
	pl.mu.Lock()
	defer pl.mu.Unlock()
	n := len(pl.spares)
	if n == 0 {
		return spare{}, false
	}
	sp := pl.spares[n-1]
	pl.spares = pl.spares[:n-1]
	pl.reused.Add(1)
	return sp, true
}

// IsSpare reports whether object id is kept, emptied, for reuse: no
// object of any view (for tests).
func (s *Store) IsSpare(id string) bool {
	if s.pool == nil {
		return false
	}
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	for _, sp := range s.pool.spares {
		if sp.id == id {
			return true
		}
	}
	return false
}

// Recycle removes object id as Remove does, but keeps a regular file of
// the main part, emptied, for the next new file object (see the top of
// this file). The caller guarantees, as for Remove, that nothing refers
// to id any more.
func (s *Store) Recycle(id string) error {
	if s.pool == nil || shardOf(id) < 0 || s.spill != nil && s.isSpilled(id) {
		return s.Remove(id)
	}
	s.pool.mu.Lock()
	full := len(s.pool.spares) >= maxSpares
	s.pool.mu.Unlock()
	if full {
		return s.Remove(id)
	}
	l := s.Loc(id)
	fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return s.Remove(id) // a directory, a symlink, a file the daemon cannot write
	}
	if !emptyForReuse(fd) {
		unix.Close(fd)
		return s.Remove(id)
	}
	// Under mu, so that closePool, which drains after marking the pool
	// closed, cannot miss it.
	s.pool.mu.Lock()
	kept := !s.pool.closed && len(s.pool.spares) < maxSpares
	if kept {
		s.pool.spares = append(s.pool.spares, spare{id: id, fd: fd})
	}
	s.pool.mu.Unlock()
	if !kept {
		unix.Close(fd)
		return s.Remove(id)
	}
	return nil
}

// emptyForReuse truncates the regular file fd and removes its extended
// attributes; it reports false when fd is not a regular file with one
// name or cannot be emptied.
func emptyForReuse(fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return false
	}
	if unix.Ftruncate(fd, 0) != nil {
		return false
	}
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

// close stops the goroutine and closes the files still in the pool,
// and removes the spares. Closing twice is harmless.
func (s *Store) closePool() {
	pl := s.pool
	if pl == nil {
		return
	}
	pl.close()
	pl.mu.Lock()
	spares := pl.spares
	pl.spares = nil
	pl.mu.Unlock()
	for _, sp := range spares {
		unix.Close(sp.fd)
		s.Remove(sp.id)
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
