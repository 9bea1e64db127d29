package branch

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// Tests of layered branches (see "Layers" in the package doc), against
// a copy-based model: a branch or snapshot is a map of its entries and
// one of its bases, and creating a branch or restoring one copies the
// maps.

// copyModel is what a branch or a snapshot holds: entries and bases.
type copyModel struct {
	entries model
	bases   map[string]Base
}

func newCopyModel() copyModel { return copyModel{entries: model{}, bases: map[string]Base{}} }

func (c copyModel) clone() copyModel {
	return copyModel{entries: maps.Clone(c.entries), bases: maps.Clone(c.bases)}
}

// change applies n random puts and deletes of entries and bases to l
// and to c; deletions hit existing paths often, so that masks hide
// what lower levels hold.
func (c copyModel) change(t *testing.T, rng *rand.Rand, l *Layer, n int) {
	t.Helper()
	var b Batch
	for range n {
		p := randomPath(rng)
		if len(c.entries) > 0 && rng.IntN(4) == 0 {
			p = slices.Sorted(maps.Keys(c.entries))[rng.IntN(len(c.entries))]
		}
		switch r := rng.IntN(8); {
		case r < 2:
			b.Delete(p)
			delete(c.entries, p)
		case r == 2:
			base := Base{Exists: rng.IntN(2) == 0, Seen: rng.Int64N(1000)}
			if base.Exists {
				base.Ino, base.Size = rng.Uint64N(100), rng.Int64N(100)
			}
			b.SetBase(p, &base)
			c.bases[p] = base
		case r == 3:
			b.DeleteBase(p)
			delete(c.bases, p)
		default:
			e := randomEntry(rng)
			e.Epoch = l.Epoch() // as the overlay writes
			b.Put(p, &e)
			c.entries[p] = e
		}
	}
	if err := l.Commit(&b); err != nil {
		t.Fatal(err)
	}
}

// check compares a branch with c: Load, Get of every path the tests
// use, Children, and Bases.
func (c copyModel) check(t *testing.T, what string, l *Layer) {
	t.Helper()
	c.checkEntries(t, what, l)
	got := bases(t, l)
	if !maps.Equal(got, c.bases) {
		t.Errorf("%s: bases = %v, want %v", what, got, c.bases)
	}
	for _, p := range allPaths() {
		b, err := l.Base(p)
		want, ok := c.bases[p]
		switch {
		case ok && (err != nil || *b != want):
			t.Errorf("%s: Base(%q) = %v, %v, want %v", what, p, b, err, want)
		case !ok && !errors.Is(err, ErrNotFound):
			t.Errorf("%s: Base(%q) = %v, %v, want ErrNotFound", what, p, b, err)
		}
	}
}

// checkEntries compares the entries of a branch or snapshot with c.
func (c copyModel) checkEntries(t *testing.T, what string, src interface {
	Source
	Get(string) (*Entry, error)
	Children(string, func(string, *Entry) error) error
}) {
	t.Helper()
	c.entries.check(t, what, src)
	for _, p := range allPaths() {
		e, err := src.Get(p)
		want, ok := c.entries[p]
		switch {
		case ok && (err != nil || *e != want):
			t.Errorf("%s: Get(%q) = %v, %v, want %v", what, p, e, err, want)
		case !ok && !errors.Is(err, ErrNotFound):
			t.Errorf("%s: Get(%q) = %v, %v, want ErrNotFound", what, p, e, err)
		}
	}
	checkChildren(t, c.entries, src)
}

// allPaths lists every path randomPath makes.
func allPaths() []string {
	names := []string{"a", "b", "a-b", "a.b", "c", "ab"}
	paths := []string{""}
	var add func(prefix string, depth int)
	add = func(prefix string, depth int) {
		for _, n := range names {
			p := prefix + n
			paths = append(paths, p)
			if depth < 3 {
				add(p+"/", depth+1)
			}
		}
	}
	add("", 1)
	return paths
}

// depth is the number of levels a read of l goes through.
func depth(l *Layer) int { return 1 + len(l.state.Load().chain) }

