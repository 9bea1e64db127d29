package integration

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// sameApplied compares the lower tree with the mount's, path by path:
// type, mode, owner, size, data, symlink target, xattrs, and the mtime
// of everything but directories (inode numbers, link counts and ctimes
// are the project's own).
func sameApplied(t *testing.T, mountTree, lowerTree harness.Tree) {
	t.Helper()
	if mountTree.Err != nil || lowerTree.Err != nil {
		t.Fatalf("recording the trees: mount %v, lower %v", mountTree.Err, lowerTree.Err)
	}
	mountTree, lowerTree = normalizeApplied(mountTree), normalizeApplied(lowerTree)
	for p, mn := range mountTree.Nodes {
		ln, ok := lowerTree.Nodes[p]
		switch {
		case !ok:
			t.Errorf("%s is in the mount but not in the project after apply", p)
		case ln != mn:
			t.Errorf("%s after apply:\n project %v\n mount   %v", p, ln, mn)
		}
	}
	for p := range lowerTree.Nodes {
		if _, ok := mountTree.Nodes[p]; !ok {
			t.Errorf("%s is in the project but not in the mount after apply", p)
		}
	}
}

// applyRun runs agentfs apply on m with args.
func applyRun(m *harness.Mount, args ...string) harness.Result {
	m.T.Helper()
	return harness.Run(m.T, append([]string{"apply", "-C", m.Dir}, args...)...)
}

// diffOutput is agentfs diff of m.
func diffOutput(m *harness.Mount) string {
	m.T.Helper()
	r := harness.Run(m.T, "diff", "-C", m.Dir)
	if r.Code != 0 {
		m.T.Fatalf("diff failed:\n%s", r)
	}
	return r.Stdout
}

func TestApplyWritesEveryKindOfChange(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("src/main.c", "int main;\n", harness.WithMode(0o644)),
		harness.LowerFile("src/old.c", "old\n"),
		harness.LowerFile("docs/a.md", "moved along\n"),
		harness.LowerFile("run.sh", "#!/bin/sh\n", harness.WithMode(0o644)),
		harness.LowerFile("attrs", "x"),
		harness.LowerSymlink("link", "src/main.c"),
		harness.LowerDir("empty"),
	))
	harness.WriteFile(t, m.Path("src/main.c"), "int main(void) { return 0; }\n")
	mt := time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)
	if err := os.Chtimes(m.Path("src/main.c"), mt, mt); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(m.Path("src/old.c")))
	must(t, os.MkdirAll(m.Path("new/deep"), 0o750))
	harness.WriteFile(t, m.Path("new/deep/file"), "made in the mount\n")
	must(t, os.Rename(m.Path("docs"), m.Path("manual")))
	must(t, os.Chmod(m.Path("run.sh"), 0o755))
	must(t, unix.Lsetxattr(m.Path("attrs"), "user.note", []byte("kept"), 0))
	must(t, os.Remove(m.Path("link")))
	must(t, os.Symlink("new/deep/file", m.Path("link")))
	must(t, os.Remove(m.Path("empty")))
	harness.WriteFile(t, m.Path("empty"), "a file now\n")
	big := strings.Repeat("0123456789abcdef", 1<<16)
	harness.WriteFile(t, m.Path("big"), big)

	want := harness.SnapshotTree(m.Dir)
	r := applyRun(m)
	if r.Code != 0 {
		t.Fatalf("apply failed:\n%s", r)
	}
	for _, line := range []string{"M  src/main.c", "D  src/old.c", "A  new/deep/file", "A  manual/a.md", "D  docs/", "P  run.sh", "P  attrs", "T  empty"} {
		if !strings.Contains(r.Stdout, line+"\n") {
			t.Errorf("apply output lacks %q:\n%s", line, r.Stdout)
		}
	}
	sameApplied(t, want, harness.SnapshotTree(m.Lower))
	if got := harness.ReadFile(t, m.LowerPath("manual/a.md")); got != "moved along\n" {
		t.Errorf("manual/a.md = %q", got)
	}
	if d := diffOutput(m); d != "" {
		t.Errorf("agentfs diff after apply:\n%s want nothing", d)
	}
	// The mount shows the same as before the apply.
	if d := harness.DiffTrees(normalizeApplied(want), normalizeApplied(harness.SnapshotTree(m.Dir))); len(d) > 0 {
		t.Errorf("the mount changed with the apply:\n%s", strings.Join(d, "\n"))
	}
	m.AcceptLower()
}

// normalizeApplied drops what an apply may change in the mount's view
// of a path: inode numbers, link counts, ctimes, directory times.
func normalizeApplied(tr harness.Tree) harness.Tree {
	out := tr
	out.Nodes = map[string]harness.Node{}
	for p, n := range tr.Nodes {
		n.Nlink, n.Ino, n.Ctime = 0, 0, unix.Timespec{}
		if n.Mode&unix.S_IFMT == unix.S_IFDIR {
			n.Mtime, n.Size = unix.Timespec{}, 0
		}
		out.Nodes[p] = n
	}
	return out
}

