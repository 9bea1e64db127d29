package branch

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []*Entry{
		{Type: TypeWhiteout},
		{Type: TypeFile, Ino: 1<<63 | 7, Object: "0123456789abcdef"},
		{Type: TypeFile, Ino: 42, Object: "aa", Metacopy: true, Origin: "a/b c"},
		{Type: TypeDir, Ino: 9, Object: "bb", Opaque: true},
		{Type: TypeDir, Ino: 9, Object: "bb", Redirect: "/x/y"},
	} {
		got, err := DecodeEntry(e.Encode())
		if err != nil {
			t.Fatalf("decode %+v: %v", e, err)
		}
		if *got != *e {
			t.Errorf("round trip = %+v, want %+v", got, e)
		}
	}
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add((&Entry{Type: TypeFile, Ino: 3, Object: "x", Origin: "y"}).Encode())
	f.Add([]byte{1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err == nil {
			if _, err := DecodeEntry(e.Encode()); err != nil {
				t.Fatalf("re-decode: %v", err)
			}
		}
	})
}

func TestCommitLoadReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Layer("main")
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	b.Put("a", &Entry{Type: TypeDir, Ino: 1, Object: "o1"})
	b.Put("a/b", &Entry{Type: TypeFile, Ino: 2, Object: "o2"})
	b.Put("gone", &Entry{Type: TypeFile, Ino: 3, Object: "o3"})
	b.Delete("gone")
	if err := l.Commit(&b); err != nil {
		t.Fatal(err)
	}
	ino1, _ := s.AllocIno()
	if err := s.SetInfo("lower", []byte("/p")); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, _ = s.Layer("main")
	var paths []string
	l.Load(func(p string, e *Entry) error { paths = append(paths, p); return nil })
	if len(paths) != 2 || paths[0] != "a" || paths[1] != "a/b" {
		t.Errorf("loaded %v, want [a a/b]", paths)
	}
	if _, err := l.Get("gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted entry: %v, want ErrNotFound", err)
	}
	ino2, _ := s.AllocIno()
	if ino2 <= ino1 {
		t.Errorf("AllocIno after reopen = %x, not above %x", ino2, ino1)
	}
	if v, err := s.Info("lower"); err != nil || string(v) != "/p" {
		t.Errorf("Info(lower) = %q, %v", v, err)
	}
}

func TestFormatVersionRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.SetFormatVersionForTest(FormatVersion + 1)
	s.Close()
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("open of a newer store: %v, want ErrIncompatible", err)
	}
}

// TestLockedByAnotherProcess holds the store in a child process.
func TestLockedByAnotherProcess(t *testing.T) {
	if dir := os.Getenv("BRANCH_TEST_HOLD"); dir != "" {
		s, err := Open(Options{Dir: dir})
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("held\n")
		os.Stdin.Read(make([]byte, 1))
		s.Close()
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=TestLockedByAnotherProcess")
	cmd.Env = append(os.Environ(), "BRANCH_TEST_HOLD="+dir)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	out.Read(buf)
	_, err := Open(Options{Dir: dir})
	in.Close()
	cmd.Wait()
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	if s, err := Open(Options{Dir: dir}); err != nil {
		t.Fatalf("open after the holder exited: %v", err)
	} else {
		s.Close()
	}
}
