package session

import (
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

// sleeperEnv makes the test binary sleep instead of running the tests:
// a process of the test binary (the "agentfs" of these tests, as it is
// the binary of this process) to point a record at.
const sleeperEnv = "AGENTFS_TEST_SLEEPER"

func TestMain(m *testing.M) {
	if os.Getenv(sleeperEnv) != "" {
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	if report := os.Getenv(terminalEnv); report != "" {
		os.Exit(terminalScenario(report))
	}
	os.Exit(m.Run())
}

// startProcess starts cmd and ends it with the test; it returns its
// pid and start time.
func startProcess(t *testing.T, cmd *exec.Cmd) (int, uint64) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		testenv.Skip(t, testenv.Program(cmd.Args[0]), "cannot start %v here: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // a sleeper: nothing to lose
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	var start uint64
	for range 100 {
		if start = procfs.StartTime(pid); start != 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return pid, start
}

// sleeper starts the test binary as a sleeper, with attr.
func sleeper(t *testing.T, attr *syscall.SysProcAttr) (int, uint64) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), sleeperEnv+"=1")
	cmd.SysProcAttr = attr
	return startProcess(t, cmd)
}

// TestCheckPrivateDir: a directory of the caller's, writable by no one
// else, below directories no one else can change, passes; one writable
// by others, or another user's, or below another user's, is refused.
func TestCheckPrivateDir(t *testing.T) {
	euid := os.Geteuid()
	base := t.TempDir()
	dir := filepath.Join(base, "sessions")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkPrivateDir(dir, euid); err != nil {
		t.Fatalf("a private directory: %v", err)
	}
	for _, c := range []struct {
		mode os.FileMode
		want string
	}{{0o777, "can be written by other users (mode 777)"}, {0o770, "mode 770"}, {0o702, "mode 702"}} {
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := checkPrivateDir(dir, euid); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("mode %o: error %v, want one saying %q", c.mode, err, c.want)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// An ancestor writable by others: refused unless sticky.
	if err := os.Chmod(base, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := checkPrivateDir(dir, euid); err == nil || !strings.Contains(err.Error(), "above "+dir) {
		t.Errorf("below a world-writable directory: error %v, want one naming %s", err, base)
	}
	if err := os.Chmod(base, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if err := checkPrivateDir(dir, euid); err != nil {
		t.Errorf("below a sticky directory: %v", err)
	}
	if err := checkPrivateDir(dir, euid+1); err == nil || !strings.Contains(err.Error(), "belongs to uid "+strconv.Itoa(euid)) {
		t.Errorf("checked for another uid: error %v, want one saying it belongs to uid %d", err, euid)
	}
	if euid != 0 {
		return // what follows chowns
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(base, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := checkPrivateDir(dir, euid); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534, who could replace") {
		t.Errorf("below another user's directory: error %v", err)
	}
}

// TestOpenDaemonProcess: this process (the binary's own, in its own
// namespaces) is held; a start time that is not the process's, a
// process of another binary, and one in a mount namespace of another
// user namespace are refused.
func TestOpenDaemonProcess(t *testing.T) {
	self, start := os.Getpid(), procfs.StartTime(os.Getpid())
	d, err := openDaemonProcess(self, start)
	if err != nil {
		t.Fatalf("this process: %v", err)
	}
	d.close()
	if _, err := openDaemonProcess(self, start+1); err == nil || !strings.Contains(err.Error(), "its pid was reused") {
		t.Errorf("a start time not the process's: error %v", err)
	}
	if _, err := openDaemonProcess(self, 0); err == nil {
		t.Error("no start time: no error")
	}

	pid, st := startProcess(t, exec.Command("sleep", "60"))
	if _, err := openDaemonProcess(pid, st); err == nil || !strings.Contains(err.Error(), "not agentfs") {
		t.Errorf("a process of sleep: error %v, want one saying it is not agentfs", err)
	}
	// A binary named agentfs is not enough: anyone can build one.
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), "agentfs")
	if err := os.WriteFile(copied, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copied)
	cmd.Env = append(os.Environ(), sleeperEnv+"=1")
	pid, st = startProcess(t, cmd)
	if _, err := openDaemonProcess(pid, st); err == nil || !strings.Contains(err.Error(), "not this agentfs") {
		t.Errorf("a process of another binary named agentfs: error %v, want one saying it is not this agentfs", err)
	}

	pid, st = sleeper(t, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}})
	if _, err := openDaemonProcess(pid, st); err == nil || !strings.Contains(err.Error(), "belongs to another user namespace") {
		t.Errorf("a mount namespace of another user namespace: error %v", err)
	}
	pid, st = sleeper(t, nil)
	d, err = openDaemonProcess(pid, st)
	if err != nil {
		t.Fatalf("a sleeper in this process's namespaces: %v", err)
	}
	d.close()
}

