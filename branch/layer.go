package branch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	badger "github.com/dgraph-io/badger/v4"
)

// layerEncoding is the leading byte of a layer record.
const layerEncoding = 1

// Layer is one branch's entries.
type Layer struct {
	s      *Store
	name   string
	id     uint64
	prefix []byte // e/<id>: the root entry's key, and every entry's prefix
}

func encodeLayer(id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{layerEncoding}, id)
}

func decodeLayer(b []byte) (uint64, error) {
	switch {
	case len(b) > 0 && b[0] > layerEncoding:
		return 0, fmt.Errorf("layer record encoding %d is newer than this agentfs reads (%d): use a newer agentfs: %w", b[0], layerEncoding, ErrIncompatible)
	case len(b) != 9 || b[0] != layerEncoding:
		return 0, fmt.Errorf("corrupt layer record (% x)", b)
	}
	return binary.BigEndian.Uint64(b[1:]), nil
}

// Layer returns the branch called name; ErrNotFound if there is none.
// "main" always exists.
func (s *Store) Layer(name string) (*Layer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.layers[name]; l != nil {
		return l, nil
	}
	var rec []byte
	err := s.view(func(txn *badger.Txn) error {
		var err error
		rec, err = getValue(txn, layerKey(name))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("branch %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("branch %q: %w", name, err)
	}
	id, err := decodeLayer(rec)
	if err != nil {
		return nil, fmt.Errorf("store %s: branch %q: %w", s.dir, name, err)
	}
	l := &Layer{s: s, name: name, id: id, prefix: layerPrefix(id)}
	s.layers[name] = l
	return l, nil
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

// ensureLayer creates the branch name, with a new layer id, if it does
// not exist.
func (s *Store) ensureLayer(name string) error {
	err := s.update(func(txn *badger.Txn) ([]op, error) {
		if _, err := txn.Get(layerKey(name)); err == nil {
			return nil, nil
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return nil, err
		}
		v, err := getValue(txn, layerSeq)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", layerSeq, err)
		}
		if len(v) != 8 {
			return nil, fmt.Errorf("corrupt %s (% x)", layerSeq, v)
		}
		id := binary.BigEndian.Uint64(v)
		return []op{
			{key: layerSeq, val: binary.BigEndian.AppendUint64(nil, id+1)},
			{key: layerKey(name), val: encodeLayer(id)},
		}, nil
	})
	if err != nil {
		return fmt.Errorf("store %s: creating branch %q: %w", s.dir, name, err)
	}
	return nil
}

// Name returns the branch name.
func (l *Layer) Name() string { return l.name }

// key returns the key of the entry at a valid path.
func (l *Layer) key(path string) []byte {
	return appendPath(slices.Clip(l.prefix), path)
}

// Get returns the entry at path; ErrNotFound if the layer has none.
func (l *Layer) Get(path string) (*Entry, error) {
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("branch %q: %w", l.name, err)
	}
	var e *Entry
	err := l.s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(l.key(path))
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			e, err = DecodeEntry(v)
			return err
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("branch %q: entry %q: %w", l.name, path, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("branch %q: entry %q: %w", l.name, path, err)
	}
	return e, nil
}

// Load calls fn with every entry of the layer, in path order: parents
// before children, each directory followed by its whole subtree,
// siblings in byte order of their names (see "Paths in keys" in the
// package doc). It reads one consistent state: commits made while it
// runs (fn may commit) are not seen. An error from fn stops Load and is
// returned as is.
func (l *Layer) Load(fn func(path string, e *Entry) error) error {
	return l.walk(l.prefix, false, fn)
}

// Children calls fn with each entry directly inside the directory dir
// ("" for the root), in byte order of their names. It reads one
// consistent state, as Load does.
func (l *Layer) Children(dir string, fn func(name string, e *Entry) error) error {
	if err := checkPath(dir); err != nil {
		return fmt.Errorf("branch %q: %w", l.name, err)
	}
	return l.walk(append(l.key(dir), 0), true, func(p string, e *Entry) error {
		return fn(p[len(dir)+min(len(dir), 1):], e)
	})
}

// walk visits the entries whose keys start with prefix; with
// childrenOnly, only those one component below prefix (whose key has no
// 0x00 after the prefix), seeking past each child's subtree.
func (l *Layer) walk(prefix []byte, childrenOnly bool, fn func(path string, e *Entry) error) error {
	var ferr error // fn's error, returned unwrapped
	err := l.s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); {
			item := it.Item()
			k := item.Key()
			if childrenOnly && slices.Contains(k[len(prefix):], 0) {
				// Only reached when a directory's entry is missing
				// (children without their parent): skip the subtree
				// below that child.
				it.Seek(subtreeEnd(k, len(prefix)))
				continue
			}
			path := pathOf(k[len(l.prefix):])
			var e *Entry
			if err := item.Value(func(v []byte) error {
				var err error
				e, err = DecodeEntry(v)
				return err
			}); err != nil {
				return fmt.Errorf("entry %q: %w", path, err)
			}
			if err := fn(path, e); err != nil {
				ferr = err
				return err
			}
			if childrenOnly {
				// Skip this child's subtree: its keys are key+0x00...
				it.Seek(append(item.KeyCopy(nil), 1))
				continue
			}
			it.Next()
		}
		return nil
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return fmt.Errorf("branch %q: %w", l.name, err)
	}
	return nil
}

// subtreeEnd returns the first key after the subtree of the child whose
// component starts at k[start:].
func subtreeEnd(k []byte, start int) []byte {
	end := start + slices.Index(k[start:], 0)
	return append(slices.Clone(k[:end]), 1)
}
