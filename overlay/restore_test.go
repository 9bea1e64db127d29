package overlay

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// TestRestoreKeeping: one call resets the branch to the snapshot and
// takes the safety snapshot of the state before, in one commit: a file
// open for writing goes into the safety snapshot as it was at the call,
// its node is cut loose, and what the descriptor writes afterwards
// reaches neither the branch nor the safety snapshot.
func TestRestoreKeeping(t *testing.T) {
	e := newEnv(t, map[string]string{"d/lower": "lower", "gone": "x", "w": "lower"})
	e.write("d/lower", "v1")
	e.write("w", "snap")
	snap, err := e.view.Snapshot("target", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	e.write("d/lower", "v2")
	if err := e.view.Unlink(e.view.Root(), "gone"); err != nil {
		t.Fatal(err)
	}
	_, nf, _, err := e.view.Create(e.view.Root(), "new", unix.O_RDWR, 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	release(t, nf)
	wn := e.must("w")
	wf, err := e.view.Open(wn, unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, wf)
	writeAt(t, wf, []byte("mine"), 0)

	r, err := e.view.RestoreKeeping(snap, "before restoring", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Synced(); err != nil {
		t.Errorf("Synced: %v", err)
	}
	if r.Safety.Kind != branch.KindSafety || r.Safety.Label != "before restoring" {
		t.Errorf("safety snapshot %+v, want kind safety, labelled", r.Safety)
	}
	e.checkIndexFresh("after RestoreKeeping")
	eq(t, "restored d/lower", e.read("d/lower"), "v1")
	eq(t, "restored gone", e.read("gone"), "x")
	eq(t, "restored w", e.read("w"), "snap")
	if _, err := e.walk("new"); err != unix.ENOENT {
		t.Errorf("restored branch still has new: %v", err)
	}
	cut := false
	for _, s := range r.Stale {
		cut = cut || s.Node == wn && !s.Kept
	}
	if !cut {
		t.Error("the node of the file open for writing is not among the nodes cut loose")
	}

	writeAt(t, wf, []byte("late"), 0)
	sv := e.snapView(r.Safety)
	eq(t, "safety d/lower", sv.read("d/lower"), "v2")
	eq(t, "safety w", sv.read("w"), "mine")
	if _, err := sv.walk("gone"); err != unix.ENOENT {
		t.Errorf("safety snapshot shows gone: %v", err)
	}
	if _, err := sv.walk("new"); err != nil {
		t.Errorf("safety snapshot lacks new: %v", err)
	}
	eq(t, "w in the branch after a late write", e.read("w"), "snap")
	// The branch goes on from the restored state.
	e.write("d/lower", "v3")
	eq(t, "target after writing the restored branch", e.snapView(snap).read("d/lower"), "v1")
	eq(t, "safety after writing the restored branch", e.snapView(r.Safety).read("d/lower"), "v2")
}

// TestRestoreKeepingTells: RestoreKeeping gives tell the list of what
// it cut loose once, with the view's lock still held and before the
// index is updated, so that the kernel is told while the index is; a
// lookup that comes meanwhile (the kernel checking a name it was told
// of) waits for the lock and finds the restored state.
func TestRestoreKeepingTells(t *testing.T) {
	e := newEnv(t, map[string]string{"d/a": "lower"})
	e.write("d/a", "old")
	snap, err := e.view.Snapshot("target", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	e.write("d/a", "new")
	_, f, _, err := e.view.Create(e.must("d"), "b", unix.O_RDWR, 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	release(t, f)
	a := e.must("d/a")
	calls := 0
	var told []Stale
	var heldAtTell, indexOldAtTell bool
	lookedUp := make(chan error, 1)
	r, err := e.view.RestoreKeeping(snap, "safety", func(stale []Stale) {
		calls++
		told = stale
		if heldAtTell = !e.view.mu.TryRLock(); !heldAtTell {
			e.view.mu.RUnlock()
		}
		indexOldAtTell = e.view.dirs["d"]["b"] != nil
		go func() {
			_, err := e.walk("d/b")
			lookedUp <- err
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("tell was called %d times, want once", calls)
	}
	if !heldAtTell {
		t.Error("tell was called without the view's lock held")
	}
	if !indexOldAtTell {
		t.Error("tell was called once the index was updated: the kernel is not told meanwhile")
	}
	if len(told) == 0 || len(told) != len(r.Stale) || &told[0] != &r.Stale[0] {
		t.Errorf("tell was given %d nodes, Restored.Stale has %d: want the same list", len(told), len(r.Stale))
	}
	if !slices.ContainsFunc(told, func(s Stale) bool { return s.Node == a && !s.Kept && s.Name == "a" }) {
		t.Errorf("tell was not given d/a's node, cut loose with its name: %+v", told)
	}
	if err := <-lookedUp; err != unix.ENOENT {
		t.Errorf("a lookup of d/b during the restore: %v, want ENOENT (the restored state)", err)
	}
	eq(t, "restored d/a", e.read("d/a"), "old")
	e.checkIndexFresh("after RestoreKeeping")
}

// TestRestoreKeepingRefused: a restore whose commit cannot be made (its
// snapshot was deleted) takes no safety snapshot and changes nothing:
// the branch goes on with the object a file open for writing writes to,
// not with the clone made for the safety snapshot.
func TestRestoreKeepingRefused(t *testing.T) {
	e := newEnv(t, map[string]string{"w": "lower", "x": "lower"})
	snap, err := e.view.Snapshot("target", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.meta.DeleteSnapshot(snap.ID); err != nil {
		t.Fatal(err)
	}
	e.write("x", "new")
	wf, err := e.view.Open(e.must("w"), unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, wf)
	writeAt(t, wf, []byte("mine!"), 0)

	r, err := e.view.RestoreKeeping(snap, "before restoring", nil)
	if err == nil {
		t.Fatal("RestoreKeeping of a deleted snapshot succeeded")
	}
	if r.Safety.ID != "" {
		t.Errorf("a refused restore returned the safety snapshot %s", r.Safety.ID)
	}
	snaps, err := e.meta.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 0 {
		t.Errorf("a refused restore left snapshots %v", snaps)
	}
	e.checkIndexFresh("after a refused RestoreKeeping")
	eq(t, "x after a refused restore", e.read("x"), "new")
	writeAt(t, wf, []byte("more!"), 0)
	eq(t, "w written after a refused restore", e.read("w"), "more!")
}

// TestRestoreKeepingRandom makes random changes to a tree, takes
// snapshots now and then and restores random ones with RestoreKeeping:
// after each, the index is the layer's, the files are the snapshot's,
// and the safety snapshot holds the files as they were before.
func TestRestoreKeepingRandom(t *testing.T) {
	files := map[string]string{}
	for i := range 40 {
		files[fmt.Sprintf("l%d/f%03d", i%2, i)] = fmt.Sprintf("lower %d", i)
	}
	e := newEnv(t, files)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	root := e.view.Root()
	contents := func(e *env) map[string]string { return dirContents(e, "l0", "l1", "new") }
	type taken struct {
		snap branch.Snapshot
		want map[string]string
	}
	var snaps []taken
	for step := range 40 {
		for range 1 + rng.IntN(20) {
			switch rng.IntN(4) {
			case 0, 1:
				if p := fmt.Sprintf("l%d/f%03d", step%2, rng.IntN(20)*2+step%2); e.walkable(p) {
					e.write(p, fmt.Sprintf("step %d", step))
				}
			case 2:
				nd, err := e.walk("new")
				if err != nil {
					if nd, _, err = e.view.Mkdir(root, "new", 0o755, Caller{}); err != nil {
						t.Fatal(err)
					}
				}
				_, f, _, err := e.view.Create(nd, fmt.Sprintf("n%d", rng.IntN(30)), unix.O_RDWR, 0o644, Caller{})
				if err != nil && err != unix.EEXIST {
					t.Fatal(err)
				}
				if err == nil {
					release(t, f)
				}
			case 3:
				i := rng.IntN(40)
				if err := e.view.Unlink(e.must(fmt.Sprintf("l%d", i%2)), fmt.Sprintf("f%03d", i)); err != nil && err != unix.ENOENT {
					t.Fatal(err)
				}
			}
		}
		if len(snaps) == 0 || rng.IntN(3) == 0 {
			snap, err := e.view.Snapshot("", branch.KindManual)
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, taken{snap, contents(e)})
			continue
		}
		before := contents(e)
		s := snaps[rng.IntN(len(snaps))]
		r, err := e.view.RestoreKeeping(s.snap, "safety", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Synced(); err != nil {
			t.Fatal(err)
		}
		e.checkIndexFresh(fmt.Sprintf("step %d, restore of %s", step, s.snap.ID))
		if got := contents(e); !maps.Equal(got, s.want) {
			t.Fatalf("step %d: after the restore of %s the files are\n%v\nwant\n%v", step, s.snap.ID, got, s.want)
		}
		if got := contents(e.snapView(r.Safety)); !maps.Equal(got, before) {
			t.Fatalf("step %d: the safety snapshot holds\n%v\nwant the files before\n%v", step, got, before)
		}
		snaps = append(snaps, taken{r.Safety, before})
	}
}
