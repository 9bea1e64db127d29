package branch

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockExclusive takes the writer lock on Dir/lock and records our pid
// in it.
func (s *Store) lockExclusive() error {
	p := filepath.Join(s.dir, "lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("store %s: lock file: %w", s.dir, err)
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return s.lockError(p, err)
	}
	// Write before truncating, so that a concurrent reader never sees
	// an empty file; readers stop at the first newline.
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if _, err := f.WriteAt(pid, 0); err != nil {
		f.Close()
		return fmt.Errorf("store %s: lock file: %w", s.dir, err)
	}
	if err := f.Truncate(int64(len(pid))); err != nil {
		f.Close()
		return fmt.Errorf("store %s: lock file: %w", s.dir, err)
	}
	s.lock = f
	return nil
}

// lockShared takes a shared lock on Dir/lock, for a read-only Open: it
// keeps a writer out while we read, and fails while a writer runs.
func (s *Store) lockShared() error {
	p := filepath.Join(s.dir, "lock")
	f, err := os.Open(p)
	if errors.Is(err, iofs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(s.dir, "meta")); err == nil {
			return nil // a store without a lock file (copied?): nothing to share
		}
		return fmt.Errorf("store %s: there is no agentfs store here: %w", s.dir, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("store %s: lock file: %w", s.dir, err)
	}
	if err := flock(f, unix.LOCK_SH); err != nil {
		f.Close()
		return s.lockError(p, err)
	}
	s.lock = f
	return nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// lockError explains a failed flock on the lock file p.
func (s *Store) lockError(p string, err error) error {
	if !errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("store %s: locking %s: %w", s.dir, p, err)
	}
	holder := "another process"
	if pid, ok := lockHolder(p); ok {
		holder = "pid " + strconv.Itoa(pid)
	}
	return fmt.Errorf("store %s is in use by %s: unmount the other mount first, or use another --store: %w", s.dir, holder, ErrLocked)
}

// lockHolder returns the pid recorded in the lock file p, if that
// process is alive. A dead one means the lock is held by a read-only
// inspector (which records no pid) or a child that inherited the fd.
func lockHolder(p string) (int, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
		return 0, false
	}
	return pid, true
}

func (s *Store) unlock() {
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}