func TestApplyConflict(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "project\n"), harness.LowerFile("g", "g\n")))
	harness.WriteFile(t, m.Path("f"), "mount\n")
	harness.WriteFile(t, m.Path("g"), "mount g\n")
	time.Sleep(20 * time.Millisecond) // a later clock tick than the copy-up
	if err := os.WriteFile(m.LowerPath("f"), []byte("edited in the project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := applyRun(m)
	if r.Code != 1 || !strings.Contains(r.Output(), "--force") || !strings.Contains(r.Stdout, "M  f  (modified in the project") {
		t.Fatalf("apply over a conflict: want exit 1, the conflict listed and the --force hint:\n%s", r)
	}
	if got := harness.ReadFile(t, m.LowerPath("f")); got != "edited in the project\n" {
		t.Errorf("the conflicting file was written: %q", got)
	}
	if got := harness.ReadFile(t, m.LowerPath("g")); got != "mount g\n" {
		t.Errorf("g = %q, want the mount's", got)
	}
	if d := diffOutput(m); d != "M  f\n" {
		t.Errorf("diff after apply = %q, want only f", d)
	}
	if r := applyRun(m, "--force"); r.Code != 0 {
		t.Fatalf("apply --force:\n%s", r)
	}
	if got := harness.ReadFile(t, m.LowerPath("f")); got != "mount\n" {
		t.Errorf("f after --force = %q", got)
	}
	if d := diffOutput(m); d != "" {
		t.Errorf("diff after --force = %q", d)
	}
	m.AcceptLower()
}

func TestApplyPaths(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a/f", "a\n"), harness.LowerFile("b/f", "b\n"), harness.LowerFile("c", "c\n")))
	harness.WriteFile(t, m.Path("a/f"), "A\n")
	harness.WriteFile(t, m.Path("b/f"), "B\n")
	if r := applyRun(m, m.Path("c")); r.Code != 1 || !strings.Contains(r.Stderr, "no change") {
		t.Errorf("apply of an unchanged path: want exit 1 and a clear error:\n%s", r)
	}
	if r := applyRun(m, m.Path("a")); r.Code != 0 {
		t.Fatalf("apply a:\n%s", r)
	}
	if got := harness.ReadFile(t, m.LowerPath("a/f")); got != "A\n" {
		t.Errorf("a/f = %q", got)
	}
	if got := harness.ReadFile(t, m.LowerPath("b/f")); got != "b\n" {
		t.Errorf("b/f was applied too: %q", got)
	}
	if d := diffOutput(m); d != "M  b/f\n" {
		t.Errorf("diff after a partial apply = %q, want b/f only", d)
	}
	// A path in the project names the same change.
	if r := applyRun(m, m.LowerPath("b/f")); r.Code != 0 {
		t.Fatalf("apply of a project path:\n%s", r)
	}
	if got := harness.ReadFile(t, m.LowerPath("b/f")); got != "B\n" {
		t.Errorf("b/f = %q", got)
	}
	m.AcceptLower()
}

func TestApplyDryRunChangesNothing(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "project\n"), harness.LowerFile("gone", "x")))
	harness.WriteFile(t, m.Path("f"), "mount\n")
	must(t, os.Remove(m.Path("gone")))
	must(t, os.Mkdir(m.Path("d"), 0o755))
	r := applyRun(m, "--dry-run")
	if r.Code != 0 || !strings.Contains(r.Stdout, "would apply 3 changes") {
		t.Fatalf("apply --dry-run:\n%s", r)
	}
	m.AssertLowerUnchanged()
	if d := diffOutput(m); d != "A  d/\nM  f\nD  gone\n" {
		t.Errorf("diff after a dry run = %q", d)
	}
	// No AcceptLower: the check at unmount compares the lower tree
	// with the one built, byte for byte.
}

func TestApplyRenamedDirectoryKeepsInodes(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("old/x", "x\n"), harness.LowerFile("old/sub/y", "y\n")))
	ino := harness.Lstat(t, m.LowerPath("old/x")).Ino
	must(t, os.Rename(m.Path("old"), m.Path("new")))
	if r := applyRun(m); r.Code != 0 {
		t.Fatalf("apply:\n%s", r)
	}
	if _, err := os.Lstat(m.LowerPath("old")); !os.IsNotExist(err) {
		t.Errorf("old still in the project: %v", err)
	}
	if got := harness.Lstat(t, m.LowerPath("new/x")).Ino; got != ino {
		t.Errorf("new/x is inode %d, want %d (moved, not copied)", got, ino)
	}
	if got := harness.ReadFile(t, m.Path("new/sub/y")); got != "y\n" {
		t.Errorf("new/sub/y in the mount = %q", got)
	}
	if d := diffOutput(m); d != "" {
		t.Errorf("diff after apply = %q", d)
	}
	m.AcceptLower()
}
