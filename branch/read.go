package branch

import (
	"errors"
	"fmt"
	"slices"

	badger "github.com/dgraph-io/badger/v4"
)

// entryReader reads the entries of one layer id: for a Layer at the
// read timestamp current when each read starts, for a View at its
// snapshot's timestamp. It implements Get, Load and Children for both.
type entryReader struct {
	prefix []byte // e/<id>: the root entry's key, and every entry's prefix
	what   string // `branch "main"`, `snapshot 1a2b3c4d`: for messages
	// read runs fn in a read transaction at the reader's timestamp.
	read func(fn func(txn *badger.Txn) error) error
}

// key returns the key of the entry at a valid path.
func (r *entryReader) key(path string) []byte {
	return appendPath(slices.Clip(r.prefix), path)
}

func (r *entryReader) get(path string) (*Entry, error) {
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("%s: %w", r.what, err)
	}
	var e *Entry
	err := r.read(func(txn *badger.Txn) error {
		item, err := txn.Get(r.key(path))
		if err != nil {
			return err
		}
		e, err = decodeItem(item)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("%s: entry %q: %w", r.what, path, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: entry %q: %w", r.what, path, err)
	}
	return e, nil
}

func (r *entryReader) load(fn func(path string, e *Entry) error) error {
	return r.walk(r.prefix, false, fn)
}

func (r *entryReader) children(dir string, fn func(name string, e *Entry) error) error {
	if err := checkPath(dir); err != nil {
		return fmt.Errorf("%s: %w", r.what, err)
	}
	return r.walk(append(r.key(dir), 0), true, func(p string, e *Entry) error {
		return fn(p[len(dir)+min(len(dir), 1):], e)
	})
}

// walk visits the entries whose keys start with prefix; with
// childrenOnly, only those one component below prefix (whose key has no
// 0x00 after the prefix), seeking past each child's subtree.
func (r *entryReader) walk(prefix []byte, childrenOnly bool, fn func(path string, e *Entry) error) error {
	var ferr error // fn's error, returned unwrapped
	err := r.read(func(txn *badger.Txn) error {
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
			path := pathOf(k[len(r.prefix):])
			e, err := decodeItem(item)
			if err != nil {
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
		return fmt.Errorf("%s: %w", r.what, err)
	}
	return nil
}

// subtreeEnd returns the first key after the subtree of the child whose
// component starts at k[start:].
func subtreeEnd(k []byte, start int) []byte {
	end := start + slices.Index(k[start:], 0)
	return append(slices.Clone(k[:end]), 1)
}

// decodeItem decodes the entry that item holds.
func decodeItem(item *badger.Item) (*Entry, error) {
	var e *Entry
	err := item.Value(func(v []byte) error {
		var err error
		e, err = DecodeEntry(v)
		return err
	})
	return e, err
}
