package overlay

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/hide"
	"github.com/agentfs/agentfs/internal/testenv"
)

type env struct {
	t     testing.TB
	lower string
	bs    *backstore.Store
	meta  *branch.Store
	view  *FS
	// hide and hidden are the views' hide rules (hide_test.go).
	hide   *hide.Rules
	hidden *hide.Inodes
	// limits are the views' limits (quota_test.go); set them, then
	// reopen.
	limits Limits
}

// newEnv builds a view over a fresh lower tree made by files (path →
// content; a trailing "/" makes a directory).
func newEnv(t testing.TB, files map[string]string) *env {
	t.Helper()
	return newEnvIn(t, t.TempDir(), files)
}

// newEnvIn is newEnv with the lower tree made in lower, an empty
// directory (testenv.DiskDir, for reads that must reach a disk).
func newEnvIn(t testing.TB, lower string, files map[string]string) *env {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(lower, p)
		if p[len(p)-1] == '/' {
			if err := os.MkdirAll(full, 0755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0644); err != nil {
			t.Fatal(err)
		}
	}
	bs, err := backstore.Open(backstore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bs.Close(); err != nil {
			t.Errorf("close the backstore: %v", err)
		}
	})
	meta, err := branch.Open(branch.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := meta.Close(); err != nil {
			t.Errorf("close the branch store: %v", err)
		}
	})
	e := &env{t: t, lower: lower, bs: bs, meta: meta}
	e.reopen()
	return e
}

// reopen builds a new view over the same lower, layer and backstore, as
// a remount does.
func (e *env) reopen() {
	e.t.Helper()
	layer, err := e.meta.Layer("main")
	if err != nil {
		e.t.Fatal(err)
	}
	v, err := New(Config{Lower: e.lower, Objects: e.bs, Layer: layer, AllocIno: e.meta.AllocIno, Hide: e.hide, HiddenInodes: e.hidden, Limits: e.limits})
	if err != nil {
		e.t.Fatal(err)
	}
	e.view = v
}

// walk resolves a slash-separated path from the root.
func (e *env) walk(p string) (*Node, error) {
	n := e.view.Root()
	if p == "" {
		return n, nil
	}
	for _, name := range splitAll(p) {
		c, _, err := e.view.Lookup(n, name)
		if err != nil {
			return nil, err
		}
		n = c
	}
	return n, nil
}

func splitAll(p string) []string {
	var out []string
	for p != "" {
		i := 0
		for i < len(p) && p[i] != '/' {
			i++
		}
		out = append(out, p[:i])
		if i == len(p) {
			break
		}
		p = p[i+1:]
	}
	return out
}

func (e *env) must(p string) *Node {
	e.t.Helper()
	n, err := e.walk(p)
	if err != nil {
		e.t.Fatalf("lookup %q: %v", p, err)
	}
	return n
}

func (e *env) read(p string) string {
	e.t.Helper()
	f, err := e.view.Open(e.must(p), unix.O_RDONLY)
	if err != nil {
		e.t.Fatalf("open %q: %v", p, err)
	}
	defer release(e.t, f)
	buf := make([]byte, 1<<16)
	n, err := f.ReadAt(buf, 0)
	if err != nil {
		e.t.Fatalf("read %q: %v", p, err)
	}
	return string(buf[:n])
}

func (e *env) write(p, s string) {
	e.t.Helper()
	f, err := e.view.Open(e.must(p), unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		e.t.Fatalf("open %q for writing: %v", p, err)
	}
	defer release(e.t, f)
	if _, err := f.WriteAt([]byte(s), 0); err != nil {
		e.t.Fatalf("write %q: %v", p, err)
	}
}

// writeAt writes b at off through f, failing the test unless all of it
// is written.
func writeAt(t testing.TB, f *File, b []byte, off int64) {
	t.Helper()
	if n, err := f.WriteAt(b, off); err != nil || n != len(b) {
		t.Fatalf("write of %d bytes at %d (node %d): %d written, %v", len(b), off, f.n.ID, n, err)
	}
}

