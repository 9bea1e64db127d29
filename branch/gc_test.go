package branch

import (
	"errors"
	"maps"
	"slices"
	"testing"
)

// referenced returns what ReferencedObjects names, with counts.
func referenced(t *testing.T, s *Store) map[string]int {
	t.Helper()
	got := map[string]int{}
	if err := s.ReferencedObjects(func(obj string) error {
		got[obj]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// objectsOf returns the objects the entries of srcs name.
func objectsOf(t *testing.T, srcs ...Source) map[string]bool {
	t.Helper()
	objs := map[string]bool{}
	for _, src := range srcs {
		for _, e := range modelOf(t, src) {
			if e.Object != "" {
				objs[e.Object] = true
			}
		}
	}
	return objs
}

func TestReferencedObjects(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		l := mainLayer(t, s)
		put := func(l *Layer, path, obj string) {
			t.Helper()
			var b Batch
			b.Put(path, &Entry{Type: TypeFile, Object: obj})
			if err := l.Commit(&b); err != nil {
				t.Fatal(err)
			}
		}
		put(l, "shared", "o-shared")
		put(l, "x", "o-x1") // overwritten before the snapshot: nobody sees it
		put(l, "x", "o-x2")
		put(l, "gone", "o-gone")
		s1 := snapshot(t, l, "s1")
		put(l, "x", "o-x3") // overwritten between snapshots: nobody sees it
		put(l, "x", "o-x4")
		var b Batch
		b.Delete("gone")
		b.Put("w", &Entry{Type: TypeWhiteout})
		if err := l.Commit(&b); err != nil {
			t.Fatal(err)
		}
		s2 := snapshot(t, l, "s2")
		put(l, "x", "o-x5")
		fork, err := s.CreateLayer("fork", s1)
		if err != nil {
			t.Fatal(err)
		}
		put(fork, "y", "o-y")

		got := referenced(t, s)
		// o-shared, o-x2, o-gone: once for main's path, which s1 and s2,
		// or s1 alone, see, and fork reads through s1.
		want := map[string]int{"o-shared": 1, "o-x2": 1, "o-gone": 1, "o-x4": 1, "o-x5": 1, "o-y": 1}
		if !maps.Equal(got, want) {
			t.Errorf("ReferencedObjects = %v, want %v", got, want)
		}
		all := objectsOf(t, l, fork, s.SnapshotView(s1), s.SnapshotView(s2))
		if !maps.Equal(all, setOf(slices.Collect(maps.Keys(got)))) {
			t.Errorf("ReferencedObjects names %v, the branches and snapshots %v", got, all)
		}

		// Without s1, the objects only it and fork's deleted copy held go.
		if err := s.DeleteLayer("fork"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSnapshot(s1.ID); err != nil {
			t.Fatal(err)
		}
		got = referenced(t, s)
		want = map[string]int{"o-shared": 1, "o-x4": 1, "o-x5": 1}
		if !maps.Equal(got, want) {
			t.Errorf("ReferencedObjects after deleting s1 and fork = %v, want %v", got, want)
		}

		stop := errors.New("stop")
		if err := s.ReferencedObjects(func(string) error { return stop }); err != stop {
			t.Errorf("ReferencedObjects with a failing fn: %v, want stop", err)
		}
	})
}

// TestReferencedObjectsRandom checks ReferencedObjects against the
// objects of every branch and snapshot, on random histories.
func TestReferencedObjectsRandom(t *testing.T) {
	s := openMem(t)
	rng := seededRand(t)
	l, m, first, _ := snapshotted(t, s, rng, 60)
	srcs := []Source{l, s.SnapshotView(first)}
	for round := range 12 {
		m.change(t, rng, l, 30)
		snap := snapshot(t, l, "")
		srcs = append(srcs, s.SnapshotView(snap))
		if round%4 == 3 {
			b, err := s.CreateLayer(string(rune('p'+round)), snap)
			if err != nil {
				t.Fatal(err)
			}
			model{}.change(t, rng, b, 20)
			srcs = append(srcs, b)
		}
	}
	got := referenced(t, s)
	want := objectsOf(t, srcs...)
	if !maps.Equal(setOf(slices.Collect(maps.Keys(got))), want) {
		t.Errorf("ReferencedObjects names %d objects, the branches and snapshots %d", len(got), len(want))
	}
}

func setOf(xs []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}
