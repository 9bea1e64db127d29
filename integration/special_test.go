package integration

// Checklist items 18 and 19 (docs/semantics.md): the control file and
// internal names; symlinks, fifos, sockets and device nodes.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// controlName is the hidden control file in the mount root.
const controlName = ".agentfs.ctl"

// Checklist 18: the control file is hidden from readdir and users
// cannot create, remove or rename it, or put anything in its place.
func TestControlFileIsProtected(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "f"), harness.LowerDir("d")))
	ctl := m.Path(controlName)
	var st0 unix.Stat_t
	if err := unix.Lstat(ctl, &st0); err != nil {
		t.Fatalf("lstat %s: %v (the CLI needs it)", controlName, err)
	}
	for _, e := range readAllDirents(t, m.Dir) {
		if e.name == controlName {
			t.Errorf("getdents of the root lists %s", controlName)
		}
	}
	refused := []struct {
		what string
		err  error
	}{
		{"unlink", unix.Unlink(ctl)},
		{"rmdir", unix.Rmdir(ctl)},
		{"rename away", unix.Rename(ctl, m.Path("stolen"))},
		{"rename onto", unix.Rename(m.Path("f"), ctl)},
		{"rename a dir onto", unix.Rename(m.Path("d"), ctl)},
		{"exchange", unix.Renameat2(unix.AT_FDCWD, m.Path("f"), unix.AT_FDCWD, ctl, unix.RENAME_EXCHANGE)},
		{"link away", unix.Link(ctl, m.Path("ctl-link"))},
		{"link onto", unix.Link(m.Path("f"), ctl)},
		{"symlink onto", unix.Symlink("f", ctl)},
		{"mkdir", unix.Mkdir(ctl, 0o755)},
		{"mknod", unix.Mknod(ctl, unix.S_IFIFO|0o644, 0)},
		{"create exclusive", openClose(ctl, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY)},
	}
	for _, r := range refused {
		if r.err == nil {
			t.Errorf("%s %s succeeded, want an error", r.what, controlName)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(ctl, &st); err != nil || st.Ino != st0.Ino || st.Mode != st0.Mode {
		t.Errorf("after the attempts: lstat %s = ino %d mode %o (%s), want ino %d mode %o", controlName, st.Ino, st.Mode, harness.ErrName(err), st0.Ino, st0.Mode)
	}
	if got := harness.ReadFile(t, m.Path("f")); got != "f" {
		t.Errorf("f = %q after the attempts, want %q", got, "f")
	}
	for _, p := range []string{"stolen", "ctl-link"} {
		if err := unix.Lstat(m.Path(p), &st); err != unix.ENOENT {
			t.Errorf("lstat %s = %s, want ENOENT", p, harness.ErrName(err))
		}
	}
	if r := harness.Run(t, "status", "-C", m.Dir); r.Code != 0 {
		t.Errorf("the control file no longer works:\n%s", r)
	}
}

// Checklist 18: the control file is for the mount's owner and root
// only: another user cannot even open it (EACCES, its mode), and agentfs
// says who may. The binary runs from a copy that every user may execute
// (the one under test may sit in a directory only root can enter).
func TestControlFileOwnerOnly(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "f")))
	bin := filepath.Join(harness.NewMountpoint(t), "agentfs")
	copyAgentfs(t, bin)
	if !harness.WorldSearchable(bin) {
		t.Fatalf("the copy %s of the binary is not reachable by other users", bin)
	}
	cmd := harness.ExecAs(harness.Cred{Uid: userUID, Gid: userGID}, bin, "status", "-C", m.Dir, "--json")
	r := harness.RunCmd(t, cmd, cmd.Args[1:])
	want := fmt.Sprintf("agentfs status: permission denied: only the owner of the mount %s and root may control it: open %s: %s\n",
		m.Dir, m.Path(controlName), unix.EACCES.Error())
	if r.Code != 1 || r.Stderr != want {
		t.Errorf("agentfs status as uid %d (not the owner): exit %d, stderr %q; want exit 1 and %q (EACCES)", userUID, r.Code, r.Stderr, want)
	}
	if r.Stdout != "" {
		t.Errorf("agentfs status as uid %d printed a status: %q", userUID, r.Stdout)
	}
}

