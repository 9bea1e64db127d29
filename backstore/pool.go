package backstore

import (
	"strconv"
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
// Locking: pool.mu guards started and closed; fds is a channel. The
// goroutine holds no lock while it makes a file.

// poolSize is how many unnamed files the pool keeps ready.
const poolSize = 64

// poolRetry is how long the pool waits after failing to make a file
// (ENOSPC, EMFILE) before it tries again.
const poolRetry = 100 * time.Millisecond

type pool struct {
	fds  chan int      // unnamed files, open O_RDWR
	stop chan struct{} // closed by close
	done chan struct{} // closed when fill returns
	used atomic.Int64  // files taken from the pool (for tests)

	mu      sync.Mutex
	started bool
	closed  bool
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
