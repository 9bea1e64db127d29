package branch

import (
	"bytes"
	"fmt"
	"slices"

	badger "github.com/dgraph-io/badger/v4"
)

// Difference names the paths whose entry may differ between the layer
// as it is and snap, each with snap's entry there (nil: none), without
// reading every entry (see "Layers" in the package doc): fn may be
// called for a path without a difference. fn is called once per path,
// in path order (see Layer.Load). The keys of the levels above the
// shared one on either side are named, and the shared level's keys
// with a version between the two timestamps it is read at; the walk of
// those versions reads the snapshot's on the way (a key's versions come
// newest first). The paths the walk cannot settle (held by a level
// above the shared one, or whose version at the snapshot's timestamp
// is a deletion, so that a level below speaks) are read through the
// snapshot's chain by one merged iterator, in key order: it steps to a
// key near the last one, and seeks only to one further away. It
// reports false, having called fn for nothing, when the chains share
// no layer id (the caller compares everything). Its cost grows with
// what changed on either side since the shared level, plus a walk of
// the shared level's keys (without the values of those that did not
// change).
func (l *Layer) Difference(snap Snapshot, fn func(path string, e *Entry)) (bool, error) {
	levels, release, err := l.levels()
	if err != nil {
		return false, err
	}
	defer release()
	unpin, err := l.s.pinSnapshot(&snap)
	if err != nil {
		return false, fmt.Errorf("snapshot %s: %w", snap.ID, err)
	}
	defer unpin()
	other := append([]level{{id: snap.Layer, ts: snap.Ts}}, l.s.chainOf(snap.Layer)...)
	ia, ib := -1, -1
	for i, a := range levels {
		if ib = slices.IndexFunc(other, func(b level) bool { return b.id == a.id }); ib >= 0 {
			ia = i
			break
		}
	}
	if ia < 0 {
		return false, nil
	}
	var keys keyArena
	// above: the keys of the levels above the shared one, whose snapshot
	// entry is read through the snapshot's chain.
	above := l.s.ownKeySuffixes(append(slices.Clip(levels[:ia]), other[:ib]...), &keys)
	items := make([]diffItem, 0, len(above))
	for _, k := range above {
		items = append(items, diffItem{key: k, lookup: true})
	}
	lo, hi := levels[ia].ts, other[ib].ts
	if lo != hi {
		walked, err := l.s.walkShared(levels[ia].id, lo, hi, other[ib].ts, ib == len(other)-1, above, &keys)
		if err != nil {
			return false, fmt.Errorf("snapshot %s: %w", snap.ID, err)
		}
		items = mergeItems(items, walked)
	}
	if err := l.s.lookUpItems(other, items); err != nil {
		return false, fmt.Errorf("snapshot %s: %w", snap.ID, err)
	}
	for _, it := range items {
		fn(pathOf(it.key), it.e)
	}
	return true, nil
}

// diffItem is a path Difference names (its key suffix) with the
// snapshot's entry there, or lookup: that entry is still to be read
// through the snapshot's chain.
type diffItem struct {
	key    []byte
	e      *Entry
	lookup bool
}

// keyArena holds copies of keys in shared chunks: one allocation per
// many keys.
type keyArena struct{ buf []byte }

func (a *keyArena) copy(k []byte) []byte {
	if cap(a.buf)-len(a.buf) < len(k) {
		a.buf = make([]byte, 0, max(64<<10, len(k)))
	}
	n := len(a.buf)
	a.buf = append(a.buf, k...)
	return a.buf[n:len(a.buf):len(a.buf)]
}

// ownKeySuffixes returns the key suffixes (paths in key form) that the
// levels hold of their own, entries and masks, sorted and without
// repeats, copied into keys.
func (s *Store) ownKeySuffixes(lvs []level, keys *keyArena) [][]byte {
	var out [][]byte
	lists := 0
	for _, lv := range lvs {
		n := len(out)
		func() {
			txn := s.db.NewTransactionAt(lv.ts, false)
			defer txn.Discard()
			prefix := layerPrefix(lv.id)
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				out = append(out, keys.copy(it.Item().Key()[len(prefix):]))
			}
		}()
		if len(out) > n {
			lists++
		}
	}
	if lists > 1 {
		slices.SortFunc(out, bytes.Compare)
		out = slices.CompactFunc(out, bytes.Equal)
	}
	return out
}