// Checklist 18: agentfs's own xattrs never show, and a file's xattrs
// are exactly what users set.
func TestNoInternalXattrs(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("plain", "p", harness.WithXattr("user.mine", "1")),
		harness.LowerFile("copied", "c", harness.WithXattr("user.mine", "1")),
		harness.LowerFile("d/x", "x"),
		harness.LowerFile("moved/y", "y"),
		harness.LowerFile("gone", "g"),
	))
	harness.WriteFile(t, m.Path("copied"), "changed")
	must(t, os.RemoveAll(m.Path("d")))
	must(t, os.Mkdir(m.Path("d"), 0o755)) // opaque
	must(t, os.Rename(m.Path("moved"), m.Path("moved2")))
	must(t, os.Remove(m.Path("gone")))
	harness.WriteFile(t, m.Path("gone"), "over a whiteout")
	harness.WriteFile(t, m.Path("new"), "n")
	must(t, os.Link(m.Path("new"), m.Path("new2")))
	want := map[string]string{
		".": "", "plain": "user.mine", "copied": "user.mine", "d": "", "moved2": "", "moved2/y": "",
		"gone": "", "new": "", "new2": "",
	}
	for _, p := range sortedKeys(want) {
		names, err := harness.ListXattrs(m.Path(p))
		if got := strings.Join(names, ","); err != nil || got != want[p] {
			t.Errorf("listxattr %s = [%s] (%s), want [%s]", p, got, harness.ErrName(err), want[p])
		}
	}
}

