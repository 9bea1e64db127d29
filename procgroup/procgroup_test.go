package procgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
		if got := Of(pid); !Within(got, g.Path()) {
			t.Errorf("process %d is in cgroup %q, want %q or below", pid, got, g.Path())
		}
	}
	if Within(Of(os.Getpid()), g.Path()) {
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

// waitPids waits for the n pids a script appends to file.
func waitPids(t *testing.T, file string, n int) []int {
	t.Helper()
	var pids []int
	for deadline := time.Now().Add(10 * time.Second); len(pids) < n && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		b, _ := os.ReadFile(file) // not written yet, at first
		pids = nil
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) < n {
		t.Fatalf("the script wrote pids %v, want %d", pids, n)
	}
	return pids
}

// exitSignal is the signal that ended a command, or 0.
func exitSignal(err error) syscall.Signal {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			return ws.Signal()
		}
	}
	return 0
}

// TestStartAfterKill: a command started again after a stop that needed
// SIGKILL runs (in a fresh leaf: a cgroup once killed kills whatever is
// cloned into it), and the leaf of the killed run is removed.
func TestStartAfterKill(t *testing.T) {
	for _, canKill := range []bool{true, false} {
		t.Run(fmt.Sprintf("cgroup.kill=%v", canKill), func(t *testing.T) {
			g := newGroup(t)
			if canKill && !g.canKill {
				testenv.Skip(t, testenv.CgroupKill, "this kernel has no cgroup.kill")
			}
			g.canKill = canKill
			pidfile := filepath.Join(t.TempDir(), "pids")
			first := exec.Command("sh", "-c", "trap '' TERM; echo $$ > "+pidfile+"; while :; do sleep 1; done")
			if err := g.Start(first); err != nil {
				t.Fatal(err)
			}
			pid := waitPids(t, pidfile, 1)[0]
			firstLeaf := Of(pid)
			if err := g.Stop(100 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if sig := exitSignal(first.Wait()); sig != syscall.SIGKILL {
				t.Fatalf("the shell that ignores SIGTERM ended by signal %v, want SIGKILL", sig)
			}
			again := exec.Command("sh", "-c", "exit 3")
			if err := g.Start(again); err != nil {
				t.Fatal(err)
			}
			if err := again.Wait(); again.ProcessState.ExitCode() != 3 {
				t.Errorf("the command started after the kill ended with %v, want exit status 3", err)
			}
			if _, err := os.Stat(filepath.Join(g.Dir(), filepath.Base(firstLeaf))); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the killed run's leaf %s is still there after the next start: %v", firstLeaf, err)
			}
		})
	}
}

// TestStopContinuesStopped: a stopped process (SIGSTOP) is continued,
// so that it acts on its SIGTERM within the grace.
func TestStopContinuesStopped(t *testing.T) {
	g := newGroup(t)
	cmd := exec.Command("sleep", "300")
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	must(t, cmd.Process.Signal(syscall.SIGSTOP))
	start := time.Now()
	if err := g.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Stop took %v: the stopped process did not act on SIGTERM", took)
	}
	if sig := exitSignal(cmd.Wait()); sig != syscall.SIGTERM {
		t.Errorf("the stopped sleep ended by signal %v, want SIGTERM", sig)
	}
}

// TestStopNestedCgroup: a process its command moved into a cgroup below
// its leaf is in the group, gets its SIGTERM, and the nested cgroup is
// removed with the group.
func TestStopNestedCgroup(t *testing.T) {
	g := newGroup(t)
	cmd := exec.Command("sleep", "300")
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	leaf := filepath.Join(filepath.Dir(g.Dir()), strings.TrimPrefix(Of(cmd.Process.Pid), filepath.Dir(g.Path())))
	nested := filepath.Join(leaf, "nested")
	must(t, os.Mkdir(nested, 0o755))
	must(t, os.WriteFile(filepath.Join(nested, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0))
	if got := Of(cmd.Process.Pid); !strings.HasSuffix(got, "/nested") || !Within(got, g.Path()) {
		t.Fatalf("the process is in cgroup %q, want %s/.../nested", got, g.Path())
	}
	if pids, err := g.Pids(); err != nil || len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Errorf("Pids = %v, %v; want [%d]", pids, err, cmd.Process.Pid)
	}
	if err := g.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if sig := exitSignal(cmd.Wait()); sig != syscall.SIGTERM {
		t.Errorf("the process in the nested cgroup ended by signal %v, want SIGTERM", sig)
	}
	must(t, g.Close())
	if _, err := os.Stat(g.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the group's directory is left after Close: %v", err)
	}
}

