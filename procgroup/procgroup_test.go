package procgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/procfs"
)

// newGroup makes a group for the test, or skips where none can be made
// (not root), unless AGENTFS_REQUIRE_FUSE=1 (CI, as root) says it must
// run (testenv.Skip).
func newGroup(t *testing.T) *Group {
	t.Helper()
	g, err := New(fmt.Sprintf("agentfs-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if errors.Is(err, ErrUnavailable) {
		testenv.Skip(t, testenv.Cgroups, "no cgroup here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return g
}

// TestStopEndsEveryProcess: a command that leaves a background process,
// a double-forked one and one in a session of its own is ended whole;
// no pid of them is left.
func TestStopEndsEveryProcess(t *testing.T) {
	g := newGroup(t)
	pidfile := filepath.Join(t.TempDir(), "pids")
	script := `sleep 300 & echo $! >> ` + pidfile + `
(sleep 301 & echo $! >> ` + pidfile + `) &
setsid sh -c 'echo $$ >> ` + pidfile + `; exec sleep 302' &
trap '' TERM
echo $$ >> ` + pidfile + `
while :; do sleep 1; done`
	cmd := exec.Command("sh", "-c", script)
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for len(pids) < 4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		b, _ := os.ReadFile(pidfile) // not written yet, at first
		pids = nil
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) < 4 {
		t.Fatalf("the script started %v, want 4 processes", pids)
	}
	in, err := g.Pids()
	if err != nil || len(in) < 4 {
		t.Fatalf("Pids = %v, %v; want at least the 4 started", in, err)
	}
	for _, pid := range pids {
		if got := Of(pid); got != g.Path() {
			t.Errorf("process %d is in cgroup %q, want %q", pid, got, g.Path())
		}
	}
	if Of(os.Getpid()) == g.Path() {
		t.Error("the test itself is in the group")
	}
	start := time.Now()
	// The shell ignores SIGTERM: the grace runs out and SIGKILL ends it.
	if err := g.Stop(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("Stop took %v: it did not wait the grace for the shell that ignores SIGTERM", took)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("the killed shell exited 0")
	}
	for _, pid := range pids {
		if procfs.Alive(pid) {
			t.Errorf("process %d is still alive after Stop", pid)
		}
	}
	if empty, err := g.Empty(); err != nil || !empty {
		t.Errorf("Empty after Stop = %v, %v", empty, err)
	}
}

// TestStopWithinGrace: processes that end on SIGTERM end the stop
// before the grace runs out.
func TestStopWithinGrace(t *testing.T) {
	g := newGroup(t)
	cmd := exec.Command("sleep", "300")
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("sleep ended with %v, want SIGTERM (it was not given its grace)", err)
	}
}
