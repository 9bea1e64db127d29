package integration

// Checklist items 1–4 (docs/semantics.md): what the merged view shows —
// upper beats lower, whiteouts, opaque directories, rmdir, readdir.

import (
	"encoding/binary"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// Checklist 1: upper beats lower; a non-directory hides everything below
// it; directories merge.
func TestUpperBeatsLower(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("d/a", "lower a"),
		harness.LowerFile("d/b", "lower b"),
		harness.LowerFile("d/deep/x", "lower x"),
		harness.LowerFile("x/child", "c"),
		harness.LowerDir("x/sub"),
		harness.LowerFile("f", "lower f"),
	))
	t.Run("upper content wins", func(t *testing.T) {
		harness.WriteFile(t, m.Path("d/a"), "upper")
		if got := harness.ReadFile(t, m.Path("d/a")); got != "upper" {
			t.Errorf("d/a = %q, want %q", got, "upper")
		}
		if st := harness.Lstat(t, m.Path("d/a")); st.Size != 5 {
			t.Errorf("d/a size = %d, want 5", st.Size)
		}
		if got := harness.ReadFile(t, m.Path("d/b")); got != "lower b" {
			t.Errorf("d/b = %q, want %q", got, "lower b")
		}
	})
	t.Run("directories merge", func(t *testing.T) {
		harness.WriteFile(t, m.Path("d/c"), "upper c")
		if err := os.Mkdir(m.Path("d/deep/new"), 0o755); err != nil {
			t.Fatal(err)
		}
		if got, want := harness.ListDir(t, m.Path("d")), []string{"a", "b", "c", "deep"}; !equalStrings(got, want) {
			t.Errorf("d lists %v, want %v", got, want)
		}
		if got, want := harness.ListDir(t, m.Path("d/deep")), []string{"new", "x"}; !equalStrings(got, want) {
			t.Errorf("d/deep lists %v, want %v", got, want)
		}
		if got := harness.ReadFile(t, m.Path("d/deep/x")); got != "lower x" {
			t.Errorf("d/deep/x = %q, want %q", got, "lower x")
		}
	})
	t.Run("a file hides a directory", func(t *testing.T) {
		if err := os.RemoveAll(m.Path("x")); err != nil {
			t.Fatal(err)
		}
		harness.WriteFile(t, m.Path("x"), "now a file")
		if st := harness.Lstat(t, m.Path("x")); st.Mode&unix.S_IFMT != unix.S_IFREG {
			t.Errorf("x: mode %o, want a regular file", st.Mode)
		}
		var st unix.Stat_t
		if err := unix.Lstat(m.Path("x/child"), &st); err != unix.ENOTDIR {
			t.Errorf("lstat x/child = %s, want ENOTDIR (nothing below a file)", harness.ErrName(err))
		}
		if got := countName(harness.ListDir(t, m.Dir), "x"); got != 1 {
			t.Errorf("x listed %d times in the root, want once", got)
		}
	})
	t.Run("a directory hides a file", func(t *testing.T) {
		if err := os.Remove(m.Path("f")); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(m.Path("f"), 0o755); err != nil {
			t.Fatal(err)
		}
		if st := harness.Lstat(t, m.Path("f")); st.Mode&unix.S_IFMT != unix.S_IFDIR {
			t.Errorf("f: mode %o, want a directory", st.Mode)
		}
		if got := harness.ListDir(t, m.Path("f")); len(got) != 0 {
			t.Errorf("f lists %v, want nothing", got)
		}
	})
}