// TestStopWithoutCgroupKill: without cgroup.kill (before Linux 5.14),
// the escalation freezes the group and kills each process.
func TestStopWithoutCgroupKill(t *testing.T) {
	g := newGroup(t)
	g.canKill = false
	pidfile := filepath.Join(t.TempDir(), "pids")
	script := `trap '' TERM
sh -c 'trap "" TERM; echo $$ >> ` + pidfile + `; while :; do sleep 1; done' &
echo $$ >> ` + pidfile + `
while :; do sleep 1; done`
	cmd := exec.Command("sh", "-c", script)
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	pids := waitPids(t, pidfile, 2)
	if err := g.Stop(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if sig := exitSignal(cmd.Wait()); sig != syscall.SIGKILL {
		t.Errorf("the shell ended by signal %v, want SIGKILL", sig)
	}
	for _, pid := range pids {
		if procfs.Alive(pid) {
			t.Errorf("process %d is still alive after Stop", pid)
		}
	}
	if v, err := g.event("frozen"); err != nil || v != "0" {
		t.Errorf("the group is left frozen = %q, %v; want thawed", v, err)
	}
}

// TestPlainRun: a group used for one command: New, Start, Wait, Close.
func TestPlainRun(t *testing.T) {
	g := newGroup(t)
	cmd := exec.Command("sh", "-c", "exit 5")
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 5 {
		t.Errorf("the command ended with %v, want exit status 5", err)
	}
	if empty, err := g.Empty(); err != nil || !empty {
		t.Errorf("Empty after the command's exit = %v, %v", empty, err)
	}
}

// TestCgroupDir: the directory of a cgroup is found on the cgroup2
// mount whose root holds it, relative to that root.
func TestCgroupDir(t *testing.T) {
	mounts := []procfs.Mount{
		{FsType: "cgroup", Root: "/", Mountpoint: "/sys/fs/cgroup/cpu"},
		{FsType: "cgroup2", Root: "/user.slice", Mountpoint: "/mnt/user"},
		{FsType: "cgroup2", Root: "/", Mountpoint: "/sys/fs/cgroup"},
	}
	for _, tc := range []struct{ path, want, err string }{
		{"/user.slice/session-1.scope", "/mnt/user/session-1.scope", ""},
		{"/user.slice", "/mnt/user", ""},
		{"/user.slicex/a", "/sys/fs/cgroup/user.slicex/a", ""},
		{"/system.slice/x", "/sys/fs/cgroup/system.slice/x", ""},
		{"/", "/sys/fs/cgroup", ""},
		{"/../outside", "", "outside its cgroup namespace"},
	} {
		got, err := cgroupDir(mounts, tc.path)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("cgroupDir(%q) = %q, %v; want %q, error %q", tc.path, got, err, tc.want, tc.err)
		}
	}
	if _, err := cgroupDir(mounts[:2], "/system.slice/x"); err == nil || !strings.Contains(err.Error(), "no cgroup2 mount here shows") {
		t.Errorf("a cgroup outside the only mount's root: %v", err)
	}
	if _, err := cgroupDir(mounts[:1], "/x"); err == nil || !strings.Contains(err.Error(), "no cgroup2 file system") {
		t.Errorf("no cgroup2 mount: %v", err)
	}
}

