package integration

// The life of a mount (issue 2): status, unmount from outside, signals,
// a daemon that dies, and a kept store.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStatus: agentfs status from inside the mount (as git finds its
// repository) and with -C, as text and JSON.
func TestStatus(t *testing.T) {
	m := newMount(t, withLower(lowerFile("d/f", "f")))
	writeFile(t, m.path("d/g"), "g")
	st, err := m.fetchStatus()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lower != m.lower || st.Mountpoint != m.dir || !st.Ephemeral || st.Pid <= 0 || st.Backstore != "hostfs" || st.Store == "" {
		t.Errorf("status --json = %+v, want lower %s, mountpoint %s, an ephemeral store, a pid, backstore hostfs", st, m.lower, m.dir)
	}
	if st.Objects < 1 {
		t.Errorf("status --json: objects %d after writing a file, want >= 1", st.Objects)
	}
	if noPT := os.Getenv("AGENTFS_TEST_NO_PASSTHROUGH") == "1"; st.Passthrough == noPT || st.Writeback {
		t.Errorf("status --json: passthrough %v, writeback cache %v; want passthrough %v and no writeback cache (not asked for)",
			st.Passthrough, st.Writeback, !noPT)
	}
	cmd := exec.Command(agentfsBin, "status")
	cmd.Dir = m.path("d")
	r := runCommand(t, cmd, []string{"status"})
	if r.code != 0 {
		t.Fatalf("status from inside the mount:\n%s", r)
	}
	for _, want := range []string{m.lower, "passthrough", "hostfs"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not mention %q:\n%s", want, r.stdout)
		}
	}
}

// waitDaemonGone waits until the daemon has exited and its mount is
// gone.
func waitDaemonGone(t *testing.T, m *mount, pid int) {
	t.Helper()
	if !waitFor(func() bool { return !processAlive(pid) }) {
		t.Fatalf("the daemon (pid %d) did not exit", pid)
	}
	if !waitFor(func() bool { return !isMounted(m.dir) }) {
		t.Errorf("%s is still mounted after the daemon exited", m.dir)
	}
}

// assertStoreDeleted checks that an ephemeral store is gone.
func assertStoreDeleted(t *testing.T, store string) {
	t.Helper()
	if store == "" {
		t.Fatalf("status gave no store")
	}
	if !waitFor(func() bool { _, err := os.Stat(store); return os.IsNotExist(err) }) {
		t.Errorf("the private store %s still exists", store)
	}
}

