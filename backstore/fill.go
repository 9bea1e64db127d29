package backstore

import (
	"crypto/sha256"
	"encoding"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The fills of pending objects (see pending.go for the rules).

// checkpointEvery is how many bytes a fill writes between checkpoints
// (a variable for the tests).
var checkpointEvery int64 = 16 << 20

// errClosed is the error of a fill asked of a closing store.
var errClosed = errors.New("the backstore is closing")

// errTooLong is the error of a fetch longer than its object.
var errTooLong = errors.New("the fetched bytes are more than the object's size")

// fill is one object being filled. done closes when it ends, err says
// how (set before done closes).
type fill struct {
	id, key string
	size    int64

	mu    sync.Mutex
	have  int64         // the first have bytes are in the object
	moved chan struct{} // closed, and replaced, when have grows

	done chan struct{}
	err  error
}

// progress returns have and the channel that closes when it grows.
func (f *fill) progress() (int64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.have, f.moved
}

// advance records that the first have bytes are in the object.
func (f *fill) advance(have int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.have = have
	close(f.moved)
	f.moved = make(chan struct{})
}

// ended reports whether f ended, and its error.
func (f *fill) ended() (bool, error) {
	select {
	case <-f.done:
		return true, f.err
	default:
		return false, nil
	}
}

// A Stream is the fill of a pending object as a reader opened with
// OpenStream sees it: which leading bytes are there to read.
type Stream struct {
	s    *Store
	id   string
	size int64

	mu sync.Mutex // guards f
	f  *fill      // nil once the object is complete
}

// current returns the fill to wait for: nil once the object is
// complete; a failed fill until another open starts a new one.
func (st *Stream) current() *fill {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.f == nil {
		return nil
	}
	ended, err := st.f.ended()
	if !ended {
		return st.f
	}
	if err == nil {
		st.f = nil
		return nil
	}
	st.s.pendMu.Lock()
	nf := st.s.fills[st.id]
	_, pending := st.s.pending[st.id]
	st.s.pendMu.Unlock()
	switch {
	case !pending:
		st.f = nil
	case nf != nil:
		st.f = nf
	}
	return st.f
}

// Size returns the object's size.
func (st *Stream) Size() int64 { return st.size }

// Done reports whether the object is complete and checked.
func (st *Stream) Done() bool { return st.current() == nil }

// Ready reports whether the bytes before end are there to read without
// waiting (all of them, checked, for an end at or past the size).
func (st *Stream) Ready(end int64) bool {
	f := st.current()
	if f == nil {
		return true
	}
	if end >= st.size {
		return false
	}
	have, _ := f.progress()
	return have >= end
}

// Wait waits until the bytes before end are there (for an end at or
// past the object's size: all of them, checked), or returns the error
// that stopped their fill.
func (st *Stream) Wait(end int64) error {
	for {
		f := st.current()
		if f == nil {
			return nil
		}
		if ended, err := f.ended(); ended {
			return err // failed, and no new fill yet
		}
		have, moved := f.progress()
		if end < st.size && have >= end {
			return nil
		}
		select {
		case <-moved:
		case <-f.done:
		}
	}
}

// OpenStream opens object id read-only. For a pending object it starts
// its fill (or joins the one under way) and returns at once, with the
// Stream a reader waits on before it reads a range; for any other
// object it is Open(id, O_RDONLY), with no Stream.
func (s *Store) OpenStream(id string) (*os.File, *Stream, error) {
	f, err := s.startFill(id)
	if err != nil {
		return nil, nil, err
	}
	if f == nil {
		file, err := s.Open(id, unix.O_RDONLY)
		return file, nil, err
	}
	l, err := s.loc(id)
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("object %s: open: %w", id, err)
	}
	return os.NewFile(uintptr(fd), id), &Stream{s: s, id: id, size: f.size, f: f}, nil
}

// Fetched waits until object id is complete and checked, if it is
// pending (its fill started, or joined); it returns at once for any
// other object. Open waits so too: a caller calls it first where it
// must not wait holding a lock of its own.
func (s *Store) Fetched(id string) error { return s.ready(id) }

// ready fills object id if it is pending, or waits for the fill under
// way; it returns at once for any other object.
func (s *Store) ready(id string) error {
	f, err := s.startFill(id)
	if err != nil || f == nil {
		return err
	}
	<-f.done
	return f.err
}

