package integration

// Snapshots and tags (the snapshots issue): agentfs snapshot
// create/list/delete and agentfs tag, driven as a user does; what a
// snapshot holds; the errors.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// TestSnapshotCommands: create prints the id on its last line (from
// inside the mount or with -C), list shows id, label, branch, created,
// size added, kind and tags, tags name and pin snapshots, delete takes
// an id or a prefix.
func TestSnapshotCommands(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a", "lower a"), harness.LowerFile("d/f", "f")))
	start := time.Now().Add(-time.Second)
	harness.WriteFile(t, m.Path("big"), strings.Repeat("b", 256<<10))
	r := agentfsIn(t, m.Path("d"), "snapshot", "create", "-m", "first")
	if r.Code != 0 {
		t.Fatalf("snapshot create inside the mount:\n%s", r)
	}
	lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
	id1 := lines[len(lines)-1]
	if !snapshotIDRe.MatchString(id1) {
		t.Fatalf("last line of stdout %q is not a snapshot id:\n%s", id1, r)
	}
	id2 := takeSnapshot(t, m.Dir, "nothing new")
	harness.WriteFile(t, m.Path("small"), strings.Repeat("s", 64<<10))
	id3 := takeSnapshot(t, m.Dir, "")

	snaps := listSnapshots(t, m.Dir)
	if len(snaps) != 3 || snaps[0].ID != id1 || snaps[1].ID != id2 || snaps[2].ID != id3 {
		t.Fatalf("snapshot list = %+v, want %s, %s, %s in that order", snaps, id1, id2, id3)
	}
	for i, want := range []string{"first", "nothing new", ""} {
		s := snaps[i]
		if s.Label != want || s.Branch != "main" || s.Kind != "manual" || len(s.Tags) != 0 {
			t.Errorf("snapshot %s = %+v, want label %q, branch main, kind manual, no tags", s.ID, s, want)
		}
		if s.Created.Before(start) || s.Created.After(time.Now().Add(time.Second)) {
			t.Errorf("snapshot %s created %v, want during the test (from %v)", s.ID, s.Created, start)
		}
	}
	if a := snaps[0].SizeAdded; a < 256<<10 {
		t.Errorf("size added by %s = %d, want at least the 256 KiB file", id1, a)
	}
	if a := snaps[1].SizeAdded; a != 0 {
		t.Errorf("size added by %s (nothing changed) = %d, want 0", id2, a)
	}
	if a := snaps[2].SizeAdded; a < 64<<10 || a >= 256<<10 {
		t.Errorf("size added by %s = %d, want the 64 KiB file only", id3, a)
	}
	text := mustC(t, m.Dir, "snapshot", "list").Stdout
	for _, want := range []string{"ID", "CREATED", "KIND", "BRANCH", "ADDED", "TAGS", "LABEL", id1, id2, id3, "first", "nothing new", "manual", "main"} {
		if !strings.Contains(text, want) {
			t.Errorf("snapshot list does not show %q:\n%s", want, text)
		}
	}

	mustC(t, m.Dir, "tag", "good", id1)
	if s := findSnapshot(listSnapshots(t, m.Dir), id1); s == nil || strings.Join(s.Tags, ",") != "good" {
		t.Errorf("after tag good %s: %+v, want tags [good]", id1, s)
	}
	if out := mustC(t, m.Dir, "tag").Stdout; !strings.Contains(out, "good") || !strings.Contains(out, id1) {
		t.Errorf("tag without arguments lists %q, want good and %s", out, id1)
	}
	mustC(t, m.Dir, "tag", "good", id3) // moves
	snaps = listSnapshots(t, m.Dir)
	if s1, s3 := findSnapshot(snaps, id1), findSnapshot(snaps, id3); len(s1.Tags) != 0 || strings.Join(s3.Tags, ",") != "good" {
		t.Errorf("after moving tag good to %s: %s tags %v, %s tags %v", id3, id1, s1.Tags, id3, s3.Tags)
	}
	mustC(t, m.Dir, "snapshot", "delete", id2[:5])
	mustC(t, m.Dir, "tag", "--delete", "good")
	mustC(t, m.Dir, "snapshot", "delete", id3)
	snaps = listSnapshots(t, m.Dir)
	if len(snaps) != 1 || snaps[0].ID != id1 {
		t.Errorf("after deleting %s (by prefix) and %s: list = %+v, want only %s", id2, id3, snaps, id1)
	}
}

