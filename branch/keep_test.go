package branch

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestResetToKeeping: one commit resets the layer to a snapshot and
// takes a snapshot of the layer as it was, which reads the state before
// (before and after a reopen), whose layer id is frozen and is no
// longer the branch's lineage, and whose epoch is below the layer's.
func TestResetToKeeping(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	rng := seededRand(t)
	main := mainLayer(t, s)
	cm := newCopyModel()
	cm.change(t, rng, main, 40)
	snap := snapshot(t, main, "target")
	target := cm.clone()
	cm.change(t, rng, main, 40)
	before, _ := loadAll(t, main)
	old := main.id()
	commits := s.nextTs

	safety, err := main.ResetToKeeping(snap, "before restoring", KindSafety)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.nextTs - commits; got != 1 {
		t.Errorf("ResetToKeeping made %d commits, want 1", got)
	}
	check := func(when string) {
		t.Helper()
		target.check(t, when+": the branch", main)
		cm.checkEntries(t, when+": the safety snapshot", s.SnapshotView(safety))
		got, err := s.Snapshot(safety.ID)
		if err != nil {
			t.Fatalf("%s: Snapshot(%s): %v", when, safety.ID, err)
		}
		if got.Kind != KindSafety || got.Label != "before restoring" || got.Layer != old || got.Branch != "main" {
			t.Errorf("%s: safety snapshot %+v, want kind safety of layer %d", when, got, old)
		}
		if main.id() == old {
			t.Errorf("%s: the branch still writes layer %d", when, old)
		}
		if l := s.Lineage(old); l == main.id() {
			t.Errorf("%s: Lineage(%d) = the branch's layer: the safety snapshot would count as taken since the restore", when, old)
		}
		if e := main.Epoch(); e <= safety.Epoch || e <= snap.Epoch {
			t.Errorf("%s: epoch %d, want above the safety snapshot's %d and the target's %d", when, e, safety.Epoch, snap.Epoch)
		}
		s.pmu.RLock()
		f, frozen := s.frozen[old]
		s.pmu.RUnlock()
		if !frozen || f != safety.Ts {
			t.Errorf("%s: layer %d frozen %v at %d, want at %d", when, old, frozen, f, safety.Ts)
		}
	}
	check("after ResetToKeeping")
	if after, _ := loadAll(t, s.SnapshotView(safety)); len(after) != len(before) {
		t.Errorf("the safety snapshot holds %d entries, the branch held %d", len(after), len(before))
	}
	// The branch goes on without touching the safety snapshot.
	target.change(t, rng, main, 20)
	closeStore(t, s)
	s = openDir(t, Options{Dir: dir})
	main = mainLayer(t, s)
	check("after a reopen")
	closeStore(t, s)
}

// TestResetToKeepingRefused: a reset that cannot be done (the target
// snapshot was deleted, a bad kind) takes no safety snapshot and leaves
// the branch as it was.
func TestResetToKeepingRefused(t *testing.T) {
	s := openMem(t)
	rng := seededRand(t)
	main := mainLayer(t, s)
	cm := newCopyModel()
	cm.change(t, rng, main, 20)
	snap := snapshot(t, main, "target")
	cm.change(t, rng, main, 20)
	if err := s.DeleteSnapshot(snap.ID); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{KindSafety, "bogus"} {
		if _, err := main.ResetToKeeping(snap, "x", kind); err == nil {
			t.Fatalf("ResetToKeeping (kind %s) to a deleted snapshot succeeded", kind)
		}
	}
	cm.check(t, "the branch after a refused reset", main)
	snaps, err := s.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 0 {
		t.Errorf("a refused reset left snapshots %v", snaps)
	}
}

// TestResetToKeepingLostCommit: the commit fails once handed over (an
// injected write error): the store fails, and after a reopen the branch
// is either reset with its safety snapshot, or as it was without one.
func TestResetToKeepingLostCommit(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	main := mainLayer(t, s)
	if err := putOne(main, "a"); err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, main, "target")
	if err := putOne(main, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(); err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected write error")
	testHookWritten = func(uint64) error { return injected }
	t.Cleanup(func() { testHookWritten = nil })
	if _, err := main.ResetToKeeping(snap, "lost", KindSafety); err == nil || !strings.Contains(err.Error(), injected.Error()) {
		t.Fatalf("ResetToKeeping with its commit lost = %v, want the injected error", err)
	}
	testHookWritten = nil
	if _, err := main.Get("b"); err != nil {
		t.Errorf("before a reopen, the branch lost b (the reset is not published): %v", err)
	}
	if err := s.Close(); err == nil {
		t.Error("Close after a lost commit succeeded")
	}
	s = openDir(t, Options{Dir: dir})
	defer closeStore(t, s)
	checkResetOrNot(t, s, mainLayer(t, s), "lost", "a", "b")
}