// release releases f, failing the test if that fails (Errorf: it may be
// deferred).
func release(t testing.TB, f *File) {
	t.Helper()
	if err := f.Release(); err != nil {
		t.Errorf("release (node %d): %v", f.n.ID, err)
	}
}

func (e *env) names(p string) []string {
	e.t.Helper()
	ents, err := e.view.ReadDir(e.must(p))
	if err != nil {
		e.t.Fatalf("readdir %q: %v", p, err)
	}
	var out []string
	for _, d := range ents {
		if d.Name != "." && d.Name != ".." {
			out = append(out, d.Name)
		}
	}
	sort.Strings(out)
	return out
}

func (e *env) lowerContent(p string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.lower, p))
	if err != nil {
		e.t.Fatalf("lower %q: %v", p, err)
	}
	return string(b)
}

func eq(t *testing.T, what string, got, want any) {
	t.Helper()
	if !equal(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func equal(a, b any) bool {
	as, ok1 := a.([]string)
	bs, ok2 := b.([]string)
	if ok1 && ok2 {
		if len(as) != len(bs) {
			return false
		}
		for i := range as {
			if as[i] != bs[i] {
				return false
			}
		}
		return true
	}
	return a == b
}

func TestReadThroughAndCopyUp(t *testing.T) {
	e := newEnv(t, map[string]string{"a/f": "lower"})
	eq(t, "read", e.read("a/f"), "lower")
	n := e.must("a/f")
	st0, _ := e.view.Getattr(n)
	e.write("a/f", "upper")
	eq(t, "read after write", e.read("a/f"), "upper")
	eq(t, "lower after write", e.lowerContent("a/f"), "lower")
	st1, _ := e.view.Getattr(n)
	eq(t, "st_ino across copy-up", st1.Ino, st0.Ino)
	e.reopen()
	eq(t, "read after reopen", e.read("a/f"), "upper")
	st2, _ := e.view.Getattr(e.must("a/f"))
	eq(t, "st_ino across reopen", st2.Ino, st0.Ino)
}

func TestReadOnlyOpenDoesNotCopyUp(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "x"})
	e.read("f")
	eq(t, "objects after a read", e.objectCount(), 0)
}

func TestReaderFollowsCopyUp(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "lower"})
	r, err := e.view.Open(e.must("f"), unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, r)
	e.write("f", "UPPER")
	buf := make([]byte, 16)
	k, _ := r.ReadAt(buf, 0)
	eq(t, "old reader", string(buf[:k]), "UPPER")
}

