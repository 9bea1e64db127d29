package branch

import (
	"errors"
	"fmt"
	"slices"

	badger "github.com/dgraph-io/badger/v4"
)

// entryReader reads the entries (or the bases) of one layer id through
// its chain of parents (see "Layers" in the package doc): for a Layer
// at the read timestamp current when each read starts, for a View at
// its snapshot's timestamp. It implements Get, Load and Children for
// both.
type entryReader struct {
	s    *Store
	kind func(id uint64) []byte // layerPrefix or basePrefix
	what string                 // `branch "main"`, `snapshot 1a2b3c4d`: for messages
	// open returns the levels to read, the reader's own first, readable
	// until release is called.
	open func() (levels []level, release func(), err error)
}

// read runs fn with a transaction for each level.
func (r *entryReader) read(fn func(levels []level, txns []*badger.Txn) error) error {
	levels, release, err := r.open()
	if err != nil {
		return err
	}
	defer release()
	txns := r.s.levelTxns(levels)
	defer discardAll(txns)
	return fn(levels, txns)
}

// getRaw calls fn with the value at path's key in the first level
// that holds it; badger.ErrKeyNotFound if none does, or if it is a
// mask.
func (r *entryReader) getRaw(path string, fn func(v []byte) error) error {
	suffix := appendPath(nil, path)
	levels, release, err := r.open()
	if err != nil {
		return err
	}
	defer release()
	for _, lv := range levels {
		// A transaction per level, opened only when the level is asked.
		found, err := func() (bool, error) {
			txn := r.s.db.NewTransactionAt(lv.ts, false)
			defer txn.Discard()
			item, err := txn.Get(append(r.kind(lv.id), suffix...))
			if errors.Is(err, badger.ErrKeyNotFound) {
				return false, nil
			}
			if err != nil {
				return true, err
			}
			if isMask(item) {
				return true, badger.ErrKeyNotFound
			}
			return true, item.Value(fn)
		}()
		if found {
			return err
		}
	}
	return badger.ErrKeyNotFound
}

func (r *entryReader) get(path string) (*Entry, error) {
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("%s: %w", r.what, err)
	}
	var e *Entry
	err := r.getRaw(path, func(v []byte) error {
		var err error
		e, err = DecodeEntry(v)
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
	return r.walk(nil, false, decodeEntryAt(fn))
}

func (r *entryReader) children(dir string, fn func(name string, e *Entry) error) error {
	if err := checkPath(dir); err != nil {
		return fmt.Errorf("%s: %w", r.what, err)
	}
	return r.walk(append(appendPath(nil, dir), 0), true, decodeEntryAt(func(p string, e *Entry) error {
		return fn(p[len(dir)+min(len(dir), 1):], e)
	}))
}

// decodeEntryAt turns fn into a walk callback that decodes entries.
func decodeEntryAt(fn func(path string, e *Entry) error) func(path string, v []byte) error {
	return func(path string, v []byte) error {
		e, err := DecodeEntry(v)
		if err != nil {
			return &walkError{fmt.Errorf("entry %q: %w", path, err)}
		}
		return fn(path, e)
	}
}

// walkError is an error of the walk itself (a corrupt value) rather
// than of its callback's caller: walk wraps it with what it reads.
type walkError struct{ err error }

func (e *walkError) Error() string { return e.err.Error() }
func (e *walkError) Unwrap() error { return e.err }

// walk visits the keys (through the chain) whose path key starts with
// sub (a directory's key and 0x00, or nothing for all), with their
// values (valid during fn); with childrenOnly, only those one
// component below sub, seeking past each child's subtree.
func (r *entryReader) walk(sub []byte, childrenOnly bool, fn func(path string, v []byte) error) error {
	var ferr error // fn's error, returned unwrapped
	err := r.read(func(levels []level, txns []*badger.Txn) error {
		m := newMergeIter(txns, levels, r.kind, sub)
		defer m.close()
		for m.rewind(); m.valid(); {
			k := m.suffix()
			if childrenOnly && slices.Contains(k[len(sub):], 0) {
				// Only reached when a directory's entry is missing
				// (children without their parent): skip the subtree
				// below that child.
				m.seek(subtreeEnd(k, len(sub)))
				continue
			}
			path := pathOf(k)
			err := m.item().Value(func(v []byte) error { return fn(path, v) })
			if err != nil {
				var we *walkError
				if errors.As(err, &we) {
					return we.err
				}
				ferr = err
				return err
			}
			if childrenOnly {
				// Skip this child's subtree: its keys are key+0x00...
				m.seek(append(slices.Clone(m.suffix()), 1))
				continue
			}
			m.next()
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
