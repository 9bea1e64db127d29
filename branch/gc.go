package branch

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	badger "github.com/dgraph-io/badger/v4"
)

// ReferencedObjects calls fn with every object that an entry of a
// branch or of a snapshot names (see "Garbage collection" in the
// package doc). An object is named once per path that holds it,
// however many snapshots share it there; an object at several paths
// (hard links, renames between snapshots) may be named more than once.
// It reads one consistent state: an object that a commit made after it
// began refers to is not named, so a collector must spare objects
// created since it began. An error from fn stops it and is returned as
// is.
func (s *Store) ReferencedObjects(fn func(obj string) error) error {
	var ferr error
	err := s.view(func(txn *badger.Txn) error {
		points, err := readPoints(txn)
		if err != nil {
			return err
		}
		txns := map[uint64]*badger.Txn{} // by timestamp, for hidden
		defer func() {
			for _, t := range txns {
				t.Discard()
			}
		}()
		// hidden reports whether a level of stack holds the key at
		// suffix (an entry or a mask), hiding what is below.
		hidden := func(stack []level, suffix []byte) (bool, error) {
			for _, lv := range stack {
				t := txns[lv.ts]
				if t == nil {
					t = s.db.NewTransactionAt(lv.ts, false)
					txns[lv.ts] = t
				}
				_, err := t.Get(append(layerPrefix(lv.id), suffix...))
				if err == nil {
					return true, nil
				}
				if !errors.Is(err, badger.ErrKeyNotFound) {
					return false, err
				}
			}
			return false, nil
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: entryPfx, AllVersions: true})
		defer it.Close()
		var (
			key []byte
			pts []readPoint // the read points of key's layer not yet matched, newest first
		)
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			if k := item.Key(); !bytes.Equal(k, key) {
				if len(k) < len(entryPfx)+8 {
					return fmt.Errorf("corrupt entry key %q", k)
				}
				key = append(key[:0], k...)
				pts = points[binary.BigEndian.Uint64(k[len(entryPfx):])]
			}
			// Versions come newest first: this one is what every read
			// point at or above it, and below the newer versions, sees.
			// It is seen when one of them reads it directly, or through
			// levels none of which holds the key.
			seen := false
			for len(pts) > 0 && pts[0].ts >= item.Version() {
				pt := pts[0]
				pts = pts[1:]
				if seen || item.IsDeletedOrExpired() {
					continue
				}
				if pt.direct {
					seen = true
					continue
				}
				for _, stack := range pt.stacks {
					h, err := hidden(stack, key[len(entryPfx)+8:])
					if err != nil {
						return err
					}
					if !h {
						seen = true
						break
					}
				}
			}
			if !seen || isMask(item) {
				continue
			}
			e, err := decodeItem(item)
			if err != nil {
				return fmt.Errorf("entry %q of layer %d at %d: %w", pathOf(key[len(entryPfx)+8:]), binary.BigEndian.Uint64(key[len(entryPfx):]), item.Version(), err)
			}
			if e.Object == "" {
				continue
			}
			if err := fn(e.Object); err != nil {
				ferr = err
				return err
			}
		}
		return nil
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return fmt.Errorf("store %s: listing referenced objects: %w", s.dir, err)
	}
	return nil
}

// readPoint is a timestamp a layer id's entries are read at, and by
// whom: directly (a branch, a snapshot), or as a level of chains, each
// through the levels above it (a stack, topmost first), which may hide
// its keys.
type readPoint struct {
	ts     uint64
	direct bool
	stacks [][]level
}

// readPoints returns, for each live layer id, the points its entries
// are read at, newest first: txn's for a branch, each snapshot's Ts,
// and, for the levels of their chains, the Tp each is read at with the
// levels above it.
func readPoints(txn *badger.Txn) (map[uint64][]readPoint, error) {
	var roots []level
	err := scanLayerRecords(txn, func(name string, rec layerRecord) error {
		roots = append(roots, level{id: rec.id, ts: txn.ReadTs()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	snaps, err := scanSnapshots(txn, snapPfx)
	if err != nil {
		return nil, err
	}
	for _, snap := range snaps {
		roots = append(roots, level{id: snap.Layer, ts: snap.Ts})
	}
	parents, err := scanParents(txn)
	if err != nil {
		return nil, err
	}
	type at struct{ id, ts uint64 }
	byAt := map[at]*readPoint{}
	seenStack := map[string]bool{}
	point := func(lv level) *readPoint {
		k := at(lv)
		if byAt[k] == nil {
			byAt[k] = &readPoint{ts: lv.ts}
		}
		return byAt[k]
	}
	for _, root := range roots {
		point(root).direct = true
		chain := []level{root}
		for p, ok := parents[root.id]; ok && len(chain) <= maxChain; p, ok = parents[p.id] {
			stack := slices.Clone(chain)
			// One stack per distinct (level, levels above).
			sk := fmt.Sprint(p, stack)
			if !seenStack[sk] {
				seenStack[sk] = true
				rp := point(p)
				rp.stacks = append(rp.stacks, stack)
			}
			chain = append(chain, p)
		}
	}
	points := map[uint64][]readPoint{}
	for k, rp := range byAt {
		points[k.id] = append(points[k.id], *rp)
	}
	for id, pts := range points {
		slices.SortFunc(pts, func(a, b readPoint) int { return cmp.Compare(b.ts, a.ts) })
		points[id] = pts
	}
	return points, nil
}
