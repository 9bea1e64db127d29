package overlay

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Cases TestApplyRandom found, each made small by hand. The seeds that
// found them run every time as fixed seeds of TestApplyRandom
// (applyRegressionSeeds).

// A directory with a subdirectory becomes a symlink: the apply removes
// the subdirectory's names, the subdirectory and the directory, then
// makes the symlink. The directories it removed are not fsync'ed after
// (they are gone; the path through the symlink leads elsewhere, or
// nowhere), only the one that held them (seed 1135).
func TestApplyDirWithSubdirBecomesSymlink(t *testing.T) {
	e := newEnv(t, map[string]string{"d/s/t/x": "x", "d/keep": "k"})
	if err := removeAll(e, "d/s"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Symlink(e.must("d"), "s", "keep", Caller{}); err != nil {
		t.Fatal(err)
	}
	want := fullWalk(t, e.view)
	res := e.apply(ApplyOptions{})
	eq(t, "applied", itemPaths(res.Applied), lines("type-changed d/s", "deleted d/s/t", "deleted d/s/t/x"))
	if got := e.lowerSigs(); !maps.Equal(got, want) {
		t.Errorf("lower after apply:\n%s", sigDiff(want, got))
	}
	checkNoDiff(t, e, "after apply")
}

// A name made and removed again in a directory moves its mtime and is
// no change for Diff, so the apply does not write that directory: its
// entry stays with the view's mtime when the changes below it are
// applied, as a file's entry whose only difference is its times does
// (seed 16130591167422992453).
func TestApplyKeepsMtimeOfDirNotWritten(t *testing.T) {
	e := newEnv(t, map[string]string{"d/sub/x": "x"})
	time.Sleep(20 * time.Millisecond) // another mtime than the lower's
	if _, _, _, err := e.view.Create(e.must("d"), "tmp", unix.O_RDWR, 0o644, Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(e.must("d"), "tmp"); err != nil {
		t.Fatal(err)
	}
	e.write("d/sub/x", "new")
	want := fullWalk(t, e.view)
	res := e.apply(ApplyOptions{})
	eq(t, "applied", itemPaths(res.Applied), lines("modified d/sub/x"))
	checkViewApplied(t, e, want)
}

// A lower file has two names, a and b; b is renamed in the view (c), so
// a shows the upper copy through its lower inode, without an entry of
// its own, and the kernel holds that upper file's node by the name a.
// An apply of another path must leave that node the upper file, not
// make it the lower file at a (its inode number is the same), which
// would show the old data at a; and the apply that then writes a and c
// as one new lower file must leave no node of the old inode at a: the
// view shows a and c as one file throughout (seed 10933293520002629469).
func TestApplyKeepsNodeOfCopiedUpHardLink(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "old", "other": "o"})
	if err := os.Link(filepath.Join(e.lower, "a"), filepath.Join(e.lower, "b")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // lower ctimes older than the bases
	if err := e.view.Rename(e.view.Root(), "b", e.view.Root(), "c", 0); err != nil {
		t.Fatal(err)
	}
	e.view.Forget(e.must("c"), 1) // the kernel forgets the renamed node
	held := e.must("a")           // and looks the file up by the name a
	eq(t, "name of the node", held.name, "a")
	e.write("a", "new")
	e.write("other", "changed")
	want := fullWalk(t, e.view)
	eq(t, "a and c in the view", want["c"].link, "a")
	e.apply(ApplyOptions{Paths: []string{"other"}})
	eq(t, "a through the node the kernel holds", readNode(t, e, held), "new")
	if got := fullWalk(t, e.view); !maps.Equal(got, want) {
		t.Errorf("view after applying other:\n%s", sigDiff(want, got))
	}
	res := e.apply(ApplyOptions{})
	if len(res.Conflicts)+len(res.Skipped) > 0 {
		t.Fatalf("conflicts:\n%sskipped:\n%s", itemPaths(res.Conflicts), itemPaths(res.Skipped))
	}
	if got := fullWalk(t, e.view); !maps.Equal(got, want) {
		t.Errorf("view after apply:\n%s", sigDiff(want, got))
	}
	eq(t, "lower a and c are one file", lowerIno(t, e, "a"), lowerIno(t, e, "c"))
	e.view.Forget(held, 1)
}

// readNode reads the data of node n (a node the kernel holds).
func readNode(t *testing.T, e *env, n *Node) string {
	t.Helper()
	f, err := e.view.Open(n, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, f)
	buf := make([]byte, 64)
	k, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("read node %d: %v", n.ID, err)
	}
	return string(buf[:k])
}

