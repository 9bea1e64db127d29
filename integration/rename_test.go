package integration

// Checklist items 12 and 13 (docs/semantics.md): renames.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// Checklist 12 (★): renaming a lower or a merged directory works (the
// kernel's overlayfs returns EXDEV without redirect_dir) and everything
// below follows, with its inode numbers, also after a remount.
func TestRenameDirectories(t *testing.T) {
	m := harness.NewMount(t, harness.WithStore(filepath.Join(t.TempDir(), "store")), harness.WithLower(
		harness.LowerFile("ld/x", "x"),
		harness.LowerFile("ld/sub/y", "y"),
		harness.LowerFile("ld/sub/deeper/z", "z"),
		harness.LowerSymlink("ld/sub/link", "y"),
		harness.LowerFile("md/l", "l"),
		harness.LowerFile("md/gone", "gone"),
		harness.LowerFile("md/sub/q", "q"),
		harness.LowerDir("other"),
		harness.LowerFile("a/in-a", "a"),
		harness.LowerFile("b/in-b", "b"),
	))
	// Make md merged: an upper file, a copied-up file, a whiteout.
	harness.WriteFile(t, m.Path("md/u"), "u")
	harness.WriteFile(t, m.Path("md/l"), "l changed")
	must(t, os.Remove(m.Path("md/gone")))

	ld := harness.SnapshotTree(m.Path("ld"))
	md := harness.SnapshotTree(m.Path("md"))
	t.Run("lower dir", func(t *testing.T) {
		if err := os.Rename(m.Path("ld"), m.Path("ld2")); err != nil {
			t.Fatalf("rename ld ld2: %v (overlayfs says EXDEV; agentfs must not)", err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(m.Path("ld"), &st); err != unix.ENOENT {
			t.Errorf("lstat ld after rename = %s, want ENOENT", harness.ErrName(err))
		}
		for _, d := range diffTreesIgnoringCtime(ld, harness.SnapshotTree(m.Path("ld2"))) {
			t.Errorf("after rename ld ld2: %s", d)
		}
	})
	t.Run("merged dir into another dir", func(t *testing.T) {
		if err := os.Rename(m.Path("md"), m.Path("other/md2")); err != nil {
			t.Fatalf("rename md other/md2: %v (overlayfs says EXDEV; agentfs must not)", err)
		}
		for _, d := range diffTreesIgnoringCtime(md, harness.SnapshotTree(m.Path("other/md2"))) {
			t.Errorf("after rename md other/md2: %s", d)
		}
		if got, want := harness.ListDir(t, m.Path("other/md2")), []string{"l", "sub", "u"}; !equalStrings(got, want) {
			t.Errorf("other/md2 lists %v, want %v", got, want)
		}
	})
	t.Run("the old name is a new, empty directory", func(t *testing.T) {
		if err := os.Mkdir(m.Path("ld"), 0o755); err != nil {
			t.Fatal(err)
		}
		if got := harness.ListDir(t, m.Path("ld")); len(got) != 0 {
			t.Errorf("ld made after renaming the lower ld away lists %v, want nothing", got)
		}
		harness.WriteFile(t, m.Path("ld/x"), "new x")
		if got := harness.ReadFile(t, m.Path("ld2/x")); got != "x" {
			t.Errorf("ld2/x = %q after creating ld/x, want %q", got, "x")
		}
		if err := os.Mkdir(m.Path("md"), 0o755); err != nil {
			t.Fatal(err)
		}
		if got := harness.ListDir(t, m.Path("md")); len(got) != 0 {
			t.Errorf("md made after renaming the merged md away lists %v, want nothing", got)
		}
	})
	t.Run("subdir out and back", func(t *testing.T) {
		if err := os.Rename(m.Path("ld2/sub"), m.Path("ld/sub")); err != nil {
			t.Fatalf("rename ld2/sub ld/sub: %v", err)
		}
		if got := harness.ReadFile(t, m.Path("ld/sub/deeper/z")); got != "z" {
			t.Errorf("ld/sub/deeper/z = %q, want %q", got, "z")
		}
		if err := os.Rename(m.Path("ld/sub"), m.Path("ld2/sub")); err != nil {
			t.Fatalf("rename ld/sub ld2/sub: %v", err)
		}
		if got := harness.ReadFile(t, m.Path("ld2/sub/y")); got != "y" {
			t.Errorf("ld2/sub/y = %q, want %q", got, "y")
		}
	})
	t.Run("exchange two lower dirs", func(t *testing.T) {
		if err := unix.Renameat2(unix.AT_FDCWD, m.Path("a"), unix.AT_FDCWD, m.Path("b"), unix.RENAME_EXCHANGE); err != nil {
			t.Fatalf("RENAME_EXCHANGE a b: %v", err)
		}
		if got, want := strings.Join(harness.ListDir(t, m.Path("a")), ",")+"/"+strings.Join(harness.ListDir(t, m.Path("b")), ","), "in-b/in-a"; got != want {
			t.Errorf("after exchange: a/b list %s, want %s", got, want)
		}
	})
	state := harness.SnapshotTree(m.Dir)
	t.Run("after remount", func(t *testing.T) {
		m.Remount()
		for _, d := range harness.DiffMountTrees(state, harness.SnapshotTree(m.Dir)) {
			t.Errorf("after remount: %s", d)
		}
	})
}

// diffTreesIgnoringCtime compares two recordings of one directory
// before and after a rename (which may change the ctime of the moved
// directory itself).
func diffTreesIgnoringCtime(before, after harness.Tree) []string {
	for _, tr := range []harness.Tree{before, after} {
		for p, n := range tr.Nodes {
			n.Ctime = unix.Timespec{}
			tr.Nodes[p] = n
		}
	}
	after.Root = before.Root
	return harness.DiffMountTrees(before, after)
}

// Checklist 13: renaming a lower file leaves the source gone; the
// source directory lists without it, also after remount.
func TestRenameLowerFile(t *testing.T) {
	m := harness.NewMount(t, harness.WithStore(filepath.Join(t.TempDir(), "store")), harness.WithLower(
		harness.LowerFile("d/f", "f"),
		harness.LowerFile("d/g", "g"),
		harness.LowerDir("e"),
	))
	ino := harness.Lstat(t, m.Path("d/f")).Ino
	if err := os.Rename(m.Path("d/f"), m.Path("e/f")); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T) {
		var st unix.Stat_t
		if err := unix.Lstat(m.Path("d/f"), &st); err != unix.ENOENT {
			t.Errorf("lstat d/f = %s, want ENOENT", harness.ErrName(err))
		}
		if got, want := harness.ListDir(t, m.Path("d")), []string{"g"}; !equalStrings(got, want) {
			t.Errorf("d lists %v, want %v", got, want)
		}
		if got := harness.ReadFile(t, m.Path("e/f")); got != "f" {
			t.Errorf("e/f = %q, want %q", got, "f")
		}
		if st := harness.Lstat(t, m.Path("e/f")); st.Ino != ino {
			t.Errorf("e/f: st_ino %d, want %d (rename keeps the inode)", st.Ino, ino)
		}
	}
	check(t)
	m.Remount()
	check(t)
}

// Checklist 13: rename errnos, RENAME_NOREPLACE and RENAME_EXCHANGE
// give what the kernel's overlayfs gives. Directories that are renamed
// are made through the mount, so that overlayfs' EXDEV for lower
// directories (checklist 12) does not get in the way.
func TestRenameLikeOverlayfs(t *testing.T) {
	entries := []harness.Entry{
		harness.LowerFile("f", "f"),
		harness.LowerFile("g", "g"),
		harness.LowerFile("h1", "h"),
		harness.LowerHardlink("h2", "h1"),
		harness.LowerDir("ld/sub"),
		harness.LowerFile("ld/x", "x"),
		harness.LowerDir("empty"),
		harness.LowerFile("full/z", "z"),
		harness.LowerFile("exf", "exf"),
	}
	compareWithOverlayfs(t, entries, func(t *testing.T, root string) string {
		var log []string
		p := func(rel string) string { return root + "/" + rel }
		step := func(what string, err error) { log = append(log, what+"="+harness.ErrName(err)) }
		rename := func(from, to string) { step("rename "+from+" "+to, unix.Rename(p(from), p(to))) }
		rename2 := func(from, to string, flags uint, name string) {
			step(name+" "+from+" "+to, unix.Renameat2(unix.AT_FDCWD, p(from), unix.AT_FDCWD, p(to), flags))
		}
		for _, d := range []string{"up", "up/sub", "up2", "up3"} {
			step("mkdir "+d, unix.Mkdir(p(d), 0o755))
		}
		rename("up", "g")             // ENOTDIR
		rename("g", "up")             // EISDIR
		rename("g", "ld")             // EISDIR (a lower dir)
		rename("up2", "full")         // ENOTEMPTY (lower content)
		rename("up2", "ld")           // ENOTEMPTY (merged)
		rename("up", "up/sub/inside") // EINVAL
		rename("up", "up/sub")        // EINVAL
		rename("missing", "x")        // ENOENT
		rename("f", "nodir/x")        // ENOENT
		rename("f", "g/x")            // ENOTDIR
		rename("f/x", "y")            // ENOTDIR
		rename("f", "f")              // same name: nothing happens
		rename("h1", "h2")            // same inode: nothing happens
		rename("up2", "empty")        // onto an empty lower dir
		rename("up3", "ld/sub")       // onto an empty lower subdir
		step("unlink full/z", unix.Unlink(p("full/z")))
		rename("empty", "full") // onto a dir emptied by a whiteout
		rename2("g", "f", unix.RENAME_NOREPLACE, "noreplace")
		rename2("g", "new", unix.RENAME_NOREPLACE, "noreplace")
		rename2("f", "new", unix.RENAME_EXCHANGE, "exchange")
		rename2("f", "absent", unix.RENAME_EXCHANGE, "exchange")
		rename2("f", "new", unix.RENAME_EXCHANGE|unix.RENAME_NOREPLACE, "exchange|noreplace")
		rename2("exf", "up", unix.RENAME_EXCHANGE, "exchange") // a file and a directory
		step("unlink f", unix.Unlink(p("f")))
		rename2("h2", "f", unix.RENAME_NOREPLACE, "noreplace") // onto a whiteout
		rename("new", "h1")                                    // replaces a lower file
		log = append(log, describeNames(t, root, "f", "g", "new", "h1", "h2", "exf", "up", "full", "ld", "empty"))
		return strings.Join(log, "\n")
	})
}

// describeNames says what each name is: missing, a directory with its
// listing, or a file with its content.
func describeNames(t *testing.T, root string, names ...string) string {
	var out []string
	for _, n := range names {
		p := root + "/" + n
		var st unix.Stat_t
		switch err := unix.Lstat(p, &st); {
		case err != nil:
			out = append(out, n+":"+harness.ErrName(err))
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			out = append(out, n+":dir"+harness.JoinNames(harness.ListDir(t, p)))
		default:
			out = append(out, n+":"+harness.ReadFile(t, p))
		}
	}
	return strings.Join(out, " ")
}
