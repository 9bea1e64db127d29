package branch

import (
	"bytes"
	"encoding/binary"
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
		it := txn.NewIterator(badger.IteratorOptions{Prefix: entryPfx, AllVersions: true})
		defer it.Close()
		var (
			key []byte
			pts []uint64 // the read points of key's layer not yet matched, newest first
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
			seen := false
			for len(pts) > 0 && pts[0] >= item.Version() {
				seen, pts = true, pts[1:]
			}
			if !seen || item.IsDeletedOrExpired() || isMask(item) {
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

// readPoints returns, for each live layer id, the timestamps its
// entries are read at, newest first: txn's for a branch, each
// snapshot's Ts, the Tp of each live layer it is the parent of.
func readPoints(txn *badger.Txn) (map[uint64][]uint64, error) {
	points := map[uint64][]uint64{}
	err := scanLayerRecords(txn, func(name string, rec layerRecord) error {
		points[rec.id] = append(points[rec.id], txn.ReadTs())
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
		points[snap.Layer] = append(points[snap.Layer], snap.Ts)
	}
	// The parents of the live layer ids, and theirs (see "Layers").
	parents, err := scanParents(txn)
	if err != nil {
		return nil, err
	}
	var todo []uint64
	for id := range points {
		todo = append(todo, id)
	}
	done := map[uint64]bool{}
	for len(todo) > 0 {
		id := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if done[id] {
			continue
		}
		done[id] = true
		if p, ok := parents[id]; ok {
			points[p.id] = append(points[p.id], p.ts)
			todo = append(todo, p.id)
		}
	}
	for id, pts := range points {
		slices.Sort(pts)
		slices.Reverse(pts)
		points[id] = slices.Compact(pts)
	}
	return points, nil
}