// lowerLink makes lower name b a hard link of lower name a, older than
// the bases the view's changes record (a lower ctime in the same clock
// tick as a base counts as a change after it).
func (e *env) lowerLink(a, b string) {
	e.t.Helper()
	if err := os.Link(filepath.Join(e.lower, a), filepath.Join(e.lower, b)); err != nil {
		e.t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
}

// checkOneLowerFile fails unless the lower names are one file.
func checkOneLowerFile(t *testing.T, e *env, names ...string) {
	t.Helper()
	for _, p := range names[1:] {
		if a, b := lowerIno(t, e, names[0]), lowerIno(t, e, p); a != b {
			t.Errorf("lower %s (inode %d) and %s (inode %d) are not one file, as in the view", names[0], a, p, b)
		}
	}
}

// One name of a hard-linked lower file is renamed in the view (a
// metacopy: its data still the lower file's), the other stays: the
// apply links the new name to the name that stays, whose lower file
// the view shows there, rather than copying the data into a new file
// (seed 16744048939468462147).
func TestApplyRenamedNameOfHardLinkJoinsTheOther(t *testing.T) {
	e := newEnv(t, map[string]string{"x": "data"})
	e.lowerLink("x", "y")
	if err := e.view.Rename(e.view.Root(), "y", e.view.Root(), "z", 0); err != nil {
		t.Fatal(err)
	}
	applyLinked(t, e, lines("deleted y", "created z"), "x", "z")
}

// A file of three names in the view, two of them entries (b, c) and one
// a lower name showing the upper copy (a). An apply of c alone writes
// it as a new lower file (the other names are changes it does not
// apply); the apply of the rest then writes a first: a name without an
// entry of its own, which must join c, the name the lower tree holds
// already with the view's data (seed 15045300775851310269).
func TestApplyLowerNameOfCopyJoinsNameAppliedBefore(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "old"})
	e.lowerLink("a", "b")
	if _, err := e.view.Link(e.must("b"), e.view.Root(), "c"); err != nil {
		t.Fatal(err)
	}
	e.write("b", "new")
	want := fullWalk(t, e.view)
	eq(t, "a, b and c in the view", []string{want["b"].link, want["c"].link}, []string{"a", "a"})
	e.apply(ApplyOptions{Paths: []string{"c"}})
	res := e.apply(ApplyOptions{})
	eq(t, "applied", itemPaths(res.Applied), lines("modified a", "modified b"))
	checkOneLowerFile(t, e, "a", "b", "c")
	checkViewApplied(t, e, want)
}