// TestLayerChain stacks branches of branches, each with puts, deletes
// (masks), whiteouts and bases of its own, and reads every level and
// every snapshot back through up to 14 levels, flattened as it goes.
func TestLayerChain(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		rng := seededRand(t)
		const levels = 14
		l := mainLayer(t, s)
		cm := newCopyModel()
		type level struct {
			l    *Layer
			cm   copyModel
			snap Snapshot
			sm   copyModel
		}
		var stack []level
		for i := range levels {
			cm.change(t, rng, l, 30)
			cm.check(t, fmt.Sprintf("level %d", i), l)
			flattened(t, s)
			cm.check(t, fmt.Sprintf("level %d, flattened", i), l)
			if got := depth(l); got > flattenAt() {
				t.Errorf("level %d reads %d levels once flattened, more than %d", i, got, flattenAt())
			}
			snap := snapshot(t, l, fmt.Sprint(i))
			stack = append(stack, level{l, cm, snap, cm.clone()})
			cm.change(t, rng, l, 10) // after the snapshot: not in the next branch
			stack[i].cm = cm.clone()
			b, err := s.CreateLayer(fmt.Sprintf("b%d", i), snap)
			if err != nil {
				t.Fatal(err)
			}
			if b.Epoch() <= snap.Epoch {
				t.Errorf("branch of snapshot %s: epoch %d, want above the snapshot's %d", snap.ID, b.Epoch(), snap.Epoch)
			}
			l, cm = b, stack[i].sm.clone()
			cm.check(t, fmt.Sprintf("new branch of level %d", i), l)
		}
		for i, lv := range stack {
			lv.cm.check(t, fmt.Sprintf("level %d at the end", i), lv.l)
			lv.sm.checkEntries(t, fmt.Sprintf("snapshot of level %d", i), s.SnapshotView(lv.snap))
		}
		// A restore anywhere in the stack re-points: one level over the
		// snapshot's chain.
		top := l
		for _, i := range []int{0, levels / 2, levels - 1} {
			if err := top.ResetTo(stack[i].snap); err != nil {
				t.Fatal(err)
			}
			stack[i].sm.check(t, fmt.Sprintf("top reset to the snapshot of level %d", i), top)
			flattened(t, s)
			stack[i].sm.check(t, fmt.Sprintf("top reset to the snapshot of level %d, flattened", i), top)
			if got := depth(top); got > flattenAt() {
				t.Errorf("top reset to level %d reads %d levels once flattened, more than %d", i, got, flattenAt())
			}
			want := stack[i].sm.clone()
			want.change(t, rng, top, 20)
			want.check(t, fmt.Sprintf("top reset to level %d, then changed", i), top)
		}
		for i, lv := range stack {
			lv.cm.check(t, fmt.Sprintf("level %d after the restores", i), lv.l)
		}
	})
}

