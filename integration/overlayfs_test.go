package integration

// Behaviours where the kernel's overlayfs is the reference: the same
// calls on overlayfs and on agentfs must give the same errnos and
// results. Long names and paths (issue 2) are checked here too.

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// TestErrnosLikeOverlayfs: errnos of calls on lower, upper and
// whited-out names.
func TestErrnosLikeOverlayfs(t *testing.T) {
	entries := []harness.Entry{
		harness.LowerFile("f", "f", harness.WithXattr("user.a", "1")),
		harness.LowerFile("ro", "ro", harness.WithMode(0o444)),
		harness.LowerDir("d/sub"),
		harness.LowerFile("d/x", "x"),
		harness.LowerSymlink("l", "f"),
		harness.LowerSymlink("dl", "d"),
		harness.LowerFile("gone", "g"),
		harness.LowerFifo("p"),
	}
	compareWithOverlayfs(t, entries, func(t *testing.T, root string) string {
		var log []string
		p := func(rel string) string { return root + "/" + rel }
		step := func(what string, err error) { log = append(log, what+"="+harness.ErrName(err)) }
		open := func(rel string, flags int) error { return openClose(p(rel), flags|unix.O_NONBLOCK) }
		var st unix.Stat_t
		step("unlink gone", unix.Unlink(p("gone")))
		step("open gone", open("gone", unix.O_RDONLY))
		step("stat gone/x", unix.Lstat(p("gone/x"), &st))
		step("open f O_DIRECTORY", open("f", unix.O_RDONLY|unix.O_DIRECTORY))
		step("open f/", open("f/", unix.O_RDONLY))
		step("open d O_WRONLY", open("d", unix.O_WRONLY))
		step("open d O_RDWR", open("d", unix.O_RDWR))
		step("open f O_CREAT|O_EXCL", open("f", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY))
		step("open l O_NOFOLLOW", open("l", unix.O_RDONLY|unix.O_NOFOLLOW))
		step("open l O_CREAT|O_EXCL", open("l", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY))
		step("open dl/x", open("dl/x", unix.O_RDONLY))
		step("open x/ O_CREAT", open("newdir/", unix.O_CREAT|unix.O_WRONLY))
		step("mkdir d", unix.Mkdir(p("d"), 0o755))
		step("mkdir f", unix.Mkdir(p("f"), 0o755))
		step("mkdir l", unix.Mkdir(p("l"), 0o755))
		step("mkdir missing/x", unix.Mkdir(p("missing/x"), 0o755))
		step("rmdir f", unix.Rmdir(p("f")))
		step("rmdir dl", unix.Rmdir(p("dl")))
		step("rmdir missing", unix.Rmdir(p("missing")))
		step("rmdir d/.", unix.Rmdir(p("d/.")))
		step("unlink d", unix.Unlink(p("d")))
		step("unlink missing", unix.Unlink(p("missing")))
		step("link d", unix.Link(p("d"), p("dlink")))
		step("link f d/x", unix.Link(p("f"), p("d/x")))
		step("symlink f", unix.Symlink("t", p("f")))
		step("symlink d", unix.Symlink("t", p("d")))
		step("mknod f", unix.Mknod(p("f"), unix.S_IFIFO|0o644, 0))
		step("truncate d", unix.Truncate(p("d"), 0))
		step("truncate -1", unix.Truncate(p("f"), -1))
		buf := make([]byte, 64)
		_, err := unix.Readlink(p("f"), buf)
		step("readlink f", err)
		_, err = unix.Getxattr(p("f"), "user.none", buf)
		step("getxattr user.none", err)
		_, err = unix.Getxattr(p("f"), "user.a", nil)
		step("getxattr user.a (size query)", err)
		_, err = unix.Getxattr(p("f"), "user.a", make([]byte, 0))
		step("getxattr user.a into 0 bytes", err)
		step("removexattr user.none", unix.Removexattr(p("f"), "user.none"))
		step("setxattr create existing", unix.Setxattr(p("f"), "user.a", []byte("2"), unix.XATTR_CREATE))
		step("setxattr replace missing", unix.Setxattr(p("f"), "user.b", []byte("2"), unix.XATTR_REPLACE))
		step("setxattr on symlink user.*", unix.Lsetxattr(p("l"), "user.x", []byte("1"), 0))
		step("setxattr on fifo user.*", unix.Lsetxattr(p("p"), "user.x", []byte("1"), 0))
		step("chmod missing", unix.Chmod(p("missing"), 0o644))
		step("utimes missing", unix.UtimesNano(p("missing"), nil))
		long := strings.Repeat("n", 256)
		step("create 256-byte name", open(long, unix.O_CREAT|unix.O_WRONLY))
		step("mkdir 256-byte name", unix.Mkdir(p(long), 0o755))
		step("stat 256-byte name", unix.Lstat(p(long), &st))
		step("write ro", open("ro", unix.O_WRONLY)) // root: allowed
		log = append(log, describeNames(t, root, "f", "d", "ro", "gone", "newdir"))
		return strings.Join(log, "\n")
	})
}

// TestLongNamesAndPaths: 255-byte names and paths near PATH_MAX work
// (fd-relative calls underneath), on lower and upper entries.
func TestLongNamesAndPaths(t *testing.T) {
	long := strings.Repeat("n", 255)
	var deep []string
	for i := 0; len(strings.Join(deep, "/")) < 3700; i++ {
		deep = append(deep, strings.Repeat(string(rune('a'+i%26)), 250))
	}
	rel := strings.Join(deep, "/")
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile(long, "long lower"), harness.LowerFile(rel+"/f", "deep lower")))
	if got := harness.ReadFile(t, m.Path(long)); got != "long lower" {
		t.Errorf("a 255-byte lower name reads %q", got)
	}
	harness.WriteFile(t, m.Path(long), "long upper") // copy-up of a 255-byte name
	if got := harness.ReadFile(t, m.Path(long)); got != "long upper" {
		t.Errorf("after copy-up: %q", got)
	}
	if err := os.WriteFile(m.Path(long+"x"), nil, 0o644); !errors.Is(err, unix.ENAMETOOLONG) {
		t.Errorf("a 256-byte name: %v, want ENAMETOOLONG", err)
	}
	if err := os.Mkdir(m.Path(strings.Repeat("m", 255)), 0o755); err != nil {
		t.Errorf("mkdir with a 255-byte name: %v", err)
	}
	p := m.Path(rel + "/f")
	if len(p) < 3800 {
		t.Fatalf("the deep path is only %d bytes", len(p))
	}
	if got := harness.ReadFile(t, p); got != "deep lower" {
		t.Errorf("a lower file at %d bytes of path reads %q", len(p), got)
	}
	harness.WriteFile(t, p, "deep upper") // copy-up of every directory on the way
	if got := harness.ReadFile(t, p); got != "deep upper" {
		t.Errorf("after copy-up at %d bytes of path: %q", len(p), got)
	}
	if err := os.Rename(p, m.Path(rel+"/g")); err != nil {
		t.Errorf("rename at %d bytes of path: %v", len(p), err)
	}
	if err := os.Mkdir(m.Path(rel+"/"+strings.Repeat("z", 200)), 0o755); err != nil {
		t.Errorf("mkdir at %d bytes of path: %v", len(p)+200, err)
	}
	if err := os.RemoveAll(m.Path(deep[0])); err != nil {
		t.Errorf("rm -rf of the deep tree: %v", err)
	}
}