func TestWhiteoutOpaqueRmdir(t *testing.T) {
	e := newEnv(t, map[string]string{"d/a": "a", "d/b": "b", "d/sub/": ""})
	d := e.must("d")
	if err := e.view.Unlink(d, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.walk("d/a"); err != unix.ENOENT {
		t.Errorf("lookup of removed name: %v, want ENOENT", err)
	}
	eq(t, "listing", e.names("d"), []string{"b", "sub"})
	if err := e.view.Rmdir(e.view.Root(), "d"); err != unix.ENOTEMPTY {
		t.Errorf("rmdir of non-empty merged dir: %v, want ENOTEMPTY", err)
	}
	if err := e.view.Unlink(d, "b"); err != nil {
		t.Fatalf("unlink d/b: %v", err)
	}
	if err := e.view.Rmdir(d, "sub"); err != nil {
		t.Fatalf("rmdir d/sub: %v", err)
	}
	if err := e.view.Rmdir(e.view.Root(), "d"); err != nil {
		t.Fatalf("rmdir of emptied merged dir: %v", err)
	}
	if _, _, err := e.view.Mkdir(e.view.Root(), "d", 0755, Caller{}); err != nil {
		t.Fatal(err)
	}
	eq(t, "new dir over whiteout", len(e.names("d")), 0)
	eq(t, "lower intact", e.lowerContent("d/a"), "a")
	e.reopen()
	eq(t, "after reopen", len(e.names("d")), 0)
}

func TestRenameLowerDir(t *testing.T) {
	e := newEnv(t, map[string]string{"src/x": "x", "src/deep/y": "y"})
	e.write("src/x", "changed")
	if err := e.view.Rename(e.view.Root(), "src", e.view.Root(), "dst", 0); err != nil {
		t.Fatalf("rename lower dir: %v", err)
	}
	if _, err := e.walk("src"); err != unix.ENOENT {
		t.Errorf("old name: %v, want ENOENT", err)
	}
	eq(t, "moved upper file", e.read("dst/x"), "changed")
	eq(t, "moved lower file", e.read("dst/deep/y"), "y")
	e.reopen()
	eq(t, "after reopen", e.read("dst/deep/y"), "y")
	eq(t, "names", e.names("dst"), []string{"deep", "x"})
	eq(t, "lower intact", e.lowerContent("src/x"), "x")
}

func TestRenameFlags(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "A", "b": "B"})
	r := e.view.Root()
	if err := e.view.Rename(r, "a", r, "b", RenameNoReplace); err != unix.EEXIST {
		t.Errorf("NOREPLACE onto existing: %v, want EEXIST", err)
	}
	if err := e.view.Rename(r, "a", r, "b", RenameExchange); err != nil {
		t.Fatalf("EXCHANGE: %v", err)
	}
	eq(t, "a after exchange", e.read("a"), "B")
	eq(t, "b after exchange", e.read("b"), "A")
	if err := e.view.Rename(r, "a", r, "b", 0); err != nil {
		t.Fatal(err)
	}
	eq(t, "b after replace", e.read("b"), "B")
	eq(t, "names", e.names(""), []string{"b"})
}

func TestLinkAndMetacopy(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "data"})
	r := e.view.Root()
	n := e.must("f")
	mode := uint32(0600)
	if _, err := e.view.Setattr(n, SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	st, _ := e.view.Getattr(n)
	eq(t, "mode after chmod", st.Mode&07777, uint32(0600))
	eq(t, "size of metacopy", st.Size, int64(4))
	eq(t, "read metacopy", e.read("f"), "data")
	if _, err := e.view.Link(n, r, "g"); err != nil {
		t.Fatal(err)
	}
	st, _ = e.view.Getattr(n)
	eq(t, "nlink", st.Nlink, uint64(2))
	eq(t, "mode kept by data copy-up", st.Mode&07777, uint32(0600))
	e.write("g", "new!")
	eq(t, "read through other link", e.read("f"), "new!")
	if err := e.view.Unlink(r, "f"); err != nil {
		t.Fatal(err)
	}
	st, _ = e.view.Getattr(e.must("g"))
	eq(t, "nlink after unlink", st.Nlink, uint64(1))
}

