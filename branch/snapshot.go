package branch

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Snapshot kinds: who took a snapshot, and why.
const (
	KindManual  = "manual"   // asked for by the user
	KindAuto    = "auto"     // taken once changes settled
	KindGit     = "git"      // taken when a git commit (tag, checkout) moved a ref
	KindBuild   = "build"    // taken when a build or test command succeeded
	KindIdle    = "idle"     // taken when the mount went idle
	KindSafety  = "safety"   // taken before a destructive operation (restore, ...)
	KindPreRun  = "pre-run"  // taken before a command runs
	KindPostRun = "post-run" // taken after a command ran
)

var snapshotKinds = []string{KindManual, KindAuto, KindGit, KindBuild, KindIdle, KindSafety, KindPreRun, KindPostRun}

const (
	snapIDLen      = 8    // hex digits of a snapshot id
	minIDPrefix    = 4    // the shortest id prefix Store.Snapshot resolves
	maxLabelLen    = 4096 // bytes of a snapshot label
	snapEncoding   = 1    // the snapshot record encoding
	snapIDAttempts = 100  // random ids tried before giving up
)

// Snapshot is an immutable point in time of a branch (see "Snapshots" in
// the package doc).
type Snapshot struct {
	ID      string    // 8 lowercase hex digits
	Branch  string    // the branch's name when the snapshot was taken
	Layer   uint64    // the branch's layer id; the snapshot outlives it
	Ts      uint64    // the commit timestamp its entries are read at
	Label   string    // the user's description; may be empty
	Kind    string    // one of the Kind constants
	Created time.Time // when it was taken
	Epoch   uint64    // the layer's epoch when taken; its entries have Epoch <= it
}

func (s *Snapshot) encode() []byte {
	b := []byte{snapEncoding}
	for _, v := range []uint64{s.Layer, s.Ts, s.Epoch, uint64(s.Created.UnixNano())} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	for _, str := range []string{s.Branch, s.Kind, s.Label} {
		b = appendString(b, str)
	}
	return b
}

func decodeSnapshot(id string, b []byte) (Snapshot, error) {
	if len(b) > 0 && b[0] > snapEncoding {
		return Snapshot{}, fmt.Errorf("snapshot %s: record encoding %d is newer than this agentfs reads (%d): use a newer agentfs: %w", id, b[0], snapEncoding, ErrIncompatible)
	}
	if len(b) == 0 || b[0] != snapEncoding {
		return Snapshot{}, fmt.Errorf("snapshot %s: corrupt record (% x)", id, b)
	}
	d := decoder{b: b[1:]}
	s := Snapshot{ID: id, Layer: d.uint64(), Ts: d.uint64(), Epoch: d.uint64()}
	s.Created = time.Unix(0, int64(d.uint64()))
	s.Branch, s.Kind, s.Label = d.string(), d.string(), d.string()
	if err := d.finish(); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: corrupt record (%v): % x", id, err, b)
	}
	return s, nil
}

