package branch

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/internal/testenv"
)

// A model is what a layer or snapshot should hold: path → entry.
type model map[string]Entry

// branchSeedEnv replays a seed of the randomized tests of this package
// (seededRand, TestKillDuringCommits): AGENTFS_BRANCH_SEED=S go test
// -run '^TestX$' runs test X with seed S.
const branchSeedEnv = "AGENTFS_BRANCH_SEED"

// seededRand returns a generator with a fresh seed, or the one
// AGENTFS_BRANCH_SEED replays, logged so that a failure can be replayed
// (testenv.Seed).
func seededRand(t *testing.T) *rand.Rand {
	t.Helper()
	return rand.New(rand.NewPCG(testenv.Seed(t, branchSeedEnv), 0))
}

// randomPath returns a path of 1 to 3 components from a small set, so
// that paths collide and nest, and names that sort around '/' ('-', '.')
// appear.
func randomPath(rng *rand.Rand) string {
	names := []string{"a", "b", "a-b", "a.b", "c", "ab"}
	parts := make([]string, 1+rng.IntN(3))
	for i := range parts {
		parts[i] = names[rng.IntN(len(names))]
	}
	return strings.Join(parts, "/")
}

func randomEntry(rng *rand.Rand) Entry {
	types := []Type{TypeWhiteout, TypeFile, TypeFile, TypeDir, TypeSymlink}
	e := Entry{Type: types[rng.IntN(len(types))]}
	if e.Type != TypeWhiteout {
		e.Ino = rng.Uint64N(1000)
		e.Object = fmt.Sprintf("o%04d", rng.IntN(10000))
		e.Epoch = rng.Uint64N(2)
		e.Opaque = e.Type == TypeDir && rng.IntN(4) == 0
	}
	return e
}

// change applies n random puts and deletes to l and to m.
func (m model) change(t *testing.T, rng *rand.Rand, l *Layer, n int) {
	t.Helper()
	var b Batch
	for range n {
		p := randomPath(rng)
		if rng.IntN(3) == 0 {
			b.Delete(p)
			delete(m, p)
			continue
		}
		e := randomEntry(rng)
		b.Put(p, &e)
		m[p] = e
	}
	if err := l.Commit(&b); err != nil {
		t.Fatal(err)
	}
}

// check compares what src holds with m, and its Load order with path
// order.
func (m model) check(t *testing.T, what string, src Source) {
	t.Helper()
	paths, got := loadAll(t, src)
	if !slices.IsSortedFunc(paths, pathLess) {
		t.Errorf("%s: Load order %q is not path order", what, paths)
	}
	if maps.Equal(got, m) {
		return
	}
	bad := 0
	for _, p := range slices.Sorted(maps.Keys(joinKeys(got, m))) {
		g, gok := got[p]
		w, wok := m[p]
		if gok != wok || g != w {
			if bad++; bad <= 5 {
				t.Errorf("%s: %q = %+v (present %v), want %+v (present %v)", what, p, g, gok, w, wok)
			}
		}
	}
	t.Errorf("%s: %d paths differ", what, bad)
}

func joinKeys(a, b model) map[string]bool {
	all := map[string]bool{}
	for p := range a {
		all[p] = true
	}
	for p := range b {
		all[p] = true
	}
	return all
}

// modelOf loads what src holds.
func modelOf(t *testing.T, src Source) model {
	t.Helper()
	_, m := loadAll(t, src)
	return m
}

func snapshot(t *testing.T, l *Layer, label string) Snapshot {
	t.Helper()
	snap, err := l.Snapshot(label, KindManual)
	if err != nil {
		t.Fatalf("Snapshot(%q): %v", label, err)
	}
	return snap
}

func (m model) clone() model { return maps.Clone(m) }

// snapshotted commits n random changes to main and snapshots it. It
// returns main, its model (to go on changing with it), the snapshot,
// and what the snapshot holds.
func snapshotted(t *testing.T, s *Store, rng *rand.Rand, n int) (*Layer, model, Snapshot, model) {
	t.Helper()
	l := mainLayer(t, s)
	m := model{}
	m.change(t, rng, l, n)
	snap := snapshot(t, l, "snapshotted")
	return l, m, snap, m.clone()
}
