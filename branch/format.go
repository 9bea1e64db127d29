package branch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// FormatVersion is the store format this build reads and writes.
const FormatVersion = 1

// knownFeatures are the feature/<name> keys this build understands.
var knownFeatures = map[string]bool{featureSnapshots: true, featureLayers: true, FeatureDeferredObjects: true}

// FeatureDeferredObjects marks a store whose entries may name objects
// the backstore has given out but not made yet (mount --from: their
// attributes are in the backstore's journal, backstore/deferred.go). An
// agentfs older than them would find those objects missing, and its
// fsck --repair would delete the entries.
const FeatureDeferredObjects = "deferred-objects"

// RequireFeature records that the store uses feature name (one of the
// exported Feature names): an agentfs that does not know it refuses the
// store. Once recorded it stays.
func (s *Store) RequireFeature(name string) error {
	if !knownFeatures[name] {
		return fmt.Errorf("feature %q: unknown to this agentfs", name)
	}
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.apply([]op{{key: featureKey(name)}}); err != nil {
		return fmt.Errorf("feature %q: %w", name, err)
	}
	return nil
}

// start checks the format of a freshly opened database, repairs a
// commit a crash interrupted, and creates a new store's initial keys.
func (s *Store) start() error {
	latest := s.db.MaxVersion()
	s.nextTs, s.readTs = latest+1, latest

	var (
		format  []byte
		pending uint64
		empty   = true
		unknown []string
	)
	txn := s.db.NewTransactionAt(latest, false)
	err := func() error {
		it := txn.NewIterator(badger.IteratorOptions{})
		it.Rewind()
		empty = !it.Valid()
		it.Close()
		var err error
		if format, err = getValue(txn, formatKey); err != nil && !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		it = txn.NewIterator(badger.IteratorOptions{Prefix: featurePfx})
		for it.Rewind(); it.Valid(); it.Next() {
			if name := string(it.Item().Key()[len(featurePfx):]); !knownFeatures[name] {
				unknown = append(unknown, name)
			}
		}
		it.Close()
		// Before anything sets the discard timestamp (badger's is 0
		// until then): see "Keeping versions" in the package doc. At
		// latest, a torn commit's records count too: holding more than
		// needed is safe.
		if err := s.loadParents(txn); err != nil {
			return err
		}
		if err := s.loadSnapshots(txn); err != nil {
			return err
		}
		v, err := getValue(txn, pendingKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(v) != 8 || binary.BigEndian.Uint64(v) == 0 || binary.BigEndian.Uint64(v) > latest {
			return fmt.Errorf("corrupt %s key (% x)", pendingKey, v)
		}
		pending = binary.BigEndian.Uint64(v)
		return nil
	}()
	txn.Discard()
	if err != nil {
		return fmt.Errorf("store %s: reading the metadata: %w", s.dir, err)
	}

	if format == nil {
		if !empty {
			return fmt.Errorf("store %s: %s holds a database that is not an agentfs store (it has no format version): use another --store: %w",
				s.dir, s.metaDir(), ErrIncompatible)
		}
		if s.ro {
			return fmt.Errorf("store %s: there is no agentfs store here: %w", s.dir, ErrNotFound)
		}
		return s.create()
	}
	if err := s.checkFormat(format); err != nil {
		return err
	}
	if len(unknown) > 0 {
		return fmt.Errorf("store %s uses features this agentfs does not know (%s): it was written by a newer agentfs; use that version, or start a new store: %w",
			s.dir, strings.Join(unknown, ", "), ErrIncompatible)
	}
	if pending != 0 {
		// Read below the torn commit, whatever happens next.
		s.readTs = pending - 1
		if !s.ro {
			if err := s.recoverLocked(pending); err != nil {
				return err
			}
		}
	}
	if !s.ro {
		if err := s.ensureLayer("main"); err != nil {
			return err
		}
		if err := s.sweepLayers(); err != nil {
			return err
		}
	}
	s.publish(s.readTs)
	return nil
}

func (s *Store) metaDir() string {
	if s.dir == "(in memory)" {
		return s.dir
	}
	return s.dir + "/meta"
}

// checkFormat refuses a store whose format version is not ours.
func (s *Store) checkFormat(v []byte) error {
	if len(v) != 4 {
		return fmt.Errorf("store %s: corrupt format version (% x): %w", s.dir, v, ErrIncompatible)
	}
	found := binary.BigEndian.Uint32(v)
	if found == FormatVersion {
		return nil
	}
	age := "a newer"
	if found < FormatVersion {
		age = "an older"
	}
	return fmt.Errorf("store %s has format version %d, this agentfs supports version %d: the store was written by %s agentfs; use that version, or start a new store: %w",
		s.dir, found, FormatVersion, age, ErrIncompatible)
}

// create writes a new store's initial keys in one commit: the format
// version and the branch "main".
func (s *Store) create() error {
	err := s.apply([]op{
		{key: formatKey, val: binary.BigEndian.AppendUint32(nil, FormatVersion)},
		{key: layerSeq, val: binary.BigEndian.AppendUint64(nil, 2)},
		{key: layerKey("main"), val: layerRecord{id: 1}.encode()},
		{key: inoSeq, val: binary.BigEndian.AppendUint64(nil, 1)},
	})
	if err != nil {
		return fmt.Errorf("store %s: creating: %w", s.dir, err)
	}
	return nil
}

// setFormatVersionForTest rewrites the store's format version, so that
// tests can check how an incompatible store is refused.
func (s *Store) setFormatVersionForTest(v uint32) error {
	return s.apply([]op{{key: formatKey, val: binary.BigEndian.AppendUint32(nil, v)}})
}
