package fs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/overlay"
)

// TestThreadGroup: a thread other than the main one resolves to its
// process, which binding and resolution go by.
func TestThreadGroup(t *testing.T) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	others := 0
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil || tid == pid {
			continue
		}
		others++
		if got, ok := threadGroup(uint32(tid)); ok && got != uint32(pid) {
			t.Errorf("threadGroup(%d) = %d, want %d", tid, got, pid)
		}
	}
	if others == 0 {
		t.Fatalf("no thread but the main one in /proc/self/task")
	}
	if got, ok := threadGroup(uint32(pid)); !ok || got != uint32(pid) {
		t.Errorf("threadGroup(%d) = %d, %v; want %d, true", pid, got, ok, pid)
	}
	if _, ok := threadGroup(999999999); ok {
		t.Errorf("threadGroup of a pid that does not exist succeeded")
	}
}

// waitUntil polls cond for up to 10 s.
func waitUntil(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestBindResolve: a bound process and its descendants resolve to the
// bound view, others to the default; the binding ends when the process
// exits, and a binding whose start time does not match the process
// (a reused pid) is ignored.
func TestBindResolve(t *testing.T) {
	lower := t.TempDir()
	m := mountForTest(t, lower, false)
	other, err := overlay.LowerView(lower, mustBackstore(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := other.Close(); err != nil {
			t.Errorf("closing the other view: %v", err)
		}
	}()
	def := m.srv.views.def.Load().view

	child := exec.Command("sh", "-c", "sleep 30 & echo $!; wait")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill() }() // for an early return; the test kills it below
	buf := make([]byte, 32)
	n, err := out.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	grandchild, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || grandchild == 0 {
		t.Fatalf("no grandchild pid: %q", buf[:n])
	}
	defer func() { _ = exec.Command("kill", strconv.Itoa(grandchild)).Run() }() // for an early return; the test kills it below

	if v, by := m.srv.Resolve(uint32(grandchild)); v != def || by != 0 {
		t.Errorf("before binding: resolve = %p by %d, want the default view", v, by)
	}
	if err := m.srv.Bind(child.Process.Pid, other); err != nil {
		t.Fatal(err)
	}
	if v, by := m.srv.Resolve(uint32(grandchild)); v != other || by != child.Process.Pid {
		t.Errorf("grandchild of a bound process: resolve = %p by %d, want the bound view by %d", v, by, child.Process.Pid)
	}
	// Resolution runs on the FUSE path: once the thread's answer is
	// cached, it reads /proc/TID/stat allocating only for its path (the
	// race detector's instrumentation allocates more).
	if n := testing.AllocsPerRun(100, func() { m.srv.Resolve(uint32(grandchild)) }); n > 2 && !raceEnabled {
		t.Errorf("a cached resolution allocates %v times, want at most 2 (the path of /proc/TID/stat)", n)
	}
	if v, _ := m.srv.Resolve(uint32(os.Getpid())); v != def {
		t.Errorf("the test (an ancestor of the bound process) resolves to another view")
	}
	if err := m.srv.Bind(999999999, other); err == nil {
		t.Errorf("binding a pid that does not exist succeeded")
	}

	// A binding with another start time is a reused pid: ignored.
	m.srv.views.mu.Lock()
	m.srv.views.bindings[uint32(child.Process.Pid)].start++
	m.srv.views.mu.Unlock()
	m.srv.views.gen.Add(1)
	if v, _ := m.srv.Resolve(uint32(grandchild)); v != def {
		t.Errorf("a binding whose start time does not match the process still applies")
	}
	m.srv.views.mu.Lock()
	m.srv.views.bindings[uint32(child.Process.Pid)].start--
	m.srv.views.mu.Unlock()
	m.srv.views.gen.Add(1)

	// Exit ends it.
	if out, err := exec.Command("kill", strconv.Itoa(grandchild)).CombinedOutput(); err != nil {
		t.Fatalf("kill %d: %v: %s", grandchild, err, out)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatalf("killing the bound process: %v", err)
	}
	_ = child.Wait() // reports the kill (or sh's exit after its child's)
	if !waitUntil(func() bool { return len(m.srv.Bindings()) == 0 }) {
		t.Errorf("the binding outlived its process: %+v", m.srv.Bindings())
	}
	if m.srv.views.active.Load() {
		t.Errorf("the root still depends on the caller with no binding left")
	}
}

func mustBackstore(t *testing.T) *backstore.Store {
	bs, err := backstore.Open(backstore.Options{Dir: filepath.Join(t.TempDir(), "bs")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bs.Close(); err != nil {
			t.Errorf("closing the backstore: %v", err)
		}
	})
	return bs
}
