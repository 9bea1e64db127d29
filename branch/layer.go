package branch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Layer record encodings (see "Layer records" in the package doc).
const (
	layerEncodingID = 1 // the id only
	layerEncoding   = 2 // the newest
)

// Layer is one branch's entries.
type Layer struct {
	s    *Store
	name string
	r    entryReader // entries
	br   entryReader // bases

	state atomic.Pointer[layerState] // changed by Snapshot, ResetTo and the flattener, under s.commitMu
	epoch atomic.Uint64              // as in the layer record
	gone  atomic.Bool                // deleted by DeleteLayer
}

// layerState is the layer id a Layer reads and writes, and its chain.
type layerState struct {
	id    uint64
	chain []level // the parent levels, nearest first
}

// id returns the layer id the branch names now.
func (l *Layer) id() uint64 { return l.state.Load().id }

// layerRecord is the value of layer/<name>.
type layerRecord struct {
	id      uint64
	epoch   uint64
	created int64  // Unix ns; 0 if unknown (main, branches made before encoding 2)
	origin  string // the id of the snapshot the branch was created from
}

func (r layerRecord) encode() []byte {
	if r.epoch == 0 && r.created == 0 && r.origin == "" {
		return binary.BigEndian.AppendUint64([]byte{layerEncodingID}, r.id)
	}
	b := binary.BigEndian.AppendUint64([]byte{layerEncoding}, r.id)
	b = binary.BigEndian.AppendUint64(b, r.epoch)
	b = binary.BigEndian.AppendUint64(b, uint64(r.created))
	return appendString(b, r.origin)
}

func decodeLayer(b []byte) (layerRecord, error) {
	var r layerRecord
	if len(b) > 0 && b[0] > layerEncoding {
		return r, fmt.Errorf("layer record encoding %d is newer than this agentfs reads (%d): use a newer agentfs: %w", b[0], layerEncoding, ErrIncompatible)
	}
	if len(b) > 0 && (b[0] == layerEncodingID || b[0] == layerEncoding) {
		d := decoder{b: b[1:]}
		r.id = d.uint64()
		if b[0] == layerEncoding {
			r.epoch = d.uint64()
			r.created = int64(d.uint64())
			r.origin = d.string()
		}
		if d.finish() == nil {
			return r, nil
		}
	}
	return layerRecord{}, fmt.Errorf("corrupt layer record (% x)", b)
}

// Layer returns the branch called name; ErrNotFound if there is none.
// "main" always exists.
func (s *Store) Layer(name string) (*Layer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.layers[name]; l != nil && !l.gone.Load() {
		return l, nil
	}
	var rec layerRecord
	err := s.view(func(txn *badger.Txn) error {
		var err error
		rec, err = getLayerRecord(txn, name)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", s.dir, err)
	}
	l := s.newLayer(name, rec)
	s.layers[name] = l
	return l, nil
}

func (s *Store) newLayer(name string, rec layerRecord) *Layer {
	l := &Layer{s: s, name: name}
	what := fmt.Sprintf("branch %q", name)
	l.r = entryReader{s: s, kind: layerPrefix, what: what, open: l.levels}
	l.br = entryReader{s: s, kind: basePrefix, what: what, open: l.levels}
	st := &layerState{id: rec.id, chain: s.chainOf(rec.id)}
	l.state.Store(st)
	l.epoch.Store(rec.epoch)
	if 1+len(st.chain) > flattenAt() {
		s.kickFlatten()
	}
	return l
}

// levels returns the levels a read of the layer reads: its own at the
// current read timestamp, then its chain.
func (l *Layer) levels() ([]level, func(), error) {
	if l.gone.Load() {
		return nil, nil, errLayerGone
	}
	if err := l.s.usable(); err != nil {
		return nil, nil, err
	}
	st := l.state.Load()
	ts := l.s.pin()
	return append([]level{{id: st.id, ts: ts}}, st.chain...), func() { l.s.unpin(ts) }, nil
}

// getLayerRecord reads the record of branch name; an error wrapping
// ErrNotFound if there is none.
func getLayerRecord(txn *badger.Txn, name string) (layerRecord, error) {
	v, err := getValue(txn, layerKey(name))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return layerRecord{}, fmt.Errorf("branch %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return layerRecord{}, fmt.Errorf("branch %q: %w", name, err)
	}
	rec, err := decodeLayer(v)
	if err != nil {
		return layerRecord{}, fmt.Errorf("branch %q: %w", name, err)
	}
	return rec, nil
}

// Layers returns the names of all branches, sorted.
func (s *Store) Layers() ([]string, error) {
	var names []string
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: layerPfx})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			names = append(names, string(it.Item().Key()[len(layerPfx):]))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: listing branches: %w", s.dir, err)
	}
	return names, nil
}

