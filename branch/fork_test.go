package branch

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// withEpoch returns m with every entry's Epoch set to epoch.
func (m model) withEpoch(epoch uint64) model {
	c := model{}
	for p, e := range m {
		e.Epoch = epoch
		c[p] = e
	}
	return c
}

func TestCreateLayer(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		rng := seededRand(t)
		main, m, snap, frozen := snapshotted(t, s, rng, 80)
		m.change(t, rng, main, 40)
		before := time.Now()
		b, err := s.CreateLayer("try2", snap)
		if err != nil {
			t.Fatal(err)
		}
		if b.Name() != "try2" || b.Epoch() != 1 {
			t.Errorf("new branch %q, epoch %d, want try2, 1", b.Name(), b.Epoch())
		}
		frozen.check(t, "new branch", b) // read through: entries keep their epochs
		if got, err := s.Layer("try2"); err != nil || got != b {
			t.Errorf("Layer(try2) = %p, %v, want the layer CreateLayer returned (%p)", got, err, b)
		}

		bm := frozen.clone()
		bm.change(t, rng, b, 40)
		bm.check(t, "branch after changes", b)
		m.check(t, "main after changes to the branch", main)
		frozen.check(t, "snapshot after changes to the branch", s.SnapshotView(snap))

		infos, err := s.LayerInfos()
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 2 || infos[0].Name != "main" || infos[1].Name != "try2" {
			t.Fatalf("LayerInfos() = %+v, want main and try2", infos)
		}
		if i := infos[0]; i.ID != main.id() || i.Epoch != 1 || i.Origin != "" || !i.Created.IsZero() {
			t.Errorf("main's info = %+v, want id %d, epoch 1, no origin, no creation time", i, main.id())
		}
		if i := infos[1]; i.ID != b.id() || i.Epoch != 1 || i.Origin != snap.ID || i.Created.Before(before.Round(0).Add(-time.Millisecond)) {
			t.Errorf("try2's info = %+v, want id %d, epoch 1, origin %s, created just now", i, b.id(), snap.ID)
		}
		if names, _ := s.Layers(); !slices.Equal(names, []string{"main", "try2"}) {
			t.Errorf("Layers() = %q, want [main try2]", names)
		}

		for _, c := range []struct {
			name string
			snap Snapshot
			want error
		}{
			{"try2", snap, ErrExists},
			{"main", snap, ErrExists},
			{"bad/name", snap, ErrInvalidName},
			{"cafe", snap, ErrInvalidName},
			{"try3", Snapshot{ID: "00000000", Ts: snap.Ts, Layer: snap.Layer}, ErrNotFound},
			{"try3", Snapshot{ID: snap.ID, Ts: snap.Ts - 1, Layer: snap.Layer}, ErrNotFound}, // a stale or made-up copy
		} {
			if _, err := s.CreateLayer(c.name, c.snap); !errors.Is(err, c.want) {
				t.Errorf("CreateLayer(%q, %s at %d): %v, want %v", c.name, c.snap.ID, c.snap.Ts, err, c.want)
			}
		}
	})
}

// TestCreateLayerSplit creates a branch from, and resets a branch to, a
// snapshot too big for one transaction: one small commit each, as the
// new layer reads through the snapshot.
func TestCreateLayerSplit(t *testing.T) {
	s, err := Open(Options{InMemory: true, memTableSize: smallTxn})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	l := mainLayer(t, s)
	const n = 3000
	if err := preState(l, n); err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, l, "")
	if err := l.Commit(bigChange(n)); err != nil {
		t.Fatal(err)
	}
	parts := 0
	setHook(t, func(part int) error {
		if part > 0 {
			parts++
		}
		return nil
	})
	b, err := s.CreateLayer("big", snap)
	if err != nil {
		t.Fatal(err)
	}
	if parts != 0 {
		t.Errorf("CreateLayer from a snapshot of %d entries took a split commit (%d parts), want one small commit", 2*n, parts)
	}
	checkState(t, b, n, false)
	checkState(t, l, n, true)
	if err := l.ResetTo(snap); err != nil {
		t.Fatal(err)
	}
	if parts != 0 {
		t.Errorf("ResetTo a snapshot of %d entries took a split commit (%d parts), want one small commit", 2*n, parts)
	}
	checkState(t, l, n, false)
}

