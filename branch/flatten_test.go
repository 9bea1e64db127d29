package branch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

func init() { childModes["flatten-kill"] = childFlattenKill }

const (
	killLevels   = 12  // branches stacked
	killPerLevel = 300 // entries each level adds: the flattened level needs several commits
)

// childFlattenKill stacks killLevels branches, each a branch of a
// snapshot of the one before with killPerLevel entries of its own
// (brNN holds the entries l00/ ... lNN/ and l(NN+1)/, the last one only
// up to its own), holding the flattener off, then flattens; the hook
// stops it at part AGENTFS_FLATTEN_PART (reporting "stopped"), or it
// reports "flattened" when done. Either way it waits to be killed.
func childFlattenKill(dir string) error {
	stopAt, err := strconv.Atoi(os.Getenv("AGENTFS_FLATTEN_PART"))
	if err != nil {
		return err
	}
	testHookFlatten = func(part int) error {
		if part == stopAt {
			fmt.Println("stopped")
			time.Sleep(time.Hour)
		}
		return nil
	}
	l, err := openMain(Options{Dir: dir})
	if err != nil {
		return err
	}
	s := l.s
	s.bg.mu.Lock()
	for i := range killLevels {
		var b Batch
		for j := range killPerLevel {
			b.Put(fmt.Sprintf("l%02d/%03d", i, j), &Entry{Type: TypeFile, Ino: uint64(i*1000 + j), Object: fmt.Sprintf("o%02d-%03d", i, j)})
		}
		if err := l.Commit(&b); err != nil {
			return err
		}
		snap, err := l.Snapshot("", KindAuto)
		if err != nil {
			return err
		}
		if l, err = s.CreateLayer(fmt.Sprintf("br%02d", i), snap); err != nil {
			return err
		}
	}
	if err := s.Settle(); err != nil {
		return err
	}
	s.bg.mu.Unlock()
	if err := s.flattenAll(); err != nil {
		return err
	}
	fmt.Println("flattened")
	time.Sleep(time.Hour)
	return nil
}

// checkFlattenKill checks the branches childFlattenKill made, and that
// no layer id that nothing reads keeps a key.
func checkFlattenKill(t *testing.T, s *Store, what string) {
	t.Helper()
	for i := -1; i < killLevels; i++ {
		name, top := "main", 0
		if i >= 0 {
			name, top = fmt.Sprintf("br%02d", i), min(i+1, killLevels-1)
		}
		l, err := s.Layer(name)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		paths, m := loadAll(t, l)
		if len(paths) != (top+1)*killPerLevel {
			t.Errorf("%s: %s holds %d entries, want %d", what, name, len(paths), (top+1)*killPerLevel)
		}
		for lv := 0; lv <= top; lv++ {
			for j := range killPerLevel {
				p := fmt.Sprintf("l%02d/%03d", lv, j)
				if e, ok := m[p]; !ok || e.Object != fmt.Sprintf("o%02d-%03d", lv, j) {
					t.Fatalf("%s: %s: %q = %+v, %v", what, name, p, e, ok)
				}
			}
		}
	}
	// The live layer ids: the branches', the snapshots', and their
	// parents'.
	live := map[uint64]bool{}
	infos, err := s.LayerInfos()
	if err != nil {
		t.Fatal(err)
	}
	for _, li := range infos {
		live[li.ID] = true
	}
	snaps, err := s.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range snaps {
		live[sn.Layer] = true
	}
	s.pmu.RLock()
	for id := range maps.Clone(live) {
		for p, ok := s.parents[id]; ok; p, ok = s.parents[p.id] {
			live[p.id] = true
		}
	}
	s.pmu.RUnlock()
	if err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: entryPfx})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if id := binary.BigEndian.Uint64(it.Item().Key()[len(entryPfx):]); !live[id] {
				return fmt.Errorf("layer %d, which nothing reads, keeps key %q", id, it.Item().Key())
			}
		}
		return nil
	}); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// TestKillDuringFlatten kills a process while its flattener writes the
// merged level (after the first commit, after the second, and before
// the re-pointing commit) and once it is done: after a reopen every
// branch reads what it held, the partial level is swept, and a
// flattening after the reopen bounds the depth.
func TestKillDuringFlatten(t *testing.T) {
	for _, part := range []int{1, 2, -1, 0} {
		t.Run(fmt.Sprintf("part=%d", part), func(t *testing.T) {
			dir := t.TempDir()
			c := startChild(t, "flatten-kill", dir, fmt.Sprintf("AGENTFS_FLATTEN_PART=%d", part))
			want := "stopped"
			if part == 0 {
				want = "flattened"
			}
			if line := c.line(); line != want {
				t.Fatalf("child: %q (%s), want %q", line, c.errb, want)
			}
			c.kill(t)
			s := openDir(t, Options{Dir: dir})
			// The checks first see the chains as the crash left them.
			// (Unlocked before Close however the test ends: Close waits
			// for the flattener.)
			s.bg.mu.Lock()
			unlock := sync.OnceFunc(s.bg.mu.Unlock)
			t.Cleanup(unlock)
			checkFlattenKill(t, s, "after the kill")
			deepest := 0
			for i := range killLevels {
				l, err := s.Layer(fmt.Sprintf("br%02d", i))
				if err != nil {
					t.Fatal(err)
				}
				deepest = max(deepest, depth(l))
			}
			if part == 0 && deepest > flattenAt() {
				t.Errorf("a branch reads %d levels after a completed flattening, more than %d", deepest, flattenAt())
			}
			if part != 0 && deepest <= flattenAt() {
				t.Errorf("the deepest branch reads %d levels after a flattening was killed: the kill came too late to test anything", deepest)
			}
			unlock()
			flattened(t, s)
			checkFlattenKill(t, s, "flattened after the reopen")
			for _, name := range []string{"br10", "br11"} {
				l, err := s.Layer(name)
				if err != nil {
					t.Fatal(err)
				}
				if d := depth(l); d > flattenAt() {
					t.Errorf("%s reads %d levels once flattened, more than %d", name, d, flattenAt())
				}
			}
			closeStore(t, s)
			s = openDir(t, Options{Dir: dir})
			checkFlattenKill(t, s, "after a second reopen")
			closeStore(t, s)
		})
	}
}

