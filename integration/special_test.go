package integration

// Checklist items 18 and 19 (DESIGN.md): the control file and internal
// names; symlinks, fifos, sockets and device nodes.

import (
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// controlName is the hidden control file in the mount root.
const controlName = ".agentfs.ctl"

// Checklist 18: the control file is hidden from readdir and users
// cannot create, remove or rename it, or put anything in its place.
func TestControlFileIsProtected(t *testing.T) {
	m := newMount(t, withLower(lowerFile("f", "f"), lowerDir("d")))
	ctl := m.path(controlName)
	var st0 unix.Stat_t
	if err := unix.Lstat(ctl, &st0); err != nil {
		t.Fatalf("lstat %s: %v (the CLI needs it)", controlName, err)
	}
	for _, e := range readAllDirents(t, m.dir) {
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
		{"rename away", unix.Rename(ctl, m.path("stolen"))},
		{"rename onto", unix.Rename(m.path("f"), ctl)},
		{"rename a dir onto", unix.Rename(m.path("d"), ctl)},
		{"exchange", unix.Renameat2(unix.AT_FDCWD, m.path("f"), unix.AT_FDCWD, ctl, unix.RENAME_EXCHANGE)},
		{"link away", unix.Link(ctl, m.path("ctl-link"))},
		{"link onto", unix.Link(m.path("f"), ctl)},
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
		t.Errorf("after the attempts: lstat %s = ino %d mode %o (%s), want ino %d mode %o", controlName, st.Ino, st.Mode, errName(err), st0.Ino, st0.Mode)
	}
	if got := readFile(t, m.path("f")); got != "f" {
		t.Errorf("f = %q after the attempts, want %q", got, "f")
	}
	for _, p := range []string{"stolen", "ctl-link"} {
		if err := unix.Lstat(m.path(p), &st); err != unix.ENOENT {
			t.Errorf("lstat %s = %s, want ENOENT", p, errName(err))
		}
	}
	if r := runAgentfs(t, "status", "-C", m.dir); r.code != 0 {
		t.Errorf("the control file no longer works:\n%s", r)
	}
}

// Checklist 18: the control file is for the mount's owner and root only.
func TestControlFileOwnerOnly(t *testing.T) {
	m := newMount(t, withLower(lowerFile("f", "f")))
	if st, err := os.Stat(agentfsBin); err != nil || st.Mode()&0o001 == 0 || !worldSearchable(agentfsBin) {
		t.Skipf("%s is not executable by other users", agentfsBin)
	}
	cmd := execAs(cred{uid: userUID, gid: userGID}, agentfsBin, "status", "-C", m.dir, "--json")
	if r := runCommand(t, cmd, cmd.Args[1:]); r.code == 0 {
		t.Errorf("uid %d (not the owner) used the control file:\n%s", userUID, r)
	}
}

// Checklist 18: agentfs's own xattrs never show, and a file's xattrs
// are exactly what users set.
func TestNoInternalXattrs(t *testing.T) {
	m := newMount(t, withLower(
		lowerFile("plain", "p", withXattr("user.mine", "1")),
		lowerFile("copied", "c", withXattr("user.mine", "1")),
		lowerFile("d/x", "x"),
		lowerFile("moved/y", "y"),
		lowerFile("gone", "g"),
	))
	writeFile(t, m.path("copied"), "changed")
	os.RemoveAll(m.path("d"))
	os.Mkdir(m.path("d"), 0o755) // opaque
	os.Rename(m.path("moved"), m.path("moved2"))
	os.Remove(m.path("gone"))
	writeFile(t, m.path("gone"), "over a whiteout")
	writeFile(t, m.path("new"), "n")
	os.Link(m.path("new"), m.path("new2"))
	want := map[string]string{
		".": "", "plain": "user.mine", "copied": "user.mine", "d": "", "moved2": "", "moved2/y": "",
		"gone": "", "new": "", "new2": "",
	}
	for _, p := range sortedKeys(want) {
		names, err := listXattrs(m.path(p))
		if got := strings.Join(names, ","); err != nil || got != want[p] {
			t.Errorf("listxattr %s = [%s] (%s), want [%s]", p, got, errName(err), want[p])
		}
	}
}

// Checklist 19: symlinks (lchown and lutimes copy up the link, not its
// target), fifos, sockets and device nodes.
func TestSpecialFiles(t *testing.T) {
	m := newMount(t, withLower(
		lowerFile("target", "t", withOwner(5, 6), withTimes(ts(1000, 1), ts(2000, 2))),
		lowerSymlink("link", "target"),
		lowerSymlink("dirlink", "d"),
		lowerFile("d/in", "in"),
		lowerSymlink("dangling", "nowhere"),
		lowerFifo("fifo", withMode(0o644)),
		lowerCharDevice("null", 1, 3),
		lowerDir("pub", withMode(0o777)),
	))
	t.Run("symlinks", func(t *testing.T) {
		if err := unix.Lchown(m.path("link"), 77, 88); err != nil {
			t.Fatal(err)
		}
		when := []unix.Timespec{ts(100, 5), ts(200, 6)}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, m.path("link"), when, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		st := lstat(t, m.path("link"))
		if st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Uid != 77 || st.Gid != 88 || st.Mtim != when[1] || st.Atim != when[0] {
			t.Errorf("link after lchown/lutimes: mode %o owner %d:%d atime %v mtime %v, want a symlink 77:88 %v %v",
				st.Mode, st.Uid, st.Gid, st.Atim, st.Mtim, when[0], when[1])
		}
		tg := lstat(t, m.path("target"))
		if tg.Uid != 5 || tg.Gid != 6 || tg.Mtim != ts(2000, 2) {
			t.Errorf("target after lchown/lutimes of the link: owner %d:%d mtime %v, want 5:6 and %v (unchanged)", tg.Uid, tg.Gid, tg.Mtim, ts(2000, 2))
		}
		if got, _ := os.Readlink(m.path("link")); got != "target" {
			t.Errorf("readlink = %q, want %q", got, "target")
		}
		if got := readFile(t, m.path("dirlink/in")); got != "in" {
			t.Errorf("dirlink/in = %q", got)
		}
		if _, err := os.Stat(m.path("dangling")); !os.IsNotExist(err) {
			t.Errorf("stat of a dangling link = %v, want ENOENT", err)
		}
		long := strings.Repeat("x/", 2048)[:4095]
		if err := os.Symlink(long, m.path("long")); err != nil {
			t.Errorf("symlink with a 4095-byte target: %v", err)
		} else if got, _ := os.Readlink(m.path("long")); got != long {
			t.Errorf("readlink of the long symlink: %d bytes, want %d", len(got), len(long))
		}
	})
	t.Run("fifos", func(t *testing.T) {
		checkFifo(t, m.path("fifo"))
		if err := unix.Chmod(m.path("fifo"), 0o600); err != nil { // copy-up must not open the fifo
			t.Fatal(err)
		}
		if err := unix.Lchown(m.path("fifo"), 9, 9); err != nil {
			t.Fatal(err)
		}
		if st := lstat(t, m.path("fifo")); st.Mode != unix.S_IFIFO|0o600 || st.Uid != 9 {
			t.Errorf("fifo after chmod/chown: mode %o uid %d", st.Mode, st.Uid)
		}
		checkFifo(t, m.path("fifo"))
		if err := unix.Mkfifo(m.path("newfifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		checkFifo(t, m.path("newfifo"))
	})
	t.Run("sockets", func(t *testing.T) {
		srv, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(srv)
		if err := unix.Bind(srv, &unix.SockaddrUnix{Name: m.path("sock")}); err != nil {
			t.Fatalf("bind a unix socket in the mount: %v", err)
		}
		unix.Listen(srv, 1)
		if st := lstat(t, m.path("sock")); st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			t.Errorf("sock: mode %o, want a socket", st.Mode)
		}
		cli, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(cli)
		if err := unix.Connect(cli, &unix.SockaddrUnix{Name: m.path("sock")}); err != nil {
			t.Fatalf("connect through the mount: %v", err)
		}
		conn, _, err := unix.Accept(srv)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(conn)
		unix.Write(cli, []byte("hello"))
		buf := make([]byte, 5)
		if n, _ := unix.Read(conn, buf); string(buf[:n]) != "hello" {
			t.Errorf("through the socket: %q", buf[:n])
		}
		if err := unix.Chmod(m.path("sock"), 0o600); err != nil {
			t.Errorf("chmod sock: %v", err)
		}
		if err := os.Remove(m.path("sock")); err != nil {
			t.Errorf("remove sock: %v", err)
		}
	})
	t.Run("device nodes", func(t *testing.T) {
		if st := lstat(t, m.path("null")); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(1, 3) {
			t.Errorf("lower device: mode %o rdev %#x, want a char device %#x", st.Mode, st.Rdev, unix.Mkdev(1, 3))
		}
		if err := unix.Chmod(m.path("null"), 0o600); err != nil {
			t.Fatal(err)
		}
		if st := lstat(t, m.path("null")); st.Mode != unix.S_IFCHR|0o600 || st.Rdev != unix.Mkdev(1, 3) {
			t.Errorf("device after chmod: mode %o rdev %#x, want %o %#x", st.Mode, st.Rdev, unix.S_IFCHR|0o600, unix.Mkdev(1, 3))
		}
		if err := unix.Mknod(m.path("zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
			t.Fatalf("mknod char device as root: %v", err)
		}
		if err := unix.Mknod(m.path("loop"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
			t.Fatalf("mknod block device as root: %v", err)
		}
		if st := lstat(t, m.path("zero")); st.Mode != unix.S_IFCHR|0o666&^currentUmask() || st.Rdev != unix.Mkdev(1, 5) {
			t.Errorf("zero: mode %o rdev %#x, want %o %#x", st.Mode, st.Rdev, unix.S_IFCHR|0o666&^currentUmask(), unix.Mkdev(1, 5))
		}
		if st := lstat(t, m.path("loop")); st.Mode != unix.S_IFBLK|0o600 || st.Rdev != unix.Mkdev(7, 0) {
			t.Errorf("loop: mode %o rdev %#x", st.Mode, st.Rdev)
		}
		if f, err := os.Open(m.path("zero")); err != nil {
			t.Logf("opening a device node in the mount: %v (the mount is nodev)", err)
		} else {
			f.Close()
		}
		res := runAs(t, cred{uid: userUID, gid: userGID}, opMkfifo(m.path("pub/fifo"), 0o644), helperOp{Op: "mknod-chr", Path: m.path("pub/dev")})
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
