package branch

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

func init() { childModes["snapshot-kill"] = childSnapshotKill }

func TestSnapshot(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		l := mainLayer(t, s)
		rng := seededRand(t)
		m := model{}
		m.change(t, rng, l, 40)
		before := time.Now()
		frozenID := l.id()
		snap, err := l.Snapshot("before refactor", KindManual)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(snap.ID) {
			t.Errorf("ID = %q, want 8 lowercase hex digits", snap.ID)
		}
		if l.id() == frozenID {
			t.Errorf("the branch goes on in layer %d, which the snapshot froze", frozenID)
		}
		want := Snapshot{ID: snap.ID, Branch: "main", Layer: frozenID, Ts: snap.Ts, Label: "before refactor", Kind: KindManual, Created: snap.Created, Epoch: 0}
		if snap != want || snap.Created.Before(before) || time.Since(snap.Created) > time.Minute {
			t.Errorf("Snapshot = %+v, want %+v taken just now", snap, want)
		}
		if got := l.Epoch(); got != 1 {
			t.Errorf("Epoch() after a snapshot = %d, want 1", got)
		}
		v := s.SnapshotView(snap)
		m.check(t, "view", v)
		if v.Snapshot() != snap {
			t.Errorf("View.Snapshot() = %+v, want %+v", v.Snapshot(), snap)
		}

		frozen := m.clone()
		m.change(t, rng, l, 40)
		m.check(t, "layer after changes", l)
		frozen.check(t, "view after changes", v)
		for p, e := range frozen {
			got, err := v.Get(p)
			if err != nil || *got != e {
				t.Errorf("view Get(%q) = %+v, %v, want %+v", p, got, err, e)
			}
		}
		if _, err := v.Get("none/such"); !errors.Is(err, ErrNotFound) {
			t.Errorf("view Get of a missing path: %v, want ErrNotFound", err)
		}
		checkChildren(t, frozen, v)

		snap2 := snapshot(t, l, "")
		if snap2.Epoch != 1 || l.Epoch() != 2 || snap2.Ts <= snap.Ts {
			t.Errorf("second snapshot: epoch %d, Ts %d (first %d), layer epoch %d; want 1, a later Ts, 2", snap2.Epoch, snap2.Ts, snap.Ts, l.Epoch())
		}
		snaps, err := s.Snapshots()
		if err != nil {
			t.Fatal(err)
		}
		if len(snaps) != 2 || snaps[0] != snap || snaps[1] != snap2 {
			t.Errorf("Snapshots() = %+v, want [%+v %+v]", snaps, snap, snap2)
		}
		m.check(t, "second view", s.SnapshotView(snap2))
	})
}

// checkChildren compares View.Children of every directory of m with m.
func checkChildren(t *testing.T, m model, src interface {
	Children(string, func(string, *Entry) error) error
}) {
	t.Helper()
	dirs := map[string]bool{"": true}
	for p := range m {
		dirs[p] = true
	}
	for dir := range dirs {
		var got, want []string
		if err := src.Children(dir, func(name string, e *Entry) error {
			got = append(got, name)
			return nil
		}); err != nil {
			t.Fatalf("Children(%q): %v", dir, err)
		}
		for p := range m {
			parent, name := "", p
			if i := strings.LastIndexByte(p, '/'); i >= 0 {
				parent, name = p[:i], p[i+1:]
			}
			if parent == dir && p != "" && hasAncestors(m, parent) {
				want = append(want, name)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("Children(%q) = %q, want %q", dir, got, want)
		}
	}
}

// hasAncestors reports whether m has an entry for dir (Children lists
// nothing below a directory that has none).
func hasAncestors(m model, dir string) bool {
	_, ok := m[dir]
	return ok || dir == ""
}

func TestSnapshotArguments(t *testing.T) {
	l := mainLayer(t, openMem(t))
	if _, err := l.Snapshot("x", "weekly"); err == nil || !strings.Contains(err.Error(), `"weekly"`) {
		t.Errorf("Snapshot with kind weekly: %v, want an error naming the kind", err)
	}
	if _, err := l.Snapshot(strings.Repeat("x", maxLabelLen+1), KindAuto); err == nil {
		t.Errorf("Snapshot with a label of %d bytes succeeded", maxLabelLen+1)
	}
	for _, kind := range snapshotKinds {
		if snap, err := l.Snapshot("", kind); err != nil || snap.Kind != kind {
			t.Errorf("Snapshot(kind %s) = %+v, %v", kind, snap, err)
		}
	}
}

// TestSnapshotImmutable changes a layer in every way there is after a
// snapshot, and checks that the snapshot reads the same after each.
func TestSnapshotImmutable(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		rng := seededRand(t)
		l, m, snap, frozen := snapshotted(t, s, rng, 60)
		other := model{}
		for _, c := range []struct {
			name string
			do   func() error
		}{
			{"overwrite and delete", func() error { m.change(t, rng, l, 60); return nil }},
			{"delete everything", func() error {
				var b Batch
				for p := range m {
					b.Delete(p)
				}
				return l.Commit(&b)
			}},
			{"another snapshot, then changes", func() error {
				other.change(t, rng, l, 30)
				snapshot(t, l, "other")
				other.change(t, rng, l, 30)
				return nil
			}},
			{"reset to the snapshot", func() error { return l.ResetTo(snap) }},
			{"change after reset", func() error { m.change(t, rng, l, 20); return nil }},
			{"branch from it, changed", func() error {
				b, err := s.CreateLayer("fork", snap)
				if err != nil {
					return err
				}
				model{}.change(t, rng, b, 30)
				return nil
			}},
			{"delete its branch", func() error {
				b, err := s.Layer("fork")
				if err != nil {
					return err
				}
				snapshot(t, b, "of fork")
				return s.DeleteLayer("fork")
			}},
		} {
			if err := c.do(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			frozen.check(t, "snapshot after "+c.name, s.SnapshotView(snap))
		}
	})
}