// walkShared walks the keys of the shared level id with a version in
// (lo, hi] and returns them in key order, each with its version at
// snapTs, when the snapshot reads the shared level at all for it (no
// level above it on the snapshot's side holds the key, which the
// sorted above tells: those are left out, as they are read through the
// chain anyway). A key whose version at snapTs is a deletion, or that
// has none, is absent from the snapshot when bottom (no level below
// the shared one on the snapshot's side), else marked lookup: a level
// below speaks.
func (s *Store) walkShared(id, lo, hi, snapTs uint64, bottom bool, above [][]byte, keys *keyArena) ([]diffItem, error) {
	txn := s.db.NewTransactionAt(hi, false)
	defer txn.Discard()
	prefix := layerPrefix(id)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, AllVersions: true})
	defer it.Close()
	var (
		out      []diffItem
		j        int    // above[:j] sort before key
		key      []byte // the key whose versions are being read
		changed  bool   // it has a version in (lo, hi]
		settled  bool   // its version at snapTs was read
		below    bool   // that version is a deletion: a level below speaks
		snapSide *Entry
	)
	finish := func() {
		if key == nil || !changed {
			return
		}
		suffix := key[len(prefix):]
		for j < len(above) && bytes.Compare(above[j], suffix) < 0 {
			j++
		}
		if j < len(above) && bytes.Equal(above[j], suffix) {
			return
		}
		item := diffItem{key: keys.copy(suffix), e: snapSide}
		if (!settled || below) && !bottom {
			item.e, item.lookup = nil, true
		}
		out = append(out, item)
	}
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		if !bytes.Equal(item.Key(), key) {
			finish()
			key = item.KeyCopy(key[:0])
			changed, settled, below, snapSide = false, false, false, nil
		}
		// Versions come newest first: those above lo, which make the
		// key changed, before the others.
		v := item.Version()
		if v > lo {
			changed = true
		}
		if settled || !changed || v > snapTs {
			continue
		}
		settled = true
		switch {
		case item.IsDeletedOrExpired():
			below = true
		case isMask(item):
		default:
			e, err := decodeItem(item)
			if err != nil {
				return nil, fmt.Errorf("entry %q: %w", pathOf(key[len(prefix):]), err)
			}
			snapSide = e
		}
	}
	finish()
	return out, nil
}

// mergeItems merges two lists of items in key order without a key in
// common.
func mergeItems(a, b []diffItem) []diffItem {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]diffItem, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if bytes.Compare(a[0].key, b[0].key) < 0 {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// nearSteps is how many keys lookUpItems steps over before it seeks
// instead: a step costs a comparison per level, a seek a search of
// every table and memtable of the store.
const nearSteps = 8

// lookUpItems reads, for each item marked lookup (items in key order),
// its entry through the chain levels (a snapshot's), with one merged
// iterator that steps to the next key asked when it is near and seeks
// otherwise.
func (s *Store) lookUpItems(chain []level, items []diffItem) error {
	first := slices.IndexFunc(items, func(it diffItem) bool { return it.lookup })
	if first < 0 {
		return nil
	}
	txns := s.levelTxns(chain)
	defer discardAll(txns)
	m := newMergeIterKeys(txns, chain, layerPrefix, nil)
	defer m.close()
	m.seek(items[first].key)
	for i := first; i < len(items); i++ {
		it := &items[i]
		if !it.lookup {
			continue
		}
		it.lookup = false
		c := -1
		if m.valid() {
			c = bytes.Compare(m.suffix(), it.key)
		}
		for steps := 0; c < 0 && m.valid() && steps < nearSteps; steps++ {
			m.next()
			if m.valid() {
				c = bytes.Compare(m.suffix(), it.key)
			}
		}
		if c < 0 && m.valid() {
			m.seek(it.key)
			if m.valid() {
				c = bytes.Compare(m.suffix(), it.key)
			}
		}
		if !m.valid() {
			// Past the chain's last key: nothing more to find.
			for ; i < len(items); i++ {
				items[i].lookup = false
			}
			return nil
		}
		if c == 0 {
			e, err := decodeItem(m.item())
			if err != nil {
				return fmt.Errorf("entry %q: %w", pathOf(it.key), err)
			}
			it.e = e
		}
	}
	return nil
}