func TestResetTo(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		rng := seededRand(t)
		l, m, s0, m0 := snapshotted(t, s, rng, 80)
		m.change(t, rng, l, 60)
		s1 := snapshot(t, l, "s1")
		m1 := m.clone()
		m.change(t, rng, l, 60)

		for i, c := range []struct {
			snap Snapshot
			want model
		}{{s0, m0}, {s1, m1}, {s0, m0}} {
			epoch := l.Epoch()
			if err := l.ResetTo(c.snap); err != nil {
				t.Fatal(err)
			}
			c.want.check(t, fmt.Sprintf("reset %d to %s", i, c.snap.ID), l)
			if l.Epoch() != epoch+1 {
				t.Errorf("reset %d: epoch %d, want %d", i, l.Epoch(), epoch+1)
			}
			m0.check(t, "s0 after reset", s.SnapshotView(s0))
			m1.check(t, "s1 after reset", s.SnapshotView(s1))
			c.want.clone().change(t, rng, l, 30)
		}

		// Another branch's snapshot, whose entries have higher epochs.
		b, err := s.CreateLayer("b", s0)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			snapshot(t, l, "")
		}
		hi := model{}
		var batch Batch
		for p, e := range m1 {
			e.Epoch = l.Epoch()
			batch.Put(p, &e)
			hi[p] = e
		}
		for p := range modelOf(t, l) {
			if _, ok := hi[p]; !ok {
				batch.Delete(p)
			}
		}
		if err := l.Commit(&batch); err != nil {
			t.Fatal(err)
		}
		sHi := snapshot(t, l, "high epochs")
		if err := b.ResetTo(sHi); err != nil {
			t.Fatal(err)
		}
		hi.check(t, "branch reset to main's snapshot", b)
		if b.Epoch() <= sHi.Epoch {
			t.Errorf("branch epoch %d after reset to a snapshot with entries of epoch %d: want it above", b.Epoch(), sHi.Epoch)
		}
		closeStore(t, s)
		if err := b.ResetTo(s0); !errors.Is(err, ErrClosed) {
			t.Errorf("ResetTo on a closed store: %v, want ErrClosed", err)
		}
	})
}

func TestDeleteLayer(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		rng := seededRand(t)
		_, _, snap, frozen := snapshotted(t, s, rng, 50)
		b, err := s.CreateLayer("b", snap)
		if err != nil {
			t.Fatal(err)
		}
		bm := frozen.clone()
		bm.change(t, rng, b, 30)
		bsnap := snapshot(t, b, "of b")
		bfrozen := bm.clone()
		bm.change(t, rng, b, 30)

		if err := s.DeleteLayer("main"); !errors.Is(err, ErrInUse) {
			t.Errorf("DeleteLayer(main): %v, want ErrInUse", err)
		}
		if err := s.DeleteLayer("nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("DeleteLayer(nope): %v, want ErrNotFound", err)
		}
		if err := s.DeleteLayer("b"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Layer("b"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Layer(b) after DeleteLayer: %v, want ErrNotFound", err)
		}
		if names, _ := s.Layers(); !slices.Equal(names, []string{"main"}) {
			t.Errorf("Layers() after DeleteLayer = %q", names)
		}
		var batch Batch
		batch.Put("x", &Entry{Type: TypeFile})
		if err := b.Commit(&batch); !errors.Is(err, ErrNotFound) {
			t.Errorf("Commit to a deleted layer: %v, want ErrNotFound", err)
		}
		if _, err := b.Get("x"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get in a deleted layer: %v, want ErrNotFound", err)
		}
		if _, err := b.Snapshot("", KindManual); !errors.Is(err, ErrNotFound) {
			t.Errorf("Snapshot of a deleted layer: %v, want ErrNotFound", err)
		}
		if err := b.ResetTo(bsnap); !errors.Is(err, ErrNotFound) {
			t.Errorf("ResetTo of a deleted layer: %v, want ErrNotFound", err)
		}
		bfrozen.check(t, "snapshot of a deleted branch", s.SnapshotView(bsnap))
		if n := countVersions(t, s, layerPrefix(b.id())); n == 0 {
			t.Errorf("no versions of the deleted layer's entries: its snapshot cannot be read")
		}

		// The name can be used again, for a new layer.
		b2, err := s.CreateLayer("b", bsnap)
		if err != nil {
			t.Fatal(err)
		}
		if b2.id() == b.id() {
			t.Errorf("a new branch b reuses the layer id %d", b.id())
		}
		bfrozen.check(t, "new b from the old b's snapshot", b2)
	})
}

