package integration

// Checklist items 12 and 13 (DESIGN.md): renames.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Checklist 12 (★): renaming a lower or a merged directory works (the
// kernel's overlayfs returns EXDEV without redirect_dir) and everything
// below follows, with its inode numbers, also after a remount.
func TestRenameDirectories(t *testing.T) {
	m := newMount(t, withStore(filepath.Join(t.TempDir(), "store")), withLower(
		lowerFile("ld/x", "x"),
		lowerFile("ld/sub/y", "y"),
		lowerFile("ld/sub/deeper/z", "z"),
		lowerSymlink("ld/sub/link", "y"),
		lowerFile("md/l", "l"),
		lowerFile("md/gone", "gone"),
		lowerFile("md/sub/q", "q"),
		lowerDir("other"),
		lowerFile("a/in-a", "a"),
		lowerFile("b/in-b", "b"),
	))
	// Make md merged: an upper file, a copied-up file, a whiteout.
	writeFile(t, m.path("md/u"), "u")
	writeFile(t, m.path("md/l"), "l changed")
	os.Remove(m.path("md/gone"))

	ld := snapshotTree(m.path("ld"))
	md := snapshotTree(m.path("md"))
	t.Run("lower dir", func(t *testing.T) {
		if err := os.Rename(m.path("ld"), m.path("ld2")); err != nil {
			t.Fatalf("rename ld ld2: %v (overlayfs says EXDEV; agentfs must not)", err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(m.path("ld"), &st); err != unix.ENOENT {
			t.Errorf("lstat ld after rename = %s, want ENOENT", errName(err))
		}
		for _, d := range diffTreesIgnoringCtime(ld, snapshotTree(m.path("ld2"))) {
			t.Errorf("after rename ld ld2: %s", d)
		}
	})
	t.Run("merged dir into another dir", func(t *testing.T) {
		if err := os.Rename(m.path("md"), m.path("other/md2")); err != nil {
			t.Fatalf("rename md other/md2: %v (overlayfs says EXDEV; agentfs must not)", err)
		}
		for _, d := range diffTreesIgnoringCtime(md, snapshotTree(m.path("other/md2"))) {
			t.Errorf("after rename md other/md2: %s", d)
		}
		if got, want := listDir(t, m.path("other/md2")), []string{"l", "sub", "u"}; !equalStrings(got, want) {
			t.Errorf("other/md2 lists %v, want %v", got, want)
		}
	})
	t.Run("the old name is a new, empty directory", func(t *testing.T) {
		if err := os.Mkdir(m.path("ld"), 0o755); err != nil {
			t.Fatal(err)
		}
		if got := listDir(t, m.path("ld")); len(got) != 0 {
			t.Errorf("ld made after renaming the lower ld away lists %v, want nothing", got)
		}
		writeFile(t, m.path("ld/x"), "new x")
		if got := readFile(t, m.path("ld2/x")); got != "x" {
			t.Errorf("ld2/x = %q after creating ld/x, want %q", got, "x")
		}
		if err := os.Mkdir(m.path("md"), 0o755); err != nil {
			t.Fatal(err)
		}
		if got := listDir(t, m.path("md")); len(got) != 0 {
			t.Errorf("md made after renaming the merged md away lists %v, want nothing", got)
		}
	})
	t.Run("subdir out and back", func(t *testing.T) {
		if err := os.Rename(m.path("ld2/sub"), m.path("ld/sub")); err != nil {
			t.Fatalf("rename ld2/sub ld/sub: %v", err)
		}
		if got := readFile(t, m.path("ld/sub/deeper/z")); got != "z" {
			t.Errorf("ld/sub/deeper/z = %q, want %q", got, "z")
		}
		if err := os.Rename(m.path("ld/sub"), m.path("ld2/sub")); err != nil {
			t.Fatalf("rename ld/sub ld2/sub: %v", err)
		}
		if got := readFile(t, m.path("ld2/sub/y")); got != "y" {
			t.Errorf("ld2/sub/y = %q, want %q", got, "y")
		}
	})
	t.Run("exchange two lower dirs", func(t *testing.T) {
		if err := unix.Renameat2(unix.AT_FDCWD, m.path("a"), unix.AT_FDCWD, m.path("b"), unix.RENAME_EXCHANGE); err != nil {
			t.Fatalf("RENAME_EXCHANGE a b: %v", err)
		}
		if got, want := strings.Join(listDir(t, m.path("a")), ",")+"/"+strings.Join(listDir(t, m.path("b")), ","), "in-b/in-a"; got != want {
			t.Errorf("after exchange: a/b list %s, want %s", got, want)
		}
	})
	state := snapshotTree(m.dir)
	t.Run("after remount", func(t *testing.T) {
		m.remount()
		for _, d := range diffMountTrees(state, snapshotTree(m.dir)) {
			t.Errorf("after remount: %s", d)
		}
	})
}

// diffTreesIgnoringCtime compares two recordings of one directory
// before and after a rename (which may change the ctime of the moved
// directory itself).
func diffTreesIgnoringCtime(before, after tree) []string {
	for _, tr := range []tree{before, after} {
		for p, n := range tr.nodes {
			n.ctime = unix.Timespec{}
			tr.nodes[p] = n
		}
	}
	after.root = before.root
	return diffMountTrees(before, after)
}

// Checklist 13: renaming a lower file leaves the source gone; the
// source directory lists without it, also after remount.
func TestRenameLowerFile(t *testing.T) {
	m := newMount(t, withStore(filepath.Join(t.TempDir(), "store")), withLower(
		lowerFile("d/f", "f"),
		lowerFile("d/g", "g"),
		lowerDir("e"),
	))
	ino := lstat(t, m.path("d/f")).Ino
	if err := os.Rename(m.path("d/f"), m.path("e/f")); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T) {
		var st unix.Stat_t
		if err := unix.Lstat(m.path("d/f"), &st); err != unix.ENOENT {
			t.Errorf("lstat d/f = %s, want ENOENT", errName(err))
		}
		if got, want := listDir(t, m.path("d")), []string{"g"}; !equalStrings(got, want) {
			t.Errorf("d lists %v, want %v", got, want)
		}
		if got := readFile(t, m.path("e/f")); got != "f" {
			t.Errorf("e/f = %q, want %q", got, "f")
		}
		if st := lstat(t, m.path("e/f")); st.Ino != ino {
			t.Errorf("e/f: st_ino %d, want %d (rename keeps the inode)", st.Ino, ino)
		}
	}
	check(t)
	m.remount()
	check(t)
}

// Checklist 13: rename errnos, RENAME_NOREPLACE and RENAME_EXCHANGE
// give what the kernel's overlayfs gives. Directories that are renamed
// are made through the mount, so that overlayfs' EXDEV for lower
// directories (checklist 12) does not get in the way.
func TestRenameLikeOverlayfs(t *testing.T) {
	entries := []lowerEntry{
		lowerFile("f", "f"),
		lowerFile("g", "g"),
		lowerFile("h1", "h"),
		lowerHardlink("h2", "h1"),
		lowerDir("ld/sub"),
		lowerFile("ld/x", "x"),
		lowerDir("empty"),
		lowerFile("full/z", "z"),
		lowerFile("exf", "exf"),
	}
	compareWithOverlayfs(t, entries, func(t *testing.T, root string) string {
		var log []string
		p := func(rel string) string { return root + "/" + rel }
		step := func(what string, err error) { log = append(log, what+"="+errName(err)) }
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
			out = append(out, n+":"+errName(err))
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			out = append(out, n+":dir"+joinNames(listDir(t, p)))
		default:
			out = append(out, n+":"+readFile(t, p))
		}
	}
	return strings.Join(out, " ")
}
