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

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/procfs"
	"golang.org/x/sys/unix"
)

// TestBranches: create (from the current state, or --from a snapshot),
// list with origin, creation time and the current marker, switch back
// and forth with the kernel's caches full of the other branch, delete.
func TestBranches(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a", "lower"), harness.LowerFile("d/x", "x")))
	start := time.Now().Add(-time.Second)
	harness.WriteFile(t, m.Path("a"), "main v1")
	r := mustC(t, m.Dir, "branch", "create", "try2")
	id := takeSnapshot(t, m.Dir, "m1")
	harness.WriteFile(t, m.Path("a"), "main v2, after the snapshot")
	mustC(t, m.Dir, "branch", "create", "--from", id[:6], "try3")

	branches := listBranches(t, m.Dir)
	if len(branches) != 3 || branches[0].Name != "main" || branches[1].Name != "try2" || branches[2].Name != "try3" {
		t.Fatalf("branch list = %+v, want main, try2, try3", branches)
	}
	if b := branches[0]; !b.Current || b.Origin != "" {
		t.Errorf("main = %+v, want current, no origin", b)
	}
	auto := findSnapshot(listSnapshots(t, m.Dir), branches[1].Origin)
	if b := branches[1]; b.Current || auto == nil || auto.Kind != "auto" || !strings.Contains(r.Stdout, b.Origin) || b.Created.Before(start) {
		t.Errorf("try2 = %+v (its origin %+v), want not current, created now, from an auto snapshot that create named:\n%s", b, auto, r)
	}
	if b := branches[2]; b.Origin != id || b.Current {
		t.Errorf("try3 = %+v, want origin %s", b, id)
	}
	if text := mustC(t, m.Dir, "branch", "list").Stdout; !strings.Contains(text, "* main") || !strings.Contains(text, "  try2") {
		t.Errorf("branch list does not mark main as current:\n%s", text)
	}

	// Fill the kernel's caches with main.
	harness.ReadFile(t, m.Path("a"))
	harness.ListDir(t, m.Dir)
	if e := errnoOfStat(m.Path("only2")); e != unix.ENOENT {
		t.Fatalf("only2 on main before the switch: %s, want ENOENT", harness.ErrName(e))
	}
	held, err := os.Open(m.Path("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	mustC(t, m.Dir, "branch", "switch", "try2")
	if b := currentBranch(t, m.Dir); b != "try2" {
		t.Errorf("status after switching to try2 says branch %q", b)
	}
	if got := harness.ReadFile(t, m.Path("a")); got != "main v1" {
		t.Errorf("a on try2 = %q, want main v1 (the state it was created from)", got)
	}
	harness.WriteFile(t, m.Path("a"), "try2")
	harness.WriteFile(t, m.Path("only2"), "only on try2")
	must(t, os.RemoveAll(m.Path("d")))
	try2 := harness.SnapshotTree(m.Dir)
	buf := make([]byte, 64)
	if n, _ := held.ReadAt(buf, 0); string(buf[:n]) != "main v2, after the snapshot" {
		t.Errorf("a held open across the switch reads %q, want the file it opened", buf[:n])
	}

	mustC(t, m.Dir, "branch", "switch", "main")
	if got := harness.ReadFile(t, m.Path("a")); got != "main v2, after the snapshot" {
		t.Errorf("a back on main = %q", got)
	}
	if st := harness.Lstat(t, m.Path("a")); st.Size != int64(len("main v2, after the snapshot")) {
		t.Errorf("a back on main: size %d", st.Size)
	}
	if e := errnoOfStat(m.Path("only2")); e != unix.ENOENT {
		t.Errorf("only2 on main: %s, want ENOENT", harness.ErrName(e))
	}
	if got := harness.ReadFile(t, m.Path("d/x")); got != "x" {
		t.Errorf("d/x on main = %q", got)
	}
	cmd := exec.Command("sh", "-c", "cat a; ls")
	cmd.Dir, cmd.Env = m.Dir, append(os.Environ(), "LC_ALL=C")
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "main v2, after the snapshota\nd\n" {
		t.Errorf("another process on main: %q, %v", out, err)
	}

	mustC(t, m.Dir, "branch", "switch", "try2")
	for _, d := range diffStates(try2, harness.SnapshotTree(m.Dir)) {
		t.Errorf("try2 after switching away and back: %s", d)
	}
	mustC(t, m.Dir, "branch", "switch", "try3")
	if got := harness.ReadFile(t, m.Path("a")); got != "main v1" {
		t.Errorf("a on try3 (from snapshot %s) = %q, want main v1", id, got)
	}
	mustC(t, m.Dir, "branch", "switch", "main")
	mustC(t, m.Dir, "branch", "delete", "try2")
	if bs := listBranches(t, m.Dir); len(bs) != 2 || bs[1].Name != "try3" {
		t.Errorf("after deleting try2: %+v", bs)
	}
	if s := findSnapshot(listSnapshots(t, m.Dir), id); s == nil {
		t.Errorf("snapshot %s is gone with a branch made from it", id)
	}
}

// TestSnapshotSurvivesKill: a snapshot that snapshot create reported
// survives kill -9 of the daemon right after: after clearing the dead
// mount and mounting the store again it is listed, restores, and fsck
// finds the store clean.
func TestSnapshotSurvivesKill(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := harness.NewMount(t, harness.WithStore(store), harness.WithLower(harness.LowerFile("a", "lower")))
	harness.WriteFile(t, m.Path("a"), "snapped")
	harness.WriteFile(t, m.Path("new"), "new")
	id := takeSnapshot(t, m.Dir, "before the crash")
	pid := m.Status.Pid
	mustf(t, syscall.Kill(pid, syscall.SIGKILL), "kill -9 of the daemon (pid %d)", pid)
	if !harness.WaitFor(func() bool { return !procfs.Alive(pid) }) {
		t.Fatalf("the daemon (pid %d) survived SIGKILL", pid)
	}
	if r := harness.Run(t, "unmount", m.Dir); r.Code != 0 {
		t.Fatalf("agentfs unmount of the dead mount:\n%s", r)
	}
	m.Mount()
	if s := findSnapshot(listSnapshots(t, m.Dir), id); s == nil || s.Label != "before the crash" {
		t.Fatalf("snapshot %s after kill -9 and remount: %+v", id, s)
	}
	checkFsckClean(t, m.Dir)
	harness.WriteFile(t, m.Path("a"), "after")
	must(t, os.Remove(m.Path("new")))
	mustC(t, m.Dir, "restore", id)
	if got := harness.ReadFile(t, m.Path("a")) + harness.ReadFile(t, m.Path("new")); got != "snappednew" {
		t.Errorf("a and new after restoring %s = %q, want snapped and new", id, got)
	}
}

// checkFsckClean runs agentfs fsck and checks it reports no problem.
func checkFsckClean(t *testing.T, dir string) {
	t.Helper()
	r := agentfsC(t, dir, "fsck")
	if r.Code != 0 || !strings.Contains(r.Stdout, "no problems found") {
		t.Errorf("fsck: want exit 0 and 'no problems found':\n%s", r)
	}
}
