package branch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	badger "github.com/dgraph-io/badger/v4"
)

// op is one key change of a commit: a set, or a delete when del.
type op struct {
	key []byte
	val []byte
	del bool
}

// errSnapshotGone is what reading a deleted snapshot returns (callers
// name the snapshot).
var errSnapshotGone = fmt.Errorf("the snapshot does not exist (deleted?): %w", ErrNotFound)

// testHookSplitPart, when set, runs after each committed part of a
// split commit (part 1, 2, ...) and before the final transaction (part
// -1); an error makes the commit fail there (tests of the roll-back; the
// crash test kills the process from it).
var testHookSplitPart func(part int) error

// testHookWritten, when set, runs when badger reports a commit handed
// to it written; an error stands for badger failing to write it.
var testHookWritten func(ts uint64) error

// view runs fn in a read transaction at the current read timestamp,
// which stays readable (above the discard timestamp) until fn returns.
func (s *Store) view(fn func(txn *badger.Txn) error) error {
	if err := s.usable(); err != nil {
		return err
	}
	ts := s.pin()
	defer s.unpin(ts)
	txn := s.db.NewTransactionAt(ts, false)
	defer txn.Discard()
	return fn(txn)
}

func (s *Store) pin() uint64 {
	s.wait() // a failed commit fails later commits; reads still read
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	s.readers[s.readTs]++
	return s.readTs
}

// pinSnapshot registers a read at snap.Ts, if snap still exists, until
// the returned function is called. Snapshot deletion only removes a
// snapshot from s.snapTs, so once pinned its versions stay.
func (s *Store) pinSnapshot(snap *Snapshot) (unpin func(), err error) {
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	if ts, ok := s.snapTs[snap.ID]; !ok || ts != snap.Ts {
		return nil, errSnapshotGone
	}
	s.readers[snap.Ts]++
	return func() { s.unpin(snap.Ts) }, nil
}

func (s *Store) unpin(ts uint64) {
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	if s.readers[ts]--; s.readers[ts] > 0 {
		return
	}
	delete(s.readers, ts)
	s.setDiscardTsLocked()
}

// publish makes every commit up to ts visible to new reads.
func (s *Store) publish(ts uint64) {
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	s.readTs = ts
	s.setDiscardTsLocked()
}

// setDiscardTsLocked lets compaction drop the versions that neither a
// reader nor a held read point can see: those superseded at or below
// the oldest read timestamp in use and the oldest held snapshot's or
// parent's (see "Keeping versions" in the package doc). Requires
// s.tsMu.
func (s *Store) setDiscardTsLocked() {
	if s.ro {
		return // badger does not compact a read-only database
	}
	d := s.readTs
	for ts := range s.readers {
		d = min(d, ts)
	}
	if s.holdAny {
		d = min(d, s.holdOldest)
	}
	s.db.SetDiscardTs(d)
}

// recomputeHoldLocked recomputes holdOldest from the held snapshots and
// parents. Requires s.tsMu.
func (s *Store) recomputeHoldLocked() {
	s.holdAny, s.holdOldest = false, math.MaxUint64
	for _, lv := range s.snapHeld {
		s.holdAny, s.holdOldest = true, min(s.holdOldest, lv.ts)
	}
	for lv := range s.parentHeld {
		s.holdAny, s.holdOldest = true, min(s.holdOldest, lv.ts)
	}
}

// holdSnapshot records snapshot id, a read of lv, and with hold makes
// compaction keep what a read at lv.ts sees for as long as the snapshot
// exists (until releaseSnapshot, or freeze of its layer). Requires that
// lv.ts is at or above the discard timestamp: the read timestamp, or an
// existing snapshot's.
func (s *Store) holdSnapshot(id string, lv level, hold bool) {
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	s.snapTs[id] = lv.ts
	if hold {
		s.snapHeld[id] = lv
		if !s.holdAny || lv.ts < s.holdOldest {
			s.holdAny, s.holdOldest = true, lv.ts
		}
	}
}

// releaseSnapshot undoes holdSnapshot when the snapshot is deleted.
func (s *Store) releaseSnapshot(id string) {
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	delete(s.snapTs, id)
	if _, ok := s.snapHeld[id]; ok {
		delete(s.snapHeld, id)
		s.recomputeHoldLocked()
	}
	s.setDiscardTsLocked()
}

// apply commits ops atomically.
func (s *Store) apply(ops []op) error {
	return s.update(func(*badger.Txn) ([]op, error) { return ops, nil })
}

// update runs fn with a read transaction that sees every commit (no
// other commit runs meanwhile) and commits the ops it returns
// atomically, and returns once badger has written them.
func (s *Store) update(fn func(txn *badger.Txn) ([]op, error)) error {
	return s.transact(func(txn *badger.Txn) ([]op, func(), error) {
		ops, err := fn(txn)
		return ops, nil, err
	})
}