// Checklist 2: whiteouts are invisible, hide the lower name, and are
// replaced atomically by a create.
func TestWhiteouts(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("f", "lower content", harness.WithMode(0o600), harness.WithXattr("user.lower", "1")),
		harness.LowerFile("d/g", "g"),
		harness.LowerFile("d/keep", "k"),
		harness.LowerSymlink("s", "f"),
		harness.LowerFile("race", "r"),
		harness.LowerFile("r/e/n", "old"),
	))
	for _, p := range []string{"f", "d/g", "s", "race", "r/e/n"} {
		if err := os.Remove(m.Path(p)); err != nil {
			t.Fatalf("remove %s: %v", p, err)
		}
	}
	t.Run("invisible", func(t *testing.T) {
		for _, p := range []string{"f", "d/g", "s"} {
			var st unix.Stat_t
			if err := unix.Lstat(m.Path(p), &st); err != unix.ENOENT {
				t.Errorf("lstat %s = %s, want ENOENT", p, harness.ErrName(err))
			}
			if _, err := os.Open(m.Path(p)); harness.ErrnoOf(err) != unix.ENOENT {
				t.Errorf("open %s = %s, want ENOENT", p, harness.ErrName(err))
			}
			if err := unix.Unlink(m.Path(p)); err != unix.ENOENT {
				t.Errorf("unlink %s again = %s, want ENOENT", p, harness.ErrName(err))
			}
		}
		if got, want := harness.ListDir(t, m.Dir), []string{"d", "r"}; !equalStrings(got, want) {
			t.Errorf("root lists %v, want %v", got, want)
		}
		for _, e := range readAllDirents(t, m.Path("d")) {
			if e.name != "." && e.name != ".." && e.name != "keep" {
				t.Errorf("getdents of d returns %q (type %d), want only keep", e.name, e.typ)
			}
		}
	})
	t.Run("replaced by create", func(t *testing.T) {
		fd, err := unix.Open(m.Path("f"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o640)
		if err != nil {
			t.Fatalf("O_CREAT|O_EXCL over a whiteout: %s, want success", harness.ErrName(err))
		}
		unix.Close(fd)
		st := harness.Lstat(t, m.Path("f"))
		if st.Size != 0 || st.Mode&0o7777 != 0o640&^currentUmask() {
			t.Errorf("new f: size %d mode %o, want 0 and %o (nothing of the lower file)", st.Size, st.Mode&0o7777, 0o640&^currentUmask())
		}
		if v, err := harness.GetXattr(m.Path("f"), "user.lower"); err != unix.ENODATA {
			t.Errorf("new f has the lower file's xattr user.lower = %q (%s), want ENODATA", v, harness.ErrName(err))
		}
		harness.WriteFile(t, m.Path("f"), "new")
		if got := harness.ReadFile(t, m.Path("f")); got != "new" {
			t.Errorf("f = %q, want %q", got, "new")
		}
	})
	t.Run("replaced by rename, symlink, mkdir, mkfifo", func(t *testing.T) {
		harness.WriteFile(t, m.Path("tmp"), "renamed")
		if err := os.Rename(m.Path("tmp"), m.Path("d/g")); err != nil {
			t.Fatalf("rename onto a whiteout: %v", err)
		}
		if got := harness.ReadFile(t, m.Path("d/g")); got != "renamed" {
			t.Errorf("d/g = %q, want %q", got, "renamed")
		}
		if err := os.Symlink("elsewhere", m.Path("s")); err != nil {
			t.Fatalf("symlink over a whiteout: %v", err)
		}
		if got, _ := os.Readlink(m.Path("s")); got != "elsewhere" {
			t.Errorf("readlink s = %q, want %q", got, "elsewhere")
		}
		if err := unix.Mkfifo(m.Path("r/e/n"), 0o644); err != nil {
			t.Fatalf("mkfifo over a whiteout: %v", err)
		}
		if st := harness.Lstat(t, m.Path("r/e/n")); st.Mode&unix.S_IFMT != unix.S_IFIFO {
			t.Errorf("r/e/n: mode %o, want a fifo", st.Mode)
		}
	})
	t.Run("exactly one exclusive create wins", func(t *testing.T) {
		const n = 16
		var wg sync.WaitGroup
		errs, writeErrs := make([]error, n), make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fd, err := unix.Open(m.Path("race"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
				if err == nil {
					_, writeErrs[i] = unix.Write(fd, []byte(fmt.Sprint(i)))
					unix.Close(fd)
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			if writeErrs[i] != nil {
				t.Errorf("create %d won, then its write: %v", i, writeErrs[i])
			}
			switch err {
			case nil:
				won++
			case unix.EEXIST:
			default:
				t.Errorf("create %d: %s, want success or EEXIST", i, harness.ErrName(err))
			}
		}
		if won != 1 {
			t.Errorf("%d of %d O_EXCL creates over one whiteout succeeded, want exactly 1", won, n)
		}
	})
}

// Checklist 3: mkdir over a whiteout makes an opaque directory; rmdir's
// ENOTEMPTY is judged on the merged view.
func TestOpaqueDirsAndRmdir(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("d/a", "a"),
		harness.LowerFile("d/sub/b", "b"),
		harness.LowerDir("e/only"),
		harness.LowerFile("g/x", "x"),
		harness.LowerFile("g/y", "y"),
		harness.LowerDir("h"),
	))
	t.Run("mkdir over a whiteout is opaque", func(t *testing.T) {
		if err := os.RemoveAll(m.Path("d")); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
			t.Fatalf("mkdir over a whiteout: %v", err)
		}
		if got := harness.ListDir(t, m.Path("d")); len(got) != 0 {
			t.Errorf("d lists %v, want nothing (opaque)", got)
		}
		for _, p := range []string{"d/a", "d/sub", "d/sub/b"} {
			var st unix.Stat_t
			if err := unix.Lstat(m.Path(p), &st); err == nil || (err != unix.ENOENT && err != unix.ENOTDIR) {
				t.Errorf("lstat %s = %s, want ENOENT (hidden by the opaque dir)", p, harness.ErrName(err))
			}
		}
		harness.WriteFile(t, m.Path("d/new"), "n")
		if got, want := harness.ListDir(t, m.Path("d")), []string{"new"}; !equalStrings(got, want) {
			t.Errorf("d lists %v, want %v", got, want)
		}
		if st := harness.Lstat(t, m.Path("d")); st.Nlink != 2 && st.Nlink != 1 {
			t.Errorf("opaque d: nlink %d, want 2 (no subdirectories) or 1", st.Nlink)
		}
	})
	t.Run("rmdir judges the merged view", func(t *testing.T) {
		if err := unix.Rmdir(m.Path("e")); err != unix.ENOTEMPTY {
			t.Errorf("rmdir e (a lower subdirectory left) = %s, want ENOTEMPTY", harness.ErrName(err))
		}
		if err := unix.Rmdir(m.Path("g")); err != unix.ENOTEMPTY {
			t.Errorf("rmdir g (lower files) = %s, want ENOTEMPTY", harness.ErrName(err))
		}
		must(t, os.Remove(m.Path("g/x")))
		if err := unix.Rmdir(m.Path("g")); err != unix.ENOTEMPTY {
			t.Errorf("rmdir g (one lower file left) = %s, want ENOTEMPTY", harness.ErrName(err))
		}
		must(t, os.Remove(m.Path("g/y")))
		if err := unix.Rmdir(m.Path("g")); err != nil {
			t.Errorf("rmdir g (every lower file removed) = %s, want success", harness.ErrName(err))
		}
		if err := unix.Rmdir(m.Path("e/only")); err != nil {
			t.Errorf("rmdir e/only = %s", harness.ErrName(err))
		}
		if err := unix.Rmdir(m.Path("e")); err != nil {
			t.Errorf("rmdir e once empty = %s, want success", harness.ErrName(err))
		}
		if err := unix.Rmdir(m.Path("h")); err != nil {
			t.Errorf("rmdir h (an empty lower dir) = %s, want success", harness.ErrName(err))
		}
		must(t, os.Mkdir(m.Path("u"), 0o755))
		harness.WriteFile(t, m.Path("u/f"), "f")
		if err := unix.Rmdir(m.Path("u")); err != unix.ENOTEMPTY {
			t.Errorf("rmdir u (an upper file) = %s, want ENOTEMPTY", harness.ErrName(err))
		}
		if got, want := harness.ListDir(t, m.Dir), []string{"d", "u"}; !equalStrings(got, want) {
			t.Errorf("root lists %v, want %v", got, want)
		}
		if err := os.Mkdir(m.Path("g"), 0o755); err != nil {
			t.Fatal(err)
		}
		if got := harness.ListDir(t, m.Path("g")); len(got) != 0 {
			t.Errorf("g made again lists %v, want nothing", got)
		}
	})
}