// A lower file has two names; in the view one is changed in mode only,
// the other is removed and made again as another file, equal to the
// lower one (so no change there). Changing the lower inode's mode in
// place would change that other file too: the apply writes the
// mode-changed name as a new file, and the other keeps the old inode
// as it is (seed 11846718270743077887).
func TestApplyModeChangeSparesOtherFileOfSameLowerInode(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "same"})
	e.lowerLink("a", "b")
	mode := uint32(0o600)
	if _, err := e.view.Setattr(e.must("b"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(e.view.Root(), "a"); err != nil {
		t.Fatal(err)
	}
	_, f, _, err := e.view.Create(e.view.Root(), "a", unix.O_RDWR, 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("same"), 0)
	release(t, f)
	want := fullWalk(t, e.view)
	res := e.apply(ApplyOptions{})
	eq(t, "applied", itemPaths(res.Applied), lines("mode-changed b"))
	eq(t, "mode of lower a", lstatLower(t, e, "a").Mode&0o7777, uint32(0o644))
	eq(t, "mode of lower b", lstatLower(t, e, "b").Mode&0o7777, uint32(0o600))
	checkViewApplied(t, e, want)
}

// A directory holding both names of a hard-linked lower file is renamed
// in the view; its files show the lower file there, without entries.
// An apply of one of them writes it alone (the other is a change it
// does not take); the apply of the rest then links the other name to
// it, the name that holds the view's file in the lower tree already,
// found through the lower names of the file the view shows
// (seed 7791999500506606885).
func TestApplyHardLinksInRenamedDirJoinNameAppliedBefore(t *testing.T) {
	e := newEnv(t, map[string]string{"d/a": "data"})
	e.lowerLink("d/a", "d/b")
	if err := e.view.Rename(e.view.Root(), "d", e.view.Root(), "e", 0); err != nil {
		t.Fatal(err)
	}
	applyPartThenRest(t, e, "e/a", lines("deleted d", "deleted d/a", "deleted d/b", "created e/b"), "e/a", "e/b")
}

// applyPartThenRest applies path part of e's view, then the rest,
// wanting the items the second apply applied, the names linked one file
// (in the view, and so in the lower tree), and the view as it was.
func applyPartThenRest(t *testing.T, e *env, part, applied string, linked ...string) {
	t.Helper()
	want := fullWalk(t, e.view)
	for _, p := range linked[1:] {
		eq(t, p+" in the view", want[p].link, linked[0])
	}
	e.apply(ApplyOptions{Paths: []string{part}})
	res := e.apply(ApplyOptions{})
	eq(t, "applied", itemPaths(res.Applied), applied)
	checkOneLowerFile(t, e, linked...)
	checkViewApplied(t, e, want)
}

// checkViewApplied fails unless the view is still want (times and hard
// links included) and no longer differs from the lower tree.
func checkViewApplied(t *testing.T, e *env, want map[string]fileSig) {
	t.Helper()
	if got := fullWalk(t, e.view); !maps.Equal(got, want) {
		t.Errorf("view after apply:\n%s", sigDiff(want, got))
	}
	checkNoDiff(t, e, "after apply")
}

// Two lower files with equal data become one file in the view (b
// removed, then linked to a), whose mode then changes: both names are
// changes of mode only. The apply must not change each lower file in
// place, which would leave them two files: one of them is written as a
// link to the other (seed 14259977362974606809).
func TestApplyModeChangedNamesBecomeOneLowerFile(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "same", "b": "same"})
	time.Sleep(20 * time.Millisecond) // lower ctimes older than the bases
	if err := e.view.Unlink(e.view.Root(), "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Link(e.must("a"), e.view.Root(), "b"); err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o600)
	if _, err := e.view.Setattr(e.must("a"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	applyLinked(t, e, lines("mode-changed a", "mode-changed b"), "a", "b")
}

// applyLinked applies all of e's view, wanting the items applied, the
// names linked one lower file, and the view as it was.
func applyLinked(t *testing.T, e *env, applied string, linked ...string) {
	t.Helper()
	want := fullWalk(t, e.view)
	res := e.apply(ApplyOptions{})
	eq(t, "applied", itemPaths(res.Applied), applied)
	checkOneLowerFile(t, e, linked...)
	checkViewApplied(t, e, want)
}

// A file of two names in the view, a and b: a is a change, b is not (its
// lower file has the view's data), but b's lower inode has another name,
// c, that the view shows as another file, so the apply cannot link a to
// b's lower file (it would change c's too) and writes a anew. b must
// then become a link of a: Diff reports no change at b (it compares no
// link identity), yet the view has a and b as one file
// (seed 18072018077852047254).
func TestApplyLinksUnchangedNameToFileWritten(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "old", "b": "new"})
	linkToFileSharingLower(t, e, "b")
	applyLinked(t, e, lines("modified a"), "a", "b")
	if lowerIno(t, e, "c") == lowerIno(t, e, "a") {
		t.Errorf("lower c is one file with a and b, another file in the view")
	}
}