// TestPruneMasks: the masks of files made and deleted since the last
// snapshot hide nothing and go; those over the snapshot's entries stay,
// and every read is the same.
func TestPruneMasks(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		l := mainLayer(t, s)
		var b Batch
		for i := range 50 {
			b.Put(fmt.Sprintf("old/%02d", i), &Entry{Type: TypeFile, Ino: uint64(i)})
		}
		b.SetBase("old/00", &Base{Exists: true, Seen: 1})
		if err := l.Commit(&b); err != nil {
			t.Fatal(err)
		}
		snap := snapshot(t, l, "")
		for i := range 200 { // made and deleted: masks that hide nothing
			b.Reset()
			b.Put(fmt.Sprintf("tmp/%03d", i), &Entry{Type: TypeFile, Ino: uint64(1000 + i)})
			b.SetBase(fmt.Sprintf("tmp/%03d", i), &Base{Seen: 2})
			if err := l.Commit(&b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
			b.Delete(fmt.Sprintf("tmp/%03d", i))
			b.DeleteBase(fmt.Sprintf("tmp/%03d", i))
			if err := l.Commit(&b); err != nil {
				t.Fatal(err)
			}
		}
		b.Reset()
		for i := range 10 { // masks over the snapshot's entries
			b.Delete(fmt.Sprintf("old/%02d", i))
		}
		b.DeleteBase("old/00")
		if err := l.Commit(&b); err != nil {
			t.Fatal(err)
		}
		before := liveKeys(t, s, layerPrefix(l.id())) + liveKeys(t, s, basePrefix(l.id()))
		s.bg.mu.Lock()
		err := s.pruneMasks(l)
		s.bg.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		after := liveKeys(t, s, layerPrefix(l.id())) + liveKeys(t, s, basePrefix(l.id()))
		if before != 411 || after != 11 {
			t.Errorf("the branch's own keys: %d before pruning, %d after; want 411 (400 needless masks, 11 that hide the snapshot's) and 11", before, after)
		}
		paths, _ := loadAll(t, l)
		if len(paths) != 40 {
			t.Errorf("the branch holds %d entries after pruning, want 40", len(paths))
		}
		for _, p := range []string{"old/00", "old/09", "tmp/000", "tmp/199"} {
			if e, err := l.Get(p); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get(%q) after pruning = %+v, %v, want ErrNotFound", p, e, err)
			}
			if _, err := l.Base(p); !errors.Is(err, ErrNotFound) {
				t.Errorf("Base(%q) after pruning: %v, want ErrNotFound", p, err)
			}
		}
		if paths, _ := loadAll(t, s.SnapshotView(snap)); len(paths) != 50 {
			t.Errorf("the snapshot holds %d entries, want 50", len(paths))
		}
	})
}

// TestLineage: Lineage leads from the layer a snapshot froze to the
// branch's layer id, through later snapshots, across a flattening and
// a reopen that sweeps the ids between, and not past a restore.
func TestLineage(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	rng := seededRand(t)
	l := mainLayer(t, s)
	cm := newCopyModel()
	var snaps []Snapshot
	for range 4 {
		cm.change(t, rng, l, 10)
		snaps = append(snaps, snapshot(t, l, ""))
	}
	for _, sn := range snaps {
		if got := s.Lineage(sn.Layer); got != l.id() {
			t.Errorf("Lineage(%d) of snapshot %s = %d, want the branch's %d", sn.Layer, sn.ID, got, l.id())
		}
	}
	// The snapshots after the first go, and main is flattened: the ids
	// between are swept at the reopen, and the lineage skips them.
	// Restored after the stores opened later are closed (t.Cleanup
	// runs last what was registered first): their flattener reads it.
	t.Cleanup(func(d int32) func() { return func() { flattenDepth.Store(d) } }(flattenDepth.Load()))
	flattenDepth.Store(3)
	for _, sn := range snaps[1:] {
		if err := s.DeleteSnapshot(sn.ID); err != nil {
			t.Fatal(err)
		}
	}
	flattened(t, s)
	closeStore(t, s)
	s = openDir(t, Options{Dir: dir})
	l = mainLayer(t, s)
	cm.check(t, "main after the reopen", l)
	for _, sn := range snaps[1:] {
		if n := liveKeys(t, s, frozenKey(sn.Layer)); n != 0 {
			t.Errorf("layer %d of a deleted snapshot, which nothing reads, keeps its frozen key", sn.Layer)
		}
	}
	if got := s.Lineage(snaps[0].Layer); got != l.id() {
		t.Errorf("after a reopen: Lineage of the first snapshot = %d, want the branch's %d", got, l.id())
	}
	last := snapshot(t, l, "")
	if err := l.ResetTo(snaps[0]); err != nil {
		t.Fatal(err)
	}
	if got := s.Lineage(last.Layer); got == l.id() {
		t.Errorf("Lineage of a snapshot taken before a restore leads to the restored branch's layer %d", got)
	}
}
