package branch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

func TestNewStoreHasMain(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		l := mainLayer(t, s)
		if got := l.Name(); got != "main" {
			t.Errorf("Name() = %q, want main", got)
		}
		names, err := s.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0] != "main" {
			t.Errorf("Layers() = %q, want [main]", names)
		}
		if _, err := s.Layer("other"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Layer(other) error = %v, want ErrNotFound", err)
		}
		paths, _ := loadAll(t, l)
		if len(paths) != 0 {
			t.Errorf("new layer has entries %q", paths)
		}
	})
}

func TestInfo(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		if _, err := s.Info("lower"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Info(lower) before SetInfo: error = %v, want ErrNotFound", err)
		}
		if err := s.SetInfo("lower", []byte("/home/u/proj")); err != nil {
			t.Fatal(err)
		}
		if err := s.SetInfo("empty", nil); err != nil {
			t.Fatal(err)
		}
		got, err := s.Info("lower")
		if err != nil || string(got) != "/home/u/proj" {
			t.Errorf("Info(lower) = %q, %v, want /home/u/proj", got, err)
		}
		got, err = s.Info("empty")
		if err != nil || len(got) != 0 {
			t.Errorf("Info(empty) = %q, %v, want empty value", got, err)
		}
	})
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	l := mainLayer(t, s)
	var b Batch
	b.Put("", &Entry{Type: TypeDir, Ino: 1, Object: "root"})
	b.Put("a", &Entry{Type: TypeDir, Ino: 2, Object: "o1"})
	b.Put("a/b", &Entry{Type: TypeFile, Ino: 3, Object: "o2", Metacopy: true, Origin: "a/b"})
	b.Put("gone", &Entry{Type: TypeFile, Ino: 4, Object: "o3"})
	b.Delete("gone")
	if err := l.Commit(&b); err != nil {
		t.Fatal(err)
	}
	if err := s.SetInfo("lower", []byte("/p")); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	s = openDir(t, Options{Dir: dir})
	paths, m := loadAll(t, mainLayer(t, s))
	if got, want := strings.Join(paths, ","), ",a,a/b"; got != want {
		t.Errorf("paths after reopen = %q, want %q", got, want)
	}
	if got, want := m["a/b"], (Entry{Type: TypeFile, Ino: 3, Object: "o2", Metacopy: true, Origin: "a/b"}); got != want {
		t.Errorf("a/b after reopen = %+v, want %+v", got, want)
	}
	if v, err := s.Info("lower"); err != nil || string(v) != "/p" {
		t.Errorf("Info(lower) after reopen = %q, %v, want /p", v, err)
	}
}

func TestStoreDirWithOtherFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "objects", "ab"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "objects", "ab", "cd"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "meta"), 0o700); err != nil { // empty meta dir
		t.Fatal(err)
	}
	s := openDir(t, Options{Dir: dir})
	mainLayer(t, s)
}

func TestClosedStore(t *testing.T) {
	s, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	l := mainLayer(t, s)
	closeStore(t, s)
	if _, err := l.Get("a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	var b Batch
	b.Put("a", &Entry{Type: TypeFile})
	if err := l.Commit(&b); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit after Close: %v, want ErrClosed", err)
	}
	if _, err := s.AllocIno(); !errors.Is(err, ErrClosed) {
		t.Errorf("AllocIno after Close: %v, want ErrClosed", err)
	}
}

func TestFormatVersionRefused(t *testing.T) {
	for _, c := range []struct {
		version uint32
		by      string
	}{{FormatVersion + 1, "written by a newer agentfs"}, {FormatVersion - 1, "written by an older agentfs"}} {
		dir := t.TempDir()
		s, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.setFormatVersionForTest(c.version); err != nil {
			t.Fatal(err)
		}
		closeStore(t, s)
		for _, ro := range []bool{false, true} {
			_, err = Open(Options{Dir: dir, ReadOnly: ro})
			if !errors.Is(err, ErrIncompatible) {
				t.Fatalf("Open (read-only %v) of a store with version %d: %v, want ErrIncompatible", ro, c.version, err)
			}
			msg := err.Error()
			for _, want := range []string{dir, fmt.Sprintf("format version %d", c.version), fmt.Sprintf("supports version %d", FormatVersion), c.by, "use that version, or start a new store"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
		}
	}
}

func TestUnknownFeatureRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.apply([]op{{key: featureKey("time-travel"), val: nil}}); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	_, err = Open(Options{Dir: dir})
	if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "time-travel") {
		t.Fatalf("Open of a store with an unknown feature: %v, want ErrIncompatible naming it", err)
	}
}