// TestLayerDepthBounded stacks 40 branches: no branch create copies
// (no split commit on its path, whatever the depth), the flattener
// keeps every read within flattenDepth levels, and what the flattened
// branches read is what the snapshots hold, big levels (split commits
// of the flattener) included.
func TestLayerDepthBounded(t *testing.T) {
	s, err := Open(Options{InMemory: true, memTableSize: smallTxn})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	rng := seededRand(t)
	l := mainLayer(t, s)
	cm := newCopyModel()
	// Enough entries that a copy would need a split commit.
	var b Batch
	for i := range 2500 {
		p := fmt.Sprintf("big/%05d", i)
		e := Entry{Type: TypeFile, Ino: uint64(i), Object: fmt.Sprintf("o%05d", i)}
		b.Put(p, &e)
		cm.entries[p] = e
	}
	if err := l.Commit(&b); err != nil {
		t.Fatal(err)
	}
	var stack []*Layer
	var models []copyModel
	deepest := 0
	for i := range 40 {
		cm.change(t, rng, l, 5)
		snap := snapshot(t, l, "")
		parts := 0
		setHook(t, func(part int) error {
			if part > 0 {
				parts++
			}
			return nil
		})
		s.bg.mu.Lock() // no flattening during the create
		nb, err := s.CreateLayer(fmt.Sprintf("b%d", i), snap)
		s.bg.mu.Unlock()
		setHook(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		if parts > 0 {
			t.Errorf("branch %d: the create made a split commit (a copy)", i)
		}
		deepest = max(deepest, depth(nb))
		stack, models = append(stack, l), append(models, cm.clone())
		l = nb
		cm.check(t, fmt.Sprintf("branch %d", i), l)
		if i%7 == 6 {
			flattened(t, s)
			if d := depth(l); d > flattenAt() {
				t.Errorf("branch %d reads %d levels once flattened, more than %d", i, d, flattenAt())
			}
			cm.check(t, fmt.Sprintf("branch %d, flattened", i), l)
		}
	}
	if deepest <= flattenAt() {
		t.Errorf("the deepest branch read %d levels: the test never needed the flattener", deepest)
	}
	flattened(t, s)
	for i, sl := range stack {
		models[i].check(t, fmt.Sprintf("branch %d at the end", i), sl)
		if d := depth(sl); d > flattenAt() {
			t.Errorf("branch %d reads %d levels at the end, more than %d", i, d, flattenAt())
		}
	}
}

// TestLayerRewindLoop: an agent that checkpoints and rewinds in a loop
// (snapshot, change, restore that snapshot) never deepens its chain:
// the empty level a restore leaves is skipped.
func TestLayerRewindLoop(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		rng := seededRand(t)
		l := mainLayer(t, s)
		cm := newCopyModel()
		cm.change(t, rng, l, 40)
		for i := range 30 {
			snap := snapshot(t, l, "checkpoint")
			frozen := cm.clone()
			if i%3 == 0 {
				cm.change(t, rng, l, 10)
			}
			if err := l.ResetTo(snap); err != nil {
				t.Fatal(err)
			}
			cm = frozen
			cm.check(t, fmt.Sprintf("rewind %d", i), l)
			if d := depth(l); d > 2 {
				t.Fatalf("rewind %d: %d levels, want at most 2", i, d)
			}
		}
	})
}

// TestLayerOriginDeleted deletes the snapshot a branch was created
// from, and the branch it was taken of, compacts, reopens: the branch
// still reads through, and gc still names its objects.
func TestLayerOriginDeleted(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir, memTableSize: smallTxn})
	rng := seededRand(t)
	main := mainLayer(t, s)
	cm := newCopyModel()
	cm.change(t, rng, main, 60)
	snap := snapshot(t, main, "")
	frozen := cm.clone()
	b, err := s.CreateLayer("b", snap)
	if err != nil {
		t.Fatal(err)
	}
	bm := cm.clone()
	bm.change(t, rng, b, 20)
	// main moves on, over every path, many times: only the parent
	// hold keeps what b reads through.
	for range 5 {
		cm.change(t, rng, main, 100)
	}
	if err := s.DeleteSnapshot(snap.ID); err != nil {
		t.Fatal(err)
	}
	compactAll(t, s)
	bm.check(t, "branch after its origin was deleted and compacted", b)
	checkReferenced(t, s, objectsOf(t, main, b), frozen.entries)
	closeStore(t, s)
	s = openDir(t, Options{Dir: dir, memTableSize: smallTxn})
	compactAll(t, s)
	b, err = s.Layer("b")
	if err != nil {
		t.Fatal(err)
	}
	bm.check(t, "branch after a reopen and a compaction", b)
	cm.check(t, "main after a reopen", mainLayer(t, s))
}

// checkReferenced checks that ReferencedObjects names every object of
// want, and nothing that neither want nor an entry of hidden names:
// hidden are the entries of parents read through, which the layers
// above may hide (masks, overwrites) and gc keeps all the same while
// a layer reads through them.
func checkReferenced(t *testing.T, s *Store, want map[string]bool, hidden ...model) {
	t.Helper()
	got := setOf(slices.Collect(maps.Keys(referenced(t, s))))
	for obj := range want {
		if !got[obj] {
			t.Errorf("ReferencedObjects does not name %s, which a branch or snapshot names", obj)
		}
	}
	extra := map[string]bool{}
	for _, m := range hidden {
		for _, e := range m {
			extra[e.Object] = true
		}
	}
	for obj := range got {
		if !want[obj] && !extra[obj] {
			t.Errorf("ReferencedObjects names %s, which no branch, snapshot or parent names", obj)
		}
	}
}

