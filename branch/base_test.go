package branch

import (
	"errors"
	"reflect"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

func TestBaseEncoding(t *testing.T) {
	for _, b := range []Base{
		{},
		{Seen: 1_700_000_000_123_456_789},
		{Exists: true, Seen: 5, Dev: 2049, Ino: 1 << 40, Mode: 0100644, Uid: 1000, Gid: 100, Size: 12345, Mtime: -3, Ctime: 1_700_000_000_000_000_001},
	} {
		got, err := DecodeBase(b.Encode())
		if err != nil {
			t.Fatalf("DecodeBase(Encode(%+v)): %v", b, err)
		}
		if *got != b {
			t.Errorf("round trip = %+v, want %+v", *got, b)
		}
	}
	good := (&Base{Exists: true, Ino: 7}).Encode()
	for _, bad := range [][]byte{nil, {1}, {1, 0}, {1, 4, 0}, good[:len(good)-1], append(good, 0)} {
		if _, err := DecodeBase(bad); err == nil {
			t.Errorf("DecodeBase(% x) succeeded, want an error", bad)
		}
	}
	if _, err := DecodeBase([]byte{9, 0, 0}); !errors.Is(err, ErrIncompatible) {
		t.Errorf("DecodeBase of encoding 9: %v, want ErrIncompatible", err)
	}
}

// bases reads every base of l.
func bases(t *testing.T, l *Layer) map[string]Base {
	t.Helper()
	out := map[string]Base{}
	if err := l.Bases(func(p string, b *Base) error { out[p] = *b; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBasesFollowTheLayer(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		main, err := s.Layer("main")
		if err != nil {
			t.Fatal(err)
		}
		a := Base{Exists: true, Seen: 1, Ino: 10, Mode: 0100644}
		var b Batch
		b.Put("a", &Entry{Type: TypeFile, Ino: 10, Object: "o1"})
		b.SetBase("a", &a)
		b.SetBase("gone", &Base{Seen: 2})
		if err := main.Commit(&b); err != nil {
			t.Fatal(err)
		}
		if got, err := main.Base("a"); err != nil || *got != a {
			t.Fatalf("Base(a) = %+v, %v, want %+v", got, err, a)
		}
		if _, err := main.Base("b"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Base(b) error = %v, want ErrNotFound", err)
		}
		snap, err := main.Snapshot("", KindManual)
		if err != nil {
			t.Fatal(err)
		}
		before := bases(t, main)

		b.Reset()
		b.DeleteBase("gone")
		b.SetBase("new", &Base{Seen: 3})
		if err := main.Commit(&b); err != nil {
			t.Fatal(err)
		}
		if got := bases(t, main); len(got) != 2 || got["new"].Seen != 3 || got["a"] != a {
			t.Errorf("bases after changes = %+v, want a and new", got)
		}

		// A branch from the snapshot has the snapshot's bases.
		br, err := s.CreateLayer("try", snap)
		if err != nil {
			t.Fatal(err)
		}
		if got := bases(t, br); !reflect.DeepEqual(got, before) {
			t.Errorf("bases of a branch from the snapshot = %+v, want %+v", got, before)
		}
		// A restore brings the snapshot's bases back.
		if err := main.ResetTo(snap); err != nil {
			t.Fatal(err)
		}
		if got := bases(t, main); !reflect.DeepEqual(got, before) {
			t.Errorf("bases after ResetTo = %+v, want %+v", got, before)
		}
		// Deleting a branch deletes its bases.
		if err := s.DeleteLayer("try"); err != nil {
			t.Fatal(err)
		}
		br2, err := s.CreateLayer("try", snap)
		if err != nil {
			t.Fatal(err)
		}
		b.Reset()
		b.SetBase("only", &Base{Seen: 9})
		if err := br2.Commit(&b); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteLayer("try"); err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := s.view(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: basePrefix(br2.id())})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			return nil
		}); err != nil {
			t.Fatalf("counting the bases of the deleted branch: %v", err)
		}
		if n != 0 {
			t.Errorf("%d bases of a deleted branch remain", n)
		}
	})
}