// Snapshot records the layer's current entries as a new snapshot, and
// raises the layer's epoch (see "Snapshots" in the package doc). It
// holds every commit that returned before it was called. One small
// commit, whatever the number of entries; durable (synced) when it
// returns. kind is one of the Kind constants.
//
// Changing objects is the caller's business: after Snapshot returns,
// entries with Epoch below the new Layer.Epoch name objects the
// snapshot shares. If only the sync fails, the snapshot exists and is
// returned with the error.
func (l *Layer) Snapshot(label, kind string) (Snapshot, error) {
	if err := l.checkSnapshot(label, kind); err != nil {
		return Snapshot{}, err
	}
	var snap Snapshot
	err := l.s.transact(func(txn *badger.Txn) ([]op, func(), error) {
		rec, err := l.recordLocked(txn)
		if err != nil {
			return nil, nil, err
		}
		// The branch goes on in a new layer id over the snapshot's, which
		// is frozen: nothing writes it again, so compaction may drop
		// every version no read point sees (see "Keeping versions").
		next, seqOp, err := nextLayerID(txn)
		if err != nil {
			return nil, nil, err
		}
		var ops []op
		snap, ops, err = l.snapshotOps(txn, rec, label, kind, next)
		if err != nil {
			return nil, nil, err
		}
		cur := level{id: snap.Layer, ts: snap.Ts}
		rec.id = next
		rec.epoch++
		lops, err := l.s.layerOnOps(txn, next, cur)
		if err != nil {
			return nil, nil, err
		}
		ops = append(append(ops, lops...), seqOp, op{key: layerKey(l.name), val: rec.encode()})
		return ops, func() {
			l.state.Store(&layerState{id: next, chain: l.s.chainOf(next)})
			l.epoch.Store(rec.epoch)
			l.s.freeze(cur.id, cur.ts, next)
		}, nil
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("branch %q: taking a snapshot: %w", l.name, err)
	}
	if err := l.s.Sync(); err != nil {
		return snap, fmt.Errorf("branch %q: snapshot %s taken but not made durable: %w", l.name, snap.ID, err)
	}
	return snap, nil
}

// checkSnapshot refuses a snapshot kind or label that Snapshot does
// not record.
func (l *Layer) checkSnapshot(label, kind string) error {
	if !slices.Contains(snapshotKinds, kind) {
		return fmt.Errorf("branch %q: snapshot kind %q: want one of %s", l.name, kind, strings.Join(snapshotKinds, ", "))
	}
	if len(label) > maxLabelLen {
		return fmt.Errorf("branch %q: snapshot label of %d bytes (at most %d)", l.name, len(label), maxLabelLen)
	}
	return nil
}

// snapshotOps makes what a commit writes to take a snapshot of the
// layer as it is (rec: its record, read in txn): the snapshot record,
// the frozen key of the layer id it reads, whose branch goes on in succ
// (0: in no layer id that reads it, after a ResetToKeeping), and
// feature/snapshots the first time. The snapshot is held until the
// commit is done and the layer id frozen (Store.freeze). Requires
// s.commitMu (txn from transact).
func (l *Layer) snapshotOps(txn *badger.Txn, rec layerRecord, label, kind string, succ uint64) (Snapshot, []op, error) {
	id, err := newSnapshotID(txn)
	if err != nil {
		return Snapshot{}, nil, err
	}
	cur := level{id: l.id(), ts: l.s.readTs}
	snap := Snapshot{ID: id, Branch: l.name, Layer: cur.id, Ts: cur.ts, Label: label, Kind: kind, Created: time.Now().Round(0), Epoch: rec.epoch} // Round(0): no monotonic reading, as decoded
	ops := []op{{key: snapKey(id), val: snap.encode()}, {key: frozenKey(cur.id), val: encodeFrozen(cur.ts, succ)}}
	if _, err := txn.Get(featureKey(featureSnapshots)); errors.Is(err, badger.ErrKeyNotFound) {
		ops = append(ops, op{key: featureKey(featureSnapshots), val: []byte{}})
	} else if err != nil {
		return Snapshot{}, nil, err
	}
	// Held until the commit is done: snap.Ts is the read timestamp, so
	// nothing has been discarded above it. A failed commit leaves it
	// held (the commit may be on disk anyway) until the store reopens.
	l.s.holdSnapshot(id, cur, true)
	return snap, ops, nil
}

// snapIDRand draws snapshot ids (tests replace it).
var snapIDRand = rand.Uint32

// newSnapshotID draws a random id that no snapshot has.
func newSnapshotID(txn *badger.Txn) (string, error) {
	for range snapIDAttempts {
		id := fmt.Sprintf("%08x", snapIDRand())
		if _, err := txn.Get(snapKey(id)); errors.Is(err, badger.ErrKeyNotFound) {
			return id, nil
		} else if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("no free snapshot id after %d attempts", snapIDAttempts)
}

// Snapshots returns every snapshot, in the order they were taken.
func (s *Store) Snapshots() ([]Snapshot, error) {
	var snaps []Snapshot
	err := s.view(func(txn *badger.Txn) error {
		var err error
		snaps, err = scanSnapshots(txn, snapPfx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: listing snapshots: %w", s.dir, err)
	}
	slices.SortFunc(snaps, func(a, b Snapshot) int { return cmp.Compare(a.Ts, b.Ts) })
	return snaps, nil
}

// scanSnapshots decodes the snapshot records whose keys start with
// prefix (snapPfx, or snapPfx + an id prefix), in key order.
func scanSnapshots(txn *badger.Txn, prefix []byte) ([]Snapshot, error) {
	var snaps []Snapshot
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return nil, err
		}
		snap, err := decodeSnapshot(string(it.Item().Key()[len(snapPfx):]), v)
		if err != nil {
			return nil, err
		}
		snaps = append(snaps, snap)
	}
	return snaps, nil
}

// getSnapshot reads the snapshot with the full id; an error wrapping
// ErrNotFound if there is none.
func getSnapshot(txn *badger.Txn, id string) (Snapshot, error) {
	v, err := getValue(txn, snapKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", id, err)
	}
	return decodeSnapshot(id, v)
}

// checkSnapshot reads snap's record and checks that snap is it (the
// caller's copy is not stale or made up).
func checkSnapshot(txn *badger.Txn, snap *Snapshot) error {
	rec, err := getSnapshot(txn, snap.ID)
	if err != nil {
		return err
	}
	if rec.Ts != snap.Ts || rec.Layer != snap.Layer {
		return fmt.Errorf("snapshot %s: the record has layer %d at %d, not layer %d at %d: %w", snap.ID, rec.Layer, rec.Ts, snap.Layer, snap.Ts, ErrNotFound)
	}
	return nil
}

// Snapshot returns the snapshot that ref names: a snapshot id, an
// unambiguous id prefix of at least 4 digits, or a tag (see "Names" in
// the package doc). Errors wrap ErrNotFound, or ErrAmbiguous for a
// prefix of several ids.
func (s *Store) Snapshot(ref string) (Snapshot, error) {
	var snap Snapshot
	err := s.view(func(txn *badger.Txn) error {
		if !looksLikeSnapshotID(ref) {
			id, err := getValue(txn, tagKey(ref))
			if errors.Is(err, badger.ErrKeyNotFound) {
				return fmt.Errorf("snapshot %q: no tag by that name, and not a snapshot id (%d to %d hex digits): %w", ref, minIDPrefix, snapIDLen, ErrNotFound)
			}
			if err != nil {
				return err
			}
			snap, err = getSnapshot(txn, string(id))
			if err != nil {
				return fmt.Errorf("tag %q: %w", ref, err)
			}
			return nil
		}
		snaps, err := scanSnapshots(txn, snapKey(ref))
		if err != nil {
			return err
		}
		switch len(snaps) {
		case 0:
			return fmt.Errorf("snapshot %s: %w", ref, ErrNotFound)
		case 1:
			snap = snaps[0]
			return nil
		}
		ids := make([]string, len(snaps))
		for i, sn := range snaps {
			ids[i] = sn.ID
		}
		return fmt.Errorf("snapshot %s: the prefix names %d snapshots (%s): type more digits: %w", ref, len(snaps), strings.Join(ids, ", "), ErrAmbiguous)
	})
	if err != nil {
		return Snapshot{}, err
	}
	return snap, nil
}

// DeleteSnapshot deletes the snapshot with the full id. A tagged
// snapshot is refused (ErrInUse): delete its tags first. Branches
// created from it stay as they are. The versions only it kept go at
// later compactions.
func (s *Store) DeleteSnapshot(id string) error {
	err := s.transact(func(txn *badger.Txn) ([]op, func(), error) {
		if _, err := getSnapshot(txn, id); err != nil {
			return nil, nil, err
		}
		tags, err := scanTags(txn)
		if err != nil {
			return nil, nil, err
		}
		var names []string
		for name, target := range tags {
			if target == id {
				names = append(names, name)
			}
		}
		if len(names) > 0 {
			slices.Sort(names)
			return nil, nil, fmt.Errorf("snapshot %s is tagged (%s): delete its tags first: %w", id, strings.Join(names, ", "), ErrInUse)
		}
		return []op{{key: snapKey(id), del: true}, {key: hashRootKey(id), del: true}}, func() { s.releaseSnapshot(id) }, nil
	})
	if err != nil {
		return fmt.Errorf("deleting snapshot: %w", err)
	}
	return nil
}

// loadSnapshots records every snapshot in txn, and holds those whose
// layer is not frozen at their Ts (at Open, after loadParents, before
// anything sets the discard timestamp).
func (s *Store) loadSnapshots(txn *badger.Txn) error {
	snaps, err := scanSnapshots(txn, snapPfx)
	if err != nil {
		return err
	}
	for _, snap := range snaps {
		lv := level{id: snap.Layer, ts: snap.Ts}
		s.pmu.RLock()
		hold := s.needsHoldLocked(lv)
		s.pmu.RUnlock()
		s.holdSnapshot(snap.ID, lv, hold)
	}
	return nil
}

// View reads a snapshot's entries (see Store.SnapshotView).
type View struct {
	snap Snapshot
	r    entryReader
}

// SnapshotView returns a read-only view of snap's entries, with the
// semantics of the Layer methods of the same names. It keeps reading
// exactly the snapshot whatever is committed or compacted later; once
// the snapshot is deleted its reads fail with ErrNotFound.
func (s *Store) SnapshotView(snap Snapshot) *View {
	v := &View{snap: snap}
	v.r = entryReader{s: s, kind: layerPrefix, what: "snapshot " + snap.ID, open: func() ([]level, func(), error) {
		if err := s.usable(); err != nil {
			return nil, nil, err
		}
		unpin, err := s.pinSnapshot(&v.snap)
		if err != nil {
			return nil, nil, err
		}
		return append([]level{{id: snap.Layer, ts: snap.Ts}}, s.chainOf(snap.Layer)...), unpin, nil
	}}
	return v
}

// Snapshot returns the snapshot v reads.
func (v *View) Snapshot() Snapshot { return v.snap }

// Get returns the entry at path; ErrNotFound if the snapshot has none.
func (v *View) Get(path string) (*Entry, error) { return v.r.get(path) }

// Load calls fn with every entry of the snapshot, in path order, as
// Layer.Load does.
func (v *View) Load(fn func(path string, e *Entry) error) error { return v.r.load(fn) }

// Children calls fn with each entry directly inside the directory dir,
// as Layer.Children does.
func (v *View) Children(dir string, fn func(name string, e *Entry) error) error {
	return v.r.children(dir, fn)
}
