package backstore

import (
	"context"
	"crypto/sha256"
	"encoding"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The fills of pending objects (see pending.go for the rules).

// checkpointEvery is how many bytes a fill writes between checkpoints
// (a variable for the tests).
var checkpointEvery int64 = 16 << 20

// stopAfter is how long a fill started for readers goes on after its
// last reader closed (and nothing else waits for the whole object)
// before it stops: a reader that opens the file again at once (many
// programs open a file twice) finds the fetch still under way, rather
// than one stopping (a checkpoint's fdatasync) and another starting (a
// new GET). Short, since a fetch on a fast link goes on at full speed
// meanwhile: with 1 s, 42% of a 1 GiB object came from a server on
// 127.0.0.1 after the file was closed. A variable for the tests; 0
// stops it at the close.
var stopAfter = 100 * time.Millisecond

// errClosed is the error of a fill asked of a closing store.
var errClosed = errors.New("the backstore is closing")

// errStopped is the error of a fill stopped because nothing reads it.
var errStopped = errors.New("every reader closed the file before it was fetched: the fetch stopped, to go on at the next open")

// errTooLong is the error of a fetch longer than its object.
var errTooLong = errors.New("the fetched bytes are more than the object's size")

// fill is one object being filled. done closes when it ends, err says
// how (set before done closes).
//
// A fill runs for its object's users, counted per object in
// Store.readers (Streams) and Store.wants (callers of ready, which need
// the whole object). When the last user goes and none waits for the
// whole object, the fill is stopped (stopAfter later, see
// Store.release): its context is cancelled, the fetch ends, the bytes
// written are checkpointed, and the object stays pending. A use that
// comes while a fill is stopping starts the fill that goes on from
// there (prev: it waits for the stopping one to end before it reads
// the resume point), so one object never has two fills writing it.
type fill struct {
	id, key string
	size    int64
	prev    *fill // the stopping fill this one goes on from, or nil

	ctx    context.Context
	cancel context.CancelCauseFunc

	// Guarded by Store.pendMu.
	stopping bool   // stopped (cancelled): the next use starts another
	idle     uint64 // counts the times its users all went (for stopAfter)

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
// OpenStream sees it: which leading bytes are there to read. Its
// reader calls Close when it is done with the object: a fill whose
// readers all closed stops (see fill).
type Stream struct {
	s    *Store
	id   string
	size int64

	mu     sync.Mutex // guards f and closed
	f      *fill      // nil once the object is complete
	closed bool
}

// Close says that the Stream's reader is gone. The last reader of an
// object still being fetched stops its fill (see fill), unless a
// caller waits for the whole object. Close is idempotent; a closed
// Stream must not be waited on.
func (st *Stream) Close() {
	st.mu.Lock()
	closed := st.closed
	st.closed = true
	st.mu.Unlock()
	if !closed {
		st.s.release(st.id, useRead)
	}
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
// Stream a reader waits on before it reads a range, and closes when it
// is done (Stream.Close); for any other object it is Open(id,
// O_RDONLY), with no Stream.
func (s *Store) OpenStream(id string) (*os.File, *Stream, error) {
	f, err := s.startFill(id, useRead)
	if err != nil {
		return nil, nil, err
	}
	if f == nil {
		file, err := s.Open(id, unix.O_RDONLY)
		return file, nil, err
	}
	l, err := s.loc(id)
	if err != nil {
		s.release(id, useRead)
		return nil, nil, err
	}
	fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		s.release(id, useRead)
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
// way; it returns at once for any other object. The fill it waits for
// is not stopped when the object's readers go (useWhole).
func (s *Store) ready(id string) error {
	f, err := s.startFill(id, useWhole)
	if err != nil || f == nil {
		return err
	}
	<-f.done
	s.release(id, useWhole)
	return f.err
}

// use says what a user of a fill needs of it.
type use int

const (
	useWhole use = iota // the whole object: its fill is never stopped for want of readers
	useRead             // a Stream's reader: the fill may stop once it is gone
)

// countLocked adds d to the users of object id of kind u. pendMu is
// held.
func (s *Store) countLocked(id string, u use, d int) {
	m := &s.readers
	if u == useWhole {
		m = &s.wants
	}
	if *m == nil {
		*m = map[string]int{}
	}
	if n := (*m)[id] + d; n > 0 {
		(*m)[id] = n
	} else {
		delete(*m, id)
	}
}

// release takes back a use of object id counted by startFill. When no
// use is left, the fill under way stops stopAfter later, unless a use
// came back meanwhile (see fill).
func (s *Store) release(id string, u use) {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	s.countLocked(id, u, -1)
	f := s.fills[id]
	if f == nil || f.stopping || s.readers[id] > 0 || s.wants[id] > 0 {
		return
	}
	f.idle++
	if stopAfter <= 0 {
		s.stopLocked(f)
		return
	}
	idle := f.idle
	time.AfterFunc(stopAfter, func() {
		s.pendMu.Lock()
		defer s.pendMu.Unlock()
		if s.fills[id] == f && f.idle == idle && !f.stopping && s.readers[id] == 0 && s.wants[id] == 0 {
			s.stopLocked(f)
		}
	})
}

// stopLocked stops fill f: its fetch ends, and the next use of its
// object starts another from where it stopped. pendMu is held.
func (s *Store) stopLocked(f *fill) {
	f.stopping = true
	f.cancel(errStopped)
}

// startFill returns the fill of object id, starting one if none runs
// (or the one under way is stopping), and counts the caller as a use of
// kind u until it calls release; nil (and no use counted) when the
// object is not pending.
func (s *Store) startFill(id string, u use) (*fill, error) {
	if !s.anyPending.Load() {
		return nil, nil
	}
	if err := s.made(id); err != nil { // deferred.go
		return nil, err
	}
	s.pendMu.Lock()
	f := s.fills[id]
	_, pending := s.pending[id]
	if f != nil && !f.stopping {
		s.countLocked(id, u, 1)
		s.pendMu.Unlock()
		return f, nil
	}
	s.pendMu.Unlock()
	if !pending {
		return nil, nil
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
	prev := s.fills[id]
	if prev != nil && !prev.stopping {
		s.countLocked(id, u, 1)
		return prev, nil
	}
	if !pending {
		return nil, nil
	}
	if s.closing {
		return nil, fmt.Errorf("object %s: %w", id, errClosed)
	}
	f = &fill{id: id, key: key, size: st.Size, prev: prev, moved: make(chan struct{}), done: make(chan struct{})}
	f.ctx, f.cancel = context.WithCancelCause(s.fillCtx)
	if s.fills == nil {
		s.fills = map[string]*fill{}
	}
	s.fills[id] = f
	s.countLocked(id, u, 1)
	s.fillWG.Add(1)
	go s.runFill(f)
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

// runFill runs fill f, from the resume point its object has once the
// fill it goes on from (f.prev) ended, and ends it.
func (s *Store) runFill(f *fill) {
	defer s.fillWG.Done()
	defer f.cancel(nil)
	if f.prev != nil {
		<-f.prev.done
	}
	s.pendMu.Lock()
	_, pending := s.pending[f.id]
	from := s.resume[f.id]
	if from.off > f.size || newHashAt(from.state) == nil {
		from = resumePoint{}
		delete(s.resume, f.id)
	}
	s.pendMu.Unlock()
	var err error
	switch {
	case !pending && f.prev != nil && f.prev.err == nil:
		// The stopping fill completed the object after all.
		f.advance(f.size)
	case !pending:
		err = fmt.Errorf("object %s: %w", f.id, unix.ENOENT) // removed meanwhile
	case f.ctx.Err() != nil:
		err = fmt.Errorf("object %s: %w", f.id, context.Cause(f.ctx))
	default:
		f.advance(from.off)
		err = s.fillObject(f, from)
		var refused errRefused
		if from.off > 0 && errors.As(err, &refused) {
			// The bytes fetched before the resume point are not trusted:
			// once more, all of them.
			f.mu.Lock()
			f.have = 0
			f.mu.Unlock()
			err = s.fillObject(f, resumePoint{})
		}
	}
	s.pendMu.Lock()
	if s.fills[f.id] == f {
		delete(s.fills, f.id)
	}
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
		err = s.source.Fetch(f.ctx, f.key, w.off, w)
	}
	if err == nil && w.off != st.Size {
		err = fmt.Errorf("%s gave %d bytes, want %d", f.key, w.off, st.Size)
	}
	if err != nil && f.ctx.Err() != nil {
		err = context.Cause(f.ctx) // stopped, or the store closing: say so
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
	_, jerr := s.journalPending(f.id, f.id+" "+f.key+"\n")
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
	if w.f.ctx.Err() != nil {
		// Stopped (or the store closing): not a byte more, whatever
		// the source does with its context.
		return 0, context.Cause(w.f.ctx)
	}
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
	if ok, err := w.s.journalPending(w.f.id, line); err != nil || !ok {
		return err // !ok: removed meanwhile, nothing to resume
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
		s.fillCancel(errClosed)
	}
	s.fillWG.Wait()
}