func TestUnlinkedOpenFile(t *testing.T) {
	e := newEnv(t, map[string]string{})
	r := e.view.Root()
	n, f, _, err := e.view.Create(r, "tmp", unix.O_RDWR, 0644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(r, "tmp"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("still here"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	k, _ := f.ReadAt(buf, 0)
	eq(t, "unlinked read", string(buf[:k]), "still here")
	obj := n.object
	release(t, f)
	e.view.Forget(n, 1)
	objectGone(t, e.bs, obj, "object of unlinked closed file")
}

func TestReaddirDedupAndInodes(t *testing.T) {
	e := newEnv(t, map[string]string{"d/a": "1", "d/b": "2"})
	d := e.must("d")
	e.write("d/a", "x")
	if _, _, err := e.view.Mknod(d, "c", unix.S_IFREG|0644, 0, Caller{}); err != nil {
		t.Fatal(err)
	}
	ents, _ := e.view.ReadDir(d)
	seen := map[string]uint64{}
	for _, de := range ents {
		if _, dup := seen[de.Name]; dup {
			t.Errorf("%q listed twice", de.Name)
		}
		seen[de.Name] = de.Ino
	}
	for _, name := range []string{"a", "b", "c"} {
		st, err := e.view.Getattr(e.must("d/" + name))
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "d_ino of "+name, seen[name], st.Ino)
	}
}

func TestMergedDirNlink(t *testing.T) {
	e := newEnv(t, map[string]string{"d/s1/": "", "d/s2/": "", "d/f": "f"})
	d := e.must("d")
	nlink := func() uint64 {
		st, err := e.view.Getattr(d)
		if err != nil {
			t.Fatal(err)
		}
		return st.Nlink
	}
	eq(t, "lower-only dir", nlink(), uint64(4))
	if err := e.view.Unlink(d, "f"); err != nil {
		t.Fatalf("unlink d/f: %v", err)
	}
	eq(t, "merged dir after unlink of a file", nlink(), uint64(4))
	if _, _, err := e.view.Mkdir(d, "s3", 0755, Caller{}); err != nil {
		t.Fatalf("mkdir d/s3: %v", err)
	}
	eq(t, "after mkdir", nlink(), uint64(5))
	if err := e.view.Rmdir(d, "s1"); err != nil {
		t.Fatalf("rmdir d/s1: %v", err)
	}
	eq(t, "after rmdir of a lower subdir", nlink(), uint64(4))
	if err := e.view.Rename(d, "s2", e.view.Root(), "moved", 0); err != nil {
		t.Fatalf("rename d/s2 to moved: %v", err)
	}
	eq(t, "after moving a subdir out", nlink(), uint64(3))
	st, _ := e.view.Getattr(e.view.Root())
	eq(t, "root after the move in", st.Nlink, uint64(4))
}

func TestExchangeDirectories(t *testing.T) {
	e := newEnv(t, map[string]string{"a/x": "ax", "b/y": "by"})
	e.write("a/x", "AX")
	if _, _, err := e.view.Mkdir(e.must("b"), "new", 0755, Caller{}); err != nil {
		t.Fatal(err)
	}
	r := e.view.Root()
	if err := e.view.Rename(r, "a", r, "b", RenameExchange); err != nil {
		t.Fatalf("exchange of two directories: %v", err)
	}
	eq(t, "a", e.names("a"), []string{"new", "y"})
	eq(t, "b", e.names("b"), []string{"x"})
	eq(t, "b/x", e.read("b/x"), "AX")
	e.reopen()
	eq(t, "a after reopen", e.names("a"), []string{"new", "y"})
	eq(t, "b/x after reopen", e.read("b/x"), "AX")
}

// TestRemovedXattrStaysRemovedAfterDataCopyUp removes a lower file's
// xattr (a metacopy), then writes the file: the data copy must not
// bring the xattr back from the lower file.
func TestRemovedXattrStaysRemovedAfterDataCopyUp(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "data", "g": "data"})
	for _, name := range []string{"f", "g"} {
		if err := unix.Setxattr(filepath.Join(e.lower, name), "user.a", []byte("1"), 0); err != nil {
			testenv.Skip(t, testenv.UserXattrs, "no user xattrs on the test filesystem: %v", err)
		}
	}
	if err := e.view.Removexattr(e.must("f"), "user.a"); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Setxattr(e.must("g"), "user.b", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	e.write("f", "new")
	e.write("g", "new")
	buf := make([]byte, 16)
	if _, err := e.view.Getxattr(e.must("f"), "user.a", buf); err != unix.ENODATA {
		t.Errorf("f: getxattr user.a after copy-up: %v, want ENODATA", err)
	}
	for _, name := range []string{"user.a", "user.b"} {
		if _, err := e.view.Getxattr(e.must("g"), name, buf); err != nil {
			t.Errorf("g: getxattr %s after copy-up: %v", name, err)
		}
	}
}

// TestLowerHardLinkNamesShareNode: the names of a hard-linked lower
// file are one node (one kernel inode), before and after copy-up, so a
// file opened through one name sees what is done through another, and
// the object goes only when every name and every open file has.
func TestLowerHardLinkNamesShareNode(t *testing.T) {
	e := newEnv(t, map[string]string{"a/f4": "data", "d5/x": "", "d0/": ""})
	if err := os.Link(filepath.Join(e.lower, "a/f4"), filepath.Join(e.lower, "d5/h0")); err != nil {
		t.Fatal(err)
	}
	n := e.must("a/f4")
	if e.must("d5/h0") != n {
		t.Fatal("two names of a lower hard link are two nodes")
	}
	// Moving a name that is not the node's own keeps both linked.
	if err := e.view.Rename(e.must("d5"), "h0", e.must("d0"), "n3", 0); err != nil {
		t.Fatal(err)
	}
	if e.must("d0/n3") != n || e.must("a/f4") != n {
		t.Fatal("a renamed name of a lower hard link is another node")
	}
	f, err := e.view.Open(n, unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("DATA"), 0); err != nil {
		t.Fatal(err)
	}
	eq(t, "read through the other name", e.read("d0/n3"), "DATA")
	st, _ := e.view.Getattr(n)
	eq(t, "nlink", st.Nlink, uint64(2))
	if err := e.view.Unlink(e.must("a"), "f4"); err != nil {
		t.Fatal(err)
	}
	st, _ = e.view.Getattr(n)
	eq(t, "nlink after unlinking one name", st.Nlink, uint64(1))
	if err := e.view.Unlink(e.must("d0"), "n3"); err != nil {
		t.Fatal(err)
	}
	var size uint64 = 1
	if _, err := e.view.Setattr(n, SetAttr{Size: &size}, f); err != nil {
		t.Fatalf("ftruncate of the unlinked open file: %v", err)
	}
	obj := n.object
	release(t, f)
	e.view.Forget(n, 1<<30)
	objectGone(t, e.bs, obj, "object after the last name and file went")
}

// TestUnlinkOwnNameOfSharedNode unlinks the name a lower hard link's
// node was found by while another lower name stays: the node must keep
// the file, and a write through it must show at the other name.
func TestUnlinkOwnNameOfSharedNode(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "data"})
	if err := os.Link(filepath.Join(e.lower, "a"), filepath.Join(e.lower, "b")); err != nil {
		t.Fatal(err)
	}
	r := e.view.Root()
	n := e.must("a")
	f, err := e.view.Open(n, unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, f)
	if err := e.view.Unlink(r, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.walk("a"); err != unix.ENOENT {
		t.Errorf("lookup of the unlinked name: %v, want ENOENT", err)
	}
	if _, err := f.WriteAt([]byte("DATA"), 0); err != nil {
		t.Fatal(err)
	}
	eq(t, "other name", e.read("b"), "DATA")
	if e.must("b") != n {
		t.Error("the remaining name is another node")
	}
	st, _ := e.view.Getattr(n)
	eq(t, "nlink", st.Nlink, uint64(1))
	e.reopen()
	eq(t, "other name after remount", e.read("b"), "DATA")
	if _, err := e.walk("a"); err != unix.ENOENT {
		t.Errorf("lookup of the unlinked name after remount: %v, want ENOENT", err)
	}
}