// TestLayerFeature: a store gets feature/layers with its first layered
// branch (its first snapshot, which layers the branch over the frozen
// level), and an agentfs that does not know it refuses the store.
func TestLayerFeature(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	main := mainLayer(t, s)
	has := func() bool {
		t.Helper()
		found := false
		if err := s.view(func(txn *badger.Txn) error {
			_, err := txn.Get(featureKey(featureLayers))
			found = err == nil
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return found
	}
	if has() {
		t.Fatal("feature/layers in a store without a layered branch")
	}
	snapshot(t, main, "")
	if !has() {
		t.Fatal("no feature/layers after a snapshot")
	}
	closeStore(t, s)
	delete(knownFeatures, featureLayers)
	_, err := Open(Options{Dir: dir})
	knownFeatures[featureLayers] = true
	if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), featureLayers) {
		t.Errorf("Open by an agentfs without layers: %v, want ErrIncompatible naming %q", err, featureLayers)
	}
}

// TestLayerRandomModel runs random sequences of changes, snapshots,
// branch creations and deletions, restores, snapshot deletions,
// compactions (which must keep one version of each key), flattenings,
// prunings of masks and reopens against the copy-based model, checking every
// branch and snapshot as it goes, and what gc names.
func TestLayerRandomModel(t *testing.T) {
	// Restored after the stores opened later are closed (t.Cleanup
	// runs last what was registered first): their flattener reads it.
	t.Cleanup(func(d int32) func() { return func() { flattenDepth.Store(d) } }(flattenDepth.Load()))
	flattenDepth.Store(3) // flatten often
	rng := seededRand(t)
	dir := t.TempDir()
	o := Options{Dir: dir, memTableSize: smallTxn}
	s := openDir(t, o)
	branches := map[string]copyModel{"main": newCopyModel()}
	type snapModel struct {
		snap Snapshot
		cm   copyModel
	}
	var (
		snaps []snapModel
		taken []model // every snapshot's entries, deleted ones too
	)
	layer := func(name string) *Layer {
		l, err := s.Layer(name)
		if err != nil {
			t.Fatalf("Layer(%s): %v", name, err)
		}
		return l
	}
	randomBranch := func() string {
		names := slices.Sorted(maps.Keys(branches))
		return names[rng.IntN(len(names))]
	}
	checkAll := func(what string) {
		t.Helper()
		for name, cm := range branches {
			cm.check(t, fmt.Sprintf("%s: branch %s", what, name), layer(name))
		}
		for _, sm := range snaps {
			sm.cm.checkEntries(t, fmt.Sprintf("%s: snapshot %s of %s", what, sm.snap.ID, sm.snap.Branch), s.SnapshotView(sm.snap))
		}
		want := map[string]bool{}
		for _, cm := range branches {
			for _, e := range cm.entries {
				if e.Object != "" {
					want[e.Object] = true
				}
			}
		}
		for _, sm := range snaps {
			for _, e := range sm.cm.entries {
				if e.Object != "" {
					want[e.Object] = true
				}
			}
		}
		checkReferenced(t, s, want, taken...)
		// Difference names every path that differs between a branch and
		// a snapshot, when it can tell, each with the snapshot's entry.
		for name, cm := range branches {
			for _, sm := range snaps {
				got := map[string]*Entry{}
				var last *string
				ok, err := layer(name).Difference(sm.snap, func(p string, e *Entry) {
					// Once per path, in path order.
					if last != nil && comparePaths(*last, p) >= 0 {
						t.Errorf("%s: Difference(%s, %s) names %q after %q", what, name, sm.snap.ID, p, *last)
					}
					last = &p
					got[p] = e
				})
				if err != nil {
					t.Fatalf("%s: Difference(%s, %s): %v", what, name, sm.snap.ID, err)
				}
				if !ok {
					continue
				}
				for p := range joinKeys(cm.entries, sm.cm.entries) {
					if a, b := cm.entries[p], sm.cm.entries[p]; a != b {
						if _, ok := got[p]; !ok {
							t.Errorf("%s: Difference(%s, snapshot %s of %s) misses %q (%+v, %+v)", what, name, sm.snap.ID, sm.snap.Branch, p, a, b)
						}
					}
				}
				for p, e := range got {
					want, has := sm.cm.entries[p]
					if e == nil && has || e != nil && (!has || *e != want) {
						t.Errorf("%s: Difference(%s, snapshot %s of %s) at %q = %+v, want %+v (present %v)", what, name, sm.snap.ID, sm.snap.Branch, p, e, want, has)
					}
				}
			}
		}
	}
	next, deepest := 0, 0
	var flattens uint64
	for step := range 300 {
		name := randomBranch()
		switch r := rng.IntN(20); {
		case r < 8:
			branches[name].change(t, rng, layer(name), 1+rng.IntN(20))
		case r < 11:
			snaps = append(snaps, snapModel{snapshot(t, layer(name), ""), branches[name].clone()})
			taken = append(taken, branches[name].entries.clone())
		case r < 14 && len(snaps) > 0:
			sm := snaps[rng.IntN(len(snaps))]
			next++
			nb := fmt.Sprintf("b%d", next)
			if _, err := s.CreateLayer(nb, sm.snap); err != nil {
				t.Fatal(err)
			}
			branches[nb] = sm.cm.clone()
		case r < 17 && len(snaps) > 0:
			sm := snaps[rng.IntN(len(snaps))]
			if err := layer(name).ResetTo(sm.snap); err != nil {
				t.Fatal(err)
			}
			branches[name] = sm.cm.clone()
		case r == 17 && len(snaps) > 0:
			i := rng.IntN(len(snaps))
			if err := s.DeleteSnapshot(snaps[i].snap.ID); err != nil {
				t.Fatal(err)
			}
			snaps = slices.Delete(snaps, i, i+1)
		case r == 18 && name != "main":
			if err := s.DeleteLayer(name); err != nil {
				t.Fatal(err)
			}
			delete(branches, name)
		case r == 19:
			switch rng.IntN(3) {
			case 0:
				compactAll(t, s)
				// Every level a snapshot or a parent reads is frozen:
				// one version of each key stays, none that no read
				// point sees (checkAll shows that none it sees went).
				s.bg.mu.Lock() // no flattening between the counts
				n, live := countVersions(t, s, entryPfx), liveKeys(t, s, entryPfx)
				s.bg.mu.Unlock()
				if n != live {
					t.Errorf("step %d: %d entry versions after a compaction, for %d keys", step, n, live)
				}
			case 1:
				flattened(t, s)
				var err error
				s.bg.mu.Lock()
				for name := range branches {
					if err == nil {
						err = s.pruneMasks(layer(name))
					}
				}
				s.bg.mu.Unlock()
				if err != nil {
					t.Fatal(err)
				}
			default:
				flattens += s.bg.flattened.Load()
				closeStore(t, s)
				s = openDir(t, o)
				for i := range snaps {
					// The same snapshot, as read again.
					snap, err := s.Snapshot(snaps[i].snap.ID)
					if err != nil {
						t.Fatal(err)
					}
					snaps[i].snap = snap
				}
			}
		}
		for name := range branches {
			deepest = max(deepest, depth(layer(name)))
		}
		if step%25 == 24 {
			checkAll(fmt.Sprintf("step %d", step))
			if t.Failed() {
				return
			}
		}
	}
	checkAll("the end")
	flattens += s.bg.flattened.Load()
	t.Logf("the deepest branch read %d levels; %d flattenings", deepest, flattens)
	if flattens == 0 {
		t.Errorf("no flattening in the whole run")
	}
}

