package integration

// Checklist items 10 and 11 (docs/semantics.md): inode numbers, st_dev,
// st_nlink and hard links.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// Checklist 10: st_ino is stable across copy-up, rename and remount;
// one st_dev; distinct files have distinct numbers.
func TestInodeNumbersAreStable(t *testing.T) {
	m := harness.NewMount(t, harness.WithStore(filepath.Join(t.TempDir(), "store")), harness.WithLower(
		harness.LowerFile("untouched", "u"),
		harness.LowerFile("d/data", "data"),
		harness.LowerFile("d/meta", "meta"),
		harness.LowerFile("d/moved", "moved"),
		harness.LowerDir("d/sub"),
		harness.LowerFile("d/sub/deep", "deep"),
		harness.LowerSymlink("d/link", "data"),
	))
	paths := []string{".", "untouched", "d", "d/data", "d/meta", "d/moved", "d/sub", "d/sub/deep", "d/link"}
	ino := map[string]uint64{}
	dev := harness.Lstat(t, m.Dir).Dev
	for _, p := range paths {
		ino[p] = harness.Lstat(t, m.Path(p)).Ino
	}
	r, err := os.Open(m.Path("d/data"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	harness.WriteFile(t, m.Path("d/data"), "changed")                     // data copy-up
	mustf(t, unix.Chmod(m.Path("d/meta"), 0o600), "chmod d/meta")         // metadata copy-up
	mustf(t, unix.Lchown(m.Path("d/link"), 12, 34), "lchown d/link")      // symlink copy-up
	harness.WriteFile(t, m.Path("d/sub/deep"), "x")                       // copies up d/sub too
	if err := os.Rename(m.Path("d/moved"), m.Path("moved")); err != nil { // a lower file
		t.Fatal(err)
	}
	ino["moved"] = ino["d/moved"]
	delete(ino, "d/moved")
	harness.WriteFile(t, m.Path("d/new"), "new")
	must(t, os.Mkdir(m.Path("newdir"), 0o755))
	ino["d/new"] = harness.Lstat(t, m.Path("d/new")).Ino
	ino["newdir"] = harness.Lstat(t, m.Path("newdir")).Ino

	check := func(t *testing.T, when string) {
		t.Helper()
		byIno := map[uint64]string{}
		for _, p := range sortedKeys(ino) {
			st := harness.Lstat(t, m.Path(p))
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
		if err := unix.Fstat(int(r.Fd()), &st); err != nil {
			t.Errorf("fstat of an fd opened before copy-up: %v", err)
		} else if st.Ino != ino["d/data"] || st.Dev != dev {
			t.Errorf("fstat of an fd opened before copy-up: ino %d dev %d, want %d %d", st.Ino, st.Dev, ino["d/data"], dev)
		}
	})
	r.Close()
	t.Run("after remount", func(t *testing.T) {
		m.Remount()
		dev = harness.Lstat(t, m.Dir).Dev
		check(t, "after remount")
		for _, dir := range []string{".", "d", "d/sub"} {
			for _, e := range readAllDirents(t, m.Path(dir)) {
				if e.name == ".." {
					continue
				}
				if st := harness.Lstat(t, m.Path(dir+"/"+e.name)); e.ino != st.Ino {
					t.Errorf("%s/%s after remount: d_ino %d, st_ino %d; want equal", dir, e.name, e.ino, st.Ino)
				}
			}
		}
	})
}

// Checklist 10: st_nlink of files and directories.
func TestLinkCounts(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("f", "f"),
		harness.LowerDir("dir/sub1"),
		harness.LowerDir("dir/sub2"),
		harness.LowerFile("dir/file", "x"),
		harness.LowerDir("empty"),
	))
	nlink := func(p string) uint64 { return harness.Lstat(t, m.Path(p)).Nlink }
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
	must(t, os.Mkdir(m.Path("dir/sub3"), 0o755))
	wantDir("dir", 3)
	mustf(t, unix.Rmdir(m.Path("dir/sub1")), "rmdir dir/sub1")
	mustf(t, unix.Rmdir(m.Path("dir/sub2")), "rmdir dir/sub2")
	wantDir("dir", 1)
	must(t, os.Mkdir(m.Path("new"), 0o755))
	must(t, os.Mkdir(m.Path("new/a"), 0o755))
	wantDir("new", 1)
	if err := unix.Link(m.Path("f"), m.Path("dir/f2")); err != nil {
		t.Fatal(err)
	}
	if a, b := nlink("f"), nlink("dir/f2"); a != 2 || b != 2 {
		t.Errorf("after link: st_nlink %d and %d, want 2 and 2", a, b)
	}
	must(t, os.Remove(m.Path("f")))
	if n := nlink("dir/f2"); n != 1 {
		t.Errorf("after unlinking one of two names: st_nlink %d, want 1", n)
	}
}

