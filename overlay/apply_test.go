package overlay

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/internal/testenv"
)

// apply runs Apply on e's view, failing the test on an error.
func (e *env) apply(o ApplyOptions) ApplyResult {
	e.t.Helper()
	r, err := Apply(e.view, o)
	if err != nil {
		e.t.Fatalf("Apply(%+v): %v", o, err)
	}
	return r
}

// itemPaths lists "kind path" of items.
func itemPaths(items []ApplyItem) string {
	var b strings.Builder
	for _, it := range items {
		fmt.Fprintf(&b, "%s %s\n", it.Kind, it.Path)
	}
	return b.String()
}

// lowerSigs walks the plain lower tree.
func (e *env) lowerSigs() map[string]fileSig {
	e.t.Helper()
	return fullWalk(e.t, e.lowerView().view)
}

// entryPaths lists the paths the branch has entries for.
func (e *env) entryPaths() []string {
	e.t.Helper()
	var out []string
	if err := e.view.Layer().Load(func(p string, _ *branch.Entry) error { out = append(out, p); return nil }); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func checkNoDiff(t *testing.T, e *env, what string) {
	t.Helper()
	if cs := diffOf(t, e.lowerView().view, e.view); len(cs) > 0 {
		t.Errorf("%s: Diff(lower, branch) =\n%s want none", what, summary(cs))
	}
}

func TestApplyEverything(t *testing.T) {
	e := newEnv(t, map[string]string{"d/f": "lower f", "d/g": "gone", "keep": "keep", "mv/a": "moved data", "mode": "m", "empty/": ""})
	r := e.view.Root()
	e.write("d/f", "upper f")
	if err := e.view.Unlink(e.must("d"), "g"); err != nil {
		t.Fatal(err)
	}
	nd, _, err := e.view.Mkdir(r, "new", 0750, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	_, f, _, err := e.view.Create(nd, "file", unix.O_RDWR, 0640, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("new data"), 0)
	release(t, f)
	if _, _, err := e.view.Symlink(nd, "link", "../keep", Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rename(e.must("mv"), "a", r, "moved", 0); err != nil {
		t.Fatal(err)
	}
	mode := uint32(0700)
	if _, err := e.view.Setattr(e.must("mode"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Setxattr(e.must("keep"), "user.note", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rmdir(r, "empty"); err != nil {
		t.Fatal(err)
	}
	movedIno := lowerIno(t, e, "mv/a")
	want := fullWalk(t, e.view)

	res := e.apply(ApplyOptions{})
	if len(res.Conflicts) > 0 || len(res.Skipped) > 0 {
		t.Fatalf("conflicts:\n%sskipped:\n%s", itemPaths(res.Conflicts), itemPaths(res.Skipped))
	}
	eq(t, "applied", itemPaths(res.Applied), lines(
		"modified d/f", "deleted d/g", "deleted empty", "mode-changed keep", "mode-changed mode",
		"created moved", "deleted mv/a", "created new", "created new/file", "created new/link"))
	eq(t, "bytes", res.Bytes, int64(len("upper f")+len("new data")))
	if got := e.lowerSigs(); !maps.Equal(got, want) {
		t.Errorf("lower after apply:\n%v\nwant (the view before):\n%v", got, want)
	}
	if got := fullWalk(t, e.view); !maps.Equal(got, want) {
		t.Errorf("view after apply:\n%v\nwant as before:\n%v", got, want)
	}
	checkNoDiff(t, e, "after apply")
	eq(t, "the moved file keeps its lower inode", lowerIno(t, e, "moved"), movedIno)
	st := lstatLower(t, e, "new")
	eq(t, "mode of new", st.Mode&07777, uint32(0750))
	// Only the directory made in the view stays an entry (for its
	// inode number), with the root above it.
	eq(t, "entries after apply", e.entryPaths(), []string{"", "new"})
	// A remount shows the same.
	e.reopen()
	if got := fullWalk(t, e.view); !maps.Equal(got, want) {
		t.Errorf("view after remount:\n%v\nwant:\n%v", got, want)
	}
	checkNoDiff(t, e, "after remount")
}

func lowerIno(t *testing.T, e *env, p string) uint64 {
	t.Helper()
	return lstatLower(t, e, p).Ino
}

func lstatLower(t *testing.T, e *env, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(e.lower, p), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestApplyKeepsTimes(t *testing.T) {
	e := newEnv(t, map[string]string{"d/f": "x"})
	e.write("d/f", "new")
	mt := unix.Timespec{Sec: 1_000_000_000, Nsec: 123456789}
	at := unix.Timespec{Sec: 1_100_000_000, Nsec: 5}
	if _, err := e.view.Setattr(e.must("d/f"), SetAttr{Mtime: &mt, Atime: &at}, nil); err != nil {
		t.Fatal(err)
	}
	dst, _ := e.view.Getattr(e.must("d"))
	e.apply(ApplyOptions{})
	st := lstatLower(t, e, "d/f")
	eq(t, "mtime", st.Mtim, mt)
	eq(t, "atime", st.Atim, at)
	eq(t, "directory mtime", lstatLower(t, e, "d").Mtim, dst.Mtim)
}

func TestApplyConflict(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "lower", "other": "o"})
	e.write("f", "upper")
	e.write("other", "upper other")
	time.Sleep(20 * time.Millisecond) // a ctime the coarse clock tells apart
	if err := os.WriteFile(filepath.Join(e.lower, "f"), []byte("edited outside"), 0644); err != nil {
		t.Fatal(err)
	}
	res := e.apply(ApplyOptions{})
	eq(t, "conflicts", itemPaths(res.Conflicts), lines("modified f"))
	eq(t, "applied", itemPaths(res.Applied), lines("modified other"))
	eq(t, "lower f", e.lowerContent("f"), "edited outside")
	eq(t, "lower other", e.lowerContent("other"), "upper other")
	eq(t, "view f", e.read("f"), "upper")
	res = e.apply(ApplyOptions{Force: true})
	eq(t, "applied with force", itemPaths(res.Applied), lines("modified f"))
	eq(t, "lower f", e.lowerContent("f"), "upper")
	checkNoDiff(t, e, "after force")
	// Applied paths are not conflicts any more.
	e.write("f", "again")
	res = e.apply(ApplyOptions{})
	eq(t, "conflicts after apply", len(res.Conflicts), 0)
	eq(t, "lower f", e.lowerContent("f"), "again")
}

func TestApplyConflictCreatedWhereLowerHadNothing(t *testing.T) {
	e := newEnv(t, map[string]string{"d/": ""})
	_, f, _, err := e.view.Create(e.must("d"), "new", unix.O_RDWR, 0644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("view"), 0)
	release(t, f)
	if err := os.WriteFile(filepath.Join(e.lower, "d/new"), []byte("outside"), 0644); err != nil {
		t.Fatal(err)
	}
	res := e.apply(ApplyOptions{})
	eq(t, "conflicts", itemPaths(res.Conflicts), lines("modified d/new"))
	eq(t, "lower", e.lowerContent("d/new"), "outside")
}

// A file in a directory made in the view has no base of its own: its
// directory's ("nothing there") judges it, so a lower file that
// appears at its path since is a conflict, and so is the directory.
func TestApplyConflictInNewDir(t *testing.T) {
	e := newEnv(t, map[string]string{"keep": "k"})
	if _, _, err := e.view.Mkdir(e.view.Root(), "nd", 0o755, Caller{}); err != nil {
		t.Fatal(err)
	}
	_, f, _, err := e.view.Create(e.must("nd"), "new", unix.O_RDWR, 0644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("view"), 0)
	release(t, f)
	if _, err := e.view.layer.Base("nd/new"); err == nil {
		t.Errorf("nd/new has a base of its own: files in new directories need none")
	}
	if err := os.MkdirAll(filepath.Join(e.lower, "nd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.lower, "nd/new"), []byte("outside"), 0644); err != nil {
		t.Fatal(err)
	}
	res := e.apply(ApplyOptions{})
	if len(res.Conflicts) == 0 {
		t.Fatalf("no conflict for nd/new, which appeared in the lower tree: applied %v", itemPaths(res.Applied))
	}
	eq(t, "lower", e.lowerContent("nd/new"), "outside")
}

func TestApplyConflictBelowRenamedDir(t *testing.T) {
	e := newEnv(t, map[string]string{"a/x": "x", "a/y": "y"})
	// The lower files must be older than the base the rename records
	// (its coarse clock): a ctime in the same tick counts as a change.
	time.Sleep(20 * time.Millisecond)
	if err := e.view.Rename(e.view.Root(), "a", e.view.Root(), "b", 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(e.lower, "a/x"), []byte("edited"), 0644); err != nil {
		t.Fatal(err)
	}
	res := e.apply(ApplyOptions{})
	eq(t, "conflicts", itemPaths(res.Conflicts), lines("deleted a/x"))
	eq(t, "skipped", itemPaths(res.Skipped), lines("deleted a"))
	eq(t, "lower a/x", e.lowerContent("a/x"), "edited")
	eq(t, "lower b/x", e.lowerContent("b/x"), "edited")
	res = e.apply(ApplyOptions{Force: true})
	checkNoDiff(t, e, "after force")
}

func TestApplyPaths(t *testing.T) {
	e := newEnv(t, map[string]string{"a/f": "a", "b/f": "b", "c": "c"})
	e.write("a/f", "A")
	e.write("b/f", "B")
	nd, _, err := e.view.Mkdir(e.view.Root(), "n", 0755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"x", "y"} {
		if _, _, _, err := e.view.Create(nd, name, unix.O_RDWR, 0644, Caller{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Apply(e.view, ApplyOptions{Paths: []string{"c"}}); !errors.Is(err, ErrNoChange) {
		t.Errorf("Apply of an unchanged path: %v, want ErrNoChange", err)
	}
	res := e.apply(ApplyOptions{Paths: []string{"a", "n/x"}})
	eq(t, "applied", itemPaths(res.Applied), lines("modified a/f", "created n", "created n/x"))
	if len(res.Applied) == 3 && !res.Applied[1].Implied {
		t.Errorf("n applied without being marked implied")
	}
	eq(t, "lower a/f", e.lowerContent("a/f"), "A")
	eq(t, "lower b/f", e.lowerContent("b/f"), "b")
	if _, err := os.Lstat(filepath.Join(e.lower, "n/y")); !os.IsNotExist(err) {
		t.Errorf("n/y in the lower tree: %v", err)
	}
	eq(t, "still different", summary(diffOf(t, e.lowerView().view, e.view)), lines("modified b/f", "created n/y"))
	eq(t, "view n", e.names("n"), []string{"x", "y"})
	res = e.apply(ApplyOptions{})
	eq(t, "the rest", itemPaths(res.Applied), lines("modified b/f", "created n/y"))
	checkNoDiff(t, e, "after the rest")
}

func TestApplyDryRun(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "lower", "g": "g"})
	e.write("f", "upper")
	if err := e.view.Unlink(e.view.Root(), "g"); err != nil {
		t.Fatal(err)
	}
	before := e.lowerSigs()
	entries := e.entryPaths()
	res := e.apply(ApplyOptions{DryRun: true})
	eq(t, "would apply", itemPaths(res.Applied), lines("modified f", "deleted g"))
	eq(t, "bytes", res.Bytes, int64(5))
	if got := e.lowerSigs(); !maps.Equal(got, before) {
		t.Errorf("a dry run changed the lower tree:\n%v\nwas\n%v", got, before)
	}
	eq(t, "entries", e.entryPaths(), entries)
}

func TestApplyTypeChanges(t *testing.T) {
	e := newEnv(t, map[string]string{"d/x": "x", "f": "file"})
	r := e.view.Root()
	if err := removeAll(e, "d"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Symlink(r, "d", "f", Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(r, "f"); err != nil {
		t.Fatal(err)
	}
	fd, _, err := e.view.Mkdir(r, "f", 0755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.view.Create(fd, "in", unix.O_RDWR, 0600, Caller{}); err != nil {
		t.Fatal(err)
	}
	want := fullWalk(t, e.view)
	res := e.apply(ApplyOptions{})
	eq(t, "applied", itemPaths(res.Applied), lines("type-changed d", "deleted d/x", "type-changed f", "created f/in"))
	if got := e.lowerSigs(); !maps.Equal(got, want) {
		t.Errorf("lower:\n%v\nwant\n%v", got, want)
	}
	checkNoDiff(t, e, "after apply")
}

func TestApplyKeepsSnapshots(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "lower"})
	e.write("f", "snapshotted")
	snap, err := e.view.Snapshot("s", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	sv := e.snapView(snap)
	before := fullWalk(t, sv.view)
	e.apply(ApplyOptions{})
	eq(t, "lower", e.lowerContent("f"), "snapshotted")
	if got := fullWalk(t, sv.view); !maps.Equal(got, before) {
		t.Errorf("snapshot after apply:\n%v\nwant\n%v", got, before)
	}
	eq(t, "entries", e.entryPaths(), []string(nil))
}

func TestApplyKeepsFileOpenForWriting(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "lower"})
	f, err := e.view.Open(e.must("f"), unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("first"), 0)
	e.apply(ApplyOptions{})
	eq(t, "lower", e.lowerContent("f"), "first")
	writeAt(t, f, []byte("later"), 0)
	release(t, f)
	eq(t, "view", e.read("f"), "later")
	eq(t, "diff", summary(diffOf(t, e.lowerView().view, e.view)), lines("modified f"))
}

// TestApplyWaitsForRelease: a file whose release comes while apply
// starts (the kernel sends RELEASE after close(2) returns) is applied
// and no longer a change, as if the close had come first.
func TestApplyWaitsForRelease(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "lower"})
	f, err := e.view.Open(e.must("f"), unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("wrote"), 0)
	waited := false
	releaseWaitHook = func() { waited = true; release(t, f) }
	defer func() { releaseWaitHook = nil }()
	e.apply(ApplyOptions{})
	if !waited {
		release(t, f)
		t.Errorf("apply did not wait for the file open for writing")
	}
	eq(t, "lower", e.lowerContent("f"), "wrote")
	checkNoDiff(t, e, "after apply")
	eq(t, "entries", e.entryPaths(), []string(nil))
}

func TestApplyHardLinks(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "a"})
	if _, err := e.view.Link(e.must("a"), e.view.Root(), "b"); err != nil {
		t.Fatal(err)
	}
	e.write("a", "both")
	e.apply(ApplyOptions{})
	if lowerIno(t, e, "a") != lowerIno(t, e, "b") {
		t.Errorf("a and b are not one file in the lower tree")
	}
	eq(t, "lower b", e.lowerContent("b"), "both")
	checkNoDiff(t, e, "after apply")
}

// TestApplyRandom applies random changes (on random trees with hard
// links, with a snapshot half way) and checks that the lower tree then
// is what an export of the view was (applyDiffs: what Diff compares,
// the times of the paths applied, and the names that are one file),
// that the view did not change (times and hard links included), and
// that the view no longer differs from the lower tree; partial applies
// of random paths first. AGENTFS_OVERLAY_SEEDS adds seeds to the fixed
// ones (testenv.Seeds: "fresh:20" explores 20 new ones, a number
// replays one); applyRegressionSeeds run every time.
func TestApplyRandom(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for _, seed := range append(slices.Clone(applyRegressionSeeds), testenv.Seeds(t, seeds, overlaySeedsEnv)...) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { applyRandomly(t, seed) })
	}
}

// applyRegressionSeeds are seeds of TestApplyRandom that once failed,
// run every time besides the numbered ones (apply_cases_test.go has
// each case made small by hand, named by its seed).
var applyRegressionSeeds = []uint64{
	1135,                 // a directory with a subdirectory became a symlink
	16130591167422992453, // a directory's mtime, moved by a name made and removed
	16744048939468462147, // a renamed name of a hard-linked lower file (metacopy)
	15045300775851310269, // a lower name showing an upper copy, after a partial apply
	10933293520002629469, // the node of a copied-up hard link held by a lower name
	11846718270743077887, // a mode change in place would change another file of the lower inode
	7791999500506606885,  // hard links in a renamed directory, after a partial apply
	14259977362974606809, // names changed in mode only, two lower files, one in the view
	18072018077852047254, // a name of a file written, no change itself, another lower inode
	9477223757470944331,  // a renamed directory of hard links applied before its old one
	2709279243894091231,  // a directory holding only a name linked after the changes
	12596637134831935729, // a lower file whose names another upper copy claims
	1866668330431813420,  // a file of two names, neither a change, two lower files
	13831909465999310861, // a lower file an upper copy claims, left one name by the apply
	13174690654181655562, // the node of a renamed file, held by a name removed (and its directory)
	9719906000793075904,  // the same
	2523893404715637522,  // the same, after a partial apply
	4222641363338389865,  // a name shown through a renamed directory whose old one a change of type removed
	9269956003817368066,  // a file renamed over an equal one: no name a change, one a lower name
	7156663213757472631,  // a file's one entry and its lower name, neither a change
	6913985052787897642,  // the same
	16501374758269319816, // a lower name of a copy, written anew by a partial apply without the copy's entry
	10355246395389050250, // a lower name of a copy, written anew, the lower file left one name
	14109995232238529535, // a renamed file's removed old name, its lower inode freed, the copy's number reused
	6763999263834883702,  // a name linked to a lower file whose number a renamed copy shows
	617882901282798699,   // names of a file not linked: its old lower name, another file now, a change
}

// overlaySeedsEnv adds seeds to TestApplyRandom and TestDiffRandom.
const overlaySeedsEnv = "AGENTFS_OVERLAY_SEEDS"

func applyRandomly(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	e := newEnv(t, randomTree(t, rng))
	for _, l := range [][2]string{{"d0/f0", "d1/s/t/hl"}, {"d2/f0", "d2/hl"}} {
		// Where f0 exists: randomTree makes 0 to 3 files a directory.
		if err := os.Link(filepath.Join(e.lower, l[0]), filepath.Join(e.lower, l[1])); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	// The lower tree's ctimes older than the bases the operations
	// record (a lower file changed in the same clock tick as a base
	// counts as changed after it).
	time.Sleep(20 * time.Millisecond)
	var log []string
	randomOps(e, rng, 12, &log)
	if _, err := e.view.Snapshot("half way", branch.KindManual); err != nil {
		t.Fatal(err)
	}
	log = append(log, "snapshot")
	randomOps(e, rng, 12, &log)
	fail := func(format string, a ...any) {
		t.Helper()
		t.Fatalf("seed %d: %s\noperations:\n%s", seed, fmt.Sprintf(format, a...), strings.Join(log, "\n"))
	}
	view := fullWalk(t, e.view)
	export := filepath.Join(t.TempDir(), "export")
	if err := Export(e.view, export); err != nil {
		t.Fatal(err)
	}
	ev, err := LowerView(export, e.bs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ev.Close(); err != nil {
			t.Errorf("close the view of the export: %v", err)
		}
	}()
	exported := fullWalk(t, ev)

	// A partial apply of a random changed path first.
	applied := map[string]ChangeKind{}
	if cs := diffOf(t, e.lowerView().view, e.view); len(cs) > 0 && rng.IntN(2) == 0 {
		p := cs[rng.IntN(len(cs))].Path
		res, err := Apply(e.view, ApplyOptions{Paths: []string{p}})
		if err != nil {
			fail("Apply(%q): %v", p, err)
		}
		addApplied(applied, res)
		log = append(log, "apply "+p)
		if got := fullWalk(t, e.view); !maps.Equal(got, view) {
			fail("the view changed with a partial apply:\n%s", sigDiff(view, got))
		}
	}
	res, err := Apply(e.view, ApplyOptions{})
	if err != nil {
		fail("Apply: %v", err)
	}
	if len(res.Conflicts)+len(res.Skipped) > 0 {
		fail("conflicts:\n%sskipped:\n%s", itemPaths(res.Conflicts), itemPaths(res.Skipped))
	}
	addApplied(applied, res)
	if d := applyDiffs(exported, e.lowerSigs(), applied); d != "" {
		fail("the lower tree is not the export:\n%s\napplied:\n%s", d, itemPaths(res.Applied))
	}
	if got := fullWalk(t, e.view); !maps.Equal(got, view) {
		fail("the view changed:\n%s", sigDiff(view, got))
	}
	if cs := diffOf(t, e.lowerView().view, e.view); len(cs) > 0 {
		var b strings.Builder
		for _, c := range cs {
			fmt.Fprintf(&b, "%s %q old %+v new %+v\n", c.Kind, c.Path, c.Old, c.New)
		}
		fail("still different:\n%s", b.String())
	}
	e.reopen()
	if got := fullWalk(t, e.view); !maps.Equal(got, view) {
		fail("the view changed at a remount:\n%s", sigDiff(view, got))
	}
}

// addApplied records the paths an apply wrote or changed in place, with
// the kind of change (removals left out).
func addApplied(set map[string]ChangeKind, res ApplyResult) {
	for _, it := range res.Applied {
		if it.Kind != Deleted {
			set[it.Path] = it.Kind
		}
	}
}

// applyDiffs describes how the lower tree after an apply (got) differs
// from what it must be, the export of the view before (want): in what
// Diff compares (type, data, mode, owner, xattrs) everywhere; in mtime
// where the apply wrote or changed in place (applied: a path whose only
// change was its times is no change, and stays as it was); and names
// that are one file in the view must be one file there (an apply must
// not break a hard link).
func applyDiffs(want, got map[string]fileSig, applied map[string]ChangeKind) string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(want)) {
		w := want[p]
		g, ok := got[p]
		kind, wasApplied := applied[p]
		switch {
		case !ok:
			fmt.Fprintf(&b, "missing %q %+v\n", p, w)
		case g.diffable() != w.diffable():
			fmt.Fprintf(&b, "differs %q: %+v, want %+v\n", p, g, w)
		case wasApplied && g.mtime != w.mtime:
			fmt.Fprintf(&b, "mtime of %q (%s): %v, want %v\n", p, kind, g.mtime, w.mtime)
		case w.link != "" && w.link != p && (g.link == "" || g.link != got[w.link].link):
			fmt.Fprintf(&b, "%q and %q are one file in the view, not in the lower tree\n", w.link, p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[p]; !ok {
			fmt.Fprintf(&b, "extra %q %+v\n", p, got[p])
		}
	}
	return b.String()
}

// sigDiff describes how two walks differ.
func sigDiff(want, got map[string]fileSig) string {
	var b strings.Builder
	keys := slices.Sorted(maps.Keys(want))
	for _, p := range keys {
		if g, ok := got[p]; !ok {
			fmt.Fprintf(&b, "missing %q %+v\n", p, want[p])
		} else if g != want[p] {
			fmt.Fprintf(&b, "differs %q: %+v, want %+v\n", p, g, want[p])
		}
	}
	for _, p := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[p]; !ok {
			fmt.Fprintf(&b, "extra %q %+v\n", p, got[p])
		}
	}
	return b.String()
}
