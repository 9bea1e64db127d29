package overlay

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// snapView opens a read-only view of snapshot s over e's lower tree.
func (e *env) snapView(s branch.Snapshot) *env {
	e.t.Helper()
	return e.otherView(Config{Snapshot: e.meta.SnapshotView(s)})
}

// otherView is a view beside e's, over the same lower tree, backstore
// and store, showing what c names (a layer or a snapshot).
func (e *env) otherView(c Config) *env {
	e.t.Helper()
	c.Lower, c.Objects, c.AllocIno = e.lower, e.bs, e.meta.AllocIno
	c.Hide, c.HiddenInodes = e.hide, e.hidden
	v, err := New(c)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if err := v.Close(); err != nil {
			e.t.Errorf("close a view: %v", err)
		}
	})
	return &env{t: e.t, lower: e.lower, bs: e.bs, meta: e.meta, view: v}
}

func TestSnapshotIsImmutable(t *testing.T) {
	e := newEnv(t, map[string]string{"d/lower": "lower", "gone": "x"})
	e.write("d/lower", "v1")
	r := e.view.Root()
	_, f, _, err := e.view.Create(e.must("d"), "open", unix.O_RDWR, 0644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("before"), 0) // open for writing across the snapshot

	snap, err := e.view.Snapshot("one", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("AFTER!"), 0)
	release(t, f)
	e.write("d/lower", "v2")
	mode := uint32(0600)
	if _, err := e.view.Setattr(e.must("d/lower"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(r, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.view.Create(r, "new", unix.O_RDWR, 0644, Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rename(e.must("d"), "lower", r, "moved", 0); err != nil {
		t.Fatal(err)
	}

	s := e.snapView(snap)
	eq(t, "snapshot d/lower", s.read("d/lower"), "v1")
	eq(t, "snapshot d/open", s.read("d/open"), "before")
	eq(t, "snapshot gone", s.read("gone"), "x")
	if _, err := s.walk("new"); err != unix.ENOENT {
		t.Errorf("snapshot shows a file made after it: %v", err)
	}
	st, _ := s.view.Getattr(s.must("d/lower"))
	eq(t, "snapshot mode", st.Mode&07777, uint32(0644))
	if _, _, _, err := s.view.Create(s.view.Root(), "x", unix.O_RDWR, 0644, Caller{}); err != unix.EROFS {
		t.Errorf("create in a snapshot's view: %v, want EROFS", err)
	}
	eq(t, "branch moved", e.read("moved"), "v2")
	eq(t, "branch open", e.read("d/open"), "AFTER!")

	stale, err := e.view.Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) == 0 {
		t.Error("restore returned no stale nodes")
	}
	eq(t, "restored d/lower", e.read("d/lower"), "v1")
	eq(t, "restored d/open", e.read("d/open"), "before")
	eq(t, "restored gone", e.read("gone"), "x")
	if _, err := e.walk("moved"); err != unix.ENOENT {
		t.Errorf("restored branch still has moved: %v", err)
	}
	// The restored branch changes without touching the snapshot.
	e.write("d/lower", "v3")
	eq(t, "snapshot after writing the restored branch", e.snapView(snap).read("d/lower"), "v1")
}

// branchView is a second view, over layer l, beside e's: the daemon
// keeps one live view per branch, over one lower tree and backstore.
func (e *env) branchView(l *branch.Layer) *env {
	e.t.Helper()
	return e.otherView(Config{Layer: l})
}

// Two live views of two branches forked from one snapshot share its
// objects until either changes a file, and never see each other's
// changes.
func TestBranchViewsAreIndependent(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "lower", "g": "lower"})
	e.write("f", "main")
	snap, err := e.view.Snapshot("", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.meta.CreateLayer("try", snap)
	if err != nil {
		t.Fatal(err)
	}
	try := e.branchView(l)
	eq(t, "try starts as the snapshot", try.read("f"), "main")
	try.write("f", "try")
	eq(t, "main untouched by try", e.read("f"), "main")
	e.write("f", "main 2")
	e.write("g", "main")
	eq(t, "try untouched by main", try.read("f"), "try")
	eq(t, "try's g, untouched by main", try.read("g"), "lower")
	eq(t, "the snapshot", e.snapView(snap).read("f"), "main")
}

// TestThawHardLinkAfterUnlink: a hard-linked file loses the name its
// node was made by after a snapshot; a write through the other name
// must thaw the file at that name, not bring the unlinked one back.
func TestThawHardLinkAfterUnlink(t *testing.T) {
	e := newEnv(t, map[string]string{})
	r := e.view.Root()
	n, f, _, err := e.view.Create(r, "x", unix.O_RDWR, 0644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("v1"), 0)
	release(t, f)
	if _, err := e.view.Link(n, r, "y"); err != nil {
		t.Fatal(err)
	}
	snap, err := e.view.Snapshot("", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(r, "x"); err != nil {
		t.Fatal(err)
	}
	e.write("y", "v2")
	eq(t, "y", e.read("y"), "v2")
	if _, err := e.walk("x"); err != unix.ENOENT {
		t.Errorf("the unlinked name is back: %v", err)
	}
	s := e.snapView(snap)
	eq(t, "snapshot x", s.read("x"), "v1")
	eq(t, "snapshot y", s.read("y"), "v1")
}

// TestPinnedFileAcrossSnapshot: a file pinned for passthrough keeps its
// object across a snapshot (the snapshot gets a clone), so writes
// through the object the kernel keeps using reach the branch and not
// the snapshot; a file on an object a snapshot shares is refused, and
// follows the node to the clone a write makes.
func TestPinnedFileAcrossSnapshot(t *testing.T) {
	e := newEnv(t, map[string]string{})
	_, f, _, err := e.view.Create(e.view.Root(), "p", unix.O_RDWR, 0644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("one"), 0)
	release(t, f)
	n := e.must("p")

	r, err := e.view.Open(n, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Pin() {
		t.Fatal("a read-only file on an upper object of its own cannot be pinned")
	}
	// Pinning a pinned file again reports it pinned and counts nothing
	// more: the one Release below unpins it (the snapshot after it shares
	// the object).
	if !r.Pin() {
		t.Fatal("a second Pin of a pinned file failed")
	}
	e.view.nodesMu.Lock()
	pins := n.pins
	e.view.nodesMu.Unlock()
	if pins != 1 {
		t.Fatalf("a file pinned twice counts %d pins on its node, want 1", pins)
	}
	obj := n.object
	snap, err := e.view.Snapshot("pinned", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	if n.object != obj || e.view.frozenLocked(n.entry) {
		t.Fatalf("after the snapshot the pinned file's node has object %s (frozen: %v), want %s, not frozen",
			n.object, e.view.frozenLocked(n.entry), obj)
	}
	// The kernel writes to the pinned object directly.
	if err := os.WriteFile(objPath(e, obj), []byte("two"), 0); err != nil {
		t.Fatal(err)
	}
	release(t, r)
	eq(t, "p in the branch", e.read("p"), "two")
	eq(t, "p in the snapshot", e.snapView(snap).read("p"), "one")

	// Unpinned, the object is shared with the next snapshot.
	if _, err := e.view.Snapshot("shared", branch.KindManual); err != nil {
		t.Fatal(err)
	}
	if !e.view.frozenLocked(n.entry) {
		t.Fatal("with no file open, the snapshot does not share the object")
	}
	r, err = e.view.Open(n, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, r)
	if r.Pin() {
		t.Fatal("a file on an object a snapshot shares was pinned")
	}
	e.write("p", "three") // thaws the node onto a clone
	buf := make([]byte, 16)
	m, err := r.ReadAt(buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "read through the file opened before the thaw", string(buf[:m]), "three")
}

// objPath is the path of object id in e's backstore.
func objPath(e *env, id string) string {
	l := e.bs.Loc(id)
	return procPath(l.Dirfd, l.Name)
}

// TestChangeStaleNode: after a restore, a node that a file held open for
// writing keeps may change in place (its object is its own); a node
// held only by a page-cache reader may not (ESTALE: its object is the
// safety snapshot's). Neither loops, thaws, or touches a snapshot.
// Before, a writable open of such a node cloned its object forever.
func TestChangeStaleNode(t *testing.T) {
	e := newEnv(t, map[string]string{"w": "snap", "r": "snap"})
	snap, err := e.view.Snapshot("before", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	e.write("w", "mine")
	e.write("r", "mine")
	wn, rn := e.must("w"), e.must("r")
	wf, err := e.view.Open(wn, unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, wf)
	rf, err := e.view.Open(rn, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, rf)
	safety, err := e.view.Snapshot("safety", branch.KindSafety)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Restore(snap); err != nil {
		t.Fatal(err)
	}
	objects := e.objectCount()

	done := make(chan struct{})
	go func() {
		defer close(done)
		again, err := e.view.Open(wn, unix.O_RDWR)
		if err != nil {
			t.Errorf("writable open of a stale node held open for writing: %v", err)
			return
		}
		// In a goroutine: Errorf, not Fatalf.
		if _, err := again.WriteAt([]byte("late"), 0); err != nil {
			t.Errorf("write through a writable open of a stale node: %v", err)
		}
		release(t, again)
		mode := uint32(0600)
		if _, err := e.view.Setattr(wn, SetAttr{Mode: &mode}, nil); err != nil {
			t.Errorf("chmod of a stale node held open for writing: %v", err)
		}
		if _, err := e.view.Open(rn, unix.O_RDWR); err != unix.ESTALE {
			t.Errorf("writable open of a stale node held open for reading: %v, want ESTALE", err)
		}
		if _, err := e.view.Setattr(rn, SetAttr{Mode: &mode}, nil); err != unix.ESTALE {
			t.Errorf("chmod of a stale node held open for reading: %v, want ESTALE", err)
		}
		if err := e.view.Setxattr(rn, "user.x", []byte("1"), 0); err != unix.ESTALE {
			t.Errorf("setxattr of a stale node held open for reading: %v, want ESTALE", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("changing a stale node did not return within 20 s")
	}
	buf := make([]byte, 16)
	n, _ := wf.ReadAt(buf, 0)
	eq(t, "w through the file held open", string(buf[:n]), "late")
	if got := e.objectCount(); got != objects {
		t.Errorf("the changes made %d objects, want none", got-objects)
	}
	eq(t, "w in the branch", e.read("w"), "snap")
	eq(t, "r in the branch", e.read("r"), "snap")
	sv := e.snapView(safety)
	eq(t, "w in the safety snapshot", sv.read("w"), "mine")
	eq(t, "r in the safety snapshot", sv.read("r"), "mine")
	st, _ := sv.view.Getattr(sv.must("w"))
	eq(t, "w's mode in the safety snapshot", st.Mode&07777, uint32(0644))
}

// objectCount is the number of objects in e's backstore.
func (e *env) objectCount() int {
	e.t.Helper()
	n := 0
	if err := e.bs.Objects(func(string) error { n++; return nil }); err != nil {
		e.t.Fatalf("list the objects: %v", err)
	}
	return n
}

// TestSetattrUnlinkedFrozen: a file a snapshot shares, unlinked while
// the kernel still holds it, then given new times (as a writeback-cache
// kernel does when it drops the inode) or a new mode through an open
// descriptor: the change thaws the object once and returns. The clone
// had no name to carry it, and was left frozen, so Setattr cloned it
// again and again, for ever.
func TestSetattrUnlinkedFrozen(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "lower"})
	e.write("f", "data")
	n := e.must("f")
	if _, err := e.view.Snapshot("", branch.KindManual); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(e.view.Root(), "f"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		mode := uint32(0600)
		ts := unix.Timespec{Sec: 1}
		_, err := e.view.Setattr(n, SetAttr{Mode: &mode, Mtime: &ts, Ctime: true}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Setattr of an unlinked file a snapshot shares did not return")
	}
	st, err := e.view.Getattr(n)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "mode", st.Mode&07777, uint32(0600))
}

// TestSnapshotKeepsNamelessWriter: an O_TMPFILE file written, a
// snapshot, an fchmod, more writes, then linkat (the atomic-write
// pattern). The snapshot left the nameless file's entry in the old
// epoch, so the fchmod thawed the node onto a clone while the
// descriptor went on writing to the object it left: "out" lost the
// second write.
func TestSnapshotKeepsNamelessWriter(t *testing.T) {
	e := newEnv(t, map[string]string{"d/": ""})
	d := e.must("d")
	n, w, _, err := e.view.Tmpfile(d, unix.O_RDWR, 0o600, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, w)
	if _, err := w.WriteAt([]byte("first "), 0); err != nil {
		t.Fatal(err)
	}
	snap, err := e.view.Snapshot("", branch.KindAuto)
	if err != nil {
		t.Fatal(err)
	}
	obj := n.object
	mode := uint32(0o644)
	if _, err := e.view.Setattr(n, SetAttr{Mode: &mode}, w); err != nil {
		t.Fatal(err)
	}
	eq(t, "object after fchmod (no snapshot shares it)", n.object, obj)
	if _, err := w.WriteAt([]byte("second"), 6); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Link(n, d, "out"); err != nil {
		t.Fatal(err)
	}
	eq(t, "d/out", e.read("d/out"), "first second")
	if _, err := e.snapView(snap).walk("d/out"); err != unix.ENOENT {
		t.Errorf("d/out in the snapshot, linked after it: %v, want ENOENT", err)
	}
}

// TestSnapshotUnlinkedWriter: a file unlinked while open for writing,
// a snapshot, an fchmod: the node keeps the object its descriptor
// writes to, so stat and a new open see the writes.
func TestSnapshotUnlinkedWriter(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "lower"})
	e.write("f", "data")
	n := e.must("f")
	w, err := e.view.Open(n, unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, w)
	if err := e.view.Unlink(e.view.Root(), "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Snapshot("", branch.KindManual); err != nil {
		t.Fatal(err)
	}
	obj := n.object
	mode := uint32(0o600)
	if _, err := e.view.Setattr(n, SetAttr{Mode: &mode}, w); err != nil {
		t.Fatal(err)
	}
	eq(t, "object after fchmod (no snapshot shares it)", n.object, obj)
	if _, err := w.WriteAt([]byte("longer data"), 0); err != nil {
		t.Fatal(err)
	}
	st, err := e.view.Getattr(n)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "size", st.Size, int64(11))
	r, err := e.view.Open(n, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, r)
	buf := make([]byte, 64)
	k, _ := r.ReadAt(buf, 0)
	eq(t, "a new read-only open reads", string(buf[:k]), "longer data")
}

// TestRestoreCutsLooseOnlyChanges: a restore cuts loose the nodes of
// the paths that changed since the snapshot (and those below a changed
// directory, which come back Below: their names go with the
// directory's), reports the directories whose entries changed as Kept,
// and leaves every other node as it was, with its name in the kernel.
func TestRestoreCutsLooseOnlyChanges(t *testing.T) {
	e := newEnv(t, map[string]string{"d/a": "a1", "d/b": "b1", "e/c": "c1"})
	r := e.view.Root()
	e.write("d/a", "a2")
	x, _, err := e.view.Mkdir(r, "x", 0o755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	_, f, _, err := e.view.Create(x, "1", unix.O_RDWR, 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	release(t, f)
	before := map[string]*Node{}
	for _, p := range []string{"d", "d/a", "d/b", "e", "e/c", "x", "x/1"} {
		before[p] = e.must(p)
	}
	snap, err := e.view.Snapshot("s", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	e.write("d/a", "a3")
	if _, f, _, err = e.view.Create(x, "2", unix.O_RDWR, 0o644, Caller{}); err != nil {
		t.Fatal(err)
	}
	release(t, f)
	y, _, err := e.view.Mkdir(r, "y", 0o755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if _, f, _, err = e.view.Create(y, "f", unix.O_RDWR, 0o644, Caller{}); err != nil {
		t.Fatal(err)
	}
	release(t, f)
	after := map[string]*Node{"d/a": e.must("d/a"), "x/2": e.must("x/2"), "y": e.must("y"), "y/f": e.must("y/f")}

	stale, err := e.view.Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	got := map[*Node]string{}
	for _, s := range stale {
		switch {
		case s.Kept:
			got[s.Node] = "kept"
		case s.Below:
			got[s.Node] = "below"
		case s.Parent != nil:
			got[s.Node] = "named " + s.Name
		default:
			got[s.Node] = "nameless"
		}
	}
	want := map[*Node]string{
		after["d/a"]: "named a", after["x/2"]: "named 2", after["y"]: "named y", after["y/f"]: "below",
		before["d"]: "kept", before["x"]: "kept", r: "kept",
	}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("node %d: %q, want %q", n.ID, got[n], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("restore returned %d nodes, want %d: %v", len(got), len(want), got)
	}
	for _, p := range []string{"d", "d/b", "e", "e/c", "x", "x/1"} {
		if n := e.must(p); n != before[p] {
			t.Errorf("%s: a new node after the restore; it did not change", p)
		}
	}
	if e.must("d/a") == after["d/a"] {
		t.Error("d/a keeps the node of its changed state")
	}
	eq(t, "restored d/a", e.read("d/a"), "a2")
	eq(t, "restored d/b", e.read("d/b"), "b1")
	eq(t, "restored x names", fmt.Sprint(e.names("x")), "[1]")
	for _, p := range []string{"x/2", "y"} {
		if _, err := e.walk(p); err != unix.ENOENT {
			t.Errorf("%s after the restore: %v, want ENOENT", p, err)
		}
	}
	// The kept nodes work on: a change through them lands in the branch.
	e.write("x/1", "later")
	eq(t, "x/1 written after the restore", e.read("x/1"), "later")
	eq(t, "snapshot's x/1", e.snapView(snap).read("x/1"), "")
}

// TestRestoreCutsLooseHardLinks: a restore that takes away or gives back
// another name of a file made in the view (a hard link) cuts the file's
// node loose wherever its own name is, in a directory without changes
// too: its link count changed. A file whose one name is unchanged keeps
// its node.
func TestRestoreCutsLooseHardLinks(t *testing.T) {
	e := newEnv(t, map[string]string{"u/": "", "w/": "", "k/": ""})
	var nodes []*Node
	for _, name := range []string{"u/a", "u/b", "k/c"} {
		dir, base := splitPath(name)
		n, f, _, err := e.view.Create(e.must(dir), base, unix.O_RDWR, 0o644, Caller{})
		if err != nil {
			t.Fatal(err)
		}
		release(t, f)
		nodes = append(nodes, n)
	}
	// u/b has a second name before the snapshot, u/a after it.
	if _, err := e.view.Link(nodes[1], e.must("w"), "b2"); err != nil {
		t.Fatal(err)
	}
	snap, err := e.view.Snapshot("s", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Link(nodes[0], e.must("w"), "a2"); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(e.must("w"), "b2"); err != nil {
		t.Fatal(err)
	}
	a, b, c := e.must("u/a"), e.must("u/b"), e.must("k/c")
	if a != nodes[0] || b != nodes[1] {
		t.Fatal("a hard link made a node of its own")
	}
	stale, err := e.view.Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	cut := map[*Node]bool{}
	for _, s := range stale {
		if !s.Kept {
			cut[s.Node] = true
		}
	}
	if !cut[a] {
		t.Error("u/a, whose other name w/a2 went, keeps its node")
	}
	if !cut[b] {
		t.Error("u/b, whose other name w/b2 came back, keeps its node")
	}
	if cut[c] {
		t.Error("k/c, which did not change, lost its node")
	}
	for _, p := range []string{"w/a2"} {
		if _, err := e.walk(p); err != unix.ENOENT {
			t.Errorf("%s after the restore: %v, want ENOENT", p, err)
		}
	}
	if _, err := e.walk("w/b2"); err != nil {
		t.Errorf("w/b2 after the restore: %v", err)
	}
	e.checkIndexFresh("after the restore")
}

// TestRestoreBatchesBusyDirectories: a kept directory with many changed
// names comes back with its name (the kernel drops it whole), and the
// nodes cut loose below it come back Below.
func TestRestoreBatchesBusyDirectories(t *testing.T) {
	e := newEnv(t, nil)
	busy, _, err := e.view.Mkdir(e.view.Root(), "busy", 0o755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range batchNames {
		_, f, _, err := e.view.Create(busy, fmt.Sprintf("f%02d", i), unix.O_RDWR, 0o644, Caller{})
		if err != nil {
			t.Fatal(err)
		}
		writeAt(t, f, []byte("old"), 0)
		release(t, f)
	}
	snap, err := e.view.Snapshot("s", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	for i := range batchNames {
		e.write(fmt.Sprintf("busy/f%02d", i), "new")
	}
	changed := e.must("busy/f00")
	stale, err := e.view.Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	var sawBusy, sawFile bool
	for _, s := range stale {
		switch s.Node {
		case busy:
			sawBusy = true
			if !s.Kept || s.Parent != e.view.Root() || s.Name != "busy" || s.Below || len(s.Names) != batchNames {
				t.Errorf("busy: %+v, want Kept with its name and %d names", s, batchNames)
			}
		case changed:
			sawFile = true
			if !s.Below {
				t.Errorf("busy/f00: %+v, want Below", s)
			}
		}
	}
	if !sawBusy || !sawFile {
		t.Errorf("restore returned busy: %v, busy/f00: %v; want both", sawBusy, sawFile)
	}
	if e.must("busy") != busy {
		t.Error("busy has a new node after the restore")
	}
	eq(t, "restored busy/f07", e.read("busy/f07"), "old")
}

// indexState is the view's index and what is derived from it, as
// values, for comparing an index updated in place with one loaded.
type indexState struct {
	Root        *branch.Entry
	Dirs        map[string]map[string]*branch.Entry
	Links       map[string]int
	Hardlinks   map[uint64]*branch.Entry
	HiddenLinks map[uint64]int
	Anchors     map[uint64]int
	Ndirs       map[string]int
	MultiNamed  int
}

func (v *FS) indexStateLocked() indexState {
	return indexState{v.rootEntry, v.dirs, v.links, v.hardlinks, v.hiddenLinks, v.anchors, v.ndirs, v.multiNamed}
}

// walkable reports whether p exists in the view.
func (e *env) walkable(p string) bool {
	_, err := e.walk(p)
	return err == nil
}

// checkIndexFresh compares the view's index with one loaded from its
// layer.
func (e *env) checkIndexFresh(what string) {
	e.t.Helper()
	v := e.view
	v.mu.Lock()
	defer v.mu.Unlock()
	got := v.indexStateLocked()
	if err := v.loadLocked(); err != nil {
		e.t.Fatal(err)
	}
	if want := v.indexStateLocked(); !reflect.DeepEqual(got, want) {
		e.t.Errorf("%s: the index updated in place differs from the layer's:\n got %+v\nwant %+v", what, got, want)
	}
}

// TestRestoreRandomFewChanges makes random changes to a tree of 200
// files, takes snapshots now and then and restores random ones, each
// after a few changes (so that the restore reads only the paths that
// may have changed, and updates the index in place), and compares the
// index with one loaded from the layer, and the files with what each
// snapshot held.
func TestRestoreRandomFewChanges(t *testing.T) { testRestoreRandom(t, 4) }

// TestRestoreRandomManyChanges is TestRestoreRandomFewChanges with up to
// 120 changes between two steps, most of the tree: the restore updates
// the index in place whatever the size of the difference.
func TestRestoreRandomManyChanges(t *testing.T) { testRestoreRandom(t, 120) }

// testRestoreRandom is TestRestoreRandomFewChanges with 1 to maxOps
// changes between two steps.
func testRestoreRandom(t *testing.T, maxOps int) {
	files := map[string]string{}
	for i := range 100 {
		files[fmt.Sprintf("l%d/f%03d", i%4, i)] = fmt.Sprintf("lower %d", i)
	}
	e := newEnv(t, files)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	r := e.view.Root()
	d, _, err := e.view.Mkdir(r, "u", 0o755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		_, f, _, err := e.view.Create(d, fmt.Sprintf("f%03d", i), unix.O_RDWR, 0o644, Caller{})
		if err != nil {
			t.Fatal(err)
		}
		writeAt(t, f, []byte(fmt.Sprintf("upper %d", i)), 0)
		release(t, f)
	}
	// contents reads every file the tests touch.
	contents := func() map[string]string { return dirContents(e, "l0", "l1", "u", "new") }
	type taken struct {
		snap branch.Snapshot
		want map[string]string
	}
	var snaps []taken
	fast := 0
	testHookReloadPaths = func(int) { fast++ }
	defer func() { testHookReloadPaths = nil }()
	for step := range 60 {
		for range 1 + rng.IntN(maxOps) {
			switch rng.IntN(6) {
			case 0, 1:
				i := 4*rng.IntN(25) + rng.IntN(2) // in l0 or l1
				e.write(fmt.Sprintf("l%d/f%03d", i%4, i), fmt.Sprintf("step %d", step))
			case 2:
				if p := fmt.Sprintf("u/f%03d", rng.IntN(100)); e.walkable(p) {
					e.write(p, fmt.Sprintf("step %d", step))
				}
			case 3:
				nd, err := e.walk("new")
				if err != nil {
					if nd, _, err = e.view.Mkdir(r, "new", 0o755, Caller{}); err != nil {
						t.Fatal(err)
					}
				}
				_, f, _, err := e.view.Create(nd, fmt.Sprintf("n%d", step), unix.O_RDWR, 0o644, Caller{})
				if err != nil {
					t.Fatal(err)
				}
				release(t, f)
			case 4:
				name := fmt.Sprintf("f%03d", rng.IntN(100))
				if err := e.view.Unlink(e.must("u"), name); err != nil && err != unix.ENOENT {
					t.Fatal(err)
				}
			case 5:
				// A hard link of a file made in the branch: one object,
				// two names, neither of them a copy of a lower file.
				if n, err := e.walk(fmt.Sprintf("u/f%03d", rng.IntN(100))); err == nil {
					if _, err := e.view.Link(n, e.must("u"), fmt.Sprintf("h%d", rng.IntN(10))); err != nil && err != unix.EEXIST {
						t.Fatal(err)
					}
				}
			}
		}
		if len(snaps) == 0 || rng.IntN(3) == 0 {
			snap, err := e.view.Snapshot("", branch.KindManual)
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, taken{snap, contents()})
			continue
		}
		s := snaps[rng.IntN(len(snaps))]
		if _, err := e.view.Restore(s.snap); err != nil {
			t.Fatal(err)
		}
		e.checkIndexFresh(fmt.Sprintf("step %d, restore of %s", step, s.snap.ID))
		if got := contents(); !maps.Equal(got, s.want) {
			t.Fatalf("step %d: after the restore of %s the files are\n%v\nwant\n%v", step, s.snap.ID, got, s.want)
		}
	}
	if fast == 0 {
		t.Error("no restore read only the paths that changed")
	}
	t.Logf("%d restores read only the paths that changed", fast)
}

// dirContents maps the files of e's directories dirs (one level; a
// missing directory has none) to their contents.
func dirContents(e *env, dirs ...string) map[string]string {
	m := map[string]string{}
	for _, dir := range dirs {
		if _, err := e.walk(dir); err == unix.ENOENT {
			continue
		}
		for _, name := range e.names(dir) {
			m[dir+"/"+name] = e.read(dir + "/" + name)
		}
	}
	return m
}