// TestEndingTheDaemon: agentfs unmount, umount and fusermount3 -u from
// outside, SIGTERM and SIGINT all end the daemon cleanly and delete the
// private store.
func TestEndingTheDaemon(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(t *testing.T, m *mount)
	}{
		{"agentfs unmount", func(t *testing.T, m *mount) {
			if r := runAgentfs(t, "unmount", m.dir); r.code != 0 {
				t.Errorf("agentfs unmount:\n%s", r)
			}
		}},
		{"umount", func(t *testing.T, m *mount) {
			if err := unix.Unmount(m.dir, 0); err != nil {
				t.Fatalf("umount %s: %v", m.dir, err)
			}
		}},
		{"fusermount3 -u", func(t *testing.T, m *mount) {
			if out, err := exec.Command("fusermount3", "-u", m.dir).CombinedOutput(); err != nil {
				t.Fatalf("fusermount3 -u: %v\n%s", err, out)
			}
		}},
		{"SIGTERM", func(t *testing.T, m *mount) { syscall.Kill(m.status.Pid, syscall.SIGTERM) }},
		{"SIGINT", func(t *testing.T, m *mount) { syscall.Kill(m.status.Pid, syscall.SIGINT) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMount(t, withLower(lowerFile("f", "f")))
			writeFile(t, m.path("g"), "g")
			pid, store := m.status.Pid, m.status.Store
			if pid <= 0 || !processAlive(pid) {
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
	m := newMount(t, withLower(lowerFile("f", "f")))
	writeFile(t, m.path("g"), "g")
	pid, store := m.status.Pid, m.status.Store
	syscall.Kill(pid, syscall.SIGKILL)
	if !waitFor(func() bool { return !processAlive(pid) }) {
		t.Fatalf("the daemon (pid %d) survived SIGKILL", pid)
	}
	var st unix.Stat_t
	if err := unix.Stat(m.dir, &st); err != unix.ENOTCONN {
		t.Logf("stat of the dead mount: %s (ENOTCONN expected)", errName(err))
	}
	r := runAgentfs(t, "unmount", m.dir)
	if r.code != 0 {
		t.Errorf("agentfs unmount of a dead mount:\n%s", r)
	}
	if isMounted(m.dir) {
		t.Errorf("%s is still mounted after agentfs unmount of the dead mount", m.dir)
		unix.Unmount(m.dir, unix.MNT_DETACH)
	}
	assertStoreDeleted(t, store)
}

// TestDaemonKilledWithRequestPending: a request the daemon had not
// answered when it died fails with ECONNABORTED, not ENOTCONN. agentfs
// unmount, waiting on the control file at that moment, must still see
// a dead mount and clear it.
func TestDaemonKilledWithRequestPending(t *testing.T) {
	m := newMount(t, withLower(lowerFile("f", "f")))
	pid, store := m.status.Pid, m.status.Store
	// Warm the root's attributes and the control file's dentry, so that
	// the unmount's first request to the daemon is the control file's
	// open.
	var st unix.Stat_t
	unix.Stat(m.dir, &st)
	unix.Stat(filepath.Join(m.dir, ".agentfs.ctl"), &st)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(agentfsBin, "unmount", m.dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal(err)
	}
	// Wait until the unmount sleeps in a FUSE request.
	waiting := waitFor(func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", cmd.Process.Pid))
		return strings.Contains(string(b), "fuse") || strings.Contains(string(b), "request_wait_answer")
	})
	syscall.Kill(pid, syscall.SIGKILL)
	if !waitFor(func() bool { return !processAlive(pid) }) {
		t.Fatalf("the daemon (pid %d) survived SIGKILL", pid)
	}
	err := cmd.Wait()
	if !waiting {
		t.Errorf("agentfs unmount never waited on the stopped daemon")
	}
	if err != nil {
		t.Errorf("agentfs unmount with a request pending when the daemon died: %v\nstdout: %s\nstderr: %s", err, &stdout, &stderr)
	}
	if isMounted(m.dir) {
		t.Errorf("%s is still mounted after agentfs unmount of the dead mount", m.dir)
		unix.Unmount(m.dir, unix.MNT_DETACH)
	}
	assertStoreDeleted(t, store)
}

// TestKeptStoreSurvivesKill: with --store, what a program fsync'ed
// survives kill -9 of the daemon (DESIGN.md, crash safety).
func TestKeptStoreSurvivesKill(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := newMount(t, withStore(store), withLower(lowerFile("f", "lower"), lowerFile("gone", "g")))
	f, err := os.OpenFile(m.path("durable"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("fsynced")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	w, err := os.OpenFile(m.path("f"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("copied up and fsynced")
	w.Sync()
	w.Close()
	pid := m.status.Pid
	syscall.Kill(pid, syscall.SIGKILL)
	if !waitFor(func() bool { return !processAlive(pid) }) {
		t.Fatalf("the daemon (pid %d) survived SIGKILL", pid)
	}
	if r := runAgentfs(t, "unmount", m.dir); r.code != 0 {
		t.Errorf("agentfs unmount of the dead mount:\n%s", r)
	}
	if _, err := os.Stat(store); err != nil {
		t.Fatalf("the kept store is gone after clearing a dead mount: %v", err)
	}
	m.mount()
	if got := readFile(t, m.path("durable")); got != "fsynced" {
		t.Errorf("after kill -9 and remount: durable = %q, want %q", got, "fsynced")
	}
	if got := readFile(t, m.path("f")); got != "copied up and fsynced" {
		t.Errorf("after kill -9 and remount: f = %q, want %q", got, "copied up and fsynced")
	}
}

// TestKeptStorePersists: with --store every kind of change survives
// unmount and mount, stat for stat, also on another mountpoint.
func TestKeptStorePersists(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := newMount(t, withStore(store), withLower(
		lowerFile("edit", "lower edit"),
		lowerFile("gone", "gone"),
		lowerFile("meta", "meta", withXattr("user.a", "1")),
		lowerFile("d/x", "x"),
		lowerFile("rmdir/x", "x"),
		lowerFile("moved/y", "y"),
		lowerSymlink("link", "edit"),
		lowerFile("h1", "h"),
		lowerSparse("sparse", 64<<20, map[int64]string{0: "s"}),
		lowerDir("keep"),
	))
	writeFile(t, m.path("edit"), "upper edit")
	os.Remove(m.path("gone"))
	unix.Chmod(m.path("meta"), 0o600)
	unix.Chown(m.path("meta"), 12, 34)
	unix.Setxattr(m.path("meta"), "user.b", []byte("2"), 0)
	unix.Removexattr(m.path("meta"), "user.a")
	unix.UtimesNano(m.path("meta"), []unix.Timespec{ts(1234, 5), ts(5678, 9)})
	os.RemoveAll(m.path("rmdir"))
	os.RemoveAll(m.path("d"))
	os.Mkdir(m.path("d"), 0o700) // opaque
	writeFile(t, m.path("d/new"), "new")
	os.Rename(m.path("moved"), m.path("keep/moved"))
	os.Symlink("d/new", m.path("newlink"))
	unix.Lchown(m.path("link"), 5, 5)
	os.Link(m.path("h1"), m.path("h2"))
	unix.Mkfifo(m.path("fifo"), 0o640)
	if f, err := os.OpenFile(m.path("sparse"), os.O_WRONLY, 0); err == nil {
		f.WriteAt([]byte("t"), 32<<20)
		f.Close()
	}
	os.Truncate(m.path("h1"), 0)

	before := snapshotTree(m.dir)
	if before.err != nil {
		t.Fatal(before.err)
	}
	otherMountpoint := newMountpoint(t) // removed after the mount's cleanup
	t.Run("same mountpoint", func(t *testing.T) {
		m.remount()
		for _, d := range diffMountTrees(before, snapshotTree(m.dir)) {
			t.Errorf("after unmount and mount: %s", d)
		}
	})
	t.Run("another mountpoint", func(t *testing.T) {
		m.unmount()
		m.dir = otherMountpoint
		m.mount()
		after := snapshotTree(m.dir)
		after.root = before.root
		for _, d := range diffMountTrees(before, after) {
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
func unprivilegedDirs(t *testing.T, entries ...lowerEntry) (lower, mp, home string, before tree) {
	t.Helper()
	requireFUSE(t)
	for _, tool := range []string{"fusermount3", "unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed: %v", tool, err)
		}
	}
	lower = newMountpoint(t)
	buildLower(t, lower, entries)
	os.Chown(lower, userUID, userGID)
	before = snapshotTree(lower)
	mp, home = newMountpoint(t), newMountpoint(t)
	os.Chown(mp, userUID, userGID)
	os.Chown(home, userUID, userGID)
	return lower, mp, home, before
}

func TestUnprivilegedMount(t *testing.T) {
	lower, mp, home, before := unprivilegedDirs(t,
		lowerFile("f", "lower", withOwner(userUID, userGID)),
		lowerDir("d", withOwner(userUID, userGID)))
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
	r := runCommand(t, cmd, []string{"(as uid 1000 in a private mount namespace)"})
	if r.code != 0 {
		t.Fatalf("an unprivileged mount:\n%s", r)
	}
	for _, want := range []string{"== ops\nupper\n1000:1000 644\nd\n", "== mounted after unmount: 0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r)
		}
	}
	t.Logf("status of an unprivileged mount:\n%s", r.stdout[strings.Index(r.stdout, "== status"):])
	assertUnchanged(t, before, snapshotTree(lower))
	leftovers := func() []string {
		var out []string
		filepath.WalkDir(home, func(p string, d os.DirEntry, err error) error {
			if err == nil && strings.HasPrefix(d.Name(), "store-") {
				out = append(out, p)
			}
			return nil
		})
		return out
	}
	if !waitFor(func() bool { return len(leftovers()) == 0 }) {
		t.Errorf("the private store is left after unmount: %v", leftovers())
	}
}

// userExecutable returns the agentfs binary at a path other users can
// execute.
func userExecutable(t *testing.T) string {
	t.Helper()
	if st, err := os.Stat(agentfsBin); err == nil && st.Mode()&0o001 != 0 && worldSearchable(agentfsBin) {
		return agentfsBin
	}
	dst := filepath.Join(harnessDir, "agentfs-for-users")
	if _, err := os.Stat(dst); err == nil {
		return dst
	}
	b, err := os.ReadFile(agentfsBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestTwoMountsOfOneLower: two mounts of one lower are independent.
func TestTwoMountsOfOneLower(t *testing.T) {
	a := newMount(t, withLower(lowerFile("f", "lower")))
	b := newMount(t, withExistingLower(a.lower))
	writeFile(t, a.path("f"), "from a")
	os.Remove(b.path("f"))
	if got := readFile(t, a.path("f")); got != "from a" {
		t.Errorf("a/f = %q, want %q", got, "from a")
	}
	var st unix.Stat_t
	if err := unix.Lstat(b.path("f"), &st); err != unix.ENOENT {
		t.Errorf("b/f: %s, want ENOENT", errName(err))
	}
	if a.status.Store == b.status.Store {
		t.Errorf("two mounts share the private store %s", a.status.Store)
	}
}
