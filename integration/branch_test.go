package integration

// Branches (the snapshots issue): agentfs branch create/list/delete/
// switch; a switch shows the other branch to every process at once.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBranches: create (from the current state, or --from a snapshot),
// list with origin, creation time and the current marker, switch back
// and forth with the kernel's caches full of the other branch, delete.
func TestBranches(t *testing.T) {
	m := newMount(t, withLower(lowerFile("a", "lower"), lowerFile("d/x", "x")))
	start := time.Now().Add(-time.Second)
	writeFile(t, m.path("a"), "main v1")
	r := mustC(t, m.dir, "branch", "create", "try2")
	id := takeSnapshot(t, m.dir, "m1")
	writeFile(t, m.path("a"), "main v2, after the snapshot")
	mustC(t, m.dir, "branch", "create", "--from", id[:6], "try3")

	branches := listBranches(t, m.dir)
	if len(branches) != 3 || branches[0].Name != "main" || branches[1].Name != "try2" || branches[2].Name != "try3" {
		t.Fatalf("branch list = %+v, want main, try2, try3", branches)
	}
	if b := branches[0]; !b.Current || b.Origin != "" {
		t.Errorf("main = %+v, want current, no origin", b)
	}
	auto := findSnapshot(listSnapshots(t, m.dir), branches[1].Origin)
	if b := branches[1]; b.Current || auto == nil || auto.Kind != "auto" || !strings.Contains(r.stdout, b.Origin) || b.Created.Before(start) {
		t.Errorf("try2 = %+v (its origin %+v), want not current, created now, from an auto snapshot that create named:\n%s", b, auto, r)
	}
	if b := branches[2]; b.Origin != id || b.Current {
		t.Errorf("try3 = %+v, want origin %s", b, id)
	}
	if text := mustC(t, m.dir, "branch", "list").stdout; !strings.Contains(text, "* main") || !strings.Contains(text, "  try2") {
		t.Errorf("branch list does not mark main as current:\n%s", text)
	}

	// Fill the kernel's caches with main.
	readFile(t, m.path("a"))
	listDir(t, m.dir)
	errnoOfStat(m.path("only2"))
	held, err := os.Open(m.path("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	mustC(t, m.dir, "branch", "switch", "try2")
	if b := currentBranch(t, m.dir); b != "try2" {
		t.Errorf("status after switching to try2 says branch %q", b)
	}
	if got := readFile(t, m.path("a")); got != "main v1" {
		t.Errorf("a on try2 = %q, want main v1 (the state it was created from)", got)
	}
	writeFile(t, m.path("a"), "try2")
	writeFile(t, m.path("only2"), "only on try2")
	os.RemoveAll(m.path("d"))
	try2 := snapshotTree(m.dir)
	buf := make([]byte, 64)
	if n, _ := held.ReadAt(buf, 0); string(buf[:n]) != "main v2, after the snapshot" {
		t.Errorf("a held open across the switch reads %q, want the file it opened", buf[:n])
	}

	mustC(t, m.dir, "branch", "switch", "main")
	if got := readFile(t, m.path("a")); got != "main v2, after the snapshot" {
		t.Errorf("a back on main = %q", got)
	}
	if st := lstat(t, m.path("a")); st.Size != int64(len("main v2, after the snapshot")) {
		t.Errorf("a back on main: size %d", st.Size)
	}
	if e := errnoOfStat(m.path("only2")); e != unix.ENOENT {
		t.Errorf("only2 on main: %s, want ENOENT", errName(e))
	}
	if got := readFile(t, m.path("d/x")); got != "x" {
		t.Errorf("d/x on main = %q", got)
	}
	cmd := exec.Command("sh", "-c", "cat a; ls")
	cmd.Dir, cmd.Env = m.dir, append(os.Environ(), "LC_ALL=C")
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "main v2, after the snapshota\nd\n" {
		t.Errorf("another process on main: %q, %v", out, err)
	}

	mustC(t, m.dir, "branch", "switch", "try2")
	for _, d := range diffStates(try2, snapshotTree(m.dir)) {
		t.Errorf("try2 after switching away and back: %s", d)
	}
	mustC(t, m.dir, "branch", "switch", "try3")
	if got := readFile(t, m.path("a")); got != "main v1" {
		t.Errorf("a on try3 (from snapshot %s) = %q, want main v1", id, got)
	}
	mustC(t, m.dir, "branch", "switch", "main")
	mustC(t, m.dir, "branch", "delete", "try2")
	if bs := listBranches(t, m.dir); len(bs) != 2 || bs[1].Name != "try3" {
		t.Errorf("after deleting try2: %+v", bs)
	}
	if s := findSnapshot(listSnapshots(t, m.dir), id); s == nil {
		t.Errorf("snapshot %s is gone with a branch made from it", id)
	}
}

// TestSnapshotSurvivesKill: a snapshot that snapshot create reported
// survives kill -9 of the daemon right after: after clearing the dead
// mount and mounting the store again it is listed, restores, and fsck
// finds the store clean.
func TestSnapshotSurvivesKill(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := newMount(t, withStore(store), withLower(lowerFile("a", "lower")))
	writeFile(t, m.path("a"), "snapped")
	writeFile(t, m.path("new"), "new")
	id := takeSnapshot(t, m.dir, "before the crash")
	pid := m.status.Pid
	syscall.Kill(pid, syscall.SIGKILL)
	if !waitFor(func() bool { return !processAlive(pid) }) {
		t.Fatalf("the daemon (pid %d) survived SIGKILL", pid)
	}
	if r := runAgentfs(t, "unmount", m.dir); r.code != 0 {
		t.Fatalf("agentfs unmount of the dead mount:\n%s", r)
	}
	m.mount()
	if s := findSnapshot(listSnapshots(t, m.dir), id); s == nil || s.Label != "before the crash" {
		t.Fatalf("snapshot %s after kill -9 and remount: %+v", id, s)
	}
	checkFsckClean(t, m.dir)
	writeFile(t, m.path("a"), "after")
	os.Remove(m.path("new"))
	mustC(t, m.dir, "restore", id)
	if got := readFile(t, m.path("a")) + readFile(t, m.path("new")); got != "snappednew" {
		t.Errorf("a and new after restoring %s = %q, want snapped and new", id, got)
	}
}

// checkFsckClean runs agentfs fsck and checks it reports no problem.
func checkFsckClean(t *testing.T, dir string) {
	t.Helper()
	r := agentfsC(t, dir, "fsck")
	if r.code != 0 || !strings.Contains(r.stdout, "no problems found") {
		t.Errorf("fsck: want exit 0 and 'no problems found':\n%s", r)
	}
}