// Checklist 19: symlinks (lchown and lutimes copy up the link, not its
// target), fifos, sockets and device nodes.
func TestSpecialFiles(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("target", "t", harness.WithOwner(5, 6), harness.WithTimes(harness.Timespec(1000, 1), harness.Timespec(2000, 2))),
		harness.LowerSymlink("link", "target"),
		harness.LowerSymlink("dirlink", "d"),
		harness.LowerFile("d/in", "in"),
		harness.LowerSymlink("dangling", "nowhere"),
		harness.LowerFifo("fifo", harness.WithMode(0o644)),
		harness.LowerCharDevice("null", 1, 3),
		harness.LowerDir("pub", harness.WithMode(0o777)),
	))
	t.Run("symlinks", func(t *testing.T) {
		if err := unix.Lchown(m.Path("link"), 77, 88); err != nil {
			t.Fatal(err)
		}
		when := []unix.Timespec{harness.Timespec(100, 5), harness.Timespec(200, 6)}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, m.Path("link"), when, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		st := harness.Lstat(t, m.Path("link"))
		if st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Uid != 77 || st.Gid != 88 || st.Mtim != when[1] || st.Atim != when[0] {
			t.Errorf("link after lchown/lutimes: mode %o owner %d:%d atime %v mtime %v, want a symlink 77:88 %v %v",
				st.Mode, st.Uid, st.Gid, st.Atim, st.Mtim, when[0], when[1])
		}
		tg := harness.Lstat(t, m.Path("target"))
		if tg.Uid != 5 || tg.Gid != 6 || tg.Mtim != harness.Timespec(2000, 2) {
			t.Errorf("target after lchown/lutimes of the link: owner %d:%d mtime %v, want 5:6 and %v (unchanged)", tg.Uid, tg.Gid, tg.Mtim, harness.Timespec(2000, 2))
		}
		if got, _ := os.Readlink(m.Path("link")); got != "target" {
			t.Errorf("readlink = %q, want %q", got, "target")
		}
		if got := harness.ReadFile(t, m.Path("dirlink/in")); got != "in" {
			t.Errorf("dirlink/in = %q", got)
		}
		if _, err := os.Stat(m.Path("dangling")); !os.IsNotExist(err) {
			t.Errorf("stat of a dangling link = %v, want ENOENT", err)
		}
		long := strings.Repeat("x/", 2048)[:4095]
		if err := os.Symlink(long, m.Path("long")); err != nil {
			t.Errorf("symlink with a 4095-byte target: %v", err)
		} else if got, _ := os.Readlink(m.Path("long")); got != long {
			t.Errorf("readlink of the long symlink: %d bytes, want %d", len(got), len(long))
		}
	})
	t.Run("fifos", func(t *testing.T) {
		checkFifo(t, m.Path("fifo"))
		if err := unix.Chmod(m.Path("fifo"), 0o600); err != nil { // copy-up must not open the fifo
			t.Fatal(err)
		}
		if err := unix.Lchown(m.Path("fifo"), 9, 9); err != nil {
			t.Fatal(err)
		}
		if st := harness.Lstat(t, m.Path("fifo")); st.Mode != unix.S_IFIFO|0o600 || st.Uid != 9 {
			t.Errorf("fifo after chmod/chown: mode %o uid %d", st.Mode, st.Uid)
		}
		checkFifo(t, m.Path("fifo"))
		if err := unix.Mkfifo(m.Path("newfifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		checkFifo(t, m.Path("newfifo"))
	})
	t.Run("sockets", func(t *testing.T) {
		srv, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(srv)
		if err := unix.Bind(srv, &unix.SockaddrUnix{Name: m.Path("sock")}); err != nil {
			t.Fatalf("bind a unix socket in the mount: %v", err)
		}
		mustf(t, unix.Listen(srv, 1), "listen on the socket in the mount")
		if st := harness.Lstat(t, m.Path("sock")); st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			t.Errorf("sock: mode %o, want a socket", st.Mode)
		}
		cli, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(cli)
		if err := unix.Connect(cli, &unix.SockaddrUnix{Name: m.Path("sock")}); err != nil {
			t.Fatalf("connect through the mount: %v", err)
		}
		conn, _, err := unix.Accept(srv)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(conn)
		if _, err := unix.Write(cli, []byte("hello")); err != nil {
			t.Fatalf("write to the socket: %v", err) // the read below would wait for ever
		}
		buf := make([]byte, 5)
		if n, _ := unix.Read(conn, buf); string(buf[:n]) != "hello" {
			t.Errorf("through the socket: %q", buf[:n])
		}
		if err := unix.Chmod(m.Path("sock"), 0o600); err != nil {
			t.Errorf("chmod sock: %v", err)
		}
		if err := os.Remove(m.Path("sock")); err != nil {
			t.Errorf("remove sock: %v", err)
		}
	})
	t.Run("device nodes", func(t *testing.T) {
		if st := harness.Lstat(t, m.Path("null")); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(1, 3) {
			t.Errorf("lower device: mode %o rdev %#x, want a char device %#x", st.Mode, st.Rdev, unix.Mkdev(1, 3))
		}
		if err := unix.Chmod(m.Path("null"), 0o600); err != nil {
			t.Fatal(err)
		}
		if st := harness.Lstat(t, m.Path("null")); st.Mode != unix.S_IFCHR|0o600 || st.Rdev != unix.Mkdev(1, 3) {
			t.Errorf("device after chmod: mode %o rdev %#x, want %o %#x", st.Mode, st.Rdev, unix.S_IFCHR|0o600, unix.Mkdev(1, 3))
		}
		if err := unix.Mknod(m.Path("zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
			t.Fatalf("mknod char device as root: %v", err)
		}
		if err := unix.Mknod(m.Path("loop"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
			t.Fatalf("mknod block device as root: %v", err)
		}
		if st := harness.Lstat(t, m.Path("zero")); st.Mode != unix.S_IFCHR|0o666&^currentUmask() || st.Rdev != unix.Mkdev(1, 5) {
			t.Errorf("zero: mode %o rdev %#x, want %o %#x", st.Mode, st.Rdev, unix.S_IFCHR|0o666&^currentUmask(), unix.Mkdev(1, 5))
		}
		if st := harness.Lstat(t, m.Path("loop")); st.Mode != unix.S_IFBLK|0o600 || st.Rdev != unix.Mkdev(7, 0) {
			t.Errorf("loop: mode %o rdev %#x", st.Mode, st.Rdev)
		}
		if f, err := os.Open(m.Path("zero")); err != nil {
			t.Logf("opening a device node in the mount: %v (the mount is nodev)", err)
		} else {
			f.Close()
		}
		res := harness.RunAs(t, harness.Cred{Uid: userUID, Gid: userGID}, harness.OpMkfifo(m.Path("pub/fifo"), 0o644), harness.Op{Op: "mknod-chr", Path: m.Path("pub/dev")})
		if res[0].Errno != "ok" {
			t.Errorf("mkfifo as a user: %s, want ok", res[0])
		}
		if res[1].Errno != "EPERM" {
			t.Errorf("mknod of a device as a user: %s, want EPERM (root only)", res[1])
		}
	})
}

// checkFifo passes a message through the fifo at p.
func checkFifo(t *testing.T, p string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			_, err = w.Write([]byte("through the fifo"))
			w.Close()
		}
		done <- err
	}()
	r, err := os.Open(p)
	if err != nil {
		t.Fatalf("open %s for reading: %v", p, err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if err := <-done; err != nil {
		t.Errorf("writing into %s: %v", p, err)
	}
	if string(got) != "through the fifo" {
		t.Errorf("%s passed %q, want %q", p, got, "through the fifo")
	}
}
