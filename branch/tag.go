package branch

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// SetTag makes the tag name point at the snapshot with the full id
// snapID, creating the tag or moving it. A tagged snapshot cannot be
// deleted. name must be a valid name (see "Names" in the package doc).
func (s *Store) SetTag(name, snapID string) error {
	if err := checkName("tag", name); err != nil {
		return err
	}
	err := s.update(func(txn *badger.Txn) ([]op, error) {
		if _, err := getSnapshot(txn, snapID); err != nil {
			return nil, err
		}
		return []op{{key: tagKey(name), val: []byte(snapID)}}, nil
	})
	if err != nil {
		return fmt.Errorf("tag %q: %w", name, err)
	}
	return nil
}

// DeleteTag deletes the tag name; ErrNotFound if there is none. The
// snapshot stays.
func (s *Store) DeleteTag(name string) error {
	err := s.update(func(txn *badger.Txn) ([]op, error) {
		if _, err := txn.Get(tagKey(name)); errors.Is(err, badger.ErrKeyNotFound) {
			return nil, ErrNotFound
		} else if err != nil {
			return nil, err
		}
		return []op{{key: tagKey(name), del: true}}, nil
	})
	if err != nil {
		return fmt.Errorf("tag %q: %w", name, err)
	}
	return nil
}

// Tags returns every tag: name → snapshot id.
func (s *Store) Tags() (map[string]string, error) {
	var tags map[string]string
	err := s.view(func(txn *badger.Txn) error {
		var err error
		tags, err = scanTags(txn)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: listing tags: %w", s.dir, err)
	}
	return tags, nil
}

func scanTags(txn *badger.Txn) (map[string]string, error) {
	tags := map[string]string{}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: tagPfx, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return nil, err
		}
		tags[string(it.Item().Key()[len(tagPfx):])] = string(v)
	}
	return tags, nil
}