// TestSnapshotErrors: every refusal exits 1 with a message that names
// the problem and the fix, and changes nothing.
func TestSnapshotErrors(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a", "lower a")))
	harness.WriteFile(t, m.Path("a"), "upper a")
	id := takeSnapshot(t, m.Dir, "kept")
	mustC(t, m.Dir, "tag", "keep", id)
	mustC(t, m.Dir, "branch", "create", "other")
	snapsBefore, branchesBefore := listSnapshots(t, m.Dir), listBranches(t, m.Dir)
	treeBefore := harness.SnapshotTree(m.Dir)

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"snapshot", "delete", "ffffffff"}, []string{`no snapshot or tag "ffffffff"`, "agentfs snapshot list"}},
		{[]string{"snapshot", "delete", "fff"}, []string{`no snapshot or tag "fff"`, "at least 4 digits"}},
		{[]string{"restore", "nosuchtag"}, []string{`no snapshot or tag "nosuchtag"`}},
		{[]string{"snapshot", "delete", id}, []string{"is tagged keep", "agentfs tag --delete keep"}},
		{[]string{"branch", "delete", "main"}, []string{"main cannot be deleted"}},
		{[]string{"branch", "delete", "nosuch"}, []string{`no branch "nosuch"`, "agentfs branch list"}},
		{[]string{"branch", "switch", "nosuch"}, []string{`no branch "nosuch"`, "agentfs branch create nosuch"}},
		{[]string{"branch", "create", "other"}, []string{`branch "other" exists already`}},
		{[]string{"branch", "create", "a/b"}, []string{`contains "/"`, "choose a branch name"}},
		{[]string{"branch", "create", ".."}, []string{`"." and ".." are reserved`}},
		{[]string{"branch", "create", "x\x01y"}, []string{"control character"}},
		{[]string{"branch", "create", "--from", "ffffffff", "new"}, []string{`no snapshot or tag "ffffffff"`}},
		{[]string{"tag", "a/b", id}, []string{`contains "/"`, "choose a tag name"}},
		{[]string{"tag", "new", "ffffffff"}, []string{`no snapshot or tag "ffffffff"`}},
		{[]string{"tag", "--delete", "nosuch"}, []string{`no tag "nosuch"`}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) { failC(t, m.Dir, c.want, c.args...) })
	}
	t.Run("outside a mount", func(t *testing.T) {
		for _, args := range [][]string{{"snapshot", "create"}, {"snapshot", "list"}, {"restore", id}, {"branch", "list"}, {"tag"}} {
			r := agentfsIn(t, t.TempDir(), args...)
			if r.Code != 1 || !strings.Contains(r.Stderr, "not inside an agentfs mount (use -C DIR)") {
				t.Errorf("want exit 1 and 'not inside an agentfs mount (use -C DIR)':\n%s", r)
			}
		}
	})
	t.Run("current branch", func(t *testing.T) {
		mustC(t, m.Dir, "branch", "switch", "other")
		failC(t, m.Dir, []string{`branch "other" is the one the mount shows`, "agentfs branch switch main"}, "branch", "delete", "other")
		mustC(t, m.Dir, "branch", "switch", "main")
	})

	if got := listSnapshots(t, m.Dir); fmt.Sprint(got) != fmt.Sprint(snapsBefore) {
		t.Errorf("the refused commands changed the snapshots:\nbefore %+v\nafter  %+v", snapsBefore, got)
	}
	if got := listBranches(t, m.Dir); fmt.Sprint(got) != fmt.Sprint(branchesBefore) {
		t.Errorf("the refused commands changed the branches:\nbefore %+v\nafter  %+v", branchesBefore, got)
	}
	for _, d := range diffStates(treeBefore, harness.SnapshotTree(m.Dir)) {
		t.Errorf("the refused commands changed the mount: %s", d)
	}
}

