package integration

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// acceptLower takes the lower tree as it is now for the check at
// unmount that agentfs did not write to it. Apply tests write to it on
// purpose: each checks the lower tree itself, then calls this, so that
// anything written to it afterwards (by the unmount) still fails.
func (m *mount) acceptLower() { m.before = snapshotTree(m.lower) }

// sameApplied compares the lower tree with the mount's, path by path:
// type, mode, owner, size, data, symlink target, xattrs, and the mtime
// of everything but directories (inode numbers, link counts and ctimes
// are the project's own).
func sameApplied(t *testing.T, mountTree, lowerTree tree) {
	t.Helper()
	if mountTree.err != nil || lowerTree.err != nil {
		t.Fatalf("recording the trees: mount %v, lower %v", mountTree.err, lowerTree.err)
	}
	mountTree, lowerTree = normalizeApplied(mountTree), normalizeApplied(lowerTree)
	for p, mn := range mountTree.nodes {
		ln, ok := lowerTree.nodes[p]
		switch {
		case !ok:
			t.Errorf("%s is in the mount but not in the project after apply", p)
		case ln != mn:
			t.Errorf("%s after apply:\n project %v\n mount   %v", p, ln, mn)
		}
	}
	for p := range lowerTree.nodes {
		if _, ok := mountTree.nodes[p]; !ok {
			t.Errorf("%s is in the project but not in the mount after apply", p)
		}
	}
}

// applyRun runs agentfs apply on m with args.
func (m *mount) applyRun(args ...string) cliResult {
	m.t.Helper()
	return runAgentfs(m.t, append([]string{"apply", "-C", m.dir}, args...)...)
}

// diffOutput is agentfs diff of m.
func (m *mount) diffOutput() string {
	m.t.Helper()
	r := runAgentfs(m.t, "diff", "-C", m.dir)
	if r.code != 0 {
		m.t.Fatalf("diff failed:\n%s", r)
	}
	return r.stdout
}

func TestApplyWritesEveryKindOfChange(t *testing.T) {
	m := newMount(t, withLower(
		lowerFile("src/main.c", "int main;\n", withMode(0o644)),
		lowerFile("src/old.c", "old\n"),
		lowerFile("docs/a.md", "moved along\n"),
		lowerFile("run.sh", "#!/bin/sh\n", withMode(0o644)),
		lowerFile("attrs", "x"),
		lowerSymlink("link", "src/main.c"),
		lowerDir("empty"),
	))
	writeFile(t, m.path("src/main.c"), "int main(void) { return 0; }\n")
	mt := time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)
	if err := os.Chtimes(m.path("src/main.c"), mt, mt); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(m.path("src/old.c")))
	must(t, os.MkdirAll(m.path("new/deep"), 0o750))
	writeFile(t, m.path("new/deep/file"), "made in the mount\n")
	must(t, os.Rename(m.path("docs"), m.path("manual")))
	must(t, os.Chmod(m.path("run.sh"), 0o755))
	must(t, unix.Lsetxattr(m.path("attrs"), "user.note", []byte("kept"), 0))
	must(t, os.Remove(m.path("link")))
	must(t, os.Symlink("new/deep/file", m.path("link")))
	must(t, os.Remove(m.path("empty")))
	writeFile(t, m.path("empty"), "a file now\n")
	big := strings.Repeat("0123456789abcdef", 1<<16)
	writeFile(t, m.path("big"), big)

	want := snapshotTree(m.dir)
	r := m.applyRun()
	if r.code != 0 {
		t.Fatalf("apply failed:\n%s", r)
	}
	for _, line := range []string{"M  src/main.c", "D  src/old.c", "A  new/deep/file", "A  manual/a.md", "D  docs/", "P  run.sh", "P  attrs", "T  empty"} {
		if !strings.Contains(r.stdout, line+"\n") {
			t.Errorf("apply output lacks %q:\n%s", line, r.stdout)
		}
	}
	sameApplied(t, want, snapshotTree(m.lower))
	if got := readFile(t, m.lowerPath("manual/a.md")); got != "moved along\n" {
		t.Errorf("manual/a.md = %q", got)
	}
	if d := m.diffOutput(); d != "" {
		t.Errorf("agentfs diff after apply:\n%s want nothing", d)
	}
	// The mount shows the same as before the apply.
	if d := diffTrees(normalizeApplied(want), normalizeApplied(snapshotTree(m.dir))); len(d) > 0 {
		t.Errorf("the mount changed with the apply:\n%s", strings.Join(d, "\n"))
	}
	m.acceptLower()
}

