package integration

// The life of a mount (issue 2): status, unmount from outside, signals,
// a daemon that dies, and a kept store.

import (
	"bytes"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/procfs"
	"golang.org/x/sys/unix"
)

// TestStatus: agentfs status from inside the mount (as git finds its
// repository) and with -C, as text and JSON.
func TestStatus(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("d/f", "f")))
	harness.WriteFile(t, m.Path("d/g"), "g")
	st, err := m.FetchStatus()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lower != m.Lower || st.Mountpoint != m.Dir || !st.Ephemeral || st.Pid <= 0 || st.Backstore != "hostfs" || st.Store == "" {
		t.Errorf("status --json = %+v, want lower %s, mountpoint %s, an ephemeral store, a pid, backstore hostfs", st, m.Lower, m.Dir)
	}
	if st.Objects < 1 {
		t.Errorf("status --json: objects %d after writing a file, want >= 1", st.Objects)
	}
	if noPT := os.Getenv("AGENTFS_TEST_NO_PASSTHROUGH") == "1"; st.Passthrough == noPT || st.Writeback {
		t.Errorf("status --json: passthrough %v, writeback cache %v; want passthrough %v and no writeback cache (not asked for)",
			st.Passthrough, st.Writeback, !noPT)
	}
	m.WaitClosed() // d/g's close is counted out (fails if it never is)
	f, err := os.OpenFile(m.Path("d/g"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st, err = m.FetchStatus(); err != nil || st.OpenForWriting != 1 {
		t.Errorf("status --json with d/g open for writing: open_for_writing %d (%v), want 1", st.OpenForWriting, err)
	}
	f.Close()
	m.WaitClosed()
	cmd := exec.Command(harness.Bin(), "status")
	cmd.Dir = m.Path("d")
	r := harness.RunCmd(t, cmd, []string{"status"})
	if r.Code != 0 {
		t.Fatalf("status from inside the mount:\n%s", r)
	}
	for _, want := range []string{m.Lower, "passthrough", "hostfs", "open for writing:"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("status does not mention %q:\n%s", want, r.Stdout)
		}
	}
}

// waitDaemonGone waits until the daemon has exited and its mount is
// gone.
func waitDaemonGone(t *testing.T, m *harness.Mount, pid int) {
	t.Helper()
	if !harness.WaitFor(func() bool { return !procfs.Alive(pid) }) {
		t.Fatalf("the daemon (pid %d) did not exit", pid)
	}
	if !harness.WaitFor(func() bool { return !harness.IsMounted(m.Dir) }) {
		t.Errorf("%s is still mounted after the daemon exited", m.Dir)
	}
}

// assertStoreDeleted checks that an ephemeral store is gone.
func assertStoreDeleted(t *testing.T, store string) {
	t.Helper()
	if store == "" {
		t.Fatalf("status gave no store")
	}
	if !harness.WaitFor(func() bool { _, err := os.Stat(store); return os.IsNotExist(err) }) {
		t.Errorf("the private store %s still exists", store)
	}
}

// TestEndingTheDaemon: agentfs unmount, umount and fusermount3 -u from
// outside, SIGTERM and SIGINT all end the daemon cleanly and delete the
// private store.
func TestEndingTheDaemon(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(t *testing.T, m *harness.Mount)
	}{
		{"agentfs unmount", func(t *testing.T, m *harness.Mount) {
			if r := harness.Run(t, "unmount", m.Dir); r.Code != 0 {
				t.Errorf("agentfs unmount:\n%s", r)
			}
		}},
		{"umount", func(t *testing.T, m *harness.Mount) {
			if err := unix.Unmount(m.Dir, 0); err != nil {
				t.Fatalf("umount %s: %v", m.Dir, err)
			}
		}},
		{"fusermount3 -u", func(t *testing.T, m *harness.Mount) {
			if out, err := exec.Command("fusermount3", "-u", m.Dir).CombinedOutput(); err != nil {
				t.Fatalf("fusermount3 -u: %v\n%s", err, out)
			}
		}},
		{"SIGTERM", func(t *testing.T, m *harness.Mount) {
			mustf(t, syscall.Kill(m.Status.Pid, syscall.SIGTERM), "SIGTERM to the daemon (pid %d)", m.Status.Pid)
		}},
		{"SIGINT", func(t *testing.T, m *harness.Mount) {
			mustf(t, syscall.Kill(m.Status.Pid, syscall.SIGINT), "SIGINT to the daemon (pid %d)", m.Status.Pid)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "f")))
			harness.WriteFile(t, m.Path("g"), "g")
			pid, store := m.Status.Pid, m.Status.Store
			if pid <= 0 || !procfs.Alive(pid) {
				t.Fatalf("status gave daemon pid %d, which is not running", pid)
			}
			c.end(t, m)
			waitDaemonGone(t, m, pid)
			assertStoreDeleted(t, store)
			if log, err := os.ReadFile(filepath.Join(store, "agentfs.log")); err == nil && strings.Contains(string(log), "panic") {
				t.Errorf("the daemon log shows a panic:\n%s", log)
			}
		})
	}
}