func TestSnapshotReopen(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	rng := seededRand(t)
	l, m, snap, frozen := snapshotted(t, s, rng, 50)
	m.change(t, rng, l, 50)
	if err := s.SetTag("v1", snap.ID); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)

	for _, ro := range []bool{false, true} {
		s = openDir(t, Options{Dir: dir, ReadOnly: ro})
		got, err := s.Snapshot("v1")
		if err != nil || got != snap {
			t.Fatalf("read-only %v: Snapshot(v1) after reopen = %+v, %v, want %+v", ro, got, err, snap)
		}
		frozen.check(t, "snapshot after reopen", s.SnapshotView(got))
		l = mainLayer(t, s)
		m.check(t, "layer after reopen", l)
		if l.Epoch() != 1 {
			t.Errorf("Epoch() after reopen = %d, want 1", l.Epoch())
		}
		closeStore(t, s)
	}
}

// childSnapshotKill commits entries, takes a snapshot, prints its id,
// then keeps changing every entry until it is killed.
func childSnapshotKill(dir string) error {
	l, err := openMain(Options{Dir: dir})
	if err != nil {
		return err
	}
	var b Batch
	for i := range 100 {
		b.Put(fmt.Sprintf("f%03d", i), &Entry{Type: TypeFile, Ino: 1, Object: "before"})
	}
	if err := l.Commit(&b); err != nil {
		return err
	}
	snap, err := l.Snapshot("", KindPreRun)
	if err != nil {
		return err
	}
	fmt.Println(snap.ID)
	for n := uint64(2); ; n++ {
		b.Reset()
		for i := range 100 {
			if i%2 == 0 {
				b.Delete(fmt.Sprintf("f%03d", i))
			} else {
				b.Put(fmt.Sprintf("f%03d", i), &Entry{Type: TypeFile, Ino: n, Object: "after"})
			}
		}
		if err := l.Commit(&b); err != nil {
			return err
		}
	}
}

func TestSnapshotSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, "snapshot-kill", dir)
	id := c.line()
	c.kill(t)
	if len(id) != snapIDLen {
		t.Fatalf("child printed %q: %s", id, c.errb)
	}
	s := openDir(t, Options{Dir: dir})
	snap, err := s.Snapshot(id)
	if err != nil {
		t.Fatalf("Snapshot(%s) after kill -9: %v", id, err)
	}
	if snap.Kind != KindPreRun || snap.Branch != "main" {
		t.Errorf("snapshot after kill -9 = %+v", snap)
	}
	_, m := loadAll(t, s.SnapshotView(snap))
	if len(m) != 100 {
		t.Errorf("snapshot after kill -9 has %d entries, want 100", len(m))
	}
	for p, e := range m {
		if e.Object != "before" || e.Ino != 1 {
			t.Errorf("snapshot after kill -9: %s = %+v, want the state before the snapshot", p, e)
			break
		}
	}
	if got := mainLayer(t, s).Epoch(); got != 1 {
		t.Errorf("Epoch() after kill -9 = %d, want 1", got)
	}
}