// LayerInfo describes a branch.
type LayerInfo struct {
	Name    string
	ID      uint64 // the layer id, as in Snapshot.Layer
	Epoch   uint64 // as Layer.Epoch
	Origin  string // the id of the snapshot it was created from; "" for main
	Created time.Time
	// (zero for main and for branches older than snapshots)
}

// LayerInfos describes all branches, sorted by name.
func (s *Store) LayerInfos() ([]LayerInfo, error) {
	var infos []LayerInfo
	err := s.view(func(txn *badger.Txn) error {
		return scanLayerRecords(txn, func(name string, rec layerRecord) error {
			info := LayerInfo{Name: name, ID: rec.id, Epoch: rec.epoch, Origin: rec.origin}
			if rec.created != 0 {
				info.Created = time.Unix(0, rec.created)
			}
			infos = append(infos, info)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: listing branches: %w", s.dir, err)
	}
	return infos, nil
}

// scanLayerRecords calls fn with every branch's record, by name.
func scanLayerRecords(txn *badger.Txn, fn func(name string, rec layerRecord) error) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: layerPfx, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		name := string(it.Item().Key()[len(layerPfx):])
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return fmt.Errorf("branch %q: %w", name, err)
		}
		rec, err := decodeLayer(v)
		if err != nil {
			return fmt.Errorf("branch %q: %w", name, err)
		}
		if err := fn(name, rec); err != nil {
			return err
		}
	}
	return nil
}

// ensureLayer creates the branch name, with a new layer id, if it does
// not exist.
func (s *Store) ensureLayer(name string) error {
	err := s.update(func(txn *badger.Txn) ([]op, error) {
		if _, err := txn.Get(layerKey(name)); err == nil {
			return nil, nil
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return nil, err
		}
		id, seqOp, err := nextLayerID(txn)
		if err != nil {
			return nil, err
		}
		return []op{seqOp, {key: layerKey(name), val: layerRecord{id: id}.encode()}}, nil
	})
	if err != nil {
		return fmt.Errorf("store %s: creating branch %q: %w", s.dir, name, err)
	}
	return nil
}

// nextLayerID returns a new layer id and the op that consumes it.
func nextLayerID(txn *badger.Txn) (uint64, op, error) {
	v, err := getValue(txn, layerSeq)
	if err != nil {
		return 0, op{}, fmt.Errorf("reading %s: %w", layerSeq, err)
	}
	if len(v) != 8 {
		return 0, op{}, fmt.Errorf("corrupt %s (% x)", layerSeq, v)
	}
	id := binary.BigEndian.Uint64(v)
	return id, op{key: layerSeq, val: binary.BigEndian.AppendUint64(nil, id+1)}, nil
}

// Name returns the branch name.
func (l *Layer) Name() string { return l.name }

// Epoch returns the layer's epoch: an entry whose Epoch is below it may
// name an object that a snapshot shares (see "Epochs" in the package
// doc). It changes only in Snapshot and ResetTo.
func (l *Layer) Epoch() uint64 { return l.epoch.Load() }

var errLayerGone = fmt.Errorf("the branch was deleted: %w", ErrNotFound)

// recordLocked reads the layer's record, checking that the branch still
// names this layer. Requires s.commitMu (txn from transact).
func (l *Layer) recordLocked(txn *badger.Txn) (layerRecord, error) {
	if l.gone.Load() {
		return layerRecord{}, errLayerGone
	}
	rec, err := getLayerRecord(txn, l.name)
	if err == nil && rec.id != l.id() {
		err = errLayerGone
	}
	return rec, err
}

// Get returns the entry at path; ErrNotFound if the layer has none.
func (l *Layer) Get(path string) (*Entry, error) { return l.r.get(path) }

// Load calls fn with every entry of the layer, in path order: parents
// before children, each directory followed by its whole subtree,
// siblings in byte order of their names (see "Paths in keys" in the
// package doc). It reads one consistent state: commits made while it
// runs (fn may commit) are not seen. An error from fn stops Load and is
// returned as is.
func (l *Layer) Load(fn func(path string, e *Entry) error) error { return l.r.load(fn) }

// Children calls fn with each entry directly inside the directory dir
// ("" for the root), in byte order of their names. It reads one
// consistent state, as Load does.
func (l *Layer) Children(dir string, fn func(name string, e *Entry) error) error {
	return l.r.children(dir, fn)
}