// normalizeApplied drops what an apply may change in the mount's view
// of a path: inode numbers, link counts, ctimes, directory times.
func normalizeApplied(tr tree) tree {
	out := tr
	out.nodes = map[string]nodeState{}
	for p, n := range tr.nodes {
		n.nlink, n.ino, n.ctime = 0, 0, unix.Timespec{}
		if n.mode&unix.S_IFMT == unix.S_IFDIR {
			n.mtime, n.size = unix.Timespec{}, 0
		}
		out.nodes[p] = n
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestApplyConflict(t *testing.T) {
	m := newMount(t, withLower(lowerFile("f", "project\n"), lowerFile("g", "g\n")))
	writeFile(t, m.path("f"), "mount\n")
	writeFile(t, m.path("g"), "mount g\n")
	time.Sleep(20 * time.Millisecond) // a later clock tick than the copy-up
	if err := os.WriteFile(m.lowerPath("f"), []byte("edited in the project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := m.applyRun()
	if r.code != 1 || !strings.Contains(r.output(), "--force") || !strings.Contains(r.stdout, "M  f  (modified in the project") {
		t.Fatalf("apply over a conflict: want exit 1, the conflict listed and the --force hint:\n%s", r)
	}
	if got := readFile(t, m.lowerPath("f")); got != "edited in the project\n" {
		t.Errorf("the conflicting file was written: %q", got)
	}
	if got := readFile(t, m.lowerPath("g")); got != "mount g\n" {
		t.Errorf("g = %q, want the mount's", got)
	}
	if d := m.diffOutput(); d != "M  f\n" {
		t.Errorf("diff after apply = %q, want only f", d)
	}
	if r := m.applyRun("--force"); r.code != 0 {
		t.Fatalf("apply --force:\n%s", r)
	}
	if got := readFile(t, m.lowerPath("f")); got != "mount\n" {
		t.Errorf("f after --force = %q", got)
	}
	if d := m.diffOutput(); d != "" {
		t.Errorf("diff after --force = %q", d)
	}
	m.acceptLower()
}

func TestApplyPaths(t *testing.T) {
	m := newMount(t, withLower(lowerFile("a/f", "a\n"), lowerFile("b/f", "b\n"), lowerFile("c", "c\n")))
	writeFile(t, m.path("a/f"), "A\n")
	writeFile(t, m.path("b/f"), "B\n")
	if r := m.applyRun(m.path("c")); r.code != 1 || !strings.Contains(r.stderr, "no change") {
		t.Errorf("apply of an unchanged path: want exit 1 and a clear error:\n%s", r)
	}
	if r := m.applyRun(m.path("a")); r.code != 0 {
		t.Fatalf("apply a:\n%s", r)
	}
	if got := readFile(t, m.lowerPath("a/f")); got != "A\n" {
		t.Errorf("a/f = %q", got)
	}
	if got := readFile(t, m.lowerPath("b/f")); got != "b\n" {
		t.Errorf("b/f was applied too: %q", got)
	}
	if d := m.diffOutput(); d != "M  b/f\n" {
		t.Errorf("diff after a partial apply = %q, want b/f only", d)
	}
	// A path in the project names the same change.
	if r := m.applyRun(m.lowerPath("b/f")); r.code != 0 {
		t.Fatalf("apply of a project path:\n%s", r)
	}
	if got := readFile(t, m.lowerPath("b/f")); got != "B\n" {
		t.Errorf("b/f = %q", got)
	}
	m.acceptLower()
}

func TestApplyDryRunChangesNothing(t *testing.T) {
	m := newMount(t, withLower(lowerFile("f", "project\n"), lowerFile("gone", "x")))
	writeFile(t, m.path("f"), "mount\n")
	must(t, os.Remove(m.path("gone")))
	must(t, os.Mkdir(m.path("d"), 0o755))
	r := m.applyRun("--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "would apply 3 changes") {
		t.Fatalf("apply --dry-run:\n%s", r)
	}
	assertUnchanged(t, m.before, snapshotTree(m.lower))
	if d := m.diffOutput(); d != "A  d/\nM  f\nD  gone\n" {
		t.Errorf("diff after a dry run = %q", d)
	}
	// No acceptLower: the check at unmount compares the lower tree
	// with the one built, byte for byte.
}

func TestApplyRenamedDirectoryKeepsInodes(t *testing.T) {
	m := newMount(t, withLower(lowerFile("old/x", "x\n"), lowerFile("old/sub/y", "y\n")))
	ino := lstat(t, m.lowerPath("old/x")).Ino
	must(t, os.Rename(m.path("old"), m.path("new")))
	if r := m.applyRun(); r.code != 0 {
		t.Fatalf("apply:\n%s", r)
	}
	if _, err := os.Lstat(m.lowerPath("old")); !os.IsNotExist(err) {
		t.Errorf("old still in the project: %v", err)
	}
	if got := lstat(t, m.lowerPath("new/x")).Ino; got != ino {
		t.Errorf("new/x is inode %d, want %d (moved, not copied)", got, ino)
	}
	if got := readFile(t, m.path("new/sub/y")); got != "y\n" {
		t.Errorf("new/sub/y in the mount = %q", got)
	}
	if d := m.diffOutput(); d != "" {
		t.Errorf("diff after apply = %q", d)
	}
	m.acceptLower()
}