func TestDiff(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		rng := seededRand(t)
		l, m, snap, frozen := snapshotted(t, s, rng, 80)
		v := s.SnapshotView(snap)
		for round := range 4 {
			m.change(t, rng, l, 40)
			if round == 3 { // entries that differ only in Epoch are the same
				var b Batch
				for p, e := range m {
					if fe, ok := frozen[p]; ok && rng.IntN(2) == 0 {
						fe.Epoch = e.Epoch + 7
						b.Put(p, &fe)
						m[p] = fe
					}
				}
				if err := l.Commit(&b); err != nil {
					t.Fatal(err)
				}
			}
			checkDiff(t, frozen, m, v, l)
			checkDiff(t, m, frozen, l, v)
			checkDiff(t, m, m, l, l)
		}
		b, err := s.CreateLayer("b", snap)
		if err != nil {
			t.Fatal(err)
		}
		checkDiff(t, frozen, frozen.withEpoch(0), v, b)
		checkDiff(t, frozen.withEpoch(0), frozen, s.SnapshotView(snapshot(t, b, "")), v)
		var del Batch
		for p := range frozen {
			del.Delete(p)
		}
		if err := b.Commit(&del); err != nil {
			t.Fatal(err)
		}
		checkDiff(t, model{}, frozen, b, v)
		checkDiff(t, frozen, model{}, v, b)

		stop := errors.New("stop")
		calls := 0
		if err := Diff(v, l, func(string, *Entry, *Entry) error { calls++; return stop }); err != stop || calls != 1 {
			t.Errorf("Diff with a failing fn: %v after %d calls, want stop after 1", err, calls)
		}
		if err := s.DeleteSnapshot(snap.ID); err != nil {
			t.Fatal(err)
		}
		if err := Diff(l, v, func(string, *Entry, *Entry) error { return nil }); !errors.Is(err, ErrNotFound) {
			t.Errorf("Diff with a deleted snapshot: %v, want ErrNotFound", err)
		}
	})
}

// checkDiff compares Diff(a, b) with the difference of their models.
func checkDiff(t *testing.T, ma, mb model, a, b Source) {
	t.Helper()
	var got []string
	err := Diff(a, b, func(p string, ea, eb *Entry) error {
		got = append(got, fmt.Sprintf("%s %s %s", p, describe(ea), describe(eb)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range slices.SortedFunc(maps.Keys(joinKeys(ma, mb)), pathLess) {
		ea, aok := ma[p]
		eb, bok := mb[p]
		if aok && bok && sameEntry(&ea, &eb) {
			continue
		}
		var pa, pb *Entry
		if aok {
			pa = &ea
		}
		if bok {
			pb = &eb
		}
		want = append(want, fmt.Sprintf("%s %s %s", p, describe(pa), describe(pb)))
	}
	if !slices.Equal(got, want) {
		t.Errorf("Diff:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

func describe(e *Entry) string {
	if e == nil {
		return "-"
	}
	return fmt.Sprintf("%+v", *e)
}

func TestComparePaths(t *testing.T) {
	paths := []string{"", "a", "a/b", "a/b/x", "a/b-c", "a/b.c", "a/bb", "a-", "a0", "b", "\xff", "a/b\x01", "a/b/x-"}
	for _, a := range paths {
		for _, b := range paths {
			if got, want := comparePaths(a, b), pathLess(a, b); got != want {
				t.Errorf("comparePaths(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
}