func TestNotAnAgentfsStore(t *testing.T) {
	dir := t.TempDir()
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(dir, "meta")).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("closing the foreign database: %v", err)
	}
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("Open of a foreign badger database: %v, want ErrIncompatible", err)
	}
}

func TestReadOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(Options{Dir: dir, ReadOnly: true}); !errors.Is(err, ErrNotFound) {
		t.Errorf("read-only Open of an empty dir: %v, want ErrNotFound", err)
	}
	if _, err := Open(Options{Dir: filepath.Join(dir, "missing"), ReadOnly: true}); !errors.Is(err, ErrNotFound) {
		t.Errorf("read-only Open of a missing dir: %v, want ErrNotFound", err)
	}

	w := openDir(t, Options{Dir: dir})
	var b Batch
	b.Put("f", &Entry{Type: TypeFile, Ino: 5, Object: "o"})
	if err := mainLayer(t, w).Commit(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir, ReadOnly: true}); !errors.Is(err, ErrLocked) {
		t.Errorf("read-only Open beside a writer: %v, want ErrLocked", err)
	}
	closeStore(t, w)

	r1 := openDir(t, Options{Dir: dir, ReadOnly: true})
	r2 := openDir(t, Options{Dir: dir, ReadOnly: true})
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrLocked) {
		t.Errorf("writable Open beside a reader: %v, want ErrLocked", err)
	}
	for _, r := range []*Store{r1, r2} {
		l := mainLayer(t, r)
		if e, err := l.Get("f"); err != nil || e.Ino != 5 {
			t.Errorf("read-only Get(f) = %+v, %v, want ino 5", e, err)
		}
		if err := l.Commit(&b); !errors.Is(err, ErrReadOnly) {
			t.Errorf("read-only Commit: %v, want ErrReadOnly", err)
		}
		if _, err := r.AllocIno(); !errors.Is(err, ErrReadOnly) {
			t.Errorf("read-only AllocIno: %v, want ErrReadOnly", err)
		}
		if err := r.SetInfo("k", nil); !errors.Is(err, ErrReadOnly) {
			t.Errorf("read-only SetInfo: %v, want ErrReadOnly", err)
		}
	}
}

// TestOpenAfterCrashLeftEmptyMemtable: a crash right after badger
// created a memtable file leaves it empty, which badger refuses to open;
// Open recovers.
func TestOpenAfterCrashLeftEmptyMemtable(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	var b Batch
	b.Put("a", &Entry{Type: TypeFile, Ino: 7, Object: "0123456789abcdef0123456789abcdef"})
	if err := mainLayer(t, s).Commit(&b); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	if err := os.WriteFile(filepath.Join(dir, "meta", "00099.mem"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, Options{Dir: dir})
	defer closeStore(t, s)
	e, err := mainLayer(t, s).Get("a")
	if err != nil || e.Ino != 7 {
		t.Fatalf("entry after recovery: %+v, %v", e, err)
	}
}

// TestCloseWhenBadgerCannotWrite: Close of a store whose badger cannot
// write its memtable to a table (here its directory is gone; a full
// disk does the same) returns, saying so, instead of waiting for badger,
// which retries for ever: a daemon's exit waited on it.
func TestCloseWhenBadgerCannotWrite(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetInfo("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "meta")); err != nil {
		t.Fatal(err)
	}
	err = s.Close()
	if err == nil || !strings.Contains(err.Error(), "badger cannot write its tables") {
		t.Errorf("Close with badger's directory gone = %v, want an error saying badger cannot write its tables", err)
	}
}
