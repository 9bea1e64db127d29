package branch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
)

// Layers: a layer id read over its parent's entries (see "Layers" in
// the package doc).

// flattenDepth is the most levels a chain holds, the layer's own
// included, before the flattener merges it (see "Depth" in the package
// doc): flattenAt. A variable for tests only, atomic as a test changes
// it while a store's flattener runs.
var flattenDepth atomic.Int32

func init() { flattenDepth.Store(8) }

// flattenAt is flattenDepth's value.
func flattenAt() int { return int(flattenDepth.Load()) }

// maxChain bounds a walk up the parents (a cycle would be a corrupt
// store; none is ever written).
const maxChain = 1 << 16

// maskByte is the value of a mask: no entry (or base) at this key,
// whatever the levels below hold.
const maskByte = 0xff

var maskValue = []byte{maskByte}

// featureLayers marks a store in which a layer has a parent.
const featureLayers = "layers"

var (
	parentPfx = []byte("parent/")
	frozenPfx = []byte("frozen/")
)

const (
	parentEncoding = 1
	frozenEncoding = 1
)

// level is one layer id read at a timestamp: a link of a chain.
type level struct {
	id, ts uint64
}

func parentKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, parentPfx...), id)
}

func frozenKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, frozenPfx...), id)
}

// encodeFrozen encodes a frozen record: the timestamp above which the
// layer has no version, and its successor (the layer id its branch went
// on in; 0 for none).
func encodeFrozen(ts, succ uint64) []byte {
	b := binary.BigEndian.AppendUint64([]byte{frozenEncoding}, ts)
	return binary.BigEndian.AppendUint64(b, succ)
}

func decodeFrozen(b []byte) (ts, succ uint64, err error) {
	if len(b) > 0 && b[0] > frozenEncoding {
		return 0, 0, fmt.Errorf("frozen record encoding %d is newer than this agentfs reads (%d): use a newer agentfs: %w", b[0], frozenEncoding, ErrIncompatible)
	}
	if len(b) != 17 || b[0] != frozenEncoding {
		return 0, 0, fmt.Errorf("corrupt frozen record (% x)", b)
	}
	return binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:]), nil
}

func (p level) encode() []byte {
	b := binary.BigEndian.AppendUint64([]byte{parentEncoding}, p.id)
	return binary.BigEndian.AppendUint64(b, p.ts)
}

func decodeParent(b []byte) (level, error) {
	if len(b) > 0 && b[0] > parentEncoding {
		return level{}, fmt.Errorf("parent record encoding %d is newer than this agentfs reads (%d): use a newer agentfs: %w", b[0], parentEncoding, ErrIncompatible)
	}
	if len(b) != 17 || b[0] != parentEncoding {
		return level{}, fmt.Errorf("corrupt parent record (% x)", b)
	}
	return level{id: binary.BigEndian.Uint64(b[1:]), ts: binary.BigEndian.Uint64(b[9:])}, nil
}

// isMask reports whether item's value is a mask.
func isMask(item *badger.Item) bool {
	if item.ValueSize() != 1 {
		return false
	}
	mask := false
	// An unreadable value is no mask; its reader reports the error.
	_ = item.Value(func(v []byte) error {
		mask = len(v) == 1 && v[0] == maskByte
		return nil
	})
	return mask
}

// chainOf returns the parent levels of layer id, nearest first.
func (s *Store) chainOf(id uint64) []level {
	s.pmu.RLock()
	defer s.pmu.RUnlock()
	var chain []level
	for {
		p, ok := s.parents[id]
		if !ok || len(chain) > maxChain {
			return chain
		}
		chain = append(chain, p)
		id = p.id
	}
}

// needsHoldLocked reports whether a read of lv needs lv.ts held from
// compaction: unless lv.id was frozen at or below lv.ts (see "Keeping
// versions" in the package doc). Requires s.pmu.
func (s *Store) needsHoldLocked(lv level) bool {
	f, ok := s.frozen[lv.id]
	return !ok || f > lv.ts
}

// addParent records that layer id has parent p, and holds p.ts unless
// p's layer is frozen at or below it (see "Layers" in the package doc).
// p.ts is at or above the discard timestamp: a snapshot's pinned Ts, or
// a level below one. A parent it replaces (a flattening) stays held
// until the store reopens: a read that began before reads it.
func (s *Store) addParent(id uint64, p level) {
	s.pmu.Lock()
	s.parents[id] = p
	hold := s.needsHoldLocked(p)
	s.pmu.Unlock()
	if !hold {
		return
	}
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	s.parentHeld[p] = true
	if !s.holdAny || p.ts < s.holdOldest {
		s.holdAny, s.holdOldest = true, p.ts
	}
	s.setDiscardTsLocked()
}