// transact is update whose fn may also return done, which runs after
// the ops are committed and written, before any other commit. While fn
// runs, s.readTs is the timestamp of txn and does not change.
func (s *Store) transact(fn func(txn *badger.Txn) (ops []op, done func(), err error)) error {
	if err := s.writable(); err != nil {
		return err
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if err := s.settleLocked(); err != nil {
		return err
	}
	rtxn := s.db.NewTransactionAt(s.readTs, false)
	ops, done, err := fn(rtxn)
	rtxn.Discard()
	if err != nil || len(ops) == 0 {
		return err
	}
	if err := s.commitLocked(ops); err != nil {
		return err
	}
	if err := s.settleLocked(); err != nil {
		return err
	}
	if done != nil {
		done()
	}
	return nil
}

// write commits ops, which were made without reading the store, once
// check (called with s.commitMu held) allows it: without waiting for the
// commits before it to be written.
func (s *Store) write(check func() error, ops []op) error {
	if err := s.writable(); err != nil {
		return err
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if err := s.failedLocked(); err != nil {
		return err
	}
	if err := check(); err != nil {
		return err
	}
	return s.commitLocked(ops)
}

// commitLocked writes ops at the next timestamp: handed to badger's
// writer in one transaction if they fit, else written as a split
// commit. Requires s.commitMu.
func (s *Store) commitLocked(ops []op) error {
	if len(ops) == 0 {
		// badger calls back at once for a transaction without writes,
		// ahead of the commits before it: never hand one over.
		return nil
	}
	ts := s.nextTs
	txn := s.db.NewTransactionAt(ts-1, true)
	for _, o := range ops {
		if err := setOp(txn, o); err != nil {
			txn.Discard()
			if errors.Is(err, badger.ErrTxnTooBig) {
				return s.commitSplitLocked(ops)
			}
			return fmt.Errorf("store %s: commit: %w", s.dir, err)
		}
	}
	// A timestamp is never used twice, even after a failed commit.
	s.nextTs = ts + 1
	s.bg.commits.Add(1)
	// The commit becomes the one in flight and joins the queue at once
	// (under ho.mu): a wait that finds it in flight finds it queued, and
	// hands it over itself, instead of waiting for a hand-over that may
	// be its own caller's to do (the releaser's).
	s.ho.mu.Lock()
	s.tsMu.Lock()
	f := &flight{done: make(chan struct{}), prev: s.flight}
	s.flight = f
	s.inFlight++
	full := s.inFlight >= maxInFlight
	s.tsMu.Unlock()
	if testHookInFlight != nil {
		testHookInFlight()
	}
	cb := s.commitCallback(f, ts)
	// With a callback, CommitAt returns nil and gives cb every error.
	s.handOffLocked(ts, func() { _ = txn.CommitAt(ts, cb) })
	if full {
		// badger is behind (a flush stalled): wait, so that the changes
		// a kill -9 can lose stay few.
		s.wait()
	}
	return nil
}

// commitCallback is what badger calls once commit f at ts is written
// (or failed).
func (s *Store) commitCallback(f *flight, ts uint64) func(error) {
	return func(err error) {
		// badger runs callbacks in goroutines of their own, in no
		// order: each waits for the one before, so that a commit is
		// reported written only once every commit before it is, and
		// nothing after a failed commit is published.
		if f.prev != nil {
			<-f.prev.done
			f.prev = nil
		}
		if err == nil && testHookWritten != nil {
			err = testHookWritten(ts)
		}
		s.tsMu.Lock()
		s.inFlight--
		switch {
		case err != nil && s.lost == nil:
			s.lost = fmt.Errorf("store %s: a change was reported done but badger could not write it (%v): remount the store; the changes made since are not all in it", s.dir, err)
		case err == nil && s.lost == nil && ts > s.readTs:
			s.readTs = ts
			s.setDiscardTsLocked()
		}
		s.tsMu.Unlock()
		close(f.done)
	}
}

// maxInFlight bounds the commits handed to badger and not yet written.
const maxInFlight = 64

// flight is a commit handed to badger; done is closed once badger wrote
// it and every commit before it (or failed to). prev is the commit
// handed over before it, until its callback has waited for it.
type flight struct {
	done chan struct{}
	prev *flight
}

// wait waits until every commit made so far is written and visible (or
// failed), handing over those still queued first.
func (s *Store) wait() {
	// The flight is read before the hand-over, under ho.mu: its commit
	// is queued by then (commitLocked), so this HandOver, or the one in
	// progress that it waits for, hands it to badger.
	s.ho.mu.Lock()
	s.tsMu.Lock()
	f := s.flight
	s.tsMu.Unlock()
	s.ho.mu.Unlock()
	s.HandOver()
	if f == nil {
		return
	}
	<-f.done
	s.tsMu.Lock()
	if s.flight == f {
		s.flight = nil
	}
	s.tsMu.Unlock()
}

// settle is wait, and returns the error of any commit that failed.
func (s *Store) settle() error {
	s.wait()
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	return s.lost
}

// settleLocked is settle with s.commitMu held, which also reports a
// store broken by a failed split commit.
func (s *Store) settleLocked() error {
	s.wait()
	return s.failedLocked()
}

// failedLocked returns why the store takes no more commits. Requires
// s.commitMu.
func (s *Store) failedLocked() error {
	if s.broken != nil {
		return s.broken
	}
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	return s.lost
}

// commitSplitLocked writes ops that do not fit in one transaction at
// timestamp T in several, marking T pending until all are written (see
// "Batch atomicity" in the package doc), and waits for them. Requires
// s.commitMu.
func (s *Store) commitSplitLocked(ops []op) error {
	if err := s.settleLocked(); err != nil {
		return err
	}
	T := s.nextTs
	s.nextTs = T + 2
	w := s.newPartWriter(func() uint64 { return T })
	w.hook = testHookSplitPart
	err := w.add(op{key: pendingKey, val: binary.BigEndian.AppendUint64(nil, T)})
	for i := 0; err == nil && i < len(ops); i++ {
		err = w.add(ops[i])
	}
	if err == nil {
		err = w.flush()
	}
	if err == nil && w.hook != nil {
		err = w.hook(-1)
	}
	if err == nil {
		txn := s.db.NewTransactionAt(T, true)
		if err = txn.Delete(pendingKey); err == nil {
			s.HandOver()
			err = txn.CommitAt(T+1, nil)
		}
		txn.Discard()
	}
	if err == nil {
		s.publish(T + 1)
		return nil
	}
	keys := make([][]byte, 0, len(ops)+1)
	for _, o := range ops {
		keys = append(keys, o.key)
	}
	keys = append(keys, pendingKey)
	if rerr := s.rollBackLocked(T, keys); rerr != nil {
		s.broken = fmt.Errorf("store %s: a failed commit could not be rolled back (%v), reopen the store to repair it: %w", s.dir, rerr, err)
		return s.broken
	}
	return fmt.Errorf("store %s: commit of %d changes failed and was rolled back: %w", s.dir, len(ops), err)
}

// rollBackLocked undoes a torn split commit at timestamp T: each of keys
// (which must end with pendingKey) is rewritten to its value at T-1.
// The rewrite itself may take several transactions; it becomes visible
// only when complete, and repeating it is harmless. Requires
// s.commitMu, and the read timestamp must still be below T.
func (s *Store) rollBackLocked(T uint64, keys [][]byte) error {
	rtxn := s.db.NewTransactionAt(T-1, false)
	defer rtxn.Discard()
	ops := make([]op, 0, len(keys))
	for _, k := range keys {
		v, err := getValue(rtxn, k)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			ops = append(ops, op{key: k, del: true})
		case err != nil:
			return err
		default:
			ops = append(ops, op{key: k, val: v})
		}
	}
	var last uint64
	w := s.newPartWriter(func() uint64 {
		last = s.nextTs
		s.nextTs++
		return last
	})
	for _, o := range ops {
		if err := w.add(o); err != nil {
			return err
		}
	}
	if err := w.flush(); err != nil {
		return err
	}
	s.publish(last)
	return nil
}

// recoverLocked rolls back the split commit at T that a crash left
// pending. Requires s.commitMu (or exclusive use of s, in Open).
func (s *Store) recoverLocked(T uint64) error {
	var keys [][]byte
	txn := s.db.NewTransactionAt(s.nextTs-1, false)
	it := txn.NewIterator(badger.IteratorOptions{AllVersions: true})
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		if item.Version() == T && string(item.Key()) != string(pendingKey) {
			keys = append(keys, item.KeyCopy(nil))
		}
	}
	it.Close()
	txn.Discard()
	if err := s.rollBackLocked(T, append(keys, pendingKey)); err != nil {
		return fmt.Errorf("store %s: rolling back the commit that a crash interrupted: %w", s.dir, err)
	}
	s.log.Warn("rolled back a commit that a crash interrupted", "store", s.dir, "changes", len(keys), "ts", T)
	return nil
}