// checkResetOrNot checks that the branch l holds either keep and gone
// (not reset, and then no snapshot labelled label) or keep alone (reset,
// and then a safety snapshot labelled label holding both).
func checkResetOrNot(t *testing.T, s *Store, l *Layer, label, keep, gone string) {
	t.Helper()
	snaps, err := s.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	var safety []Snapshot
	for _, sn := range snaps {
		if sn.Label == label {
			safety = append(safety, sn)
		}
	}
	if _, err := l.Get(keep); err != nil {
		t.Fatalf("the branch lost %s: %v", keep, err)
	}
	_, err = l.Get(gone)
	reset := errors.Is(err, ErrNotFound)
	switch {
	case err != nil && !reset:
		t.Fatal(err)
	case reset && len(safety) != 1:
		t.Fatalf("the branch was reset, with %d safety snapshots labelled %q, want 1", len(safety), label)
	case !reset && len(safety) != 0:
		t.Fatalf("the branch was not reset, yet has the safety snapshot %+v", safety)
	case reset:
		_, m := loadAll(t, s.SnapshotView(safety[0]))
		if _, ok := m[gone]; !ok || len(m) != 2 {
			t.Errorf("the safety snapshot holds %v, want %s and %s", m, keep, gone)
		}
	}
}

func init() { childModes["keeping-kill"] = childKeepingKill }

// childKeepingKill resets branch r to snapshot A (r holds "a") again and
// again, each time after a commit of its own entry r/N, with a safety
// snapshot labelled "round N", and reports each round done ("done N").
func childKeepingKill(dir string) error {
	l, err := openMain(Options{Dir: dir})
	if err != nil {
		return err
	}
	s := l.s
	if err := putOne(l, "a"); err != nil {
		return err
	}
	a, err := l.Snapshot("A", KindManual)
	if err != nil {
		return err
	}
	r, err := s.CreateLayer("r", a)
	if err != nil {
		return err
	}
	for i := 0; ; i++ {
		if err := putOne(r, fmt.Sprintf("r/%06d", i)); err != nil {
			return err
		}
		if _, err := r.ResetToKeeping(a, fmt.Sprintf("round %d", i), KindSafety); err != nil {
			return err
		}
		if err := s.Settle(); err != nil {
			return err
		}
		fmt.Printf("done %d\n", i)
	}
}

// TestKillDuringResetToKeeping kills a process resetting a branch with
// safety snapshots, round after round, and checks after a reopen that
// the round in flight is whole or absent: the branch is reset with the
// round's safety snapshot, or holds the round's entry without one; every
// round reported is there, and every safety snapshot holds "a" and its
// round's entry.
func TestKillDuringResetToKeeping(t *testing.T) {
	rng := seededRand(t)
	for round := range 4 {
		dir := t.TempDir()
		reported := killAfter(t, rng, "keeping-kill", dir, 3+rng.IntN(20))
		s := openDir(t, Options{Dir: dir})
		snaps, err := s.Snapshots()
		if err != nil {
			t.Fatal(err)
		}
		last := -1
		for _, sn := range snaps {
			if sn.Kind != KindSafety {
				continue
			}
			var n int
			if _, err := fmt.Sscanf(sn.Label, "round %d", &n); err != nil {
				t.Fatalf("round %d: safety snapshot labelled %q", round, sn.Label)
			}
			if n != last+1 {
				t.Errorf("round %d: safety snapshot of round %d after that of round %d", round, n, last)
			}
			last = n
			_, m := loadAll(t, s.SnapshotView(sn))
			if _, ok := m[fmt.Sprintf("r/%06d", n)]; !ok || len(m) != 2 {
				t.Errorf("round %d: safety snapshot %q holds %d entries, want a and r/%06d", round, sn.Label, len(m), n)
			}
		}
		if last < reported {
			t.Errorf("round %d: safety snapshots up to round %d, the child reported %d", round, last, reported)
		}
		r, err := s.Layer("r")
		if err != nil {
			t.Fatal(err)
		}
		_, m := loadAll(t, r)
		_, pending := m[fmt.Sprintf("r/%06d", last+1)]
		if _, ok := m["a"]; !ok || len(m) != 1 && (!pending || len(m) != 2) {
			t.Errorf("round %d: branch r holds %d entries (%v), want a, with r/%06d if its reset did not happen", round, len(m), m, last+1)
		}
		closeStore(t, s)
	}
}