// freeze records that layer id has no version above ts (its frozen/
// key is committed) and that its branch went on in succ (0: none), and
// stops holding the snapshots and parents that
// read it at or above ts: what they see is each key's newest version,
// which compaction keeps (see "Keeping versions" in the package doc).
func (s *Store) freeze(id, ts, succ uint64) {
	s.pmu.Lock()
	if f, ok := s.frozen[id]; !ok || ts < f {
		s.frozen[id] = ts
	}
	if succ != 0 {
		s.succ[id] = succ
	}
	s.pmu.Unlock()
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	for sid, lv := range s.snapHeld {
		if lv.id == id && lv.ts >= ts {
			delete(s.snapHeld, sid)
		}
	}
	for lv := range s.parentHeld {
		if lv.id == id && lv.ts >= ts {
			delete(s.parentHeld, lv)
		}
	}
	s.recomputeHoldLocked()
	s.setDiscardTsLocked()
}

// loadParents reads every parent and frozen key in txn and holds the
// parents that need it (at Open, before anything sets the discard
// timestamp).
func (s *Store) loadParents(txn *badger.Txn) error {
	parents, err := scanParents(txn)
	if err != nil {
		return err
	}
	frozen, err := scanFrozen(txn)
	if err != nil {
		return err
	}
	s.pmu.Lock()
	s.parents = parents
	for id, r := range frozen {
		s.frozen[id] = r.ts
		if r.succ != 0 {
			s.succ[id] = r.succ
		}
	}
	var held []level
	for _, p := range parents {
		if s.needsHoldLocked(p) {
			held = append(held, p)
		}
	}
	s.pmu.Unlock()
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	for _, p := range held {
		s.parentHeld[p] = true
	}
	s.recomputeHoldLocked()
	return nil
}

// frozenRecord is the value of frozen/<id>.
type frozenRecord struct{ ts, succ uint64 }

// scanFrozen reads every frozen key in txn: layer id → record.
func scanFrozen(txn *badger.Txn) (map[uint64]frozenRecord, error) {
	frozen := map[uint64]frozenRecord{}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: frozenPfx, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(frozenPfx)+8 {
			return nil, fmt.Errorf("corrupt frozen key %q", k)
		}
		id := binary.BigEndian.Uint64(k[len(frozenPfx):])
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return nil, err
		}
		var r frozenRecord
		if r.ts, r.succ, err = decodeFrozen(v); err != nil {
			return nil, fmt.Errorf("frozen record of layer %d: %w", id, err)
		}
		frozen[id] = r
	}
	return frozen, nil
}

// Lineage returns the layer id that the branch whose layer was layer
// went on in: a snapshot freezes its branch's layer id and the branch
// goes on in a new one (see "Keeping versions" in the package doc);
// Lineage follows those steps to the newest. That is a branch's
// LayerInfo.ID when the branch was neither restored (ResetTo) nor
// deleted since, and layer itself for a layer no snapshot froze. So
// Lineage(snap.Layer) == info.ID tells that snap was taken of that
// branch since its last restore (merge bases, sizes).
func (s *Store) Lineage(layer uint64) uint64 {
	s.pmu.RLock()
	defer s.pmu.RUnlock()
	for range maxChain {
		next, ok := s.succ[layer]
		if !ok {
			break
		}
		layer = next
	}
	return layer
}

// scanParents reads every parent key in txn: layer id → parent.
func scanParents(txn *badger.Txn) (map[uint64]level, error) {
	parents := map[uint64]level{}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: parentPfx, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(parentPfx)+8 {
			return nil, fmt.Errorf("corrupt parent key %q", k)
		}
		id := binary.BigEndian.Uint64(k[len(parentPfx):])
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return nil, err
		}
		p, err := decodeParent(v)
		if err != nil {
			return nil, fmt.Errorf("parent of layer %d: %w", id, err)
		}
		parents[id] = p
	}
	return parents, nil
}

// levelTxns opens a read transaction for each level; the caller
// discards them (discardAll).
func (s *Store) levelTxns(levels []level) []*badger.Txn {
	txns := make([]*badger.Txn, len(levels))
	for i, lv := range levels {
		txns[i] = s.db.NewTransactionAt(lv.ts, false)
	}
	return txns
}