// Checklist 3, against the kernel: the same rmdir/mkdir sequence gives
// the same errnos and listings on overlayfs and agentfs.
func TestOpaqueDirsLikeOverlayfs(t *testing.T) {
	entries := []harness.Entry{harness.LowerFile("d/a", "a"), harness.LowerFile("d/sub/b", "b"), harness.LowerDir("e/only"), harness.LowerFile("g/x", "x")}
	compareWithOverlayfs(t, entries, func(t *testing.T, root string) string {
		var log []string
		step := func(what string, err error) { log = append(log, what+"="+harness.ErrName(err)) }
		p := func(rel string) string { return root + "/" + rel }
		step("rmdir d", unix.Rmdir(p("d")))
		step("unlink d/a", unix.Unlink(p("d/a")))
		step("rmdir d", unix.Rmdir(p("d")))
		step("unlink d/sub/b", unix.Unlink(p("d/sub/b")))
		step("rmdir d/sub", unix.Rmdir(p("d/sub")))
		step("rmdir d", unix.Rmdir(p("d")))
		step("mkdir d", unix.Mkdir(p("d"), 0o755))
		log = append(log, "d:"+harness.JoinNames(harness.ListDir(t, p("d"))))
		step("rmdir e", unix.Rmdir(p("e")))
		step("unlink g", unix.Unlink(p("g")))
		step("rmdir g/x", unix.Rmdir(p("g/x")))
		step("unlink g/x", unix.Unlink(p("g/x")))
		step("rmdir g", unix.Rmdir(p("g")))
		step("mkdir g", unix.Mkdir(p("g"), 0o700))
		step("rmdir g", unix.Rmdir(p("g")))
		log = append(log, "root:"+harness.JoinNames(harness.ListDir(t, root)))
		return strings.Join(log, " ")
	})
}