// TestRenameOverUpperFile replaces an upper file that an open file
// holds: the replaced file shows nlink 0 and its object goes once the
// file is closed.
func TestRenameOverUpperFile(t *testing.T) {
	e := newEnv(t, map[string]string{})
	r := e.view.Root()
	n, f, _, err := e.view.Create(r, "old", unix.O_RDWR, 0644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.view.Create(r, "new", unix.O_RDWR, 0644, Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rename(r, "new", r, "old", 0); err != nil {
		t.Fatal(err)
	}
	st, err := e.view.Getattr(n)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "nlink of the replaced file", st.Nlink, uint64(0))
	obj := n.object
	release(t, f)
	e.view.Forget(n, 1<<30)
	objectGone(t, e.bs, obj, "object of the replaced file")
}

// TestCopyUpKeepsCtime: a copy-up is no change of the file, so the
// copy shows the lower ctime until something changes it.
func TestCopyUpKeepsCtime(t *testing.T) {
	e := newEnv(t, map[string]string{"d/f": "data"})
	var lst unix.Stat_t
	if err := unix.Lstat(filepath.Join(e.lower, "d/f"), &lst); err != nil {
		t.Fatal(err)
	}
	f, err := e.view.Open(e.must("d/f"), unix.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	release(t, f)
	st, _ := e.view.Getattr(e.must("d/f"))
	eq(t, "ctime after copy-up", st.Ctim, lst.Ctim)
	mode := uint32(0600)
	if _, err := e.view.Setattr(e.must("d/f"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	st, _ = e.view.Getattr(e.must("d/f"))
	if st.Ctim == lst.Ctim {
		t.Error("ctime unchanged by a chmod after the copy-up")
	}
}

// TestReload replaces the layer's entries underneath the view, as a
// restore does: the view shows the new entries, the old nodes come back
// as stale with their names, and an open file keeps its data.
func TestReload(t *testing.T) {
	e := newEnv(t, map[string]string{"d/f": "lower"})
	e.write("d/f", "upper")
	old := e.must("d/f")
	f, err := e.view.Open(old, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, f)
	var b branch.Batch
	if err := e.view.layer.Load(func(p string, _ *branch.Entry) error { b.Delete(p); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := e.view.layer.Commit(&b); err != nil {
		t.Fatal(err)
	}
	stale, err := e.view.Reload()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range stale {
		if s.Parent != nil {
			names = append(names, s.Name)
		}
	}
	sort.Strings(names)
	eq(t, "stale names", fmt.Sprint(names), "[d f]")
	eq(t, "read after reload", e.read("d/f"), "lower")
	if e.must("d/f") == old {
		t.Error("the old node is still the file's node")
	}
	buf := make([]byte, 16)
	k, _ := f.ReadAt(buf, 0)
	eq(t, "open file keeps its data", string(buf[:k]), "upper")
}

// TestCutLooseLower: a project file changed from outside gets a new
// node at its next lookup (a new inode for a writeback-cache kernel);
// an open file keeps reading the file; a file the mount changed and
// the root are never cut loose.
func TestCutLooseLower(t *testing.T) {
	e := newEnv(t, map[string]string{"d/f": "old", "d/mine": "lower"})
	old := e.must("d/f")
	f, err := e.view.Open(old, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, f)
	if err := os.WriteFile(filepath.Join(e.lower, "d/f"), []byte("new contents"), 0644); err != nil {
		t.Fatal(err)
	}
	if !e.view.CutLooseLower(old) {
		t.Fatal("CutLooseLower of a project file = false")
	}
	if e.view.CutLooseLower(old) {
		t.Error("CutLooseLower of a node already cut loose = true")
	}
	n := e.must("d/f")
	if n == old || n.ID == old.ID {
		t.Errorf("d/f keeps its node %d after CutLooseLower", old.ID)
	}
	eq(t, "read after CutLooseLower", e.read("d/f"), "new contents")
	buf := make([]byte, 16)
	k, _ := f.ReadAt(buf, 0)
	eq(t, "the open file reads the project file", string(buf[:k]), "new contents")
	e.write("d/mine", "upper")
	if e.view.CutLooseLower(e.must("d/mine")) {
		t.Error("CutLooseLower of a file the mount changed = true")
	}
	if e.view.CutLooseLower(e.view.Root()) {
		t.Error("CutLooseLower of the root = true")
	}
}

// TestRmdirKeepsHiddenLinkCount: a hard-linked lower file loses one
// name under a renamed-over file (its copy is then kept by an anchor)
// and another name by a rename out of a lower directory, which is then
// removed: the whiteout that counted the moved name must keep counting
// (differential test seed 211800316).
func TestRmdirKeepsHiddenLinkCount(t *testing.T) {
	e := newEnv(t, map[string]string{"d3/f2": "x", "d0/f3": "", "d0/d2/": "", "d1/": ""})
	if err := os.Link(filepath.Join(e.lower, "d3/f2"), filepath.Join(e.lower, "d0/d2/h0")); err != nil {
		t.Fatal(err)
	}
	e.must("d0/d2/h0")
	e.must("d3/f2")
	if err := e.view.Rename(e.must("d0"), "f3", e.must("d0/d2"), "h0", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rename(e.must("d3"), "f2", e.must("d1"), "n1", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rmdir(e.view.Root(), "d3"); err != nil {
		t.Fatal(err)
	}
	st, err := e.view.Getattr(e.must("d1/n1"))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "nlink after rmdir", st.Nlink, uint64(1))
	e.reopen()
	st, _ = e.view.Getattr(e.must("d1/n1"))
	eq(t, "nlink after remount", st.Nlink, uint64(1))
}

// TestNewNameOverHiddenLinkKeepsCount: a name made where a whiteout hid
// a hard-linked lower file's name keeps that name counted as hidden
// (differential test seed 605239117).
func TestNewNameOverHiddenLinkKeepsCount(t *testing.T) {
	e := newEnv(t, map[string]string{"f1": "x", "d/": "", "n/": ""})
	if err := os.Link(filepath.Join(e.lower, "f1"), filepath.Join(e.lower, "d/h1")); err != nil {
		t.Fatal(err)
	}
	r := e.view.Root()
	e.must("d/h1") // the node is found by d/h1: the rename copies up there
	if err := e.view.Rename(r, "f1", e.must("n"), "f4", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Symlink(r, "f1", "/nowhere", Caller{}); err != nil {
		t.Fatal(err)
	}
	st, err := e.view.Getattr(e.must("n/f4"))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "nlink", st.Nlink, uint64(2))
	e.reopen()
	st, _ = e.view.Getattr(e.must("n/f4"))
	eq(t, "nlink after remount", st.Nlink, uint64(2))
}

// objectGone checks that object obj is no object any more: removed, or
// kept emptied and idle for reuse (backstore.Recycle).
func objectGone(t *testing.T, bs *backstore.Store, obj, what string) {
	t.Helper()
	st, err := bs.Lstat(obj)
	switch {
	case err == unix.ENOENT:
	case err == nil && bs.IsIdle(obj) && st.Size == 0:
	default:
		t.Errorf("%s: lstat %v (size %d, idle %v), want ENOENT or an empty idle object", what, err, st.Size, bs.IsIdle(obj))
	}
}

// TestForgetAndReleaseReapOnce: the kernel's FORGET and the last
// RELEASE may both find an unlinked node gone (the fs layer calls
// Forget(n, 0) after each release). Its object is recycled once: a
// second recycling would empty the file, in another branch's view, that
// took it as a spare.
func TestForgetAndReleaseReapOnce(t *testing.T) {
	e := newEnv(t, map[string]string{})
	main, err := e.meta.Layer("main")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := main.Snapshot("base", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.meta.CreateLayer("other", snap)
	if err != nil {
		t.Fatal(err)
	}
	ofs, err := New(Config{Lower: e.lower, Objects: e.bs, Layer: other, AllocIno: e.meta.AllocIno})
	if err != nil {
		t.Fatal(err)
	}
	r := e.view.Root()
	n, f, _, err := e.view.Create(r, "old", unix.O_RDWR, 0644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.view.Unlink(r, "old"); err != nil {
		t.Fatal(err)
	}
	obj := n.object
	release(t, f)           // the last RELEASE: opens drop to 0 ...
	e.view.Forget(n, 1<<30) // ... the kernel's FORGET reaps the node ...
	m, g, _, err := ofs.Create(ofs.Root(), "new", unix.O_RDWR, 0644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if m.object != obj {
		t.Fatalf("the other view's new file did not reuse the spare %s (got %s): the test checks nothing", obj, m.object)
	}
	if _, err := g.WriteAt([]byte("new data"), 0); err != nil {
		t.Fatal(err)
	}
	release(t, g)
	e.view.Forget(n, 0) // ... and then the release's own Forget
	h, err := ofs.Open(m, unix.O_RDONLY)
	if err != nil {
		t.Fatalf("open the other view's new file: %v", err)
	}
	defer release(t, h)
	buf := make([]byte, 64)
	k, err := h.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	eq(t, "the other view's new file", string(buf[:k]), "new data")
}
