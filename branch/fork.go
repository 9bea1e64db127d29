package branch

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// CreateLayer creates the branch name holding a copy of snap's entries
// (see "Branches from snapshots" in the package doc): a new layer id,
// epoch 1, every entry with Epoch 0 (its object is shared with the
// snapshot), snap recorded as its origin. One commit, split when big.
// Errors wrap ErrInvalidName for a bad name, ErrExists if the branch
// exists, ErrNotFound if snap does not.
func (s *Store) CreateLayer(name string, from Snapshot) (*Layer, error) {
	if err := checkName("branch", name); err != nil {
		return nil, err
	}
	var rec layerRecord
	err := s.fromSnapshot(&from, func(txn, stxn *badger.Txn) ([]op, func(), error) {
		if _, err := txn.Get(layerKey(name)); err == nil {
			return nil, nil, fmt.Errorf("branch %q: %w", name, ErrExists)
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return nil, nil, err
		}
		id, seqOp, err := nextLayerID(txn)
		if err != nil {
			return nil, nil, err
		}
		rec = layerRecord{id: id, epoch: 1, created: time.Now().UnixNano(), origin: from.ID}
		ops := []op{seqOp, {key: layerKey(name), val: rec.encode()}}
		prefix := layerPrefix(id)
		it := newEntryIter(stxn, layerPrefix(from.Layer), true)
		defer it.close()
		for ; it.valid(); it.next() {
			e, _, err := it.entry()
			if err != nil {
				return nil, nil, err
			}
			e.Epoch = 0
			ops = append(ops, op{key: append(slices.Clip(prefix), it.suffix()...), val: e.Encode()})
		}
		// The snapshot's bases go with its entries (see "Bases").
		bprefix := basePrefix(id)
		bit := newEntryIter(stxn, basePrefix(from.Layer), true)
		defer bit.close()
		for ; bit.valid(); bit.next() {
			v, err := bit.it.Item().ValueCopy(nil)
			if err != nil {
				return nil, nil, err
			}
			ops = append(ops, op{key: append(slices.Clip(bprefix), bit.suffix()...), val: v})
		}
		return ops, nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: creating branch %q from snapshot %s: %w", s.dir, name, from.ID, err)
	}
	l := s.newLayer(name, rec)
	s.mu.Lock()
	s.layers[name] = l
	s.mu.Unlock()
	return l, nil
}

// ResetTo makes the layer's entries exactly snap's, in one commit (split
// when big): entries snap lacks are deleted, those that differ are
// written, and the epoch is raised past every restored entry's (see
// "Branches from snapshots, restore, deletion" in the package doc).
// snap may be of another branch. Callers reload what they cached of
// the layer afterwards.
func (l *Layer) ResetTo(snap Snapshot) error {
	err := l.s.fromSnapshot(&snap, func(txn, stxn *badger.Txn) ([]op, func(), error) {
		rec, err := l.recordLocked(txn)
		if err != nil {
			return nil, nil, err
		}
		epoch := max(rec.epoch, snap.Epoch)
		ops, err := resetOps(txn, stxn, l.r.prefix, layerPrefix(snap.Layer), func(it *entryIter) ([]byte, error) {
			e, v, err := it.entry()
			if err != nil {
				return nil, err
			}
			epoch = max(epoch, e.Epoch)
			return v, nil
		})
		if err != nil {
			return nil, nil, err
		}
		// The bases go back to the snapshot's too (see "Bases").
		bops, err := resetOps(txn, stxn, basePrefix(l.id), basePrefix(snap.Layer), func(it *entryIter) ([]byte, error) {
			return it.it.Item().ValueCopy(nil)
		})
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, bops...)
		rec.epoch = epoch + 1
		ops = append(ops, op{key: layerKey(l.name), val: rec.encode()})
		return ops, func() { l.epoch.Store(rec.epoch) }, nil
	})
	if err != nil {
		return fmt.Errorf("branch %q: resetting to snapshot %s: %w", l.name, snap.ID, err)
	}
	return nil
}