// TestDaemonKilled: kill -9 of the daemon leaves a dead mount that
// agentfs unmount still clears (with the private store).
func TestDaemonKilled(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "f")))
	harness.WriteFile(t, m.Path("g"), "g")
	pid, store := m.Status.Pid, m.Status.Store
	mustf(t, syscall.Kill(pid, syscall.SIGKILL), "kill -9 of the daemon (pid %d)", pid)
	if !harness.WaitFor(func() bool { return !procfs.Alive(pid) }) {
		t.Fatalf("the daemon (pid %d) survived SIGKILL", pid)
	}
	var st unix.Stat_t
	if err := unix.Stat(m.Dir, &st); err != unix.ENOTCONN {
		t.Logf("stat of the dead mount: %s (ENOTCONN expected)", harness.ErrName(err))
	}
	r := harness.Run(t, "unmount", m.Dir)
	if r.Code != 0 {
		t.Errorf("agentfs unmount of a dead mount:\n%s", r)
	}
	if harness.IsMounted(m.Dir) {
		t.Errorf("%s is still mounted after agentfs unmount of the dead mount", m.Dir)
		if err := unix.Unmount(m.Dir, unix.MNT_DETACH); err != nil {
			t.Errorf("detaching %s: %v", m.Dir, err)
		}
	}
	assertStoreDeleted(t, store)
}

// TestDaemonKilledWithRequestPending: a request the daemon had not
// answered when it died fails with ECONNABORTED, not ENOTCONN. agentfs
// unmount, waiting on the control file at that moment, must still see
// a dead mount and clear it.
func TestDaemonKilledWithRequestPending(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "f")))
	pid, store := m.Status.Pid, m.Status.Store
	// Warm the root's attributes and the control file's dentry, so that
	// the unmount's first request to the daemon is the control file's
	// open.
	var st unix.Stat_t
	mustf(t, unix.Stat(m.Dir, &st), "stat %s", m.Dir)
	mustf(t, unix.Stat(filepath.Join(m.Dir, ".agentfs.ctl"), &st), "stat the control file")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(harness.Bin(), "unmount", m.Dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Errorf("kill -9 of the stopped daemon (pid %d): %v", pid, err)
		}
		t.Fatal(err)
	}
	// Wait until the unmount sleeps in a FUSE request.
	waiting := harness.WaitFor(func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", cmd.Process.Pid))
		return strings.Contains(string(b), "fuse") || strings.Contains(string(b), "request_wait_answer")
	})
	mustf(t, syscall.Kill(pid, syscall.SIGKILL), "kill -9 of the stopped daemon (pid %d)", pid)
	if !harness.WaitFor(func() bool { return !procfs.Alive(pid) }) {
		t.Fatalf("the daemon (pid %d) survived SIGKILL", pid)
	}
	err := cmd.Wait()
	if !waiting {
		t.Errorf("agentfs unmount never waited on the stopped daemon")
	}
	if err != nil {
		t.Errorf("agentfs unmount with a request pending when the daemon died: %v\nstdout: %s\nstderr: %s", err, &stdout, &stderr)
	}
	if harness.IsMounted(m.Dir) {
		t.Errorf("%s is still mounted after agentfs unmount of the dead mount", m.Dir)
		if err := unix.Unmount(m.Dir, unix.MNT_DETACH); err != nil {
			t.Errorf("detaching %s: %v", m.Dir, err)
		}
	}
	assertStoreDeleted(t, store)
}

