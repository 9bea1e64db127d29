package integration

// Rewriting a store's format version, to check that agentfs refuses a
// store written by another version.
//
// The branch package keeps its setFormatVersionForTest hook unexported,
// so this opens the store's badger database directly, in managed mode
// as branch does, and commits the key "format" (a big-endian uint32)
// above the latest version. It depends on that key layout (see
// branch/keys.go and branch/format.go); an exported hook in branch would
// remove the dependency.

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// setStoreFormatVersion rewrites the format version of the (unmounted)
// store in dir.
func setStoreFormatVersion(t testing.TB, dir string, v uint32) {
	t.Helper()
	db, err := badger.OpenManaged(badger.DefaultOptions(filepath.Join(dir, "meta")).WithLogger(nil))
	if err != nil {
		t.Fatalf("opening the store's metadata %s: %v", dir, err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Errorf("closing the store's metadata %s: %v", dir, err)
		}
	}()
	ts := db.MaxVersion()
	txn := db.NewTransactionAt(ts, true)
	defer txn.Discard()
	if err := txn.Set([]byte("format"), binary.BigEndian.AppendUint32(nil, v)); err != nil {
		t.Fatal(err)
	}
	if err := txn.CommitAt(ts+1, nil); err != nil {
		t.Fatalf("rewriting the store's format version: %v", err)
	}
}

// storeFormatVersion reads the format version of the (unmounted) store.
func storeFormatVersion(t testing.TB, dir string) uint32 {
	t.Helper()
	db, err := badger.OpenManaged(badger.DefaultOptions(filepath.Join(dir, "meta")).WithLogger(nil).WithReadOnly(true))
	if err != nil {
		t.Fatalf("opening the store's metadata %s: %v", dir, err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Errorf("closing the store's metadata %s: %v", dir, err)
		}
	}()
	txn := db.NewTransactionAt(db.MaxVersion(), false)
	defer txn.Discard()
	item, err := txn.Get([]byte("format"))
	if err != nil {
		t.Fatalf("reading the store's format version: %v", err)
	}
	v, err := item.ValueCopy(nil)
	if err != nil || len(v) != 4 {
		t.Fatalf("the store's format version: % x, %v", v, err)
	}
	return binary.BigEndian.Uint32(v)
}