func init() { childModes["layers-kill"] = childLayersKill }

// childLayersKill creates a branch from a new snapshot and resets
// branch r to one, round after round, with a commit to each, and
// reports each round done ("done N"): main holds m/0 ... m/N; branch
// b<N> was created from main's snapshot N (entries m/0 ... m/N) and
// then got b/N (branch names br<N>: b<N> would read as a snapshot id);
// r was reset to main's snapshot N and then got r/N.
func childLayersKill(dir string) error {
	l, err := openMain(Options{Dir: dir})
	if err != nil {
		return err
	}
	s := l.s
	if _, err := l.Snapshot("", KindManual); err != nil {
		return err
	}
	snaps, err := s.Snapshots()
	if err != nil {
		return err
	}
	r, err := s.CreateLayer("r", snaps[0])
	if err != nil {
		return err
	}
	put := func(l *Layer, p string, ino int) error {
		var b Batch
		b.Put(p, &Entry{Type: TypeFile, Ino: uint64(ino), Object: fmt.Sprintf("o%d", ino)})
		return l.Commit(&b)
	}
	for i := 0; ; i++ {
		if err := put(l, fmt.Sprintf("m/%06d", i), i); err != nil {
			return err
		}
		snap, err := l.Snapshot("", KindManual)
		if err != nil {
			return err
		}
		b, err := s.CreateLayer(fmt.Sprintf("br%06d", i), snap)
		if err != nil {
			return err
		}
		if err := put(b, fmt.Sprintf("b/%06d", i), i); err != nil {
			return err
		}
		if err := r.ResetTo(snap); err != nil {
			return err
		}
		if err := put(r, fmt.Sprintf("r/%06d", i), i); err != nil {
			return err
		}
		if err := s.Settle(); err != nil {
			return err
		}
		fmt.Printf("done %d\n", i)
	}
}

