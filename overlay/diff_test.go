package overlay

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/internal/testenv"
)

// diffOf returns the changes from view a to view b.
func diffOf(t testing.TB, a, b *FS) []Change {
	t.Helper()
	var out []Change
	if err := Diff(a, b, func(c Change) error { out = append(out, c); return nil }); err != nil {
		t.Fatalf("Diff: %v", err)
	}
	return out
}

// summary lists changes as "kind path" lines.
func summary(cs []Change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%s %s\n", c.Kind, c.Path)
	}
	return b.String()
}

func lines(s ...string) string {
	if len(s) == 0 {
		return ""
	}
	return strings.Join(s, "\n") + "\n"
}

func checkDiff(t *testing.T, what string, a, b *FS, want string) []Change {
	t.Helper()
	na, nb := kernelRefs(a), kernelRefs(b)
	cs := diffOf(t, a, b)
	if got := summary(cs); got != want {
		t.Errorf("%s:\n%s\nwant:\n%s", what, got, want)
	}
	if kernelRefs(a) != na || kernelRefs(b) != nb {
		t.Errorf("%s: Diff changed the kernel references: %d and %d, before %d and %d", what, kernelRefs(a), kernelRefs(b), na, nb)
	}
	return cs
}

// kernelRefs sums the kernel references of a view's nodes (a walk must
// give back every one it takes).
func kernelRefs(v *FS) uint64 {
	v.nodesMu.Lock()
	defer v.nodesMu.Unlock()
	seen := map[*Node]bool{}
	var refs uint64
	for _, m := range []map[string]*Node{v.byObject, v.byLower} {
		for _, n := range m {
			seen[n] = true
		}
	}
	for _, n := range v.byLowerIno {
		seen[n] = true
	}
	for n := range seen {
		refs += n.lookups
	}
	return refs
}

func find(cs []Change, p string) *Change {
	for i := range cs {
		if cs[i].Path == p {
			return &cs[i]
		}
	}
	return nil
}

