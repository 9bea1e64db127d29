package branch

import (
	"crypto/rand"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// Layer is one branch's entries.
type Layer struct {
	s      *Store
	name   string
	prefix []byte // e/<id>/
}

// Layer returns the branch called name.
func (s *Store) Layer(name string) (*Layer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.layers[name]; l != nil {
		return l, nil
	}
	var id []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte("layer/" + name))
		if err != nil {
			return err
		}
		id, err = it.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("branch %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	l := &Layer{s: s, name: name, prefix: append([]byte("e/"+string(id)), '/')}
	s.layers[name] = l
	return l, nil
}

// ensureLayer creates the branch name if it does not exist.
func (s *Store) ensureLayer(name string) (*Layer, error) {
	err := s.db.Update(func(txn *badger.Txn) error {
		key := []byte("layer/" + name)
		if _, err := txn.Get(key); err == nil {
			return nil
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		var id [8]byte
		rand.Read(id[:])
		return txn.Set(key, []byte(fmt.Sprintf("%x", id)))
	})
	if err != nil {
		return nil, fmt.Errorf("branch %q: %w", name, err)
	}
	return s.Layer(name)
}

// Name returns the branch name.
func (l *Layer) Name() string { return l.name }

func (l *Layer) key(path string) []byte {
	return append(append([]byte{}, l.prefix...), path...)
}

// Load calls fn with every entry of the layer, in path order.
func (l *Layer) Load(fn func(path string, e *Entry) error) error {
	return l.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: l.prefix, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			path := string(item.Key()[len(l.prefix):])
			var e *Entry
			if err := item.Value(func(v []byte) error {
				var err error
				e, err = DecodeEntry(v)
				return err
			}); err != nil {
				return fmt.Errorf("entry %q: %w", path, err)
			}
			if err := fn(path, e); err != nil {
				return err
			}
		}
		return nil
	})
}

// Get returns the entry at path.
func (l *Layer) Get(path string) (*Entry, error) {
	var e *Entry
	err := l.s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(l.key(path))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			e, err = DecodeEntry(v)
			return err
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("entry %q: %w", path, ErrNotFound)
	}
	return e, err
}

// Batch collects entry changes for one atomic Commit. Later changes to
// a path replace earlier ones.
type Batch struct {
	ops   map[string]*Entry // nil value: delete
	order []string
}

// Put records e at path.
func (b *Batch) Put(path string, e *Entry) {
	b.set(path, e.clone())
}

// Delete removes the entry at path.
func (b *Batch) Delete(path string) { b.set(path, nil) }

func (b *Batch) set(path string, e *Entry) {
	if b.ops == nil {
		b.ops = map[string]*Entry{}
	}
	if _, ok := b.ops[path]; !ok {
		b.order = append(b.order, path)
	}
	b.ops[path] = e
}

// Len is the number of paths the batch changes.
func (b *Batch) Len() int { return len(b.order) }

// Commit applies the batch atomically.
func (l *Layer) Commit(b *Batch) error {
	if l.s.ro {
		return ErrReadOnly
	}
	txn := l.s.db.NewTransaction(true)
	defer txn.Discard()
	for _, p := range b.order {
		var err error
		if e := b.ops[p]; e != nil {
			err = txn.Set(l.key(p), e.Encode())
		} else {
			err = txn.Delete(l.key(p))
		}
		if err != nil {
			if errors.Is(err, badger.ErrTxnTooBig) {
				return fmt.Errorf("branch %q: a change of %d entries is more than one transaction holds: %w", l.name, b.Len(), err)
			}
			return err
		}
	}
	return txn.Commit()
}