// Checklist 11: link() works; a lower file with several names stays
// consistently linked, or each name behaves as its own file.
func TestHardLinks(t *testing.T) {
	m := harness.NewMount(t, harness.WithStore(filepath.Join(t.TempDir(), "store")), harness.WithLower(
		harness.LowerFile("h1", "lower"),
		harness.LowerHardlink("h2", "h1"),
		harness.LowerFile("plain", "plain"),
		harness.LowerDir("dir"),
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
			if err := unix.Link(m.Path(c.from), m.Path(c.to)); harness.ErrnoOf(err) != c.want {
				t.Errorf("link %s %s = %s, want %s", c.from, c.to, harness.ErrName(err), unix.ErrnoName(c.want))
			}
		}
	})
	t.Run("link a lower file", func(t *testing.T) {
		if err := unix.Link(m.Path("plain"), m.Path("dir/plain2")); err != nil {
			t.Fatalf("link: %v", err)
		}
		a, b := harness.Lstat(t, m.Path("plain")), harness.Lstat(t, m.Path("dir/plain2"))
		if a.Ino != b.Ino || a.Nlink != 2 || b.Nlink != 2 {
			t.Errorf("plain and dir/plain2: ino %d/%d nlink %d/%d, want one inode with nlink 2", a.Ino, b.Ino, a.Nlink, b.Nlink)
		}
		harness.WriteFile(t, m.Path("dir/plain2"), "through the link")
		if got := harness.ReadFile(t, m.Path("plain")); got != "through the link" {
			t.Errorf("plain = %q after writing dir/plain2, want %q", got, "through the link")
		}
	})
	t.Run("lower hard links", func(t *testing.T) {
		a, b := harness.Lstat(t, m.Path("h1")), harness.Lstat(t, m.Path("h2"))
		if a.Ino != b.Ino || a.Nlink != 2 {
			t.Errorf("lower links h1, h2: ino %d/%d nlink %d, want one inode with nlink 2", a.Ino, b.Ino, a.Nlink)
		}
		if err := unix.Link(m.Path("h1"), m.Path("h3")); err != nil {
			t.Fatalf("link h1 h3: %v", err)
		}
		harness.WriteFile(t, m.Path("h1"), "written through h1")
		checkLinkConsistency(t, m, "h1", "h2", "h3")
	})
	t.Run("after remount", func(t *testing.T) {
		m.Remount()
		a, b := harness.Lstat(t, m.Path("plain")), harness.Lstat(t, m.Path("dir/plain2"))
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
func checkLinkConsistency(t *testing.T, m *harness.Mount, names ...string) {
	t.Helper()
	groups := map[uint64][]string{}
	for _, n := range names {
		groups[harness.Lstat(t, m.Path(n)).Ino] = append(groups[harness.Lstat(t, m.Path(n)).Ino], n)
	}
	for ino, g := range groups {
		st := harness.Lstat(t, m.Path(g[0]))
		content := harness.ReadFile(t, m.Path(g[0]))
		if st.Nlink != uint64(len(g)) {
			t.Errorf("%v: st_ino %d, st_nlink %d, want %d (the names with this inode)", g, ino, st.Nlink, len(g))
		}
		for _, n := range g[1:] {
			if s := harness.Lstat(t, m.Path(n)); s.Nlink != st.Nlink {
				t.Errorf("%s and %s share st_ino %d but st_nlink is %d and %d", g[0], n, ino, st.Nlink, s.Nlink)
			}
			if c := harness.ReadFile(t, m.Path(n)); c != content {
				t.Errorf("%s and %s share st_ino %d but read %q and %q", g[0], n, ino, content, c)
			}
		}
	}
	if len(groups) > 1 {
		t.Logf("hard links were broken into %d files: %v", len(groups), groups)
	}
}