func TestDiffKinds(t *testing.T) {
	e := newEnv(t, map[string]string{
		"keep": "k", "mod": "old", "del": "gone", "chmod": "c", "xattr": "x",
		"d/a": "a", "d/b": "b", "typ": "t", "owner": "o",
	})
	r := e.view.Root()
	e.write("mod", "new content")
	if err := e.view.Unlink(r, "del"); err != nil {
		t.Fatal(err)
	}
	mode := uint32(0600)
	if _, err := e.view.Setattr(e.must("chmod"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Setxattr(e.must("xattr"), "user.k", []byte("v"), 0); err != nil {
		testenv.Skip(t, testenv.UserXattrs, "no user xattrs here: %v", err)
	}
	uid := uint32(1234)
	if _, err := e.view.Setattr(e.must("owner"), SetAttr{Uid: &uid}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.view.Create(e.must("d"), "new", unix.O_RDWR, 0644, Caller{}); err != nil {
		t.Fatal(err)
	}
	e.write("d/new", "12345")
	if err := e.view.Unlink(r, "typ"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Mkdir(r, "typ", 0755, Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Symlink(e.must("typ"), "link", "../keep", Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Mknod(r, "fifo", unix.S_IFIFO|0644, 0, Caller{}); err != nil {
		t.Fatal(err)
	}
	l := e.lowerView()
	cs := checkDiff(t, "lower → branch", l.view, e.view, lines(
		"mode-changed chmod",
		"created d/new",
		"deleted del",
		"created fifo",
		"modified mod",
		"mode-changed owner",
		"type-changed typ",
		"created typ/link",
		"mode-changed xattr",
	))
	if c := find(cs, "mod"); c != nil {
		if c.Old.Size != 3 || c.New.Size != 11 || c.SizeDelta != 8 || c.AttrsChanged {
			t.Errorf("mod: %+v old %+v new %+v", *c, *c.Old, *c.New)
		}
	}
	if c := find(cs, "chmod"); c != nil && (c.Old.Mode != 0644 || c.New.Mode != 0600) {
		t.Errorf("chmod: mode %o → %o, want 644 → 600", c.Old.Mode, c.New.Mode)
	}
	if c := find(cs, "owner"); c != nil && (c.Old.Uid != 0 || c.New.Uid != 1234) {
		t.Errorf("owner: uid %d → %d, want 0 → 1234", c.Old.Uid, c.New.Uid)
	}
	if c := find(cs, "typ"); c != nil && (c.Old.Type != "file" || c.New.Type != "dir" || c.SizeDelta != -1) {
		t.Errorf("typ: %+v, %+v → %+v", *c, *c.Old, *c.New)
	}
	if c := find(cs, "typ/link"); c != nil && (c.New.Type != "symlink" || c.New.Target != "../keep") {
		t.Errorf("typ/link: %+v", *c.New)
	}
	if c := find(cs, "del"); c != nil && (c.New != nil || c.SizeDelta != -4) {
		t.Errorf("del: %+v", *c)
	}
	checkDiff(t, "branch → lower", e.view, l.view, lines(
		"mode-changed chmod",
		"deleted d/new",
		"created del",
		"deleted fifo",
		"modified mod",
		"mode-changed owner",
		"type-changed typ",
		"deleted typ/link",
		"mode-changed xattr",
	))
	checkDiff(t, "branch → branch", e.view, e.view, "")
	checkDiff(t, "lower → lower", l.view, l.view, "")
}

func TestDiffRenamedLowerDir(t *testing.T) {
	e := newEnv(t, map[string]string{"src/x": "x", "src/deep/y": "y", "other": "o"})
	r := e.view.Root()
	if err := e.view.Rename(r, "src", r, "dst", 0); err != nil {
		t.Fatal(err)
	}
	checkDiff(t, "rename of a lower directory", e.lowerView().view, e.view, lines(
		"created dst",
		"created dst/deep",
		"created dst/deep/y",
		"created dst/x",
		"deleted src",
		"deleted src/deep",
		"deleted src/deep/y",
		"deleted src/x",
	))
}

func TestDiffWhiteoutOfLowerDir(t *testing.T) {
	e := newEnv(t, map[string]string{"w/a": "a", "w/sub/b": "b", "w-x": "keep"})
	if err := removeAll(e, "w"); err != nil {
		t.Fatal(err)
	}
	checkDiff(t, "rm -r of a lower directory", e.lowerView().view, e.view, lines(
		"deleted w",
		"deleted w/a",
		"deleted w/sub",
		"deleted w/sub/b",
	))
}

func TestDiffOpaqueRecreatedDir(t *testing.T) {
	e := newEnv(t, map[string]string{"o/a": "a", "o/b": "b", "o/s/c": "c"})
	if err := removeAll(e, "o"); err != nil {
		t.Fatal(err)
	}
	r := e.view.Root()
	o, _, err := e.view.Mkdir(r, "o", 0755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Mkdir(o, "s", 0755, Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.view.Create(o, "a", unix.O_RDWR, 0644, Caller{}); err != nil {
		t.Fatal(err)
	}
	checkDiff(t, "a lower directory removed and made again", e.lowerView().view, e.view, lines(
		"modified o/a",
		"deleted o/b",
		"deleted o/s/c",
	))
}

func TestDiffChangedBack(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "same", "g": "meta"})
	e.write("f", "different")
	e.write("f", "same")
	mode := uint32(0600)
	g := e.must("g")
	if _, err := e.view.Setattr(g, SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	mode = 0644
	if _, err := e.view.Setattr(g, SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.view.Create(e.view.Root(), "tmp", unix.O_RDWR, 0644, Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(e.view.Root(), "tmp"); err != nil {
		t.Fatal(err)
	}
	checkDiff(t, "changed and changed back", e.lowerView().view, e.view, "")
}

func TestDiffHardLinks(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "data", "h1": "shared", "L/p1": "p", "z": ""})
	for _, l := range [][2]string{{"h1", "h2"}, {"L/p1", "L/p2"}} {
		if err := os.Link(filepath.Join(e.lower, l[0]), filepath.Join(e.lower, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	r := e.view.Root()
	if _, err := e.view.Link(e.must("f"), r, "g"); err != nil {
		t.Fatal(err)
	}
	e.write("h1", "SHARED")
	if err := e.view.Rename(r, "L", r, "M", 0); err != nil {
		t.Fatal(err)
	}
	snap, err := e.view.Snapshot("renamed", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	cs := checkDiff(t, "lower → branch", e.lowerView().view, e.view, lines(
		"deleted L",
		"deleted L/p1",
		"deleted L/p2",
		"created M",
		"created M/p1",
		"created M/p2",
		"created g",
		"modified h1",
		"modified h2",
	))
	if c := find(cs, "g"); c != nil {
		st, _ := e.view.Getattr(e.must("f"))
		if c.New.Ino != st.Ino {
			t.Errorf("g: st_ino %d, want f's %d", c.New.Ino, st.Ino)
		}
	}
	e.write("M/p1", "P")
	s := e.snapView(snap)
	checkDiff(t, "snapshot → branch, one name of a lower hard link written below a renamed directory", s.view, e.view, lines(
		"modified M/p1",
		"modified M/p2",
	))
}

func TestDiffSymlinkAndDevice(t *testing.T) {
	e := newEnv(t, map[string]string{"keep": ""})
	if err := os.Symlink("t1", filepath.Join(e.lower, "s")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("same", filepath.Join(e.lower, "s2")); err != nil {
		t.Fatal(err)
	}
	dev := os.Geteuid() == 0
	if !dev {
		testenv.Reduced(t, testenv.Root, "no device node: only root may make one")
	}
	if dev {
		if err := unix.Mknod(filepath.Join(e.lower, "null"), unix.S_IFCHR|0666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
	}
	r := e.view.Root()
	if err := e.view.Unlink(r, "s"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Symlink(r, "s", "t2", Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(r, "s2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Symlink(r, "s2", "same", Caller{}); err != nil {
		t.Fatal(err)
	}
	want := lines("modified s")
	if dev {
		if err := e.view.Unlink(r, "null"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.view.Mknod(r, "null", unix.S_IFCHR|0666, unix.Mkdev(1, 5), Caller{}); err != nil {
			t.Fatal(err)
		}
		want = lines("modified null", "modified s")
	}
	cs := checkDiff(t, "symlink and device", e.lowerView().view, e.view, want)
	if c := find(cs, "s"); c != nil && (c.Old.Target != "t1" || c.New.Target != "t2") {
		t.Errorf("s: target %q → %q", c.Old.Target, c.New.Target)
	}
}

func TestDiffSnapshotSharesObjects(t *testing.T) {
	e := newEnv(t, map[string]string{"a/f": "x"})
	e.write("a/f", "y")
	snap, err := e.view.Snapshot("", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	s := e.snapView(snap)
	checkDiff(t, "snapshot → branch right after it", s.view, e.view, "")
	checkDiff(t, "lower → snapshot", e.lowerView().view, s.view, lines("modified a/f"))
}