// startFill returns the fill of object id, starting one if none runs;
// nil when the object is not pending.
func (s *Store) startFill(id string) (*fill, error) {
	if !s.anyPending.Load() {
		return nil, nil
	}
	if err := s.made(id); err != nil { // deferred.go
		return nil, err
	}
	s.pendMu.Lock()
	f := s.fills[id]
	_, pending := s.pending[id]
	s.pendMu.Unlock()
	if f != nil || !pending {
		return f, nil
	}
	if s.source.Fetch == nil || s.source.Check == nil {
		return nil, fmt.Errorf("object %s: %w", id, ErrPending)
	}
	st, err := s.Lstat(id)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", id, err)
	}
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	key, pending := s.pending[id]
	if f := s.fills[id]; f != nil || !pending {
		return f, nil
	}
	if s.closing {
		return nil, fmt.Errorf("object %s: %w", id, errClosed)
	}
	from := s.resume[id]
	if from.off > st.Size || newHashAt(from.state) == nil {
		from = resumePoint{}
		delete(s.resume, id)
	}
	f = &fill{id: id, key: key, size: st.Size, have: from.off, moved: make(chan struct{}), done: make(chan struct{})}
	if s.fills == nil {
		s.fills = map[string]*fill{}
	}
	s.fills[id] = f
	s.fillWG.Add(1)
	go s.runFill(f, from)
	return f, nil
}

// newHashAt returns a SHA-256 in state (nil for a state it cannot
// take): a fresh one for none.
func newHashAt(state []byte) hash.Hash {
	h := sha256.New()
	if len(state) == 0 {
		return h
	}
	if h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state) != nil {
		return nil
	}
	return h
}

// errRefused marks a fill whose bytes the source's check refused.
type errRefused struct{ err error }

func (e errRefused) Error() string { return e.err.Error() }
func (e errRefused) Unwrap() error { return e.err }

// runFill runs fill f from resume point from, and ends it.
func (s *Store) runFill(f *fill, from resumePoint) {
	defer s.fillWG.Done()
	err := s.fillObject(f, from)
	var refused errRefused
	if from.off > 0 && errors.As(err, &refused) {
		// The bytes fetched before the resume point are not trusted:
		// once more, all of them.
		f.mu.Lock()
		f.have = 0
		f.mu.Unlock()
		err = s.fillObject(f, resumePoint{})
	}
	s.pendMu.Lock()
	delete(s.fills, f.id)
	if err == nil {
		delete(s.pending, f.id)
		delete(s.resume, f.id)
	}
	s.pendMu.Unlock()
	f.err = err
	close(f.done)
}