// TestAmbiguousSnapshotPrefix: a 4-digit prefix that starts two ids is
// refused, naming both. Ids are random, so the test takes snapshots
// until two share their first 4 digits (about 300 on average).
func TestAmbiguousSnapshotPrefix(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a", "a")))
	seen := map[string]string{}
	var a, b string
	for i := 0; i < 5000 && a == ""; i++ {
		id := takeSnapshot(t, m.Dir, "")
		if other, ok := seen[id[:4]]; ok {
			a, b = other, id
		}
		seen[id[:4]] = id
	}
	if a == "" {
		t.Fatalf("5000 snapshots and no two share 4 digits: are ids random?")
	}
	r := failC(t, m.Dir, []string{fmt.Sprintf("the snapshot id prefix %q is ambiguous", a[:4]), a, b, "type more digits"}, "restore", a[:4])
	if r.Code == 1 {
		if s := listSnapshots(t, m.Dir); len(s) != len(seen)+1 {
			t.Errorf("%d snapshots after a refused restore, want %d (no safety snapshot)", len(s), len(seen)+1)
		}
	}
	mustC(t, m.Dir, "snapshot", "delete", a) // the full id works
}

// TestSnapshotOfFileOpenForWriting: a file held open for writing when
// the snapshot is taken goes into it as it was then; writes through the
// same descriptor afterwards do not reach the snapshot.
func TestSnapshotOfFileOpenForWriting(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "lower content")))
	w, err := os.OpenFile(m.Path("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt([]byte("BEFORE"), 0); err != nil {
		t.Fatal(err)
	}
	want := harness.ReadFile(t, m.Path("f"))
	id := takeSnapshot(t, m.Dir, "f open")
	if _, err := w.WriteAt([]byte("AFTER!"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte(" and more"), int64(len(want))); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := harness.ReadFile(t, m.Path("f")); got != "AFTER!"+want[6:]+" and more" {
		t.Errorf("f in the mount = %q, want the writes made after the snapshot", got)
	}
	checkSnapshotContent(t, m, id, map[string]string{"f": want})
	mustC(t, m.Dir, "restore", id)
	if got := harness.ReadFile(t, m.Path("f")); got != want {
		t.Errorf("f after restoring the snapshot = %q, want %q (as when the snapshot was taken)", got, want)
	}
}

// TestSnapshotOfFileOpenForReading: changed files held open read-only
// when a snapshot is taken (or opened after it, on the objects the
// snapshot shares), then written through another descriptor. The
// writes reach the mount, stay after every descriptor is closed, are
// seen through the read-only descriptor, and never reach the
// snapshot. With passthrough, the kernel reads such a file through a
// backing file it keeps until the file is closed: the snapshot must not
// share that object, or the writes would go to the snapshot's copy.
func TestSnapshotOfFileOpenForReading(t *testing.T) {
	m := harness.NewMount(t)
	for _, name := range []string{"before", "after", "append"} {
		harness.WriteFile(t, m.Path(name), name+": snapshot")
	}
	open := func(name string) *os.File {
		t.Helper()
		f, err := os.Open(m.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, f); got != name+": snapshot" {
			t.Fatalf("%s read through a new descriptor = %q", name, got)
		}
		return f
	}
	before, appended := open("before"), open("append")
	id := takeSnapshot(t, m.Dir, "files open for reading")
	after := open("after")

	harness.WriteFile(t, m.Path("before"), "before: written")
	harness.WriteFile(t, m.Path("after"), "after: written")
	w, err := os.OpenFile(m.Path("append"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString(", appended"); err != nil {
		t.Fatal(err)
	}
	w.Close()

	want := map[string]string{"before": "before: written", "after": "after: written", "append": "append: snapshot, appended"}
	for name, f := range map[string]*os.File{"before": before, "after": after, "append": appended} {
		if got := readAll(t, f); got != want[name] {
			t.Errorf("%s through the descriptor opened before the write = %q, want %q", name, got, want[name])
		}
		f.Close()
	}
	for name, w := range want {
		if got := harness.ReadFile(t, m.Path(name)); got != w {
			t.Errorf("%s after every descriptor was closed = %q, want %q", name, got, w)
		}
	}
	checkSnapshotContent(t, m, id, map[string]string{
		"before": "before: snapshot", "after": "after: snapshot", "append": "append: snapshot"})
}

// readAll reads f from its start.
func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	b := make([]byte, 4096)
	n, err := f.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		t.Fatalf("read %s: %v", f.Name(), err)
	}
	return string(b[:n])
}

// checkSnapshotContent exports snapshot id and checks the files in
// want (path → content) byte for byte.
func checkSnapshotContent(t *testing.T, m *harness.Mount, id string, want map[string]string) {
	t.Helper()
	dir := exportRef(t, m, id)
	for p, w := range want {
		if got := harness.ReadFile(t, filepath.Join(dir, p)); got != w {
			t.Errorf("%s in the export of snapshot %s = %q, want %q", p, id, got, w)
		}
	}
}

// TestSnapshotImmutable: after a snapshot, writes, truncates, renames,
// deletes, chmod, chown, utimes, xattrs, links and new files change
// the mount but not the snapshot: its export is the mount as it was,
// byte for byte, before and after the changes.
func TestSnapshotImmutable(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("lower-only", "lower only"),
		harness.LowerFile("upper", "lower version"),
		harness.LowerFile("trunc", strings.Repeat("t", 10000)),
		harness.LowerFile("d/moved", "moved"),
		harness.LowerFile("d/gone", "gone"),
		harness.LowerFile("chmod", "chmod", harness.WithMode(0o640)),
		harness.LowerFile("x", "x", harness.WithXattr("user.k", "v")),
		harness.LowerSymlink("link", "upper"),
		harness.LowerSparse("sparse", 8<<20, map[int64]string{0: "head", 4 << 20: "middle"}),
		harness.LowerDir("dir/sub"),
	))
	harness.WriteFile(t, m.Path("upper"), "upper version, copied up before the snapshot")
	harness.WriteFile(t, m.Path("new"), "new before the snapshot")
	must(t, os.Chmod(m.Path("new"), 0o600))
	mustf(t, unix.UtimesNano(m.Path("new"), []unix.Timespec{harness.Timespec(100, 1), harness.Timespec(200, 2)}), "utimensat new")
	must(t, os.Mkdir(m.Path("newdir"), 0o700))
	want := harness.SnapshotTree(m.Dir)
	id := takeSnapshot(t, m.Dir, "immutable")
	first := exportRef(t, m, id)
	for _, d := range diffExport(want, harness.SnapshotTree(first)) {
		t.Errorf("export right after the snapshot: %s", d)
	}

	f, err := os.OpenFile(m.Path("upper"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" and appended"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	harness.WriteFile(t, m.Path("lower-only"), "written")
	must(t, os.Truncate(m.Path("trunc"), 3))
	must(t, os.Rename(m.Path("d/moved"), m.Path("moved-out")))
	must(t, os.Remove(m.Path("d/gone")))
	must(t, os.Chmod(m.Path("chmod"), 0o755))
	must(t, os.Chown(m.Path("new"), 123, 456))
	mustf(t, unix.UtimesNano(m.Path("new"), []unix.Timespec{harness.Timespec(300, 3), harness.Timespec(400, 4)}), "utimensat new")
	mustf(t, unix.Setxattr(m.Path("x"), "user.k", []byte("changed"), 0), "setxattr x user.k")
	mustf(t, unix.Setxattr(m.Path("x"), "user.added", []byte("1"), 0), "setxattr x user.added")
	must(t, os.Link(m.Path("upper"), m.Path("hardlink")))
	must(t, os.Remove(m.Path("link")))
	must(t, os.Symlink("elsewhere", m.Path("link")))
	g, err := os.OpenFile(m.Path("sparse"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("changed"), 4<<20); err != nil {
		t.Fatal(err)
	}
	g.Close()
	must(t, os.RemoveAll(m.Path("dir")))
	must(t, os.Remove(m.Path("newdir")))
	harness.WriteFile(t, m.Path("newer"), "after the snapshot")
	if d := diffExport(want, harness.SnapshotTree(m.Dir)); len(d) < 10 {
		t.Fatalf("the changes after the snapshot did not change the mount enough: %v", d)
	}

	second := exportRef(t, m, id)
	for _, d := range diffExport(want, harness.SnapshotTree(second)) {
		t.Errorf("export of the snapshot after the changes: %s", d)
	}
}

// exportRef exports ref to a new directory and returns it.
func exportRef(t *testing.T, m *harness.Mount, ref string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "export")
	r := mustC(t, m.Dir, "export", ref, "--to", dir)
	if !strings.Contains(r.Stdout, "exported ") {
		t.Errorf("export does not say what it did:\n%s", r)
	}
	return dir
}

// diffExport compares a recording of the mount with one of an export:
// contents, types, modes, owners, sizes, mtimes, symlink targets and
// xattrs, which an export keeps (not inode numbers, ctimes or the link
// counts of directories).
func diffExport(mnt, export harness.Tree) []string {
	norm := func(tr harness.Tree) harness.Tree {
		out := tr
		out.Nodes = map[string]harness.Node{}
		for p, n := range tr.Nodes {
			n.Ino, n.Ctime = 0, unix.Timespec{}
			if n.Mode&unix.S_IFMT == unix.S_IFDIR {
				n.Nlink = 0
			}
			out.Nodes[p] = n
		}
		return out
	}
	out := harness.DiffTrees(norm(mnt), norm(export))
	for i := range out {
		out[i] = strings.ReplaceAll(out[i], export.Root, "the export")
	}
	return out
}

// errnoOfStat stats p and returns the errno (0 for success).
func errnoOfStat(p string) syscall.Errno {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return harness.ErrnoOf(err)
	}
	return 0
}

// TestSnapshotCommandsHelp: each command of the snapshots issue has
// --help with an example and the exit codes, and agentfs --help lists
// them.
func TestSnapshotCommandsHelp(t *testing.T) {
	cmds := [][]string{
		{"snapshot"}, {"snapshot", "create"}, {"snapshot", "list"}, {"snapshot", "delete"},
		{"branch"}, {"branch", "create"}, {"branch", "list"}, {"branch", "delete"}, {"branch", "switch"},
		{"tag"}, {"diff"}, {"restore"}, {"export"}, {"gc"}, {"fsck"},
	}
	main := harness.Run(t, "--help")
	for _, c := range cmds {
		r := harness.Run(t, append(c, "--help")...)
		if r.Code != 0 || !strings.Contains(r.Stdout, "Usage: agentfs "+strings.Join(c, " ")) ||
			!strings.Contains(r.Stdout, "Example") || !strings.Contains(r.Stdout, "Exit codes:") {
			t.Errorf("want usage, an example and the exit codes:\n%s", r)
		}
		if !strings.Contains(main.Stdout, "\n  "+c[0]+" ") {
			t.Errorf("agentfs --help does not list %s:\n%s", c[0], main.Stdout)
		}
	}
}