func discardAll(txns []*badger.Txn) {
	for _, t := range txns {
		t.Discard()
	}
}

// ownKeys reports whether layer id has a key of its own (an entry, a
// base or a mask) in txn.
func ownKeys(txn *badger.Txn, id uint64) bool {
	for _, prefix := range [][]byte{layerPrefix(id), basePrefix(id)} {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		it.Rewind()
		found := it.Valid()
		it.Close()
		if found {
			return true
		}
	}
	return false
}

// layerOnOps returns the ops that give the new layer id the entries of
// the level top (a snapshot's layer at its Ts): its parent key, naming
// top or, when top holds no key of its own, the first level below it
// that does. It never copies: a chain that grows too deep is merged by
// the flattener, off the caller's path (see "Depth" in the package
// doc). It records the parent (addParent) before the commit, so that
// whoever reads the new layer id finds its chain: should the commit
// fail, the id is never used. Requires s.commitMu (txn from transact),
// and top pinned.
func (s *Store) layerOnOps(txn *badger.Txn, id uint64, top level) ([]op, error) {
	chain := s.chainOf(top.id)
	// A level without keys of its own reads as its parent: skip it.
	for len(chain) > 0 {
		ltxn := s.db.NewTransactionAt(top.ts, false)
		own := ownKeys(ltxn, top.id)
		ltxn.Discard()
		if own {
			break
		}
		top, chain = chain[0], chain[1:]
	}
	ops := []op{{key: parentKey(id), val: top.encode()}}
	if _, err := txn.Get(featureKey(featureLayers)); errors.Is(err, badger.ErrKeyNotFound) {
		ops = append(ops, op{key: featureKey(featureLayers)})
	} else if err != nil {
		return nil, err
	}
	s.addParent(id, top)
	if 2+len(chain) > flattenAt() {
		s.kickFlatten()
	}
	return ops, nil
}

// mergeIter walks the keys of a chain of levels below one sub-prefix
// (the key form of a directory, or nothing), in key order: at a key
// that several levels hold the topmost wins, and masks are skipped with
// what they hide.
type mergeIter struct {
	its       []*badger.Iterator
	prefixes  [][]byte // each level's layer prefix (e/<id> or base/<id>)
	cur       int      // the level at the current key; -1 when done
	keepMasks bool     // stop at masks too (the flattener copies them)
}

// newMergeIter opens iterators over levels (txns[i] reads levels[i])
// for the keys kind(id)+sub.
func newMergeIter(txns []*badger.Txn, levels []level, kind func(uint64) []byte, sub []byte) *mergeIter {
	return newMergeIterOpts(txns, levels, kind, sub, badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64})
}

// newMergeIterKeys is newMergeIter for a caller that seeks often and
// reads few values: nothing is read ahead (badger's read-ahead starts
// again at every seek).
func newMergeIterKeys(txns []*badger.Txn, levels []level, kind func(uint64) []byte, sub []byte) *mergeIter {
	return newMergeIterOpts(txns, levels, kind, sub, badger.IteratorOptions{})
}

func newMergeIterOpts(txns []*badger.Txn, levels []level, kind func(uint64) []byte, sub []byte, opts badger.IteratorOptions) *mergeIter {
	m := &mergeIter{cur: -1}
	for i, lv := range levels {
		prefix := kind(lv.id)
		m.prefixes = append(m.prefixes, prefix)
		opts.Prefix = append(slices.Clip(prefix), sub...)
		m.its = append(m.its, txns[i].NewIterator(opts))
	}
	return m
}

func (m *mergeIter) close() {
	for _, it := range m.its {
		it.Close()
	}
}

func (m *mergeIter) rewind() {
	for _, it := range m.its {
		it.Rewind()
	}
	m.settle()
}

// seek moves to the first key at or after suffix (a key without the
// layer prefix).
func (m *mergeIter) seek(suffix []byte) {
	for i, it := range m.its {
		it.Seek(append(slices.Clip(m.prefixes[i]), suffix...))
	}
	m.settle()
}

func (m *mergeIter) valid() bool { return m.cur >= 0 }

// suffix is the current key without its layer prefix; valid until the
// iterator moves.
func (m *mergeIter) suffix() []byte { return m.suffixOf(m.cur) }