// fillObject fetches the bytes of fill f into its object from resume
// point from on, checks them, and journals the object complete.
func (s *Store) fillObject(f *fill, from resumePoint) error {
	l, err := s.loc(f.id)
	if err != nil {
		return err
	}
	st, err := s.Lstat(f.id)
	if err != nil {
		return fmt.Errorf("object %s: %w", f.id, err)
	}
	fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.EACCES {
		// A read-only file of a daemon that is not root: readable and
		// writable for the fill only.
		if err = unix.Fchmodat(l.Dirfd, l.Name, st.Mode&07777|0o600, 0); err == nil {
			fd, err = unix.Openat(l.Dirfd, l.Name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if cerr := unix.Fchmodat(l.Dirfd, l.Name, st.Mode&07777, 0); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("object %s: opening it to fill it: %w", f.id, err)
	}
	file := os.NewFile(uintptr(fd), f.id)
	defer func() { _ = file.Close() }()
	w := &fillWriter{s: s, f: f, file: file, l: l, limit: st.Size, times: []unix.Timespec{st.Atim, st.Mtim}}
	w.h = newHashAt(from.state)
	if from.off > 0 {
		w.off, w.ckAt, w.times = from.off, from.off, from.times
		if from.state == nil {
			// Resumed from the journal: the check covers the bytes the
			// object holds, read back.
			if _, err := io.Copy(w.h, io.NewSectionReader(file, 0, from.off)); err != nil {
				return fmt.Errorf("object %s: reading back what was fetched: %w", f.id, err)
			}
		}
	}
	if w.off < st.Size {
		err = s.source.Fetch(s.fillCtx, f.key, w.off, w)
	}
	if err == nil && w.off != st.Size {
		err = fmt.Errorf("%s gave %d bytes, want %d", f.key, w.off, st.Size)
	}
	if err != nil {
		// Stopped: what arrived stays, for the next fill to go on from.
		if cerr := w.checkpoint(); cerr != nil {
			err = fmt.Errorf("%w (and keeping what arrived: %v)", err, cerr)
		}
		return fmt.Errorf("object %s: fetching %s: %w", f.id, f.key, err)
	}
	if cerr := s.source.Check(f.key, w.h.Sum(nil)); cerr != nil {
		return errRefused{fmt.Errorf("object %s: %w", f.id, s.refuse(f, w, cerr))}
	}
	if err := unix.Fdatasync(fd); err != nil {
		return fmt.Errorf("object %s: %w", f.id, err)
	}
	if err := w.setTimes(); err != nil {
		return fmt.Errorf("object %s: %w", f.id, err)
	}
	return s.journal(f.id + " -\n")
}

// refuse takes back the bytes of a fill the check refused: the object
// is pending from its start again, holding no data. It returns err,
// the check's error.
func (s *Store) refuse(f *fill, w *fillWriter, err error) error {
	s.pendMu.Lock()
	delete(s.resume, f.id)
	s.pendMu.Unlock()
	jerr := s.journal(f.id + " " + f.key + "\n")
	// The refused bytes go (a hole, the size kept: a reader between two
	// truncations would take the object for empty, at its end).
	_ = unix.Fallocate(int(w.file.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, w.limit)
	_ = w.setTimes()
	if jerr != nil {
		return fmt.Errorf("%w (and journaling it pending again: %v)", err, jerr)
	}
	return err
}

// fillWriter writes a fill's bytes into its object from w.off on, in
// order, never past limit (the object's size: a fetch that brings more
// bytes fails without growing the object), hashing them and telling
// the fill's readers. Each write sets the object's times back: the
// object is the view's file, whose mtime a fetch must not change.
type fillWriter struct {
	s     *Store
	f     *fill
	file  *os.File
	l     Loc
	off   int64
	limit int64
	h     hash.Hash
	times []unix.Timespec // atime, mtime
	ckAt  int64           // the offset of the last checkpoint
}

func (w *fillWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.limit-w.off {
		return 0, errTooLong
	}
	n, err := w.file.WriteAt(p, w.off)
	w.h.Write(p[:n])
	w.off += int64(n)
	if terr := w.setTimes(); err == nil {
		err = terr
	}
	w.f.advance(w.off)
	if err == nil && w.off-w.ckAt >= checkpointEvery {
		err = w.checkpoint()
	}
	return n, err
}

// setTimes gives the object its atime and mtime back.
func (w *fillWriter) setTimes() error {
	return unix.UtimesNanoAt(w.l.Dirfd, w.l.Name, w.times, unix.AT_SYMLINK_NOFOLLOW)
}

// checkpoint makes what was written durable and journals where the
// next fill resumes.
func (w *fillWriter) checkpoint() error {
	if w.off == w.ckAt {
		return nil
	}
	if err := unix.Fdatasync(int(w.file.Fd())); err != nil {
		return err
	}
	state, err := w.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return err
	}
	line := fmt.Sprintf("%s %s %d %d %d\n", w.f.id, w.f.key, w.off, w.times[0].Nano(), w.times[1].Nano())
	if err := w.s.journal(line); err != nil {
		return err
	}
	w.s.pendMu.Lock()
	if w.s.resume == nil {
		w.s.resume = map[string]resumePoint{}
	}
	w.s.resume[w.f.id] = resumePoint{off: w.off, state: state, times: w.times}
	w.s.pendMu.Unlock()
	w.ckAt = w.off
	return nil
}

// closeFills stops the fills under way (at Close) and waits for them:
// each journals where it stopped.
func (s *Store) closeFills() {
	s.pendMu.Lock()
	s.closing = true
	s.pendMu.Unlock()
	if s.fillCancel != nil {
		s.fillCancel()
	}
	s.fillWG.Wait()
}
