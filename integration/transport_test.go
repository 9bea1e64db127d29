package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
	"golang.org/x/sys/unix"
)

// ringExpected reports whether this run's default mounts take their
// FUSE requests over io_uring: as root, unless the pass runs with
// AGENTFS_TEST_NO_IO_URING=1, on a kernel with FUSE over io_uring. On a
// kernel without it the test goes on over /dev/fuse, and says so
// (testenv.Reduced: on CI, a failure).
func ringExpected(t *testing.T) bool {
	t.Helper()
	if !harness.RingRequested(nil) {
		return false
	}
	if !harness.RingOffered() {
		testenv.Reduced(t, testenv.FUSEOverIOURing, "no %s in this kernel: requests over /dev/fuse only", harness.RingKnob)
		return false
	}
	return true
}

// TestTransport: where the kernel has FUSE over io_uring and agentfs
// runs as root, requests come over io_uring queues, one per CPU:
// agentfs status says so, and the daemon's debug log shows every kind
// of request the test makes coming from a queue, including the ones
// served off the queue's thread (FSYNC, the control file's IOCTL) and
// the RELEASE answered at once. With --no-io-uring they come over
// /dev/fuse.
func TestTransport(t *testing.T) {
	m := harness.NewMount(t, harness.WithArgs("--debug"), harness.WithLower(harness.LowerFile("project", "project file\n")))
	var st struct {
		Transport string `json:"transport"`
	}
	statusJSON(t, m.Dir, &st)
	uring := ringExpected(t)
	if want := map[bool]string{true: "io_uring (", false: "/dev/fuse"}[uring]; !strings.HasPrefix(st.Transport, want) {
		t.Fatalf("status: transport %q, want %q...", st.Transport, want)
	}

	// Requests of every shape: names, two names, an out struct, data
	// in, data out, a listing, xattrs, an async FSYNC.
	data := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640,000 bytes: more than one READ and WRITE
	f, err := os.OpenFile(m.Path("new"), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := unix.Setxattr(m.Path("new"), "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(m.Path("new"), "user.k", buf); err != nil || string(buf[:n]) != "v" {
		t.Fatalf("getxattr: %q, %v", buf[:n], err)
	}
	if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m.Path("new"), m.Path("d/moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("moved", m.Path("d/link")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(m.Path("d/link")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading back %d bytes through a symlink: %d bytes, %v", len(data), len(got), err)
	}
	if got, err := os.ReadFile(m.Path("project")); err != nil || string(got) != "project file\n" {
		t.Fatalf("reading the project file: %q, %v", got, err)
	}
	ents, err := os.ReadDir(m.Path("d"))
	if err != nil || len(ents) != 2 {
		t.Fatalf("listing d: %v, %v; want link and moved", ents, err)
	}
	for _, p := range []string{"d/link", "d/moved"} {
		if err := os.Remove(m.Path(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(m.Path("d")); err != nil {
		t.Fatal(err)
	}
	statusJSON(t, m.Dir, &st)

	log, err := os.ReadFile(m.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	fromRing := map[string]bool{}
	for line := range strings.Lines(string(log)) {
		if i := strings.Index(line, "(io_uring queue "); i >= 0 {
			if f := strings.Fields(line[:i]); len(f) >= 2 {
				fromRing[f[len(f)-2]] = true // "rx N: OP nID (io_uring queue Q)"
			}
		}
	}
	if !uring {
		if len(fromRing) > 0 {
			t.Errorf("requests came over io_uring with transport %q: %v", st.Transport, fromRing)
		}
		return
	}
	for _, op := range []string{"LOOKUP", "CREATE", "FSYNC", "SETXATTR", "GETXATTR", "MKDIR", "RENAME", "SYMLINK",
		"OPEN", "READ", "READDIRPLUS", "UNLINK", "RMDIR", "RELEASE", "IOCTL", "GETATTR"} {
		if !fromRing[op] {
			t.Errorf("no %s came over io_uring (ops seen there: %v)", op, fromRing)
		}
	}
	if t.Failed() {
		t.Logf("daemon log %s", filepath.Base(m.LogPath()))
	}
}

// TestTransportRefused: --no-io-uring keeps requests on /dev/fuse, and
// status says why.
func TestTransportRefused(t *testing.T) {
	m := harness.NewMount(t, harness.WithArgs("--no-io-uring"))
	var st struct {
		Transport string `json:"transport"`
	}
	statusJSON(t, m.Dir, &st)
	if st.Transport != "/dev/fuse (--no-io-uring)" {
		t.Fatalf("status with --no-io-uring: transport %q, want %q", st.Transport, "/dev/fuse (--no-io-uring)")
	}
}

// TestRingThreadsBatch: each io_uring queue's thread is SCHED_BATCH, so
// that a RELEASE, which the closing program does not wait for, does not
// preempt that program (fuseuring.batchPolicy); no other thread is (the
// releaser must run at once when woken). Over /dev/fuse no thread of
// the daemon is.
func TestRingThreadsBatch(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "f")))
	var st struct {
		Transport string `json:"transport"`
	}
	statusJSON(t, m.Dir, &st)
	want := 0
	if ringExpected(t) {
		var queues int
		if _, err := fmt.Sscanf(st.Transport, "io_uring (%d queues)", &queues); err != nil {
			t.Fatalf("status: transport %q: %v", st.Transport, err)
		}
		want = queues
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", m.Status.Pid))
	if err != nil {
		t.Fatal(err)
	}
	batch := 0
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", m.Status.Pid, task.Name()))
		if err != nil {
			continue // the thread exited
		}
		// The fields after the command's closing parenthesis; policy
		// is field 41 of the whole line, 39 of these.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 38 && f[38] == "3" { // SCHED_BATCH
			batch++
		}
	}
	if batch != want {
		t.Errorf("%d of the daemon's %d threads are SCHED_BATCH, want %d (transport %q)", batch, len(tasks), want, st.Transport)
	}
}
