package branch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// pathLess orders paths component by component: the order Load
// promises (parents first, each subtree contiguous).
func pathLess(a, b string) int {
	if a == "" || b == "" {
		return strings.Compare(a, b)
	}
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/"))
}

func TestLoadOrder(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		l := mainLayer(t, s)
		paths := []string{"", "a", "a/b", "a/b-c", "a/b.c", "a/b/x", "a/b/x/y", "a/b/z", "a/bb", "a/b\x01", "a-", "b", "B", "\xff", "a/b/x-"}
		want := slices.Clone(paths)
		slices.SortFunc(want, pathLess)
		rand.Shuffle(len(paths), func(i, j int) { paths[i], paths[j] = paths[j], paths[i] })
		for i, p := range paths { // one commit each, in random order
			var b Batch
			b.Put(p, &Entry{Type: TypeDir, Ino: uint64(i)})
			if err := l.Commit(&b); err != nil {
				t.Fatal(err)
			}
		}
		got, _ := loadAll(t, l)
		if !slices.Equal(got, want) {
			t.Errorf("Load order:\n got %q\nwant %q", got, want)
		}
		// Parents before children, subtrees contiguous.
		if i, j := slices.Index(got, "a/b"), slices.Index(got, "a/b/z"); j != i+4 {
			t.Errorf("a/b at %d, a/b/z at %d: subtree of a/b not contiguous in %q", i, j, got)
		}
	})
}

func TestChildren(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		l := mainLayer(t, s)
		var b Batch
		for _, p := range []string{"", "a", "a/b", "a/b/x", "a/b/x/y", "a/b-c", "a/bb", "a/c", "d", "orphan/kid/grandkid"} {
			b.Put(p, &Entry{Type: TypeDir})
		}
		if err := l.Commit(&b); err != nil {
			t.Fatal(err)
		}
		for dir, want := range map[string]string{
			"":       "a,d",
			"a":      "b,b-c,bb,c",
			"a/b":    "x",
			"a/b/x":  "y",
			"a/c":    "",
			"none":   "",
			"orphan": "", // its child has no entry, only a grandchild does
		} {
			var got []string
			if err := l.Children(dir, func(name string, e *Entry) error {
				got = append(got, name)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, ",") != want {
				t.Errorf("Children(%q) = %q, want %q", dir, strings.Join(got, ","), want)
			}
		}
		stop := errors.New("stop")
		n := 0
		err := l.Children("a", func(string, *Entry) error { n++; return stop })
		if err != stop || n != 1 {
			t.Errorf("Children with a failing fn: %v after %d calls, want stop after 1", err, n)
		}
	})
}

func TestGetPutDelete(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		l := mainLayer(t, s)
		if _, err := l.Get("a"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get of a missing entry: %v, want ErrNotFound", err)
		}
		var b Batch
		b.Put("a", &Entry{Type: TypeFile, Ino: 1})
		b.Put("w", &Entry{Type: TypeWhiteout})
		b.Delete("never-there")
		e := &Entry{Type: TypeFile, Ino: 2}
		b.Put("a", e)
		e.Ino = 99 // the batch holds a copy
		if got := b.Len(); got != 3 {
			t.Errorf("Len() = %d, want 3", got)
		}
		if err := l.Commit(&b); err != nil {
			t.Fatal(err)
		}
		if got, err := l.Get("a"); err != nil || got.Ino != 2 {
			t.Errorf("Get(a) = %+v, %v, want the last Put (ino 2)", got, err)
		}
		if got, err := l.Get("w"); err != nil || !got.IsWhiteout() {
			t.Errorf("Get(w) = %+v, %v, want a whiteout", got, err)
		}
		b.Reset()
		b.Put("a", &Entry{Type: TypeFile, Ino: 3})
		b.Delete("a")
		if err := l.Commit(&b); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Get("a"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get after Put then Delete in one batch: %v, want ErrNotFound", err)
		}
		if err := l.Commit(&Batch{}); err != nil {
			t.Errorf("Commit of an empty batch: %v", err)
		}
	})
}

func TestInvalidBatchAppliesNothing(t *testing.T) {
	l := mainLayer(t, openMem(t))
	for _, bad := range []func(b *Batch){
		func(b *Batch) { b.Put("a//b", &Entry{}) },
		func(b *Batch) { b.Delete("/abs") },
		func(b *Batch) { b.Put("x", nil) },
	} {
		var b Batch
		b.Put("ok", &Entry{Type: TypeFile})
		bad(&b)
		if err := l.Commit(&b); err == nil {
			t.Errorf("Commit of an invalid batch succeeded")
		}
		if _, err := l.Get("ok"); !errors.Is(err, ErrNotFound) {
			t.Errorf("after a refused batch, Get(ok) = %v, want ErrNotFound", err)
		}
	}
	if _, err := l.Get("a/../b"); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Get(a/../b) = %v, want ErrInvalidPath", err)
	}
}

// TestLoadSeesOneState commits while a Load runs (from inside its
// callback): the Load sees none of those commits.
func TestLoadSeesOneState(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		l := mainLayer(t, s)
		var b Batch
		for i := range 100 {
			b.Put(fmt.Sprintf("f%03d", i), &Entry{Type: TypeFile, Ino: 1})
		}
		if err := l.Commit(&b); err != nil {
			t.Fatal(err)
		}
		n := 0
		err := l.Load(func(p string, e *Entry) error {
			n++
			if e.Ino != 1 {
				t.Errorf("Load saw %s with ino %d, committed after the Load began", p, e.Ino)
			}
			var c Batch
			c.Put(p, &Entry{Type: TypeFile, Ino: 2})
			c.Put(p+"x", &Entry{Type: TypeFile, Ino: 2})
			return l.Commit(&c)
		})
		if err != nil {
			t.Fatal(err)
		}
		if n != 100 {
			t.Errorf("Load visited %d entries, want 100", n)
		}
		if paths, _ := loadAll(t, l); len(paths) != 200 {
			t.Errorf("second Load found %d entries, want 200", len(paths))
		}
	})
}

// TestBatchAtomicVisibility moves a set of entries back and forth in
// batches, some too big for one badger transaction, while readers check
// that they never see half a move.
func TestBatchAtomicVisibility(t *testing.T) {
	s, err := Open(Options{InMemory: true, memTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	l := mainLayer(t, s)
	move := func(from, to string, n int) error {
		var b Batch
		for i := range n {
			b.Delete(fmt.Sprintf("%s/%05d", from, i))
			b.Put(fmt.Sprintf("%s/%05d", to, i), &Entry{Type: TypeFile, Ino: uint64(i)})
		}
		return l.Commit(&b)
	}
	const n = 3000 // 6,000 changes: several transactions at this memtable size
	if err := move("left", "left", n); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				left, right := 0, 0
				if err := l.Load(func(p string, e *Entry) error {
					if strings.HasPrefix(p, "left/") {
						left++
					} else {
						right++
					}
					return nil
				}); err != nil {
					t.Errorf("a reader's Load: %v", err)
					return
				}
				oneSide := left == n && right == 0 || left == 0 && right == n
				if !oneSide {
					t.Errorf("a reader saw %d left and %d right, want all %d on one side", left, right, n)
					return
				}
			}
		})
	}
	for i := range 6 {
		from, to := "left", "right"
		if i%2 == 1 {
			from, to = to, from
		}
		if err := move(from, to, n); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}
