package overlay

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/internal/testenv"
)

// walkDir reads a plain directory tree as fullWalk reads a view.
func walkDir(t *testing.T, root string) map[string]fileSig {
	t.Helper()
	out := map[string]fileSig{}
	inos := map[string]uint64{}
	err := filepath.Walk(root, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			rel = ""
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		s := fileSig{typ: st.Mode & unix.S_IFMT, mode: st.Mode & 07777, uid: st.Uid, gid: st.Gid, mtime: st.Mtim}
		if s.typ != unix.S_IFDIR {
			inos[rel] = st.Ino
		}
		s.xattrs = xattrString(func(b []byte) (int, error) { return unix.Llistxattr(path, b) },
			func(name string, b []byte) (int, error) { return unix.Lgetxattr(path, name, b) })
		switch s.typ {
		case unix.S_IFREG:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			s.data = string(b)
		case unix.S_IFLNK:
			s.data, _ = os.Readlink(path)
		case unix.S_IFCHR, unix.S_IFBLK:
			s.data = fmt.Sprint(st.Rdev)
		}
		out[rel] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	joinLinks(out, inos)
	return out
}

// exportEnv builds a view with every kind of file, upper and lower.
func exportEnv(t *testing.T) *env {
	e := newEnv(t, map[string]string{
		"d/lower": "lower data", "d/meta": "metacopy", "ro/f": "in a read-only dir", "h1": "linked",
		"d/sub/deep": "deep", "big": "",
	})
	if err := os.Link(filepath.Join(e.lower, "h1"), filepath.Join(e.lower, "h2")); err != nil {
		t.Fatal(err)
	}
	// A sparse lower file: 64 MiB with data at 0 and 32 MiB.
	f, err := os.OpenFile(filepath.Join(e.lower, "big"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("start"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("middle"), 32<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	old := unix.Timespec{Sec: 1_000_000_000, Nsec: 123456789}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(e.lower, "d/lower"), []unix.Timespec{old, old}, 0); err != nil {
		t.Fatalf("set the times of the lower d/lower: %v", err)
	}

	r := e.view.Root()
	e.write("d/sub/deep", "changed deep")
	mode := uint32(0640)
	if _, err := e.view.Setattr(e.must("d/meta"), SetAttr{Mode: &mode, Mtime: &old}, nil); err != nil {
		t.Fatal(err)
	}
	n, file, _, err := e.view.Create(r, "sparse", unix.O_RDWR, 0600, Caller{Uid: 1000, Gid: 100})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, file, []byte("end"), 48<<20)
	release(t, file)
	if err := e.view.Setxattr(n, "user.color", []byte("blue"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Link(n, e.must("d"), "sparse-link"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Symlink(r, "link", "d/lower", Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Mknod(r, "fifo", unix.S_IFIFO|0640, 0, Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.view.Mknod(r, "sock", unix.S_IFSOCK|0600, 0, Caller{}); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if _, _, err := e.view.Mknod(r, "null", unix.S_IFCHR|0666, unix.Mkdev(1, 3), Caller{}); err != nil {
			t.Fatal(err)
		}
	} else {
		testenv.Reduced(t, testenv.Root, "no device node: only root may make one")
	}
	setuid := uint32(04755)
	if _, err := e.view.Setattr(e.must("h1"), SetAttr{Mode: &setuid}, nil); err != nil {
		t.Fatal(err)
	}
	ro := uint32(0555)
	if _, err := e.view.Setattr(e.must("ro"), SetAttr{Mode: &ro}, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestExportRoundTrip(t *testing.T) {
	e := exportEnv(t)
	to := filepath.Join(t.TempDir(), "parent", "out")
	var skipped []string
	if err := ExportWith(e.view, to, ExportOptions{Skipped: func(p, why string) { skipped = append(skipped, p+": "+why) }}); err != nil {
		t.Fatal(err)
	}
	if len(skipped) > 0 {
		t.Errorf("skipped: %v", skipped)
	}
	// Times and hard links first, from lstat only: reading files moves
	// atimes (the view's too: fullWalk reads objects without O_NOATIME).
	var paths []string
	if err := filepath.Walk(to, func(path string, _ os.FileInfo, err error) error {
		rel, _ := filepath.Rel(to, path)
		if rel == "." {
			rel = ""
		}
		paths = append(paths, rel)
		return err
	}); err != nil {
		t.Fatalf("walk the export: %v", err)
	}
	// Times and hard links, from lstat only (reading would move atimes).
	inos := map[uint64]uint64{} // view st_ino → exported st_ino
	for _, p := range paths {
		vst, err := e.view.Getattr(e.must(p))
		if err != nil {
			t.Fatal(err)
		}
		var xst unix.Stat_t
		if err := unix.Lstat(filepath.Join(to, p), &xst); err != nil {
			t.Fatal(err)
		}
		if xst.Mtim != vst.Mtim || p != "" && xst.Atim != vst.Atim && vst.Mode&unix.S_IFMT == unix.S_IFREG {
			t.Errorf("%q: times %v %v, want %v %v", p, xst.Atim, xst.Mtim, vst.Atim, vst.Mtim)
		}
		if xi, ok := inos[vst.Ino]; ok && xi != xst.Ino {
			t.Errorf("%q: another inode than the other names of view inode %d", p, vst.Ino)
		}
		inos[vst.Ino] = xst.Ino
	}
	if len(inos) != len(paths)-2 {
		t.Errorf("%d inodes for %d paths, want 2 hard links (h1=h2, sparse=d/sparse-link)", len(inos), len(paths))
	}
	want := fullWalk(t, e.view)
	got := walkDir(t, to)
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%q not exported", p)
		} else if g != w {
			t.Errorf("%q exported as %+v, want %+v", p, g, w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%q exported, not in the view", p)
		}
	}
	for _, p := range []string{"big", "sparse"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(to, p), &st); err != nil {
			t.Fatalf("stat the exported %s: %v", p, err)
		}
		if st.Blocks*512 > 1<<20 {
			t.Errorf("%s: %d bytes allocated for %d: holes filled", p, st.Blocks*512, st.Size)
		}
	}
}

func TestExportTargets(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "x"})
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0755); err != nil {
		t.Fatal(err)
	}
	if err := Export(e.view, empty); err != nil {
		t.Errorf("export to an empty directory: %v", err)
	}
	full := filepath.Join(dir, "full")
	if err := os.Mkdir(full, 0755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ to, want string }{
		{full, "is not empty: choose a path that does not exist, or empty the directory first"},
		{file, "exists and is not a directory"},
		{filepath.Join(e.lower, "out"), "is inside the lower directory"},
		{filepath.Join(e.lower, "new", "out"), "is inside the lower directory"},
		{e.lower, "is inside the lower directory"},
	} {
		if err := Export(e.view, c.to); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("export to %s: %v, want an error saying %q", c.to, err, c.want)
		}
	}
	for _, name := range []string{"out", "new"} {
		if _, err := os.Lstat(filepath.Join(e.lower, name)); !os.IsNotExist(err) {
			t.Errorf("a refused export left %s/%s: %v", e.lower, name, err)
		}
	}
	names, _ := os.ReadDir(full)
	if len(names) != 1 {
		t.Errorf("a refused export changed %s: %v", full, names)
	}
}

func TestExportSnapshotAndLower(t *testing.T) {
	e := newEnv(t, map[string]string{"a": "1", "d/b": "2"})
	e.write("a", "changed")
	snap, err := e.view.Snapshot("", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	e.write("a", "again")
	for name, v := range map[string]*FS{"snapshot": e.snapView(snap).view, "lower": e.lowerView().view} {
		to := filepath.Join(t.TempDir(), name)
		if err := Export(v, to); err != nil {
			t.Fatal(err)
		}
		got, want := walkDir(t, to), fullWalk(t, v)
		keys := func(m map[string]fileSig) []string {
			var out []string
			for k := range m {
				out = append(out, k)
			}
			sort.Strings(out)
			return out
		}
		if !slices.Equal(keys(got), keys(want)) || got["a"] != want["a"] {
			t.Errorf("export of the %s view: %v, a=%q; want %v, a=%q", name, keys(got), got["a"].data, keys(want), want["a"].data)
		}
	}
}