// Checklist 4: readdir is de-duplicated, hides internal names, gives the
// right d_type and d_ino, and its offsets are stable per handle.
func TestReaddir(t *testing.T) {
	entries := []harness.Entry{
		harness.LowerDir("d/subdir"),
		harness.LowerSymlink("d/link", "nowhere"),
		harness.LowerFifo("d/fifo"),
		harness.LowerCharDevice("d/null", 1, 3),
		harness.LowerFile("d/hard", "h"),
		harness.LowerHardlink("d/hard2", "d/hard"),
	}
	for i := range 300 {
		entries = append(entries, harness.LowerFile(fmt.Sprintf("d/file%03d", i), "x"))
	}
	m := harness.NewMount(t, harness.WithLower(entries...))
	for i := 0; i < 300; i += 7 {
		harness.WriteFile(t, m.Path(fmt.Sprintf("d/file%03d", i)), "changed") // in both layers now
	}
	must(t, os.Remove(m.Path("d/file001")))
	must(t, os.Remove(m.Path("d/file002")))
	harness.WriteFile(t, m.Path("d/file002"), "recreated over a whiteout")
	harness.WriteFile(t, m.Path("d/new"), "n")
	must(t, os.Mkdir(m.Path("d/newdir"), 0o755))
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	want := 300 - 1 + 6 + 3 // files, lower specials, new names
	if err := unix.Bind(sock, &unix.SockaddrUnix{Name: m.Path("d/sock")}); err != nil {
		t.Errorf("bind a unix socket in the mount: %v", err)
		want--
	}

	t.Run("de-duplicated, d_type and d_ino", func(t *testing.T) {
		all := readAllDirents(t, m.Path("d"))
		seen := map[string]int{}
		for _, e := range all {
			seen[e.name]++
			if seen[e.name] == 2 {
				t.Errorf("%q listed more than once", e.name)
			}
			if e.name == ".." {
				continue
			}
			st := harness.Lstat(t, m.Path("d/"+e.name))
			if e.ino != st.Ino {
				t.Errorf("%s: d_ino %d, st_ino %d: want equal", e.name, e.ino, st.Ino)
			}
			if want := uint8(st.Mode & unix.S_IFMT >> 12); e.typ != want {
				t.Errorf("%s: d_type %d, want %d (from st_mode %o)", e.name, e.typ, want, st.Mode)
			}
		}
		if seen["file001"] != 0 {
			t.Errorf("removed file001 listed")
		}
		if seen["."] != 1 || seen[".."] != 1 {
			t.Errorf(". listed %d times and .. %d times, want once each", seen["."], seen[".."])
		}
		if got := len(seen) - 2; got != want {
			t.Errorf("d lists %d distinct names besides . and .., want %d", got, want)
		}
	})
	t.Run("internal names hidden", func(t *testing.T) {
		for _, e := range readAllDirents(t, m.Dir) {
			if e.name != "." && e.name != ".." && e.name != "d" {
				t.Errorf("the root lists %q, want only d", e.name)
			}
		}
	})
	t.Run("seekdir and telldir", func(t *testing.T) {
		fd, err := unix.Open(m.Path("d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		all := readDirents(t, fd, 512)
		for _, k := range []int{0, 1, 57, 100, len(all) / 2, len(all) - 2, len(all) - 1} {
			if _, err := unix.Seek(fd, all[k].off, unix.SEEK_SET); err != nil {
				t.Fatalf("seekdir to the offset of entry %d (%d): %v", k, all[k].off, err)
			}
			rest := readDirents(t, fd, 512)
			if got, want := direntNames(rest), direntNames(all[k+1:]); !equalStrings(got, want) {
				t.Errorf("after seekdir to the offset of entry %d: %d names from %q, want %d from %q",
					k, len(got), firstOf(got), len(want), firstOf(want))
			}
		}
		if _, err := unix.Seek(fd, 0, unix.SEEK_SET); err != nil {
			t.Fatal(err)
		}
		if got := direntNames(readDirents(t, fd, 512)); !equalStrings(got, direntNames(all)) {
			t.Errorf("after rewinddir: %d names, want %d", len(got), len(all))
		}
	})
	t.Run("offsets survive changes during the listing", func(t *testing.T) {
		fd, err := unix.Open(m.Path("d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		first := readDirentsN(t, fd, 1024, 100)
		// Remove names already listed and add new ones: every name that
		// was there all along must still come exactly once (POSIX leaves
		// only the added and removed names unspecified).
		before := map[string]bool{}
		for _, n := range harness.ListDir(t, m.Path("d")) {
			before[n] = true
		}
		removed := map[string]bool{}
		for _, e := range first[2:40] {
			if err := os.Remove(m.Path("d/" + e.name)); err == nil {
				removed[e.name] = true
			}
		}
		for i := range 50 {
			harness.WriteFile(t, m.Path(fmt.Sprintf("d/added%02d", i)), "a")
		}
		rest := readDirents(t, fd, 1024)
		count := map[string]int{}
		for _, e := range append(first, rest...) {
			count[e.name]++
		}
		for n := range before {
			if !removed[n] && count[n] != 1 {
				t.Errorf("%q (there all along) listed %d times, want once", n, count[n])
			}
		}
	})
}

// dirent is one entry returned by getdents64.
type dirent struct {
	name string
	ino  uint64
	off  int64
	typ  uint8
}

// readAllDirents lists dir with getdents64, including . and ..
func readAllDirents(t testing.TB, dir string) []dirent {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer unix.Close(fd)
	return readDirents(t, fd, 4096)
}

// readDirents reads the rest of a directory with a buffer of bufSize.
func readDirents(t testing.TB, fd, bufSize int) []dirent {
	t.Helper()
	return readDirentsN(t, fd, bufSize, -1)
}

// readDirentsN reads at least max entries (all when max < 0), one
// getdents64 call at a time.
func readDirentsN(t testing.TB, fd, bufSize, max int) []dirent {
	t.Helper()
	var out []dirent
	buf := make([]byte, bufSize)
	for max < 0 || len(out) < max {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents64: %v", err)
		}
		if n == 0 {
			break
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			name := b[19:reclen]
			if i := strings.IndexByte(string(name), 0); i >= 0 {
				name = name[:i]
			}
			out = append(out, dirent{
				name: string(name),
				ino:  binary.NativeEndian.Uint64(b[0:8]),
				off:  int64(binary.NativeEndian.Uint64(b[8:16])),
				typ:  b[18],
			})
			b = b[reclen:]
		}
	}
	return out
}

func direntNames(es []dirent) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.name
	}
	return out
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func countName(names []string, name string) int {
	n := 0
	for _, x := range names {
		if x == name {
			n++
		}
	}
	return n
}

// currentUmask reads the process umask (without changing it for good).
func currentUmask() uint32 {
	old := unix.Umask(0)
	unix.Umask(old)
	return uint32(old)
}

// sortedKeys returns a map's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