// TestKillDuringLayers kills a process in the middle of branch creations
// and restores under load, and checks after a reopen that every branch
// is one of the states a complete sequence of commits leaves.
func TestKillDuringLayers(t *testing.T) {
	rng := seededRand(t)
	for round := range 4 {
		dir := t.TempDir()
		reported := killAfter(t, rng, "layers-kill", dir, 3+rng.IntN(20))

		s := openDir(t, Options{Dir: dir})
		// count reports whether m holds m/0 ... m/(n-1) and no other
		// m/ entry, and which n.
		count := func(m model, dir string) (n int, ok bool) {
			for p := range m {
				if strings.HasPrefix(p, dir+"/") {
					n++
				}
			}
			for i := range n {
				if _, found := m[fmt.Sprintf("%s/%06d", dir, i)]; !found {
					return n, false
				}
			}
			return n, true
		}
		_, mm := loadAll(t, mainLayer(t, s))
		last, ok := count(mm, "m")
		if !ok || last < reported+1 {
			t.Errorf("round %d: main holds %d m/ entries (contiguous: %v), the child reported %d rounds", round, last, ok, reported+1)
		}
		names, err := s.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			l, err := s.Layer(name)
			if err != nil {
				t.Fatal(err)
			}
			_, m := loadAll(t, l)
			n, ok := count(m, "m")
			own := 0
			for p := range m {
				if !strings.HasPrefix(p, "m/") {
					own++
				}
			}
			switch {
			case name == "main":
			case !ok:
				t.Errorf("round %d: branch %s holds m/ entries with gaps", round, name)
			case name == "r":
				// Reset to snapshot n-1, with or without r/(n-1).
				if _, found := m[fmt.Sprintf("r/%06d", n-1)]; own > 1 || own == 1 && !found {
					t.Errorf("round %d: r holds %d m/ entries and %d others", round, n, own)
				}
			default:
				i, _ := strconv.Atoi(strings.TrimPrefix(name, "br"))
				if _, found := m[fmt.Sprintf("b/%06d", i)]; n != i+1 || own > 1 || own == 1 && !found {
					t.Errorf("round %d: branch %s holds %d m/ entries and %d others, want %d and b/%06d or nothing", round, name, n, own, i+1, i)
				}
				if i <= reported && own != 1 {
					t.Errorf("round %d: branch %s of a reported round lacks its own entry", round, name)
				}
			}
		}
		closeStore(t, s)
	}
}

