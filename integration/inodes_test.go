package integration

// Checklist items 10 and 11 (DESIGN.md): inode numbers, st_dev,
// st_nlink and hard links.

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Checklist 10: st_ino is stable across copy-up, rename and remount;
// one st_dev; distinct files have distinct numbers.
func TestInodeNumbersAreStable(t *testing.T) {
	m := newMount(t, withStore(filepath.Join(t.TempDir(), "store")), withLower(
		lowerFile("untouched", "u"),
		lowerFile("d/data", "data"),
		lowerFile("d/meta", "meta"),
		lowerFile("d/moved", "moved"),
		lowerDir("d/sub"),
		lowerFile("d/sub/deep", "deep"),
		lowerSymlink("d/link", "data"),
	))
	paths := []string{".", "untouched", "d", "d/data", "d/meta", "d/moved", "d/sub", "d/sub/deep", "d/link"}
	ino := map[string]uint64{}
	dev := lstat(t, m.dir).Dev
	for _, p := range paths {
		ino[p] = lstat(t, m.path(p)).Ino
	}
	r, err := os.Open(m.path("d/data"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	writeFile(t, m.path("d/data"), "changed")                             // data copy-up
	unix.Chmod(m.path("d/meta"), 0o600)                                   // metadata copy-up
	unix.Lchown(m.path("d/link"), 12, 34)                                 // symlink copy-up
	writeFile(t, m.path("d/sub/deep"), "x")                               // copies up d/sub too
	if err := os.Rename(m.path("d/moved"), m.path("moved")); err != nil { // a lower file
		t.Fatal(err)
	}
	ino["moved"] = ino["d/moved"]
	delete(ino, "d/moved")
	writeFile(t, m.path("d/new"), "new")
	os.Mkdir(m.path("newdir"), 0o755)
	ino["d/new"] = lstat(t, m.path("d/new")).Ino
	ino["newdir"] = lstat(t, m.path("newdir")).Ino

	check := func(t *testing.T, when string) {
		t.Helper()
		byIno := map[uint64]string{}
		for _, p := range sortedKeys(ino) {
			st := lstat(t, m.path(p))
			if st.Ino != ino[p] {
				t.Errorf("%s: st_ino %d %s, want %d", p, st.Ino, when, ino[p])
			}
			if other, dup := byIno[st.Ino]; dup {
				t.Errorf("%s and %s share st_ino %d %s", p, other, st.Ino, when)
			}
			byIno[st.Ino] = p
			if st.Dev != dev {
				t.Errorf("%s: st_dev %d %s, want the mount's one device %d", p, st.Dev, when, dev)
			}
		}
	}
	t.Run("after copy-up and rename", func(t *testing.T) {
		check(t, "after copy-up and rename")
		var st unix.Stat_t
		unix.Fstat(int(r.Fd()), &st)
		if st.Ino != ino["d/data"] || st.Dev != dev {
			t.Errorf("fstat of an fd opened before copy-up: ino %d dev %d, want %d %d", st.Ino, st.Dev, ino["d/data"], dev)
		}
	})
	r.Close()
	t.Run("after remount", func(t *testing.T) {
		m.remount()
		dev = lstat(t, m.dir).Dev
		check(t, "after remount")
		for _, dir := range []string{".", "d", "d/sub"} {
			for _, e := range readAllDirents(t, m.path(dir)) {
				if e.name == ".." {
					continue
				}
				if st := lstat(t, m.path(dir+"/"+e.name)); e.ino != st.Ino {
					t.Errorf("%s/%s after remount: d_ino %d, st_ino %d; want equal", dir, e.name, e.ino, st.Ino)
				}
			}
		}
	})
}

// Checklist 10: st_nlink of files and directories.
func TestLinkCounts(t *testing.T) {
	m := newMount(t, withLower(
		lowerFile("f", "f"),
		lowerDir("dir/sub1"),
		lowerDir("dir/sub2"),
		lowerFile("dir/file", "x"),
		lowerDir("empty"),
	))
	nlink := func(p string) uint64 { return lstat(t, m.path(p)).Nlink }
	// Directories: 2 + subdirectories, or 1 ("unknown", as overlayfs
	// reports for merged directories and find(1) understands).
	wantDir := func(p string, subdirs uint64) {
		t.Helper()
		if n := nlink(p); n != 2+subdirs && n != 1 {
			t.Errorf("%s: st_nlink %d, want %d (2 + %d subdirectories) or 1", p, n, 2+subdirs, subdirs)
		}
	}
	if n := nlink("f"); n != 1 {
		t.Errorf("f: st_nlink %d, want 1", n)
	}
	wantDir("dir", 2)
	wantDir("empty", 0)
	os.Mkdir(m.path("dir/sub3"), 0o755)
	wantDir("dir", 3)
	unix.Rmdir(m.path("dir/sub1"))
	unix.Rmdir(m.path("dir/sub2"))
	wantDir("dir", 1)
	os.Mkdir(m.path("new"), 0o755)
	os.Mkdir(m.path("new/a"), 0o755)
	wantDir("new", 1)
	if err := unix.Link(m.path("f"), m.path("dir/f2")); err != nil {
		t.Fatal(err)
	}
	if a, b := nlink("f"), nlink("dir/f2"); a != 2 || b != 2 {
		t.Errorf("after link: st_nlink %d and %d, want 2 and 2", a, b)
	}
	os.Remove(m.path("f"))
	if n := nlink("dir/f2"); n != 1 {
		t.Errorf("after unlinking one of two names: st_nlink %d, want 1", n)
	}
}

// Checklist 11: link() works; a lower file with several names stays
// consistently linked, or each name behaves as its own file.
func TestHardLinks(t *testing.T) {
	m := newMount(t, withStore(filepath.Join(t.TempDir(), "store")), withLower(
		lowerFile("h1", "lower"),
		lowerHardlink("h2", "h1"),
		lowerFile("plain", "plain"),
		lowerDir("dir"),
	))
	t.Run("link errors", func(t *testing.T) {
		for _, c := range []struct {
			from, to string
			want     unix.Errno
		}{
			{"dir", "dirlink", unix.EPERM},
			{"missing", "x", unix.ENOENT},
			{"plain", "h1", unix.EEXIST},
			{"plain", "missing/x", unix.ENOENT},
		} {
			if err := unix.Link(m.path(c.from), m.path(c.to)); errnoOf(err) != c.want {
				t.Errorf("link %s %s = %s, want %s", c.from, c.to, errName(err), unix.ErrnoName(c.want))
			}
		}
	})
	t.Run("link a lower file", func(t *testing.T) {
		if err := unix.Link(m.path("plain"), m.path("dir/plain2")); err != nil {
			t.Fatalf("link: %v", err)
		}
		a, b := lstat(t, m.path("plain")), lstat(t, m.path("dir/plain2"))
		if a.Ino != b.Ino || a.Nlink != 2 || b.Nlink != 2 {
			t.Errorf("plain and dir/plain2: ino %d/%d nlink %d/%d, want one inode with nlink 2", a.Ino, b.Ino, a.Nlink, b.Nlink)
		}
		writeFile(t, m.path("dir/plain2"), "through the link")
		if got := readFile(t, m.path("plain")); got != "through the link" {
			t.Errorf("plain = %q after writing dir/plain2, want %q", got, "through the link")
		}
	})
	t.Run("lower hard links", func(t *testing.T) {
		a, b := lstat(t, m.path("h1")), lstat(t, m.path("h2"))
		if a.Ino != b.Ino || a.Nlink != 2 {
			t.Errorf("lower links h1, h2: ino %d/%d nlink %d, want one inode with nlink 2", a.Ino, b.Ino, a.Nlink)
		}
		if err := unix.Link(m.path("h1"), m.path("h3")); err != nil {
			t.Fatalf("link h1 h3: %v", err)
		}
		writeFile(t, m.path("h1"), "written through h1")
		checkLinkConsistency(t, m, "h1", "h2", "h3")
	})
	t.Run("after remount", func(t *testing.T) {
		m.remount()
		a, b := lstat(t, m.path("plain")), lstat(t, m.path("dir/plain2"))
		if a.Ino != b.Ino || a.Nlink != 2 {
			t.Errorf("after remount: plain and dir/plain2: ino %d/%d nlink %d, want one inode with nlink 2", a.Ino, b.Ino, a.Nlink)
		}
		checkLinkConsistency(t, m, "h1", "h2", "h3")
	})
}

// checkLinkConsistency checks the rule for names (all the names there
// are) that were hard links: names with one st_ino show one content, and
// st_nlink is the number of such names; names with different st_ino
// are separate files.
func checkLinkConsistency(t *testing.T, m *mount, names ...string) {
	t.Helper()
	groups := map[uint64][]string{}
	for _, n := range names {
		groups[lstat(t, m.path(n)).Ino] = append(groups[lstat(t, m.path(n)).Ino], n)
	}
	for ino, g := range groups {
		st := lstat(t, m.path(g[0]))
		content := readFile(t, m.path(g[0]))
		if st.Nlink != uint64(len(g)) {
			t.Errorf("%v: st_ino %d, st_nlink %d, want %d (the names with this inode)", g, ino, st.Nlink, len(g))
		}
		for _, n := range g[1:] {
			if s := lstat(t, m.path(n)); s.Nlink != st.Nlink {
				t.Errorf("%s and %s share st_ino %d but st_nlink is %d and %d", g[0], n, ino, st.Nlink, s.Nlink)
			}
			if c := readFile(t, m.path(n)); c != content {
				t.Errorf("%s and %s share st_ino %d but read %q and %q", g[0], n, ino, content, c)
			}
		}
	}
	if len(groups) > 1 {
		t.Logf("hard links were broken into %d files: %v", len(groups), groups)
	}
}