// TestWithin: membership of the group is by path prefix, whole names
// only.
func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		p, top string
		want   bool
	}{
		{"/a/g", "/a/g", true},
		{"/a/g/run-1", "/a/g", true},
		{"/a/g/run-1/nested", "/a/g", true},
		{"/a/gx", "/a/g", false},
		{"/a", "/a/g", false},
		{"", "/a/g", false},
		{"/x", "/", true},
	} {
		if got := Within(tc.p, tc.top); got != tc.want {
			t.Errorf("Within(%q, %q) = %v, want %v", tc.p, tc.top, got, tc.want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestProbe: the probe of New passes for a cgroup and refuses, as
// ErrUnavailable naming CLONE_INTO_CGROUP, where a process cannot be
// started into the directory (here: one that is no cgroup; on a kernel
// before 5.7, any).
func TestProbe(t *testing.T) {
	g := newGroup(t)
	if err := g.probe(); err != nil {
		t.Errorf("probe of a group: %v", err)
	}
	if empty, err := g.Empty(); err != nil || !empty {
		t.Errorf("the probe left a process in the group: empty %v, %v", empty, err)
	}
	bad := &Group{dir: t.TempDir()}
	err := bad.probe()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "CLONE_INTO_CGROUP") || !strings.Contains(err.Error(), "Linux 5.7") {
		t.Errorf("probe of a plain directory = %v; want ErrUnavailable naming CLONE_INTO_CGROUP and Linux 5.7", err)
	}
	t.Logf("the refusal: %v", err)
}

// TestProbeRefused: where the caller may not move a process into the
// cgroup (clone3 fails with EACCES, as it does in a cgroup delegated
// wrongly), the probe refuses: that EACCES is not taken for the exec's.
// The probe runs on a thread whose uid is nobody's, against root's
// group.
func TestProbeRefused(t *testing.T) {
	testenv.RequireRoot(t, "probing as another user")
	g := newGroup(t)
	res := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, and its
		// uid with it.
		runtime.LockOSThread()
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); errno != 0 {
			res <- fmt.Errorf("setresuid: %w", errno)
			return
		}
		res <- g.probe()
	}()
	err := <-res
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("probe as nobody of root's cgroup = %v; want ErrUnavailable saying the start was refused", err)
	}
	if empty, e := g.Empty(); e != nil || !empty {
		t.Errorf("the refused probe left a process in the group: empty %v, %v", empty, e)
	}
}

// TestStartKeepsBusyLeaf: a Start removes the leaves of earlier runs
// that are empty, but leaves a busy one whole: the empty cgroups its
// processes made below it stay.
func TestStartKeepsBusyLeaf(t *testing.T) {
	g := newGroup(t)
	first := exec.Command("sleep", "300")
	if err := g.Start(first); err != nil {
		t.Fatal(err)
	}
	if got := g.Leaf(); got != "run-1" {
		t.Errorf("Leaf after the first start = %q, want run-1", got)
	}
	empty := filepath.Join(g.Dir(), "run-1", "made-by-the-command")
	must(t, os.Mkdir(empty, 0o755))
	second := exec.Command("sh", "-c", "exit 0")
	if err := g.Start(second); err != nil {
		t.Fatal(err)
	}
	_ = second.Wait() // its exit is not the point
	if _, err := os.Stat(empty); err != nil {
		t.Errorf("the empty cgroup below the busy leaf run-1 was removed by the next start: %v", err)
	}
	if got := g.Leaf(); got != "run-2" {
		t.Errorf("Leaf after the second start = %q, want run-2", got)
	}
	must(t, g.Stop(time.Minute))
	_ = first.Wait() // stopped
}

// TestLeafOf: the leaf a cgroup path is in or below, for the top of a
// group.
func TestLeafOf(t *testing.T) {
	for _, tc := range []struct{ p, top, want string }{
		{"/a/g/run-3", "/a/g", "run-3"},
		{"/a/g/run-3/sub/x", "/a/g", "run-3"},
		{"/a/g", "/a/g", ""},
		{"/a/gx/run-1", "/a/g", ""},
		{"/a", "/a/g", ""},
		{"", "/a/g", ""},
	} {
		if got := LeafOf(tc.p, tc.top); got != tc.want {
			t.Errorf("LeafOf(%q, %q) = %q, want %q", tc.p, tc.top, got, tc.want)
		}
	}
}

// TestPidList: an error lists at most maxListedPids pids, and how many
// more.
func TestPidList(t *testing.T) {
	pids := make([]int, 5000)
	for i := range pids {
		pids[i] = 100000 + i
	}
	got := pidList(pids)
	if len(got) > 200 || !strings.HasSuffix(got, "and 4980 more") {
		t.Errorf("pidList of 5000 = %q (%d bytes), want 20 of them and the count", got, len(got))
	}
	if got := pidList([]int{1, 2}); got != "[1 2]" {
		t.Errorf("pidList of two = %q", got)
	}
}
