package overlay

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/agentfs/agentfs/branch"
	"golang.org/x/sys/unix"
)

// treeOf describes every path of e's view: type, mode and, for a file,
// its data.
func treeOf(t *testing.T, e *env) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(p string, n *Node)
	walk = func(p string, n *Node) {
		st, err := e.view.Getattr(n)
		if err != nil {
			t.Fatalf("getattr %q: %v", p, err)
		}
		switch n.mode {
		case unix.S_IFDIR:
			out[p] = fmt.Sprintf("dir %o", st.Mode&07777)
			names, err := e.view.childNames(n)
			if err != nil {
				t.Fatalf("listing %q: %v", p, err)
			}
			for _, name := range names {
				c, _, err := e.view.lookupChild(n, name)
				if err != nil || c == nil {
					t.Fatalf("lookup %q in %q: %v", name, p, err)
				}
				walk(joinPath(p, name), c)
				e.view.release(c)
			}
		case unix.S_IFREG:
			out[p] = fmt.Sprintf("file %o %q", st.Mode&07777, e.read(p))
		default:
			out[p] = fmt.Sprintf("type %o", n.mode)
		}
	}
	root, _, err := e.view.lookupPath("")
	if err != nil {
		t.Fatal(err)
	}
	walk("", root)
	e.view.release(root)
	delete(out, "")
	delete(out, internalDir)
	return out
}

// undoScenario makes a merge of every kind of change: files taken,
// edited line by line and deleted, a directory deleted whole, types
// changed both ways, a directory's mode, new directories.
func undoScenario(t *testing.T) *mergeEnv {
	m := newMergeEnv(t, map[string]string{
		"a.txt": "a\n", "code": funcs, "gone.txt": "gone\n",
		"old/x": "x\n", "old/sub/y": "y\n", "d/x": "x", "d/e/y": "y", "f": "f", "m/z": "z\n",
	})
	m.theirs.put("a.txt", "theirs a\n")
	m.theirs.write("code", "func a() {\n\treturn 10\n}\n\nfunc b() {\n\treturn 2\n}\n\nfunc c() {\n\treturn 3\n}\n")
	m.ours.write("code", "func a() {\n\treturn 1\n}\n\nfunc b() {\n\treturn 2\n}\n\nfunc c() {\n\treturn 30\n}\n")
	m.theirs.remove("gone.txt")
	m.theirs.remove("old")
	m.theirs.remove("d")
	m.theirs.put("d", "now a file")
	m.theirs.remove("f")
	if _, _, err := m.theirs.view.Mkdir(m.theirs.must(""), "f", 0o755, Caller{}); err != nil {
		t.Fatal(err)
	}
	m.theirs.put("f/z", "z")
	m.theirs.chmod("m", 0o700)
	if _, _, err := m.theirs.view.Mkdir(m.theirs.must(""), "new", 0o755, Caller{}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		m.theirs.put(fmt.Sprintf("new/n%d", i), fmt.Sprintf("n%d\n", i))
	}
	return m
}

// planUndoable takes the safety snapshot of m's ours and plans the
// merge: the snapshot's view and tree, the plan, and its UndoPaths.
func planUndoable(t *testing.T, m *mergeEnv) (*env, map[string]string, *MergePlan, []UndoPath) {
	t.Helper()
	safety, err := m.ours.view.Snapshot("before the merge", branch.KindSafety)
	if err != nil {
		t.Fatal(err)
	}
	before := m.ours.snapView(safety)
	p, err := PlanMerge(m.base.view, m.ours.view, m.theirs.view, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, p)
	paths, err := p.UndoPaths()
	if err != nil {
		t.Fatal(err)
	}
	return before, treeOf(t, before), p, paths
}

// stopAt is the panic a plan's Step raises to stop a merge half way.
type stopAt struct{}

// A merge stopped after any number of its changes is taken back by
// UndoMerge to exactly the state before it, keeping what was written
// meanwhile to another path; undoing again changes nothing.
func TestUndoMergeAtEveryStep(t *testing.T) {
	total := -1
	for k := 0; total < 0 || k <= total; k++ {
		m := undoScenario(t)
		before, want, p, paths := planUndoable(t, m)
		p.Step = func(done, n int) {
			total = n
			if done == k {
				panic(stopAt{})
			}
		}
		func() {
			defer func() {
				if r := recover(); r != nil && r != (stopAt{}) {
					panic(r)
				}
			}()
			if _, err := m.ours.view.ApplyMerge(p); err != nil {
				t.Fatalf("ApplyMerge: %v", err)
			}
		}()
		if total < 3 {
			t.Fatalf("the scenario's merge makes %d changes: too few to stop it half way", total)
		}
		if k > 0 && maps.Equal(treeOf(t, m.ours), want) {
			t.Fatalf("stopped after %d of %d changes, the merge changed nothing (the test would prove nothing)", k, total)
		}
		m.ours.put("meanwhile.txt", "written during the merge\n")
		want["meanwhile.txt"] = fmt.Sprintf("file %o %q", 0o644, "written during the merge\n")
		for round := range 2 {
			if err := m.ours.view.UndoMerge(before.view, paths); err != nil {
				t.Fatalf("stopped after %d of %d changes: UndoMerge (round %d): %v", k, total, round, err)
			}
			got := treeOf(t, m.ours)
			for _, q := range slices.Sorted(maps.Keys(maps.Collect(func(yield func(string, bool) bool) {
				for q := range got {
					yield(q, true)
				}
				for q := range want {
					yield(q, true)
				}
			}))) {
				if got[q] != want[q] {
					t.Errorf("stopped after %d of %d changes, undone (round %d): %s is %q, want %q", k, total, round, q, got[q], want[q])
				}
			}
		}
	}
}

// A merge killed inside the removal of a directory (removeAllPath takes
// the files below it first) leaves the directory with part of its
// contents: the undo brings all of it back.
func TestUndoMergeHalfRemovedDirectory(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"old/x": "x\n", "old/sub/y": "y\n", "old/sub/z": "z\n", "keep": "k\n"})
	m.theirs.remove("old")
	before, want, _, paths := planUndoable(t, m)
	if len(paths) != 1 || paths[0] != (UndoPath{Path: "old", Deep: true}) {
		t.Fatalf("UndoPaths = %+v, want old, deep", paths)
	}
	// What removeAllPath("old") had done when the daemon died.
	m.ours.remove("old/sub/y")
	m.ours.remove("old/sub/z")
	m.ours.remove("old/sub")
	if err := m.ours.view.UndoMerge(before.view, paths); err != nil {
		t.Fatal(err)
	}
	if got := treeOf(t, m.ours); !maps.Equal(got, want) {
		t.Errorf("after the undo: %v, want %v", got, want)
	}
}