// resetOps returns the ops that make the keys below cur (read in txn)
// those below old (read in stxn): keys old lacks are deleted, those
// that differ written. value reads the value at old's position.
func resetOps(txn, stxn *badger.Txn, cur, old []byte, value func(*entryIter) ([]byte, error)) ([]op, error) {
	ci := newEntryIter(txn, cur, true)
	defer ci.close()
	oi := newEntryIter(stxn, old, true)
	defer oi.close()
	var ops []op
	for ci.valid() || oi.valid() {
		var c int // compares ci with oi; an exhausted side sorts last
		switch {
		case !oi.valid():
			c = -1
		case !ci.valid():
			c = 1
		default:
			c = bytes.Compare(ci.suffix(), oi.suffix())
		}
		if c < 0 {
			ops = append(ops, op{key: ci.it.Item().KeyCopy(nil), del: true})
			ci.next()
			continue
		}
		v, err := value(oi)
		if err != nil {
			return nil, err
		}
		if c > 0 || !ci.sameValue(v) {
			ops = append(ops, op{key: append(slices.Clip(cur), oi.suffix()...), val: v})
		}
		if c == 0 {
			ci.next()
		}
		oi.next()
	}
	return ops, nil
}

// fromSnapshot runs fn as transact does, with stxn reading snap at its
// timestamp, after checking that snap exists; snap's versions stay
// until fn has returned.
func (s *Store) fromSnapshot(snap *Snapshot, fn func(txn, stxn *badger.Txn) ([]op, func(), error)) error {
	if err := s.writable(); err != nil {
		return err
	}
	unpin, err := s.pinSnapshot(snap)
	if err != nil {
		return err
	}
	defer unpin()
	return s.transact(func(txn *badger.Txn) ([]op, func(), error) {
		if err := checkSnapshot(txn, snap); err != nil {
			return nil, nil, err
		}
		stxn := s.db.NewTransactionAt(snap.Ts, false)
		defer stxn.Discard()
		return fn(txn, stxn)
	})
}

// DeleteLayer deletes the branch name and its entries (one commit, split
// when big). Snapshots of it stay. "main" cannot be deleted (ErrInUse).
// The caller makes sure that nothing uses the branch (no process is
// bound to it) and holds off new users until DeleteLayer returns;
// Layers of it that remain fail with ErrNotFound.
func (s *Store) DeleteLayer(name string) error {
	if name == "main" {
		return fmt.Errorf(`branch "main" cannot be deleted: %w`, ErrInUse)
	}
	s.mu.Lock()
	cached := s.layers[name]
	s.mu.Unlock()
	var id uint64
	err := s.transact(func(txn *badger.Txn) ([]op, func(), error) {
		rec, err := getLayerRecord(txn, name)
		if err != nil {
			return nil, nil, err
		}
		id = rec.id
		ops := []op{{key: layerKey(name), del: true}}
		for _, prefix := range [][]byte{layerPrefix(id), basePrefix(id)} {
			it := newEntryIter(txn, prefix, false)
			for ; it.valid(); it.next() {
				ops = append(ops, op{key: it.it.Item().KeyCopy(nil), del: true})
			}
			it.close()
		}
		return ops, func() {
			if cached != nil && cached.id == id {
				cached.gone.Store(true)
			}
		}, nil
	})
	if err != nil {
		return fmt.Errorf("store %s: deleting branch %q: %w", s.dir, name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.layers[name]; l != nil && l.id == id {
		l.gone.Store(true)
		delete(s.layers, name)
	}
	return nil
}

// entryIter walks the entry keys of one layer in txn, in key order.
type entryIter struct {
	it     *badger.Iterator
	prefix []byte
}

func newEntryIter(txn *badger.Txn, prefix []byte, values bool) *entryIter {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: values, PrefetchSize: 64})
	it.Rewind()
	return &entryIter{it: it, prefix: prefix}
}

func (e *entryIter) valid() bool { return e.it.Valid() }
func (e *entryIter) next()       { e.it.Next() }
func (e *entryIter) close()      { e.it.Close() }

// suffix returns the current key after the layer prefix (the path in
// key form), valid until next.
func (e *entryIter) suffix() []byte { return e.it.Item().Key()[len(e.prefix):] }

// entry returns the current entry, decoded, and a copy of its value.
func (e *entryIter) entry() (*Entry, []byte, error) {
	v, err := e.it.Item().ValueCopy(nil)
	if err != nil {
		return nil, nil, err
	}
	ent, err := DecodeEntry(v)
	if err != nil {
		return nil, nil, fmt.Errorf("entry %q: %w", pathOf(e.suffix()), err)
	}
	return ent, v, nil
}

// sameValue reports whether the current value is v (false when it
// cannot be read: rewriting it does no harm).
func (e *entryIter) sameValue(v []byte) bool {
	same := false
	// An error leaves same false, as documented above.
	_ = e.it.Item().Value(func(cur []byte) error {
		same = bytes.Equal(cur, v)
		return nil
	})
	return same
}