// TestEnterThroughSymlink: the sessions directory reached through a
// symbolic link (XDG_STATE_HOME=/tmp/link) is checked and read as
// resolved, so that the link, whoever owns it, cannot be pointed
// elsewhere between the check and the read; the check of a path does
// not follow a link on it.
func TestEnterThroughSymlink(t *testing.T) {
	testenv.RequireRoot(t, "a link another user owns")
	base := t.TempDir()
	state := filepath.Join(base, "state")
	link := filepath.Join(base, "link")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(state, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(state, "sessions"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkPrivateDir(filepath.Join(link, "sessions"), 0); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("a path through a link of uid 65534: error %v, want the link refused", err)
	}
	t.Setenv("XDG_STATE_HOME", link)
	project := t.TempDir()
	r, err := Create(project, project, []string{"agent"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.SessionDir(), link) {
		t.Fatalf("the session's directory %s is not through the link %s", r.SessionDir(), link)
	}
	pid, start := sleeper(t, nil)
	r.State, r.DaemonPid, r.DaemonStart = StateRunning, pid, start
	if err := r.Save(); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckEnter(); err != nil {
		t.Errorf("CheckEnter of a session whose state directory is reached through a link: %v", err)
	}
}

// TestRefuseEnter: what the record alone refuses, and the record read
// again once its directories are checked.
func TestRefuseEnter(t *testing.T) {
	r := newTestSession(t)
	pid, start := sleeper(t, nil)
	r.State, r.DaemonPid, r.DaemonStart = StateRunning, pid, start
	if err := r.Save(); err != nil {
		t.Fatal(err)
	}
	if err := r.refuseEnter(0); err != nil {
		t.Errorf("a running session, as root: %v", err)
	}
	if err := r.refuseEnter(1000); err == nil || !strings.Contains(err.Error(), "needs root") {
		t.Errorf("a running session, as uid 1000: error %v, want one saying it needs root", err)
	}
	ns := *r
	ns.UserNamespace = true
	if err := ns.refuseEnter(0); err == nil || !strings.Contains(err.Error(), "user namespace") {
		t.Errorf("a session in a user namespace: error %v", err)
	}
	old := *r
	old.DaemonStart = 0
	if err := old.refuseEnter(0); err == nil || !strings.Contains(err.Error(), "no start time") {
		t.Errorf("a record without the daemon's start time: error %v", err)
	}
	gone := *r
	gone.DaemonStart++
	if err := gone.refuseEnter(0); err == nil || !strings.Contains(err.Error(), "is not running") {
		t.Errorf("a daemon with another start time: error %v", err)
	}
	testenv.RequireRoot(t, "the checks past the record")
	if err := r.CheckEnter(); err != nil {
		t.Fatalf("CheckEnter of a session whose daemon is a sleeper of this binary: %v", err)
	}
	// The record in memory is not what counts: the file is read again.
	forged := *r
	forged.DaemonPid = os.Getppid()
	forged.DaemonStart = procfs.StartTime(forged.DaemonPid)
	if err := forged.CheckEnter(); err != nil || forged.DaemonPid != pid {
		t.Errorf("CheckEnter of a record changed in memory: %v, daemon pid %d, want %d (the file's)", err, forged.DaemonPid, pid)
	}
	base := filepath.Dir(r.SessionDir())
	if err := os.Chmod(base, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckEnter(); err == nil || !strings.Contains(err.Error(), "can be written by other users") {
		t.Errorf("a world-writable sessions directory: error %v", err)
	}
}
