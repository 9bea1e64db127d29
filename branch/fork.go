package branch

import (
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// CreateLayer creates the branch name with snap's entries (see
// "Layers" in the package doc): a new layer id whose parent is snap,
// with an epoch above snap's (every entry it shows names an object the
// snapshot shares), snap recorded as its origin. One small commit,
// whatever the depth (the flattener merges a deep chain later). Errors
// wrap ErrInvalidName for a bad name, ErrExists if the branch exists,
// ErrNotFound if snap does not.
func (s *Store) CreateLayer(name string, from Snapshot) (*Layer, error) {
	if err := checkName("branch", name); err != nil {
		return nil, err
	}
	var rec layerRecord
	err := s.fromSnapshot(&from, func(txn *badger.Txn) ([]op, func(), error) {
		if _, err := txn.Get(layerKey(name)); err == nil {
			return nil, nil, fmt.Errorf("branch %q: %w", name, ErrExists)
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return nil, nil, err
		}
		id, seqOp, err := nextLayerID(txn)
		if err != nil {
			return nil, nil, err
		}
		rec = layerRecord{id: id, epoch: from.Epoch + 1, created: time.Now().UnixNano(), origin: from.ID}
		ops, err := s.layerOnOps(txn, id, level{id: from.Layer, ts: from.Ts})
		if err != nil {
			return nil, nil, err
		}
		return append(ops, seqOp, op{key: layerKey(name), val: rec.encode()}), nil, nil
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

// ResetTo makes the layer's entries exactly snap's by re-pointing (see
// "Layers" in the package doc): the branch gets a new layer id whose
// parent is snap, and an epoch above its own and snap's, so every
// restored object counts as shared. One small commit, whatever the
// depth. The old layer id is left as it was, for the snapshots that
// read it. snap may be of another branch. Callers reload what they
// cached of the layer afterwards.
func (l *Layer) ResetTo(snap Snapshot) error {
	_, err := l.reset(snap, nil)
	return err
}

// ResetToKeeping is ResetTo with a snapshot of the layer as it was
// taken in the same commit (labelled label, of kind kind: a restore's
// safety snapshot, which undoes it), and returned: the snapshot exists
// if and only if the reset happened, whatever a crash interrupts. The
// old layer id is frozen, as Snapshot freezes it, but its branch goes
// on in none of the layer ids that read it: Store.Lineage of the
// snapshot's layer is not the branch's. One small commit, written when
// it returns but not synced: Store.Sync makes it survive a power loss.
func (l *Layer) ResetToKeeping(snap Snapshot, label, kind string) (Snapshot, error) {
	if err := l.checkSnapshot(label, kind); err != nil {
		return Snapshot{}, err
	}
	return l.reset(snap, &safetyArgs{label, kind})
}

// safetyArgs are the label and kind of the snapshot ResetToKeeping takes.
type safetyArgs struct{ label, kind string }

// reset is ResetTo, and with safety ResetToKeeping, which returns the
// snapshot it took.
func (l *Layer) reset(snap Snapshot, safety *safetyArgs) (Snapshot, error) {
	var kept Snapshot
	err := l.s.fromSnapshot(&snap, func(txn *badger.Txn) ([]op, func(), error) {
		rec, err := l.recordLocked(txn)
		if err != nil {
			return nil, nil, err
		}
		id, seqOp, err := nextLayerID(txn)
		if err != nil {
			return nil, nil, err
		}
		var ops []op
		if safety != nil {
			if kept, ops, err = l.snapshotOps(txn, rec, safety.label, safety.kind, 0); err != nil {
				return nil, nil, err
			}
		}
		rec.id, rec.epoch = id, max(rec.epoch, snap.Epoch)+1
		lops, err := l.s.layerOnOps(txn, id, level{id: snap.Layer, ts: snap.Ts})
		if err != nil {
			return nil, nil, err
		}
		ops = append(append(ops, lops...), seqOp, op{key: layerKey(l.name), val: rec.encode()})
		return ops, func() {
			l.state.Store(&layerState{id: id, chain: l.s.chainOf(id)})
			l.epoch.Store(rec.epoch)
			if safety != nil {
				l.s.freeze(kept.Layer, kept.Ts, 0)
			}
		}, nil
	})
	switch {
	case err != nil && safety != nil:
		return Snapshot{}, fmt.Errorf("branch %q: resetting to snapshot %s after a snapshot of the branch: %w", l.name, snap.ID, err)
	case err != nil:
		return Snapshot{}, fmt.Errorf("branch %q: resetting to snapshot %s: %w", l.name, snap.ID, err)
	}
	return kept, nil
}

// fromSnapshot runs fn as transact does, after checking that snap
// exists; snap's versions stay until fn has returned.
func (s *Store) fromSnapshot(snap *Snapshot, fn func(txn *badger.Txn) ([]op, func(), error)) error {
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
		return fn(txn)
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
			if cached != nil && cached.id() == id {
				cached.gone.Store(true)
			}
		}, nil
	})
	if err != nil {
		return fmt.Errorf("store %s: deleting branch %q: %w", s.dir, name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.layers[name]; l != nil && l.id() == id {
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