// linkToFileSharingLower makes lower name c a hard link of b; in the
// view, c another file of b's data, and a (lower "old") a name of b.
func linkToFileSharingLower(t *testing.T, e *env, b string) {
	t.Helper()
	e.lowerLink(b, "c")
	r := e.view.Root()
	if err := e.view.Unlink(r, "c"); err != nil {
		t.Fatal(err)
	}
	_, f, _, err := e.view.Create(r, "c", unix.O_RDWR, 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, []byte("new"), 0)
	release(t, f)
	if err := e.view.Unlink(r, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Link(e.must(b), r, "a"); err != nil {
		t.Fatal(err)
	}
}

// A directory holding both names of a hard-linked lower file is renamed
// in the view, and one name's mode changed (an upper copy that the old
// lower names show). An apply of the renamed directory alone writes it
// whole, but it keeps merging the old lower directory, whose names still
// show the upper copy: made to merge its own, the other name would show
// the lower file written, apart. The apply of the rest then removes the
// old directory, and the renamed one merges its own from then on
// (seed 9477223757470944331).
func TestApplyRenamedDirOfHardLinksAppliedBeforeItsOldDir(t *testing.T) {
	e := newEnv(t, map[string]string{"d/x": "data"})
	e.lowerLink("d/x", "d/y")
	if err := e.view.Rename(e.view.Root(), "d", e.view.Root(), "t", 0); err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o600)
	if _, err := e.view.Setattr(e.must("t/x"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	want := fullWalk(t, e.view)
	eq(t, "t/x and t/y in the view", want["t/y"].link, "t/x")
	e.apply(ApplyOptions{Paths: []string{"t"}})
	if got := fullWalk(t, e.view); !maps.Equal(got, want) {
		t.Errorf("view after applying t:\n%s", sigDiff(want, got))
	}
	res := e.apply(ApplyOptions{})
	if len(res.Conflicts)+len(res.Skipped) > 0 {
		t.Fatalf("conflicts:\n%sskipped:\n%s", itemPaths(res.Conflicts), itemPaths(res.Skipped))
	}
	eq(t, "applied", itemPaths(res.Applied), lines("deleted d", "deleted d/x", "deleted d/y"))
	checkOneLowerFile(t, e, "t/x", "t/y")
	checkViewApplied(t, e, want)
}

// As TestApplyLinksUnchangedNameToFileWritten, with the name linked
// after the changes in a directory the apply changes nothing else in:
// that directory gets the view's times back (seed 2709279243894091231).
func TestApplyLinkingUnchangedNameKeepsItsDirTimes(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "old", "d/b": "new"})
	linkToFileSharingLower(t, e, "d/b")
	dst, err := e.view.Getattr(e.must("d"))
	if err != nil {
		t.Fatal(err)
	}
	applyLinked(t, e, lines("modified a"), "a", "d/b")
	eq(t, "mtime of lower d", lstatLower(t, e, "d").Mtim, dst.Mtim)
}

