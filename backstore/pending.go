package backstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// # Objects filled at first use
//
// A store may hold pending objects: regular files whose bytes are
// elsewhere (an object of a remote), made with their size (a sparse
// file) and their attributes, so that listings and attributes need
// nothing fetched. MarkPending records each pending id with the key of
// its bytes in the journal Dir/pending, synced before the call
// returns; SetSource gives the functions that fetch a key's bytes and
// check them.
//
// The first use of a pending object starts its fill (fill.go): one
// fetch per object however many ask, run on a goroutine of its own,
// that writes the bytes into the object in place, in order, while it
// hashes them (SHA-256). Only once every byte is there and the hash is
// the key's (Source.Check) are they fdatasync'ed, the object's atime
// and mtime set back, and the line "ID -" journaled: the object is then
// complete. Open, OpenRead and Clone wait for that, so what they hand
// out is whole and checked. OpenStream (the reads of a read-only open)
// does not wait: its Stream says which leading bytes are there, and a
// read waits only for the range it needs; the last byte waits for the
// check, so a reader that reads to the end gets checked bytes or an
// error. A check that fails refuses the bytes: the error names the key,
// and the object stays pending, to be fetched again from the start.
//
// A fill runs for its users: the Streams of OpenStream until their
// Close, and the callers of Open, OpenRead, Clone and Fetched until it
// ends. Once no Stream is open and no caller waits for the whole
// object, the fill stops (stopAfter, 100 ms, later: a file opened again
// at once finds it still running; fill.go): its fetch's context is
// cancelled and its writer takes no byte more, what arrived is
// checkpointed, and the object stays pending, its missing bytes still
// holes that nothing takes for data (a read waits for them, a
// passthrough open is refused, Open waits for the whole object). A
// fill started for a caller that needs the whole object (a copy-up, a
// push, an apply, an export, a clone) is never stopped so. A use that
// comes while a fill is stopping starts the next fill at once, which
// waits for the stopping one to end and goes on from its checkpoint:
// one object never has two fills writing it, and no user waits on a
// fill that nothing will end.
//
// A fill that stops (its readers gone, the network, the store closed, a crash) resumes
// where it stopped: every CheckpointEvery bytes, and when it stops, the
// bytes written are fdatasync'ed and the line "ID KEY OFFSET ATIME
// MTIME" journaled (the object's own times, which the fill's writes
// must not change and sets back after each), so the next fill fetches
// from OFFSET on (a ranged GET). Within one Store the hash goes on from
// where it was; after a reopen the first OFFSET bytes are read back
// from the object and hashed, so that the check covers the bytes the
// object holds. A resumed fill whose check fails is fetched once more
// from the start before the bytes are refused.
//
// The journal's lines, the last one of an id standing:
//
//	ID KEY                 pending: key's bytes, none here yet
//	ID KEY OFFSET ATIME MTIME
//	                       pending: the first OFFSET bytes here, synced;
//	                       the object's times (ns) before its fill
//	ID -                   complete (or removed)
//
// Open reads the journal, so pending objects stay pending across a
// reopen; using one with no source set fails with ErrPending.
//
// A line of a fill (a checkpoint, a refusal) is journaled only while
// its object is pending, under jmu, which forgetPending holds too: an
// object removed while its fill stops is not made pending again by the
// fill's last checkpoint.
//
// Locking: pendMu guards pending, resume, fills, the users of each
// object (readers, wants) and a fill's stopping state; it is never
// held across a system call or a fetch. jmu is taken before pendMu and
// held across the journal's write. A fill's own mu guards its progress.
// A store that never held a pending object takes no lock for them:
// anyPending says whether to look.

// ErrPending is the error of opening a pending object with no source.
var ErrPending = errors.New("the object's bytes are not fetched, and nothing can fetch them")

// A Source fetches and checks the bytes of pending objects.
type Source struct {
	// Fetch writes the bytes named key from offset off to their end to
	// w, in order. It may resume a broken transfer itself, as long as
	// w receives each byte once.
	Fetch func(ctx context.Context, key string, off int64, w io.Writer) error
	// Check is given the SHA-256 of all of key's bytes once they are
	// here: an error (naming key) refuses them.
	Check func(key string, sum []byte) error
}