// TestSnapshotDuringCommits takes snapshots while another goroutine
// commits: each snapshot holds a whole prefix of the commits.
func TestSnapshotDuringCommits(t *testing.T) {
	s := openMem(t)
	l := mainLayer(t, s)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var b Batch
			b.Put(fmt.Sprintf("c/%06d", i), &Entry{Type: TypeFile, Ino: uint64(i)})
			b.Put("last", &Entry{Type: TypeFile, Ino: uint64(i)})
			if err := l.Commit(&b); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var snaps []Snapshot
	for range 20 {
		snaps = append(snaps, snapshot(t, l, ""))
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for _, snap := range snaps {
		_, m := loadAll(t, s.SnapshotView(snap))
		last := int(m["last"].Ino)
		if len(m) != last+min(last, 1) {
			t.Errorf("snapshot %s: last %d but %d entries, want all commits up to it and no later one", snap.ID, last, len(m))
		}
	}
}

// fixedIDs makes snapshot ids come from ids, in order.
func fixedIDs(t *testing.T, ids ...uint32) {
	old := snapIDRand
	snapIDRand = func() uint32 {
		id := ids[0]
		ids = ids[1:]
		return id
	}
	t.Cleanup(func() { snapIDRand = old })
}

func TestSnapshotRefsAndTags(t *testing.T) {
	s := openMem(t)
	l := mainLayer(t, s)
	fixedIDs(t, 0x1234aaaa, 0x1234aaaa, 0x1234bbbb, 0x00c0ffee)
	a := snapshot(t, l, "a")
	b := snapshot(t, l, "b") // the first id drawn collides: drawn again
	c := snapshot(t, l, "c")
	if a.ID != "1234aaaa" || b.ID != "1234bbbb" || c.ID != "00c0ffee" {
		t.Fatalf("ids %s %s %s, want 1234aaaa 1234bbbb 00c0ffee", a.ID, b.ID, c.ID)
	}
	if err := s.SetTag("good", a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTag("latest", b.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTag("latest", c.ID); err != nil { // moves it
		t.Fatalf("moving a tag: %v", err)
	}
	for _, r := range []struct {
		ref  string
		want Snapshot
		err  error
	}{
		{"1234aaaa", a, nil},
		{"1234b", b, nil},
		{"00c0", c, nil},
		{"good", a, nil},
		{"latest", c, nil},
		{"1234", Snapshot{}, ErrAmbiguous},
		{"1234aaa", a, nil},
		{"9999", Snapshot{}, ErrNotFound},
		{"123", Snapshot{}, ErrNotFound}, // too short for a prefix: a tag name
		{"1234aaaa0", Snapshot{}, ErrNotFound},
		{"bad", Snapshot{}, ErrNotFound},
		{"", Snapshot{}, ErrNotFound},
	} {
		got, err := s.Snapshot(r.ref)
		if !errors.Is(err, r.err) || got != r.want {
			t.Errorf("Snapshot(%q) = %s, %v, want %s, %v", r.ref, got.ID, err, r.want.ID, r.err)
		}
	}
	if _, err := s.Snapshot("1234"); err == nil || !strings.Contains(err.Error(), "1234aaaa, 1234bbbb") {
		t.Errorf("ambiguous Snapshot(1234): %v, want both ids named", err)
	}
	tags, err := s.Tags()
	if err != nil || len(tags) != 2 || tags["good"] != a.ID || tags["latest"] != c.ID {
		t.Errorf("Tags() = %v, %v, want good → %s, latest → %s", tags, err, a.ID, c.ID)
	}
	if err := s.SetTag("x", "deadbeef"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetTag to a missing snapshot: %v, want ErrNotFound", err)
	}
	if err := s.SetTag("beef", a.ID); !errors.Is(err, ErrInvalidName) {
		t.Errorf("SetTag(beef): %v, want ErrInvalidName", err)
	}

	// A tag pins its snapshot.
	err = s.DeleteSnapshot(a.ID)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "good") {
		t.Errorf("DeleteSnapshot of a tagged snapshot: %v, want ErrInUse naming the tag", err)
	}
	if err := s.DeleteTag("good"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTag("good"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteTag of a missing tag: %v, want ErrNotFound", err)
	}
	if err := s.DeleteSnapshot(a.ID); err != nil {
		t.Fatalf("DeleteSnapshot after untagging: %v", err)
	}
	if err := s.DeleteSnapshot(a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second DeleteSnapshot: %v, want ErrNotFound", err)
	}
	if _, err := s.Snapshot("1234"); err != nil {
		t.Errorf("Snapshot(1234) with one match left: %v", err)
	}
	if _, err := s.SnapshotView(a).Get(""); !errors.Is(err, ErrNotFound) {
		t.Errorf("View of a deleted snapshot: %v, want ErrNotFound", err)
	}
	snaps, _ := s.Snapshots()
	if len(snaps) != 2 || snaps[0] != b || snaps[1] != c {
		t.Errorf("Snapshots() after a deletion = %+v, want [b c]", snaps)
	}
}

func TestCheckName(t *testing.T) {
	for _, name := range []string{"main", "try2", "feature.x", "v1.0", "a b", "..x", "x-", "abc", "deadbeef0", "DEAD", "g123", "名前", strings.Repeat("x", maxNameLen)} {
		if err := checkName("tag", name); err != nil {
			t.Errorf("checkName(%q) = %v, want nil", name, err)
		}
	}
	for _, c := range []struct{ name, why string }{
		{"", "empty"},
		{strings.Repeat("x", maxNameLen+1), "longer than 100"},
		{"a/b", `"/"`},
		{"/", `"/"`},
		{".", "reserved"},
		{"..", "reserved"},
		{"-rf", `starts with "-"`},
		{"a\tb", "control"},
		{"a\x7f", "control"},
		{"a\x00", "control"},
		{"\xff", "UTF-8"},
		{"beef", "snapshot id"},
		{"12345678", "snapshot id"},
		{"c0ffee", "snapshot id"},
	} {
		err := checkName("branch", c.name)
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("checkName(%q) = %v, want ErrInvalidName saying %q", c.name, err, c.why)
		}
	}
}

// TestSnapshotFeature: the first snapshot marks the store, and layer
// records keep encoding 1 until an epoch needs encoding 2.
func TestSnapshotFeature(t *testing.T) {
	s := openMem(t)
	l := mainLayer(t, s)
	rawRecord := func() []byte {
		var v []byte
		if err := s.view(func(txn *badger.Txn) error {
			var err error
			v, err = getValue(txn, layerKey("main"))
			return err
		}); err != nil {
			t.Fatalf("reading the record of main: %v", err)
		}
		return v
	}
	hasFeature := func() bool {
		found := false
		if err := s.view(func(txn *badger.Txn) error {
			_, err := txn.Get(featureKey(featureSnapshots))
			if errors.Is(err, badger.ErrKeyNotFound) {
				return nil
			}
			found = err == nil
			return err
		}); err != nil {
			t.Fatalf("reading feature/snapshots: %v", err)
		}
		return found
	}
	if v := rawRecord(); v[0] != 1 || hasFeature() {
		t.Errorf("new store: main record % x, feature/snapshots %v; want encoding 1, no feature", v, hasFeature())
	}
	snapshot(t, l, "")
	if v := rawRecord(); v[0] != 2 || !hasFeature() {
		t.Errorf("after a snapshot: main record % x, feature/snapshots %v; want encoding 2 and the feature", v, hasFeature())
	}
}

// countVersions counts the versions badger holds of keys with prefix
// (deletions included).
func countVersions(t *testing.T, s *Store, prefix []byte) int {
	t.Helper()
	txn := s.db.NewTransactionAt(math.MaxUint64, false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, AllVersions: true})
	defer it.Close()
	n := 0
	for it.Rewind(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// compactAll makes badger compact every table, applying the discard
// timestamp: two marker keys at both ends of the key space make level 0
// overlap every table below; DropPrefix of one marker flushes the
// memtables and compacts level 0 into the base level; Flatten merges
// whatever other levels remain. Nothing else may commit meanwhile.
func compactAll(t testing.TB, s *Store) {
	t.Helper()
	// DropPrefix fails the commits made meanwhile: none from the
	// flattener.
	s.bg.mu.Lock()
	defer s.bg.mu.Unlock()
	marker := []byte("\x00test-compaction-marker")
	if err := s.apply([]op{{key: marker, val: []byte{1}}, {key: []byte("\xfftest-compaction-marker"), val: []byte{1}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.DropPrefix(marker); err != nil {
		t.Fatalf("DropPrefix: %v", err)
	}
	if err := s.db.Flatten(2); err != nil {
		t.Fatalf("Flatten: %v", err)
	}
}

// TestSnapshotsSurviveCompaction writes, snapshots, overwrites and
// deletes many times, compacting now and then and deleting some
// snapshots, and reads every remaining snapshot back exactly, also
// after a reopen. Then it deletes them all and checks that the old
// versions go.
func TestSnapshotsSurviveCompaction(t *testing.T) {
	rng := seededRand(t)
	dir := t.TempDir()
	o := Options{Dir: dir, memTableSize: smallTxn}
	s := openDir(t, o)
	l := mainLayer(t, s)
	m := model{}
	want := map[string]model{} // snapshot id → what it holds
	var snaps []Snapshot
	for round := range 40 {
		m.change(t, rng, l, 40)
		snap := snapshot(t, l, fmt.Sprint("round ", round))
		snaps = append(snaps, snap)
		want[snap.ID] = m.clone()
		if round%3 == 2 { // delete a random older one
			i := rng.IntN(len(snaps) - 1)
			if err := s.DeleteSnapshot(snaps[i].ID); err != nil {
				t.Fatal(err)
			}
			delete(want, snaps[i].ID)
			snaps = slices.Delete(snaps, i, i+1)
		}
		if round%8 == 7 {
			compactAll(t, s)
		}
	}
	m.change(t, rng, l, 40)
	compactAll(t, s)
	checkSnaps := func(when string) {
		for _, snap := range snaps {
			want[snap.ID].check(t, fmt.Sprintf("snapshot %s (%s) %s", snap.ID, snap.Label, when), s.SnapshotView(snap))
		}
		m.check(t, "layer "+when, l)
	}
	checkSnaps("after compaction")
	// Every level a snapshot reads is frozen: compaction keeps one
	// version of each key, none that no read point sees.
	s.bg.mu.Lock() // no flattening between the counts
	held, live := countVersions(t, s, entryPfx), liveKeys(t, s, entryPfx)
	s.bg.mu.Unlock()
	if held != live {
		t.Errorf("%d entry versions with %d snapshots, for %d keys: want one version a key", held, len(snaps), live)
	}

	closeStore(t, s)
	s = openDir(t, o)
	l = mainLayer(t, s)
	compactAll(t, s)
	checkSnaps("after reopen and compaction")

	for _, snap := range snaps {
		if err := s.DeleteSnapshot(snap.ID); err != nil {
			t.Fatal(err)
		}
	}
	compactAll(t, s)
	m.check(t, "layer after deleting every snapshot", l)
	s.bg.mu.Lock()
	got, live := countVersions(t, s, entryPfx), liveKeys(t, s, entryPfx)
	s.bg.mu.Unlock()
	if got != live {
		t.Errorf("%d entry versions after deleting every snapshot and compacting, for %d keys: want one version a key", got, live)
	}
	t.Logf("%d entries; %d versions kept for %d snapshots", len(m), held, len(snaps))
}

// TestDiscardBeforeOldestSnapshot shows which versions compaction keeps:
// a snapshot freezes its layer, so of the versions written before it
// only the one it sees, and of those after it (in the branch's new
// layer id) only the newest; a snapshot of a layer that was written
// after it (as agentfs builds before freezing took them) holds every
// version since.
func TestDiscardBeforeOldestSnapshot(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		l := mainLayer(t, s)
		put := func(n, from int) {
			for i := range n {
				var b Batch
				b.Put("k", &Entry{Type: TypeFile, Ino: uint64(from + i)})
				if err := l.Commit(&b); err != nil {
					t.Fatal(err)
				}
			}
		}
		put(10, 0)
		snap := snapshot(t, l, "")
		put(10, 100)
		compactAll(t, s)
		if got := countVersions(t, s, appendPath(layerPrefix(snap.Layer), "k")); got != 1 {
			t.Errorf("versions of k in the frozen layer after 10 writes: %d, want 1 (the snapshot's)", got)
		}
		if got := countVersions(t, s, appendPath(layerPrefix(l.id()), "k")); got != 1 {
			t.Errorf("versions of k in the branch's layer after 10 writes over the snapshot: %d, want 1", got)
		}
		if e, err := s.SnapshotView(snap).Get("k"); err != nil || e.Ino != 9 {
			t.Errorf("snapshot's k after compaction = %+v, %v, want ino 9", e, err)
		}
		if e, err := l.Get("k"); err != nil || e.Ino != 109 {
			t.Errorf("branch's k after compaction = %+v, %v, want ino 109", e, err)
		}

		// A snapshot of a layer that is written on (no frozen key):
		// held.
		if err := s.apply([]op{{key: layerKey("main"), val: layerRecord{id: snap.Layer, epoch: l.Epoch()}.encode()}, {key: frozenKey(snap.Layer), del: true}}); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		delete(s.layers, "main")
		s.mu.Unlock()
		s.pmu.Lock()
		delete(s.frozen, snap.Layer)
		s.pmu.Unlock()
		s.holdSnapshot(snap.ID, level{id: snap.Layer, ts: snap.Ts}, true)
		l = mainLayer(t, s)
		put(10, 200)
		compactAll(t, s)
		if got := countVersions(t, s, appendPath(layerPrefix(snap.Layer), "k")); got != 11 {
			t.Errorf("versions of k in a written layer after 10 writes over its snapshot: %d, want 11 (the snapshot's and the 10 after it)", got)
		}
		if e, err := s.SnapshotView(snap).Get("k"); err != nil || e.Ino != 9 {
			t.Errorf("snapshot's k after compaction = %+v, %v, want ino 9", e, err)
		}
		if err := s.DeleteSnapshot(snap.ID); err != nil {
			t.Fatal(err)
		}
		compactAll(t, s)
		if got := countVersions(t, s, appendPath(layerPrefix(snap.Layer), "k")); got != 1 {
			t.Errorf("versions of k after deleting the snapshot: %d, want 1", got)
		}
	})
}

// TestViewHoldsVersionsWhileReading: a snapshot deleted while a View
// reads it keeps its versions until the read ends.
func TestViewHoldsVersionsWhileReading(t *testing.T) {
	s := openMem(t)
	rng := seededRand(t)
	l, m, snap, frozen := snapshotted(t, s, rng, 60)
	for range 3 {
		m.change(t, rng, l, 60)
	}
	got := model{}
	v := s.SnapshotView(snap)
	err := v.Load(func(p string, e *Entry) error {
		if len(got) == 0 {
			if err := s.DeleteSnapshot(snap.ID); err != nil {
				return err
			}
			compactAll(t, s)
		}
		got[p] = *e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(frozen) {
		t.Errorf("Load of a snapshot deleted while read: %d entries, want %d", len(got), len(frozen))
	}
	if err := v.Load(func(string, *Entry) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load after the deletion: %v, want ErrNotFound", err)
	}
}

// TestLongSessionBounded: a long session of metadata changes after a
// pre-run snapshot keeps the store within a size that does not grow
// with the number of changes (issue 29): the snapshot froze its layer,
// so compaction keeps the snapshot's version of each key and the
// branch's newest, and nothing of the 100,000 versions in between. The
// bound (1 MiB on disk after Close, for 500 entries) is generous; with
// every version kept the store takes 2 MiB and more.
func TestLongSessionBounded(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, memTableSize: smallTxn}
	s := openDir(t, o)
	l := mainLayer(t, s)
	const keys, changes = 500, 100_000
	put := func(i int) {
		var b Batch
		b.Put(fmt.Sprintf("src/f%03d", i%keys), &Entry{Type: TypeFile, Ino: uint64(i), Object: fmt.Sprintf("%016x", i)})
		if err := l.Commit(&b); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		put(i)
	}
	snap := snapshot(t, l, "pre-run")
	for i := range changes {
		put(keys + i)
	}
	compactAll(t, s)
	if n := countVersions(t, s, entryPfx); n > 2*keys {
		t.Errorf("%d entry versions after %d changes of %d entries over a snapshot, want at most %d (the snapshot's and the branch's)", n, changes, keys, 2*keys)
	}
	closeStore(t, s)
	if size := diskUsage(t, filepath.Join(dir, "meta")); size > 1<<20 {
		t.Errorf("the store takes %d bytes after %d changes of %d entries over a snapshot, want at most 1 MiB", size, changes, keys)
	}
	s = openDir(t, o)
	l = mainLayer(t, s)
	for i := range keys {
		p := fmt.Sprintf("src/f%03d", i)
		if e, err := s.SnapshotView(snap).Get(p); err != nil || e.Ino != uint64(i) {
			t.Fatalf("snapshot's %s = %+v, %v, want ino %d", p, e, err, i)
		}
		last := keys + changes - keys + i
		if e, err := l.Get(p); err != nil || e.Ino != uint64(last) {
			t.Fatalf("branch's %s = %+v, %v, want ino %d", p, e, err, last)
		}
	}
}
