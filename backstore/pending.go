package backstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// # Objects filled at first use
//
// A store may hold pending objects: regular files whose bytes are
// elsewhere (an object of a remote), made with their size (a sparse
// file) and their attributes, so that listings and attributes need
// nothing fetched. MarkPending records each pending id with the key of
// its bytes in the journal Dir/pending, one line "ID KEY" each, synced
// before the call returns; SetFetcher gives the function that fetches
// a key's bytes.
//
// Open, OpenRead and Clone of a pending object fill it first, once
// however many ask at the same time: the fetcher writes the bytes into
// the object in place from offset 0 (it checks them: a remote's fetch
// refuses bytes that do not hash to the key), they are fdatasync'ed,
// the object's atime and mtime are set back, and the line "ID -" is
// journaled; only then does a caller get a descriptor. So no
// descriptor ever reads a pending object: a fetch that fails, or a
// crash in the middle of one, leaves it pending, and the next open
// fetches it again from the start. Open reads the journal, so pending
// objects stay pending across a reopen; opening one with no fetcher set
// fails with ErrPending.
//
// Locking: pendMu guards pending and fills; it is never held across a
// system call or a fetch (a fill's waiters wait on its done channel).
// A store that never held a pending object takes no lock for them:
// anyPending says whether to look.

// ErrPending is the error of opening a pending object with no fetcher.
var ErrPending = errors.New("the object's bytes are not fetched, and nothing can fetch them")

// A Fetcher writes the bytes named key to w, checked.
type Fetcher func(ctx context.Context, key string, w io.Writer) error

// pendingName is the journal's name in Dir.
const pendingName = "pending"

// fill is one object being filled: done closes when it ends, err says
// how.
type fill struct {
	done chan struct{}
	err  error
}

// SetFetcher sets the function that fetches the bytes of pending
// objects (before the store is used).
func (s *Store) SetFetcher(f Fetcher) { s.fetcher = f }

// MarkPending records that the objects (id → key) are pending: their
// bytes are key's, fetched at their first open.
func (s *Store) MarkPending(objects map[string]string) error {
	var b strings.Builder
	for id, key := range objects {
		if shardOf(id) < 0 || key == "" || key == "-" || strings.ContainsAny(key, " \n") {
			return fmt.Errorf("pending object %q (key %q): %w", id, key, ErrBadID)
		}
		fmt.Fprintf(&b, "%s %s\n", id, key)
	}
	if err := s.journal(b.String()); err != nil {
		return err
	}
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	if s.pending == nil {
		s.pending = map[string]string{}
	}
	for id, key := range objects {
		s.pending[id] = key
	}
	s.anyPending.Store(len(s.pending) > 0)
	return nil
}

// Pending reports whether object id is pending.
func (s *Store) Pending(id string) bool {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	_, ok := s.pending[id]
	return ok
}

// journal appends lines to the journal and syncs it.
func (s *Store) journal(lines string) error {
	if lines == "" {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(s.opts.Dir, pendingName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("backstore: the journal of pending objects: %w", err)
	}
	_, err = f.WriteString(lines)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("backstore: the journal of pending objects: %w", err)
	}
	return nil
}

// loadPending reads the journal (at Open).
func (s *Store) loadPending() error {
	f, err := os.Open(filepath.Join(s.opts.Dir, pendingName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	pending := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, key, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue // a line a crash cut short
		}
		if key == "-" {
			delete(pending, id)
		} else {
			pending[id] = key
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("backstore: the journal of pending objects: %w", err)
	}
	if len(pending) > 0 {
		s.pending = pending
		s.anyPending.Store(true)
	}
	return nil
}

// ready fills object id if it is pending, or waits for the fill under
// way; it returns at once for any other object.
func (s *Store) ready(id string) error {
	if !s.anyPending.Load() {
		return nil
	}
	s.pendMu.Lock()
	key, ok := s.pending[id]
	if !ok {
		s.pendMu.Unlock()
		return nil
	}
	if f := s.fills[id]; f != nil {
		s.pendMu.Unlock()
		<-f.done
		if f.err != nil {
			return f.err
		}
		return s.ready(id) // filled, or pending again after a failure
	}
	if s.fills == nil {
		s.fills = map[string]*fill{}
	}
	f := &fill{done: make(chan struct{})}
	s.fills[id] = f
	s.pendMu.Unlock()

	f.err = s.fillObject(id, key)
	s.pendMu.Lock()
	delete(s.fills, id)
	if f.err == nil {
		delete(s.pending, id)
	}
	s.pendMu.Unlock()
	close(f.done)
	return f.err
}

// fillObject fetches key's bytes into pending object id (see above).
func (s *Store) fillObject(id, key string) error {
	if s.fetcher == nil {
		return fmt.Errorf("object %s: %w", id, ErrPending)
	}
	l, err := s.loc(id)
	if err != nil {
		return err
	}
	st, err := s.Lstat(id)
	if err != nil {
		return fmt.Errorf("object %s: %w", id, err)
	}
	fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.EACCES {
		// A read-only file of a daemon that is not root: writable for
		// the fill only.
		if err = unix.Fchmodat(l.Dirfd, l.Name, st.Mode&07777|0o200, 0); err == nil {
			fd, err = unix.Openat(l.Dirfd, l.Name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if cerr := unix.Fchmodat(l.Dirfd, l.Name, st.Mode&07777, 0); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("object %s: opening it to fill it: %w", id, err)
	}
	f := os.NewFile(uintptr(fd), id)
	defer func() { _ = f.Close() }()
	w := &offsetWriter{f: f, limit: st.Size}
	if err := s.fetcher(context.Background(), key, w); err != nil {
		return fmt.Errorf("object %s: fetching %s: %w", id, key, err)
	}
	if w.off != st.Size {
		return fmt.Errorf("object %s: fetching %s gave %d bytes, want %d", id, key, w.off, st.Size)
	}
	if err := unix.Fdatasync(fd); err != nil {
		return fmt.Errorf("object %s: %w", id, err)
	}
	times := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(l.Dirfd, l.Name, times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("object %s: %w", id, err)
	}
	return s.journal(id + " -\n")
}

// offsetWriter writes to a file from offset 0, in order, never past
// limit (the object's size): a fetch that brings more bytes fails
// without growing the object, so that the next fill starts from the
// same size.
type offsetWriter struct {
	f     *os.File
	off   int64
	limit int64
}

// errTooLong is the error of a fetch longer than its object.
var errTooLong = errors.New("the fetched bytes are more than the object's size")

func (w *offsetWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.limit-w.off {
		return 0, errTooLong
	}
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

// forgetPending drops object id from the pending ones (it is removed).
func (s *Store) forgetPending(id string) {
	if !s.anyPending.Load() {
		return
	}
	s.pendMu.Lock()
	_, ok := s.pending[id]
	delete(s.pending, id)
	s.pendMu.Unlock()
	if ok {
		// At worst the journal keeps it: a later fill of a missing
		// object fails, and nothing names it.
		_ = s.journal(id + " -\n")
	}
}