// A lower file Y (a1, a2) is written and renamed in the view (b, an
// upper copy that Y's names would show), and another lower file X is
// renamed over a1, with equal data: a1 is no change. A new name of X
// (z) must not be linked to a1's lower file, which is Y: its names
// would show b's copy in the view afterwards (seed 12596637134831935729).
func TestApplyNeverLinksToLowerFileOfAnotherUpperCopy(t *testing.T) {
	e := newEnv(t, map[string]string{"a1": "hello", "x": "hello"})
	e.lowerLink("a1", "a2")
	e.lowerLink("x", "x2")
	r := e.view.Root()
	held := e.must("a1") // the node of Y, by the name a1: a2's copy-up keeps a1 as its Origin
	e.write("a2", "bytes")
	e.view.Forget(held, 1)
	if err := e.view.Rename(r, "a2", r, "b", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rename(r, "x", r, "a1", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Link(e.must("x2"), r, "z"); err != nil {
		t.Fatal(err)
	}
	want := fullWalk(t, e.view)
	eq(t, "a1, x2 and z in the view", []string{want["x2"].link, want["z"].link}, []string{"a1", "a1"})
	res := e.apply(ApplyOptions{})
	if len(res.Conflicts)+len(res.Skipped) > 0 {
		t.Fatalf("conflicts:\n%sskipped:\n%s", itemPaths(res.Conflicts), itemPaths(res.Skipped))
	}
	checkOneLowerFile(t, e, "a1", "x2", "z")
	checkViewApplied(t, e, want)
}

// A lower file x renamed in the view over y, whose lower file has the
// same data (so y is no change): an apply of x alone removes lower x,
// and y, which read x's data until then (a metacopy), reads its own
// lower file from then on, not a file gone. Lower x's inode, its only
// name removed, is freed, and the filesystem may give its number to a
// file it makes (in this apply, or a later one): y's entry, which
// stays, and the node the kernel holds must not show that number, or
// the view would show two files of one number; they get a new one
// (seed 14109995232238529535).
func TestApplyRemovedOriginOfRenamedFileOutsideSelection(t *testing.T) {
	e := newEnv(t, map[string]string{"x": "a", "y": "a"})
	time.Sleep(20 * time.Millisecond) // lower ctimes older than the bases
	r := e.view.Root()
	if err := e.view.Rename(r, "x", r, "y", 0); err != nil {
		t.Fatal(err)
	}
	held := e.must("y")
	freed := e.stat("y").Ino
	eq(t, "st_ino of y in the view", freed, lowerIno(t, e, "x"))
	want := fullWalk(t, e.view)
	res := e.apply(ApplyOptions{Paths: []string{"x"}})
	eq(t, "applied", itemPaths(res.Applied), lines("deleted x"))
	if got := fullWalk(t, e.view); !maps.Equal(got, want) {
		t.Errorf("view after applying x:\n%s", sigDiff(want, got))
	}
	checkNoDiff(t, e, "after applying x")
	st, err := e.view.Getattr(held)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ino == freed {
		t.Errorf("the node of y shows inode number %d, which the apply freed", freed)
	}
	if st := e.stat("y"); st.Ino == freed {
		t.Errorf("y shows inode number %d, which the apply freed", freed)
	}
	e.view.Forget(held, 1)
	e.reopen()
	if st := e.stat("y"); st.Ino == freed {
		t.Errorf("after a remount, y shows inode number %d, which the apply freed", freed)
	}
}

// Two lower files with equal data become one file in the view (b
// removed, then linked to a): neither name is a change for Diff (each
// lower file has the view's data and attributes), yet the view has them
// as one file, and the apply links them (seed 1866668330431813420).
func TestApplyLinksNamesOfFileWithNoChange(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "same", "b": "same", "c": "other"})
	time.Sleep(20 * time.Millisecond) // lower ctimes older than the bases
	r := e.view.Root()
	if err := e.view.Unlink(r, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Link(e.must("a"), r, "b"); err != nil {
		t.Fatal(err)
	}
	e.write("c", "changed")
	applyLinked(t, e, lines("modified c"), "a", "b")
}

// A lower file Y (y1, y2) is copied up in the view (an xattr set through
// a new name, a), y1 removed there, and y1 made a name of another file
// Z (z) with Y's data: neither y1 nor z is a change. The apply writes a
// and y2 anew (Y's other name is another file in the view), which
// leaves Y one name, y1: Y is still claimed by the upper copy, so z must
// not be linked to it (y1 and z would show that copy's xattr afterwards)
// but y1 to z (seed 13831909465999310861).
func TestApplyNeverLinksToLowerFileClaimedWithOneNameLeft(t *testing.T) {
	e := newEnv(t, map[string]string{"y1": "x", "z": "x"})
	e.lowerLink("y1", "y2")
	r := e.view.Root()
	held := e.must("y1") // Y's node, by the name y1: the copy-up keeps y1 as its Origin
	mode := uint32(0o644)
	if _, err := e.view.Setattr(e.must("y2"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	e.view.Forget(held, 1)
	if _, err := e.view.Link(e.must("y2"), r, "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Setxattr(e.must("a"), "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(r, "y1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Link(e.must("z"), r, "y1"); err != nil {
		t.Fatal(err)
	}
	want := fullWalk(t, e.view)
	res := e.apply(ApplyOptions{})
	if len(res.Conflicts)+len(res.Skipped) > 0 {
		t.Fatalf("conflicts:\n%sskipped:\n%s", itemPaths(res.Conflicts), itemPaths(res.Skipped))
	}
	checkOneLowerFile(t, e, "a", "y2")
	checkOneLowerFile(t, e, "y1", "z")
	checkViewApplied(t, e, want)
}

// A lower file has two names, d/x and d/y; y is renamed over b (a
// metacopy; lower b has equal data, so b is no change), then the kernel
// forgets that node and looks the file up again by its other name, x,
// which is then removed, and d with it: the node the kernel holds is
// b's file, by a name that is gone. The apply removes d/x and d/y. Where
// b's times differ from its lower file's, b's entry stays and reads b's
// own lower file: so must that node, not the name removed. Where they
// are equal, b's entry goes, and so does the node, with the name b the
// kernel may hold it by (seeds 13174690654181655562,
// 9719906000793075904, 2523893404715637522).
func TestApplyKeepsNodeOfFileLookedUpByRemovedName(t *testing.T) {
	for _, sameTimes := range []bool{false, true} {
		t.Run(fmt.Sprint("same times ", sameTimes), func(t *testing.T) {
			e := newEnv(t, map[string]string{"d/x": "data", "b": "data"})
			bTime := time.Unix(1_000_000_000, 0)
			if !sameTimes {
				bTime = bTime.Add(time.Second)
			}
			for p, mt := range map[string]time.Time{"d/x": time.Unix(1_000_000_000, 0), "b": bTime} {
				if err := os.Chtimes(filepath.Join(e.lower, p), mt, mt); err != nil {
					t.Fatal(err)
				}
			}
			e.lowerLink("d/x", "d/y")
			r := e.view.Root()
			if err := e.view.Rename(e.must("d"), "y", r, "b", 0); err != nil {
				t.Fatal(err)
			}
			e.view.Forget(e.must("b"), 1) // the kernel forgets the renamed node
			held := e.must("d/x")         // and looks the file up by its other name
			eq(t, "name of the node", held.name, "x")
			if err := removeAll(e, "d"); err != nil {
				t.Fatal(err)
			}
			want := fullWalk(t, e.view)
			e.must("b") // the kernel holds the node by the name b too
			res := e.apply(ApplyOptions{})
			eq(t, "applied", itemPaths(res.Applied), lines("deleted d", "deleted d/x", "deleted d/y"))
			named := slices.ContainsFunc(res.Stale, func(s Stale) bool { return s.Node == held && s.Parent == r && s.Name == "b" })
			if sameTimes {
				eq(t, "the node is cut loose", held.unlinked, true)
				eq(t, "the name b goes from the kernel", named, true)
			} else {
				eq(t, "the node is cut loose", held.unlinked, false)
				eq(t, "the name b goes from the kernel", named, false)
				eq(t, "b through the node the kernel holds", readNode(t, e, held), "data")
			}
			checkViewApplied(t, e, want)
		})
	}
}

// A lower file has two names, a/f and d/s/hl; f is renamed to d/s/t, d/s
// to n, and d/s made a symlink: n/t and n/hl are one file in the view,
// n/hl showing the lower file through the renamed directory. An apply
// of n/hl alone writes it as a new file (t is a change it does not
// take); the apply of the rest, writing n/t, must link it to n/hl: but
// by then it has removed d/s (the change of type goes first), and the
// view, which reads n/hl through d/s/hl, shows nothing there. The names
// are judged by what the view showed before anything was written
// (seed 4222641363338389865).
func TestApplyJudgesNamesByTheViewBeforeWriting(t *testing.T) {
	e := newEnv(t, map[string]string{"a/f": "data", "d/s/": ""})
	e.lowerLink("a/f", "d/s/hl")
	if err := e.view.Rename(e.must("a"), "f", e.must("d/s"), "t", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rename(e.must("d"), "s", e.view.Root(), "n", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Symlink(e.must("d"), "s", "x", Caller{}); err != nil {
		t.Fatal(err)
	}
	applyPartThenRest(t, e, "n/hl", lines("deleted a/f", "type-changed d/s", "deleted d/s/hl", "created n/t"), "n/hl", "n/t")
}

// A lower file has two names, x and hl; x is renamed over y, another
// lower file with equal data: y is no change, nor is hl, yet y and hl
// are one file in the view, the lower file's. The apply removes x and
// links y to hl, whose lower file is the view's (seed
// 9269956003817368066). So too where the file's one entry is the name
// a, made a name of the lower file (x) by link and rename in the view
// after its other lower name (y) was removed (seeds 7156663213757472631,
// 6913985052787897642): the names of a file none of which is written
// are its entries and the lower names of the file they came from.
func TestApplyLinksLowerNamesOfFileWithNoChange(t *testing.T) {
	t.Run("renamed over an equal file", func(t *testing.T) {
		e := newEnv(t, map[string]string{"x": "data", "y": "data"})
		e.lowerLink("x", "hl")
		ino := lowerIno(t, e, "hl")
		r := e.view.Root()
		if err := e.view.Rename(r, "x", r, "y", 0); err != nil {
			t.Fatal(err)
		}
		applyLinked(t, e, lines("deleted x"), "hl", "y")
		eq(t, "inode of lower y", lowerIno(t, e, "y"), ino)
	})
	t.Run("linked over an equal file", func(t *testing.T) {
		e := newEnv(t, map[string]string{"a": "data", "x": "data"})
		e.lowerLink("x", "y")
		r := e.view.Root()
		if err := e.view.Unlink(r, "y"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.view.Link(e.must("x"), r, "t"); err != nil {
			t.Fatal(err)
		}
		if err := e.view.Rename(r, "t", r, "a", 0); err != nil {
			t.Fatal(err)
		}
		applyLinked(t, e, lines("deleted y"), "a", "x")
	})
}

// The names of a hard-linked lower file that show its upper copy without
// entries of their own must go on showing it where the apply writes
// another file at them or leaves the lower file one name. A lower file
// of names d/f0 and d/hl is linked in the view as a and written: an
// apply of d writes d/f0 and d/hl as one new lower file, and the copy
// (a, d/hl) no longer joins a lower file; d/f0 becomes a name of the
// copy (seed 16501374758269319816). A lower file of names x and d/hl:
// x renamed to y, a directory made at x, an xattr set through d/hl: an
// apply of d/hl writes it as a new file (the other lower name, x, is a
// directory in the view), which leaves the lower file one name; d/hl
// becomes a name of the copy, and the apply of the rest links y to it
// (seed 10355246395389050250).
func TestApplyKeepsNamesShowingUpperCopy(t *testing.T) {
	t.Run("applied without the copy's entry", func(t *testing.T) {
		e := newEnv(t, map[string]string{"d/f0": "old"})
		e.lowerLink("d/f0", "d/hl")
		if _, err := e.view.Link(e.must("d/hl"), e.view.Root(), "a"); err != nil {
			t.Fatal(err)
		}
		e.write("d/hl", "new")
		want := fullWalk(t, e.view)
		eq(t, "a, d/f0 and d/hl in the view", []string{want["d/f0"].link, want["d/hl"].link}, []string{"a", "a"})
		res := e.apply(ApplyOptions{Paths: []string{"d"}})
		eq(t, "applied", itemPaths(res.Applied), lines("modified d/f0", "modified d/hl"))
		if got := fullWalk(t, e.view); !maps.Equal(got, want) {
			t.Errorf("view after applying d:\n%s", sigDiff(want, got))
		}
		applyLinked(t, e, lines("created a"), "a", "d/f0", "d/hl")
	})
	t.Run("written anew, leaving the lower file one name", func(t *testing.T) {
		e := newEnv(t, map[string]string{"x": "data", "d/": ""})
		e.lowerLink("x", "d/hl")
		r := e.view.Root()
		if err := e.view.Rename(r, "x", r, "y", 0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.view.Mkdir(r, "x", 0o755, Caller{}); err != nil {
			t.Fatal(err)
		}
		if err := e.view.Setxattr(e.must("d/hl"), "user.k", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		applyPartThenRest(t, e, "d/hl", lines("type-changed x", "created y"), "d/hl", "y")
	})
}

// A lower file Z (at z) is renamed in the view over w and written there
// with w's lower data (so w is no change, and its entry stays for its
// times): w's copy shows Z's inode number. Another file (x) is made a
// name of z and written with z's lower data, so z is no change: the
// apply must not link x to lower z, whose number w shows (the view
// would show that number for two files), but write x anew and link z to
// it; Z, left without names, is then freed, and w gets a new number
// (seed 6763999263834883702).
func TestApplyNeverLinksToLowerFileWhoseNumberAnotherFileShows(t *testing.T) {
	e := newEnv(t, map[string]string{"x": "old", "z": "new", "w": "other"})
	time.Sleep(20 * time.Millisecond) // lower ctimes older than the bases
	r := e.view.Root()
	if err := e.view.Rename(r, "z", r, "w", 0); err != nil {
		t.Fatal(err)
	}
	e.write("w", "other")
	if _, err := e.view.Link(e.must("x"), r, "t"); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rename(r, "t", r, "z", 0); err != nil {
		t.Fatal(err)
	}
	e.write("x", "new")
	applyLinked(t, e, lines("modified x"), "x", "z")
}

// A lower file of names f0 and hl is linked in the view as new, and
// another lower file renamed over f0: new and hl are one file in the
// view, the copy, and f0 another. An apply of new alone writes it anew
// (the lower file's other name f0 is another file in the view); the
// apply of the rest writes f0, and links new to hl, whose lower file
// is the view's: f0, a name of the copy's lower file but another file
// in the view, is no name of that file and does not keep its names from
// being linked (seed 617882901282798699).
func TestApplyLinksNamesOfFileWhoseOldLowerNameIsAnotherFile(t *testing.T) {
	e := newEnv(t, map[string]string{"f0": "a", "f1": "b"})
	e.lowerLink("f0", "hl")
	r := e.view.Root()
	if _, err := e.view.Link(e.must("f0"), r, "new"); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rename(r, "f1", r, "f0", 0); err != nil {
		t.Fatal(err)
	}
	applyPartThenRest(t, e, "new", lines("modified f0", "deleted f1"), "hl", "new")
}

// stat returns the view's attributes of path p (a lookup the kernel
// forgets again).
func (e *env) stat(p string) unix.Stat_t {
	e.t.Helper()
	n := e.must(p)
	defer e.view.Forget(n, 1)
	st, err := e.view.Getattr(n)
	if err != nil {
		e.t.Fatalf("getattr %q: %v", p, err)
	}
	return st
}