func (m *mergeIter) item() *badger.Item { return m.its[m.cur].Item() }

func (m *mergeIter) suffixOf(i int) []byte {
	return m.its[i].Item().Key()[len(m.prefixes[i]):]
}

func (m *mergeIter) next() {
	m.skip()
	m.settle()
}

// skip moves every level at the current key past it.
func (m *mergeIter) skip() {
	if len(m.its) == 1 {
		m.its[0].Next()
		return
	}
	k := slices.Clone(m.suffix())
	for i, it := range m.its {
		if it.Valid() && bytes.Equal(m.suffixOf(i), k) {
			it.Next()
		}
	}
}

// settle finds the least key of the levels, topmost first, skipping
// masks.
func (m *mergeIter) settle() {
	for {
		m.cur = -1
		for i, it := range m.its {
			if it.Valid() && (m.cur < 0 || bytes.Compare(m.suffixOf(i), m.suffixOf(m.cur)) < 0) {
				m.cur = i
			}
		}
		if m.cur < 0 || m.keepMasks || !isMask(m.item()) {
			return
		}
		m.skip()
	}
}

// sweepLayers deletes the keys of the layer ids that are not live (see
// "Layers" in the package doc) and holds the parents of the live ones
// only: at Open, before anything reads.
func (s *Store) sweepLayers() error {
	var dead []uint64
	resucc := map[uint64]uint64{}
	err := s.transact(func(txn *badger.Txn) ([]op, func(), error) {
		live := map[uint64]bool{}
		err := scanLayerRecords(txn, func(_ string, rec layerRecord) error {
			live[rec.id] = true
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		snaps, err := scanSnapshots(txn, snapPfx)
		if err != nil {
			return nil, nil, err
		}
		for _, snap := range snaps {
			live[snap.Layer] = true
		}
		frozen, err := scanFrozen(txn)
		if err != nil {
			return nil, nil, err
		}
		s.pmu.RLock()
		parents := maps.Clone(s.parents)
		s.pmu.RUnlock()
		for id := range live {
			for p, ok := parents[id]; ok && !live[p.id]; p, ok = parents[p.id] {
				live[p.id] = true
			}
		}
		var ops []op
		for id := range parents {
			if !live[id] {
				ops = append(ops, op{key: parentKey(id), del: true})
				dead = append(dead, id)
			}
		}
		for id, r := range frozen {
			if !live[id] {
				ops = append(ops, op{key: frozenKey(id), del: true})
				dead = append(dead, id)
				continue
			}
			// Keep the lineage (Lineage) through the ids that go: point
			// past them.
			succ := r.succ
			for n := 0; succ != 0 && !live[succ] && n < maxChain; n++ {
				succ = frozen[succ].succ
			}
			if succ != r.succ {
				ops = append(ops, op{key: frozenKey(id), val: encodeFrozen(r.ts, succ)})
				resucc[id] = succ
			}
		}
		for _, pfx := range [][]byte{entryPfx, basePfx} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: pfx})
			for it.Rewind(); it.Valid(); {
				k := it.Item().Key()
				if len(k) < len(pfx)+8 {
					it.Close()
					return nil, nil, fmt.Errorf("corrupt key %q", k)
				}
				id := binary.BigEndian.Uint64(k[len(pfx):])
				if live[id] {
					if id == math.MaxUint64 {
						break
					}
					it.Seek(binary.BigEndian.AppendUint64(slices.Clip(pfx), id+1))
					continue
				}
				ops = append(ops, op{key: it.Item().KeyCopy(nil), del: true})
				it.Next()
			}
			it.Close()
		}
		return ops, nil, nil
	})
	if err != nil {
		return fmt.Errorf("store %s: deleting the layers nothing reads: %w", s.dir, err)
	}
	s.pmu.Lock()
	for _, id := range dead {
		delete(s.parents, id)
		delete(s.frozen, id)
		delete(s.succ, id)
	}
	for id, succ := range resucc {
		if succ == 0 {
			delete(s.succ, id)
		} else {
			s.succ[id] = succ
		}
	}
	var held []level
	for _, p := range s.parents {
		if s.needsHoldLocked(p) {
			held = append(held, p)
		}
	}
	s.pmu.Unlock()
	s.tsMu.Lock()
	defer s.tsMu.Unlock()
	clear(s.parentHeld)
	for _, p := range held {
		s.parentHeld[p] = true
	}
	s.recomputeHoldLocked()
	return nil
}
