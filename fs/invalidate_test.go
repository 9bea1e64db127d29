package fs

import "testing"

// TestNamedDropsItsNegative: a name made through the mount leaves the
// record of negative entries (its dentry is positive now), and only
// that name: the others of its directory and of other directories stay
// recorded, for a restore to drop.
func TestNamedDropsItsNegative(t *testing.T) {
	s := &Server{negatives: map[uint64]map[string]struct{}{}}
	for _, n := range []struct {
		dir  uint64
		name string
	}{{5, "a"}, {5, "b"}, {6, "a"}} {
		if !s.noteNegative(n.dir, n.name) {
			t.Fatalf("noteNegative(%d, %q) = false", n.dir, n.name)
		}
	}
	s.named(5, "a")
	s.named(5, "never looked up")
	s.named(7, "a")
	if _, ok := s.negatives[5]["a"]; ok {
		t.Errorf("5/a is still recorded after it was made")
	}
	for _, n := range []struct {
		dir  uint64
		name string
	}{{5, "b"}, {6, "a"}} {
		if _, ok := s.negatives[n.dir][n.name]; !ok {
			t.Errorf("%d/%s is no longer recorded", n.dir, n.name)
		}
	}
	if s.negCount != 2 {
		t.Errorf("negCount = %d, want 2", s.negCount)
	}
	s.named(5, "b")
	if _, ok := s.negatives[5]; ok || s.negCount != 1 {
		t.Errorf("after 5/b was made: directory 5 recorded %v, negCount %d; want none, 1", ok, s.negCount)
	}
}