// TestKeptStoreSurvivesKill: with --store, what a program fsync'ed
// survives kill -9 of the daemon (docs/semantics.md, "Guarantees": crash
// safety).
func TestKeptStoreSurvivesKill(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := harness.NewMount(t, harness.WithStore(store), harness.WithLower(harness.LowerFile("f", "lower"), harness.LowerFile("gone", "g")))
	f, err := os.OpenFile(m.Path("durable"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("fsynced"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	w, err := os.OpenFile(m.Path("f"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("copied up and fsynced"); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	pid := m.Status.Pid
	mustf(t, syscall.Kill(pid, syscall.SIGKILL), "kill -9 of the daemon (pid %d)", pid)
	if !harness.WaitFor(func() bool { return !procfs.Alive(pid) }) {
		t.Fatalf("the daemon (pid %d) survived SIGKILL", pid)
	}
	if r := harness.Run(t, "unmount", m.Dir); r.Code != 0 {
		t.Errorf("agentfs unmount of the dead mount:\n%s", r)
	}
	if _, err := os.Stat(store); err != nil {
		t.Fatalf("the kept store is gone after clearing a dead mount: %v", err)
	}
	m.Mount()
	if got := harness.ReadFile(t, m.Path("durable")); got != "fsynced" {
		t.Errorf("after kill -9 and remount: durable = %q, want %q", got, "fsynced")
	}
	if got := harness.ReadFile(t, m.Path("f")); got != "copied up and fsynced" {
		t.Errorf("after kill -9 and remount: f = %q, want %q", got, "copied up and fsynced")
	}
}

// TestKeptStorePersists: with --store every kind of change survives
// unmount and mount, stat for stat, also on another mountpoint.
func TestKeptStorePersists(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := harness.NewMount(t, harness.WithStore(store), harness.WithLower(
		harness.LowerFile("edit", "lower edit"),
		harness.LowerFile("gone", "gone"),
		harness.LowerFile("meta", "meta", harness.WithXattr("user.a", "1")),
		harness.LowerFile("d/x", "x"),
		harness.LowerFile("rmdir/x", "x"),
		harness.LowerFile("moved/y", "y"),
		harness.LowerSymlink("link", "edit"),
		harness.LowerFile("h1", "h"),
		harness.LowerSparse("sparse", 64<<20, map[int64]string{0: "s"}),
		harness.LowerDir("keep"),
	))
	harness.WriteFile(t, m.Path("edit"), "upper edit")
	must(t, os.Remove(m.Path("gone")))
	mustf(t, unix.Chmod(m.Path("meta"), 0o600), "chmod meta")
	mustf(t, unix.Chown(m.Path("meta"), 12, 34), "chown meta")
	mustf(t, unix.Setxattr(m.Path("meta"), "user.b", []byte("2"), 0), "setxattr meta user.b")
	mustf(t, unix.Removexattr(m.Path("meta"), "user.a"), "removexattr meta user.a")
	mustf(t, unix.UtimesNano(m.Path("meta"), []unix.Timespec{harness.Timespec(1234, 5), harness.Timespec(5678, 9)}), "utimensat meta")
	must(t, os.RemoveAll(m.Path("rmdir")))
	must(t, os.RemoveAll(m.Path("d")))
	must(t, os.Mkdir(m.Path("d"), 0o700)) // opaque
	harness.WriteFile(t, m.Path("d/new"), "new")
	must(t, os.Rename(m.Path("moved"), m.Path("keep/moved")))
	must(t, os.Symlink("d/new", m.Path("newlink")))
	mustf(t, unix.Lchown(m.Path("link"), 5, 5), "lchown link")
	must(t, os.Link(m.Path("h1"), m.Path("h2")))
	mustf(t, unix.Mkfifo(m.Path("fifo"), 0o640), "mkfifo fifo")
	f, err := os.OpenFile(m.Path("sparse"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("t"), 32<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	must(t, os.Truncate(m.Path("h1"), 0))

	before := harness.SnapshotTree(m.Dir)
	if before.Err != nil {
		t.Fatal(before.Err)
	}
	otherMountpoint := harness.NewMountpoint(t) // removed after the mount's cleanup
	t.Run("same mountpoint", func(t *testing.T) {
		m.Remount()
		for _, d := range harness.DiffMountTrees(before, harness.SnapshotTree(m.Dir)) {
			t.Errorf("after unmount and mount: %s", d)
		}
	})
	t.Run("another mountpoint", func(t *testing.T) {
		m.Unmount()
		m.Dir = otherMountpoint
		m.Mount()
		after := harness.SnapshotTree(m.Dir)
		after.Root = before.Root
		for _, d := range harness.DiffMountTrees(before, after) {
			t.Errorf("after mounting the store on another mountpoint: %s", d)
		}
	})
}

// TestUnprivilegedMount: a normal user mounts through fusermount3, uses
// the mount, and unmounts it. It runs in a private mount namespace with
// its own /dev, where /dev/fuse is usable by all (as on most systems),
// so that the machine's /dev/fuse permissions do not matter.
// unprivilegedPrelude starts the shell scripts of the tests that mount
// as uid userUID (run by root with unshare -m): a /dev of their own with
// a /dev/fuse every user can open, and as_user, which runs a command as
// that user with HOME and TMPDIR in $HOME_DIR.
var unprivilegedPrelude = `set -e
mount -t tmpfs -o mode=755 tmpfs /dev
mknod -m 666 /dev/fuse c 10 229
mknod -m 666 /dev/null c 1 3
ln -s /proc/self/fd /dev/fd
as_user() { setpriv --reuid ` + fmt.Sprint(userUID) + ` --regid ` + fmt.Sprint(userGID) + ` --clear-groups -- env -i HOME="$HOME_DIR" TMPDIR="$HOME_DIR" PATH=/usr/local/bin:/usr/bin:/bin "$@"; }
`

// unprivilegedDirs prepares a test that mounts as uid userUID: the tools
// it needs, a lower directory with entries, a mountpoint and a home,
// all the user's, and the lower tree as it was.
func unprivilegedDirs(t *testing.T, entries ...harness.Entry) (lower, mp, home string, before harness.Tree) {
	t.Helper()
	harness.RequireFUSE(t)
	for _, tool := range []string{"fusermount3", "unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed: %v", tool, err)
		}
	}
	lower = harness.NewMountpoint(t)
	harness.BuildLower(t, lower, entries)
	must(t, os.Chown(lower, userUID, userGID))
	before = harness.SnapshotTree(lower)
	mp, home = harness.NewMountpoint(t), harness.NewMountpoint(t)
	must(t, os.Chown(mp, userUID, userGID))
	must(t, os.Chown(home, userUID, userGID))
	return lower, mp, home, before
}

func TestUnprivilegedMount(t *testing.T) {
	lower, mp, home, before := unprivilegedDirs(t,
		harness.LowerFile("f", "lower", harness.WithOwner(userUID, userGID)),
		harness.LowerDir("d", harness.WithOwner(userUID, userGID)))
	script := unprivilegedPrelude + `as_user "$BIN" mount --lower "$LOWER" "$MP"
echo "== ops"
as_user sh -c 'echo upper > "$1/f"; cat "$1/f"; touch "$1/d/new"; stat -c "%u:%g %a" "$1/d/new"; rm "$1/f"; ls "$1"' sh "$MP"
echo "== status"
as_user "$BIN" status -C "$MP"
echo "== unmount"
as_user "$BIN" unmount "$MP"
echo "== mounted after unmount: $(grep -c " $MP " /proc/self/mountinfo || true)"
`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "BIN="+userExecutable(t), "LOWER="+lower, "MP="+mp, "HOME_DIR="+home)
	r := harness.RunCmd(t, cmd, []string{"(as uid 1000 in a private mount namespace)"})
	if r.Code != 0 {
		t.Fatalf("an unprivileged mount:\n%s", r)
	}
	for _, want := range []string{"== ops\nupper\n1000:1000 644\nd\n", "== mounted after unmount: 0"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r)
		}
	}
	t.Logf("status of an unprivileged mount:\n%s", r.Stdout[strings.Index(r.Stdout, "== status"):])
	harness.AssertUnchanged(t, before, harness.SnapshotTree(lower))
	leftovers := func() ([]string, error) {
		var out []string
		err := filepath.WalkDir(home, func(p string, d os.DirEntry, err error) error {
			// The daemon may be removing its store meanwhile: what
			// went is ENOENT.
			if errors.Is(err, iofs.ErrNotExist) && p != home {
				return nil
			}
			if err != nil {
				return err
			}
			if strings.HasPrefix(d.Name(), "store-") {
				out = append(out, p)
			}
			return nil
		})
		return out, err
	}
	var left []string
	var walkErr error
	gone := harness.WaitFor(func() bool {
		left, walkErr = leftovers()
		return walkErr != nil || len(left) == 0
	})
	switch {
	case walkErr != nil:
		t.Errorf("looking for the private store in %s: %v", home, walkErr)
	case !gone:
		t.Errorf("the private store is left after unmount: %v", left)
	}
}

// userExecutable returns the agentfs binary at a path other users can
// execute (with agentfs-core beside it).
func userExecutable(t *testing.T) string {
	t.Helper()
	if st, err := os.Stat(harness.Bin()); err == nil && st.Mode()&0o001 != 0 && harness.WorldSearchable(harness.Bin()) {
		return harness.Bin()
	}
	dir := filepath.Join(harness.SharedDir(), "for-users")
	dst := filepath.Join(dir, "agentfs")
	if _, err := os.Stat(dst); err == nil {
		return dst
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyAgentfs(t, dst)
	return dst
}

// TestTwoMountsOfOneLower: two mounts of one lower are independent.
func TestTwoMountsOfOneLower(t *testing.T) {
	a := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "lower")))
	b := harness.NewMount(t, harness.WithExistingLower(a.Lower))
	harness.WriteFile(t, a.Path("f"), "from a")
	must(t, os.Remove(b.Path("f")))
	if got := harness.ReadFile(t, a.Path("f")); got != "from a" {
		t.Errorf("a/f = %q, want %q", got, "from a")
	}
	var st unix.Stat_t
	if err := unix.Lstat(b.Path("f"), &st); err != unix.ENOENT {
		t.Errorf("b/f: %s, want ENOENT", harness.ErrName(err))
	}
	if a.Status.Store == b.Status.Store {
		t.Errorf("two mounts share the private store %s", a.Status.Store)
	}
}
