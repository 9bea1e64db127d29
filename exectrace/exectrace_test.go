package exectrace

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/procgroup"
)

// startTracer traces a new cgroup, or skips where the trace cannot run
// (not root), unless AGENTFS_REQUIRE_FUSE=1 (CI, as root) says it must.
func startTracer(t *testing.T) (*Tracer, *procgroup.Group, *recorder) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("AGENTFS_REQUIRE_FUSE") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	g, err := procgroup.New(fmt.Sprintf("agentfs-exectrace-test-%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	rec := &recorder{}
	tr, err := Start(Options{Cgroup: g.Dir(), Sink: rec.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Error(err)
		}
	})
	return tr, g, rec
}

type recorder struct {
	mu   sync.Mutex
	recs []Record
}

func (r *recorder) add(rec Record) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

func (r *recorder) all() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.recs...)
}

// TestTraceShortLived: every one of 1,000 /bin/true a script runs is
// recorded with its arguments, its directory and its exit, and so are
// a failing command, one killed by a signal, and the script; nothing
// outside the cgroup is.
func TestTraceShortLived(t *testing.T) {
	tr, g, rec := startTracer(t)
	dir := t.TempDir()
	script := fmt.Sprintf(`i=0; while [ $i -lt 1000 ]; do /bin/true arg$i; i=$((i+1)); done
cd %s && /bin/sh -c 'exit 3'
/bin/sh -c 'kill -9 $$'
exit 0`, dir)
	cmd := exec.Command("/bin/sh", "-c", script)
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	// Arguments longer than ArgvMax are cut, and say so.
	long := exec.Command("/bin/true", strings.Repeat("x", ArgvMax+100))
	if err := g.Start(long); err != nil {
		t.Fatal(err)
	}
	if err := long.Wait(); err != nil {
		t.Fatal(err)
	}
	// Outside the cgroup: not traced.
	if err := exec.Command("/bin/true", "outside").Run(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var got []Record
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		got = rec.all()
		if exits(got) >= 1004 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := tr.Dropped(); n != 0 {
		t.Errorf("%d records dropped", n)
	}
	execs := map[string]Record{}
	for _, r := range got {
		if r.Exec {
			execs[strings.Join(r.Argv, " ")] = r
		}
	}
	for i := range 1000 {
		e, ok := execs[fmt.Sprintf("/bin/true arg%d", i)]
		if !ok {
			t.Fatalf("no exec record of /bin/true arg%d (%d records)", i, len(got))
		}
		if e.Pid == 0 || e.Ppid != cmd.Process.Pid || e.Cwd == "" {
			t.Errorf("exec of /bin/true arg%d: %+v", i, e)
		}
	}
	cut := false
	for _, r := range got {
		if r.Exec && r.ArgvTruncated && len(r.Argv) == 2 && r.Argv[0] == "/bin/true" && len(r.Argv[1]) == ArgvMax-len("/bin/true")-1 {
			cut = true
		}
	}
	if !cut {
		t.Errorf("no record of the long command, cut at %d bytes", ArgvMax)
	}
	if _, ok := execs["/bin/true outside"]; ok {
		t.Error("a process outside the cgroup was traced")
	}
	failing, ok := execs["/bin/sh -c exit 3"]
	if !ok || failing.Cwd != dir {
		t.Errorf("the failing command's record: %+v (ok %v), want cwd %s", failing, ok, dir)
	}
	statuses := map[int]Record{}
	for _, r := range got {
		if !r.Exec {
			statuses[r.Pid] = r
		}
	}
	if s, ok := statuses[failing.Pid]; !ok || s.Status.ExitStatus() != 3 {
		t.Errorf("exit of the failing command: %+v (ok %v), want status 3", s, ok)
	}
	killed := execs["/bin/sh -c kill -9 $$"]
	if s := statuses[killed.Pid]; !s.Status.Signaled() || s.Status.Signal() != 9 {
		t.Errorf("exit of the killed command: %+v, want signal 9", s)
	}
	if s := statuses[cmd.Process.Pid]; s.Status.ExitStatus() != 0 || !s.Start.Equal(execs["/bin/sh -c "+script].Time) || s.Time.Before(s.Start) {
		t.Errorf("exit of the script: %+v", s)
	}
}

// TestTraceAfterQuiet: the reader reads at intervals while records
// come and waits for the next one once they stop: a burst is delivered
// whole without Close, and so is a lone command that follows a quiet
// spell.
func TestTraceAfterQuiet(t *testing.T) {
	_, g, rec := startTracer(t)
	run := func(script string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		if err := g.Start(cmd); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	waitExits := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); exits(rec.all()) < want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d exit records, want %d", exits(rec.all()), want)
			}
		}
	}
	run(`i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done`)
	waitExits(101)               // the /bin/true and the shell
	time.Sleep(5 * readInterval) // the reader goes back to waiting
	run("/bin/true lone")
	waitExits(102)
	found := false
	for _, r := range rec.all() {
		found = found || r.Exec && strings.HasSuffix(strings.Join(r.Argv, " "), "/bin/true lone")
	}
	if !found {
		t.Error("no exec record of the lone command")
	}
}

func exits(rs []Record) int {
	n := 0
	for _, r := range rs {
		if !r.Exec {
			n++
		}
	}
	return n
}

// TestTraceMountDev: with a device, a process working on it is traced,
// and what it starts elsewhere too, through a subshell (a fork that
// starts no program of its own) as well.
func TestTraceMountDev(t *testing.T) {
	if err := Available(); err != nil {
		if os.Getenv("AGENTFS_REQUIRE_FUSE") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	// A file system of its own: / and the temporary directory are
	// usually one.
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Error(err)
		}
	})
	dev := statDev(t, dir)
	if dev == statDev(t, "/") {
		t.Fatal("the tmpfs has the device of /")
	}
	rec := &recorder{}
	tr, err := Start(Options{MountDev: dev, Sink: rec.add})
	if err != nil {
		t.Fatal(err)
	}
	// The subshell forks without a program of its own and leaves the
	// directory: what it starts is still traced.
	cmd := exec.Command("/bin/sh", "-c", "cd / && /bin/echo from-root; (cd /tmp && /bin/echo from-subshell && true) ; true")
	cmd.Dir = dir
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the reader catch up before Close
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	var argvs []string
	for _, r := range rec.all() {
		if r.Exec && (strings.Contains(strings.Join(r.Argv, " "), "from-root")) {
			argvs = append(argvs, strings.Join(r.Argv, " ")+" in "+r.Cwd)
		}
	}
	if len(argvs) != 2 || !strings.HasSuffix(argvs[0], "in "+dir) || argvs[1] != "/bin/echo from-root in /" {
		t.Errorf("records = %q: want the shell (in %s) and the echo it started in /", argvs, filepath.Clean(dir))
	}
	found := false
	for _, r := range rec.all() {
		if r.Exec && strings.Join(r.Argv, " ") == "/bin/echo from-subshell" && r.Cwd == "/tmp" {
			found = true
		}
	}
	if !found {
		t.Error("the echo a subshell started in /tmp was not traced")
	}
}

func statDev(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}