// pendingName is the journal's name in Dir.
const pendingName = "pending"

// resumePoint is where a stopped fill resumes: the first off bytes are
// in the object, and state is the SHA-256 state over them (nil when read
// from the journal: they are hashed again from the object).
type resumePoint struct {
	off   int64
	state []byte
	times []unix.Timespec // the object's atime and mtime before the fill
}

// SetSource sets what fetches the bytes of pending objects (before the
// store is used).
func (s *Store) SetSource(src Source) { s.source = src }

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
		delete(s.resume, id)
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

// PendingKey returns the key of object id's bytes while it is pending
// (ok false once it is filled, or when it never was): until then its
// bytes are the key's, whatever is in its file.
func (s *Store) PendingKey(id string) (key string, ok bool) {
	if !s.anyPending.Load() {
		return "", false
	}
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	key, ok = s.pending[id]
	return key, ok
}

// PendingCount returns how many objects are pending.
func (s *Store) PendingCount() int {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	return len(s.pending)
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

// journalPending appends line, a line of object id's fill, unless id
// is no longer pending (ok false): an object removed while its fill
// ran (or stopped) must not be made pending again by a line journaled
// after its removal's. jmu orders the two.
func (s *Store) journalPending(id, line string) (ok bool, err error) {
	s.jmu.Lock()
	defer s.jmu.Unlock()
	s.pendMu.Lock()
	_, ok = s.pending[id]
	s.pendMu.Unlock()
	if !ok {
		return false, nil
	}
	return true, s.journal(line)
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
	resume := map[string]resumePoint{}
	deferred := map[string]*deferredObj{}
	now := time.Now().UnixNano()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 {
			// Any later line of an id says it was made (a checkpoint)
			// or is done with (deferred.go).
			delete(deferred, fields[0])
		}
		switch {
		case len(fields) == 2 && fields[1] == "-":
			delete(pending, fields[0])
			delete(resume, fields[0])
		case len(fields) == 2:
			pending[fields[0]] = fields[1]
			delete(resume, fields[0])
		case len(fields) == 8:
			if id, d, ok := parseDeferred(fields, now); ok {
				deferred[id] = d
				pending[id] = d.Key
				delete(resume, id)
			}
		case len(fields) == 5:
			off, err1 := strconv.ParseInt(fields[2], 10, 64)
			atime, err2 := strconv.ParseInt(fields[3], 10, 64)
			mtime, err3 := strconv.ParseInt(fields[4], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil || off < 0 {
				continue // a line a crash cut short
			}
			pending[fields[0]] = fields[1]
			resume[fields[0]] = resumePoint{off: off,
				times: []unix.Timespec{unix.NsecToTimespec(atime), unix.NsecToTimespec(mtime)}}
		}
		// Any other line is one a crash cut short.
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("backstore: the journal of pending objects: %w", err)
	}
	if len(pending) > 0 {
		s.pending = pending
		s.resume = resume
		s.anyPending.Store(true)
	}
	if len(deferred) > 0 {
		// Those a crash left made (named) are objects like any other
		// (deferred.go): their names win over their records.
		for _, p := range []*part{s.main, s.spill} {
			if p == nil {
				continue
			}
			if err := p.ids(func(id string) error { delete(deferred, id); return nil }); err != nil {
				return err
			}
		}
		s.deferred = deferred
		s.anyDeferred.Store(true)
	}
	return nil
}

// forgetPending drops object id from the pending ones (it is removed).
func (s *Store) forgetPending(id string) {
	s.jmu.Lock()
	defer s.jmu.Unlock()
	if s.forgetLocal(id) {
		// At worst the journal keeps it: a later fill of a missing
		// object fails, and nothing names it; a deferred one is
		// garbage that a collection removes.
		_ = s.journal(id + " -\n")
	}
}

// forgetLocal drops object id from the pending (and deferred) ones in
// memory, and reports whether it was pending: the journal must then
// say "ID -".
func (s *Store) forgetLocal(id string) bool {
	if !s.anyPending.Load() {
		return false
	}
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	_, ok := s.pending[id]
	delete(s.pending, id)
	delete(s.resume, id)
	s.dropDeferredLocked(id)
	return ok
}