func setOp(txn *badger.Txn, o op) error {
	if o.del {
		return txn.Delete(o.key)
	}
	return txn.Set(o.key, o.val)
}

// partWriter writes ops in as many transactions as they need; each
// part is committed at the timestamp ts returns.
type partWriter struct {
	s     *Store
	ts    func() uint64
	txn   *badger.Txn
	n     int // ops in txn
	parts int
	hook  func(part int) error
}

func (s *Store) newPartWriter(ts func() uint64) *partWriter {
	return &partWriter{s: s, ts: ts}
}

func (w *partWriter) add(o op) error {
	if w.txn == nil {
		w.txn = w.s.db.NewTransactionAt(0, true)
	}
	err := setOp(w.txn, o)
	if errors.Is(err, badger.ErrTxnTooBig) && w.n > 0 {
		if err := w.flush(); err != nil {
			return err
		}
		return w.add(o)
	}
	if err != nil {
		return fmt.Errorf("key %q: %w", o.key, err)
	}
	w.n++
	return nil
}

// flush commits the current part, if it holds anything.
func (w *partWriter) flush() error {
	if w.txn == nil {
		return nil
	}
	txn := w.txn
	w.txn, w.n = nil, 0
	defer txn.Discard()
	w.s.HandOver() // after the commits before it
	if err := txn.CommitAt(w.ts(), nil); err != nil {
		return err
	}
	w.parts++
	if w.hook != nil {
		return w.hook(w.parts)
	}
	return nil
}