// liveKeys counts the keys below prefix that a read at the newest
// timestamp sees.
func liveKeys(t *testing.T, s *Store, prefix []byte) int {
	t.Helper()
	n := 0
	if err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLayerSweep: the layer id a restore leaves behind is kept while a
// snapshot names it or a live layer reads through it, and its keys go
// at the Open after the last of those went.
func TestLayerSweep(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	rng := seededRand(t)
	main := mainLayer(t, s)
	cm := newCopyModel()
	cm.change(t, rng, main, 40)
	old := main.id()
	s1 := snapshot(t, main, "s1") // names old, which main goes on over
	s1m, frozen := cm.clone(), cm.clone()
	cm.change(t, rng, main, 40)
	s2 := snapshot(t, main, "s2") // reads through old
	if err := main.ResetTo(s1); err != nil {
		t.Fatal(err)
	}
	mid := main.id() // reads through old at s1.Ts
	frozen.change(t, rng, main, 10)
	s3 := snapshot(t, main, "s3") // names mid
	if err := main.ResetTo(s3); err != nil {
		t.Fatal(err)
	}
	frozen.change(t, rng, main, 10)
	reopen := func() {
		t.Helper()
		closeStore(t, s)
		s = openDir(t, Options{Dir: dir})
		main = mainLayer(t, s)
	}
	for _, id := range []uint64{old, mid} {
		if liveKeys(t, s, layerPrefix(id)) == 0 {
			t.Fatalf("layer %d has no keys before any deletion", id)
		}
	}
	// s2 goes: old is still read through by mid (which s3 names).
	if err := s.DeleteSnapshot(s2.ID); err != nil {
		t.Fatal(err)
	}
	reopen()
	if liveKeys(t, s, layerPrefix(old)) == 0 {
		t.Errorf("the keys of layer %d went while a live layer reads through it", old)
	}
	frozen.check(t, "main after s2 went", main)
	// s3 goes: main reads through mid (its parent is s3's level), and
	// mid through old, so both stay.
	if err := s.DeleteSnapshot(s3.ID); err != nil {
		t.Fatal(err)
	}
	reopen()
	frozen.check(t, "main after s3 went", main)
	for _, id := range []uint64{old, mid} {
		if liveKeys(t, s, layerPrefix(id)) == 0 {
			t.Errorf("the keys of layer %d went while main reads through it", id)
		}
	}
	// A restore to s1 leaves main's current id, and mid, read by
	// nothing: main now reads through old, which s1 names.
	cur := main.id()
	if err := main.ResetTo(s1); err != nil {
		t.Fatal(err)
	}
	reopen()
	for _, id := range []uint64{cur, mid} {
		if n := liveKeys(t, s, layerPrefix(id)); n != 0 {
			t.Errorf("layer %d, which nothing reads, has %d keys after a reopen", id, n)
		}
		if n := liveKeys(t, s, parentKey(id)); n != 0 {
			t.Errorf("layer %d, which nothing reads, keeps its parent key", id)
		}
		if _, ok := s.parents[id]; ok {
			t.Errorf("layer %d, which nothing reads, is still held", id)
		}
	}
	if liveKeys(t, s, layerPrefix(old)) == 0 {
		t.Errorf("the keys of layer %d, which s1 names, went", old)
	}
	s1m.checkEntries(t, "s1 after the sweeps", s.SnapshotView(s1))
	s1m.check(t, "main restored to s1, after the sweeps", main)
	checkReferenced(t, s, objectsOf(t, main, s.SnapshotView(s1)))
}

// TestRequireFeature: a feature a caller records (deferred objects)
// makes an agentfs that does not know it refuse the store; an unknown
// name is refused at once.
func TestRequireFeature(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	if err := s.RequireFeature("no-such-feature"); err == nil {
		t.Error("RequireFeature of an unknown name: no error")
	}
	if err := s.RequireFeature(FeatureDeferredObjects); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	s = openDir(t, Options{Dir: dir}) // this build opens it
	closeStore(t, s)
	delete(knownFeatures, FeatureDeferredObjects)
	_, err := Open(Options{Dir: dir})
	knownFeatures[FeatureDeferredObjects] = true
	if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), FeatureDeferredObjects) {
		t.Errorf("Open by an agentfs without deferred objects: %v, want ErrIncompatible naming %q", err, FeatureDeferredObjects)
	}
}
