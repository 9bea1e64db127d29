package exectrace

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/procgroup"
)

// startTracer traces a new cgroup, or skips where the trace cannot run
// (not root), unless AGENTFS_REQUIRE_FUSE=1 (CI, as root) says it must.
func startTracer(t *testing.T) (*Tracer, *procgroup.Group, *recorder) {
	t.Helper()
	if err := Available(); err != nil {
		testenv.Skip(t, testenv.EBPF, "%v", err)
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
		testenv.Skip(t, testenv.EBPF, "%v", err)
	}
	// A file system of its own: / and the temporary directory are
	// usually one.
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
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
	// An orphan: its parent has exited before it starts a program.
	orphan := exec.Command("/bin/sh", "-c", "(sleep 0.3; cd /; exec /bin/echo orphan) & exit 0")
	orphan.Dir = dir
	if err := orphan.Run(); err != nil {
		t.Fatal(err)
	}
	// A deep directory (60 levels): the whole path; one longer than
	// CwdMax: cut, and said so.
	deep := dir
	for i := range 60 {
		deep = filepath.Join(deep, fmt.Sprintf("d%02d", i))
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("/bin/true", "in-deep")
	c.Dir = deep
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	// Past PATH_MAX: made one name at a time, entered by descriptor.
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		name := fmt.Sprintf("%03d%s", i, strings.Repeat("x", 250))
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	c = exec.Command("/bin/true", "in-deep")
	c.Dir = fmt.Sprintf("/proc/self/fd/%d", fd) // the child's, before it execs
	err = c.Run()
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !slices.ContainsFunc(rec.all(), func(r Record) bool { return r.Exec && strings.Join(r.Argv, " ") == "/bin/echo orphan" }) {
		time.Sleep(10 * time.Millisecond)
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
	var orphanSeen bool
	var deepCwds []Record
	for _, r := range rec.all() {
		switch {
		case r.Exec && strings.Join(r.Argv, " ") == "/bin/echo orphan":
			orphanSeen = true
		case r.Exec && strings.Join(r.Argv, " ") == "/bin/true in-deep":
			deepCwds = append(deepCwds, r)
		}
	}
	if !orphanSeen {
		t.Error("a program started by an orphan (its traced parent gone) was not traced")
	}
	if len(deepCwds) != 2 || deepCwds[0].Cwd != deep || deepCwds[0].CwdTruncated || !deepCwds[1].CwdTruncated || !strings.HasPrefix(deepCwds[1].Cwd, "…/") || len(deepCwds[1].Cwd) > CwdMax+len("…")+1 {
		t.Errorf("the deep directories: %+v; want %s whole, and the long one cut", deepCwds, deep)
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

// TestVerifierCost: the kernel's verifier checks each program in few
// steps (an unrolled loop once made it walk 750,000 instructions, most
// of a second at every mount, near its limit of a million).
func TestVerifierCost(t *testing.T) {
	if err := Available(); err != nil {
		testenv.Skip(t, testenv.EBPF, "%v", err)
	}
	spec, err := loadExectrace()
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	for name, p := range coll.Programs {
		var n int
		i := strings.Index(p.VerifierLog, "processed ")
		if i < 0 {
			t.Fatalf("%s: no count of instructions in the verifier's log: %s", name, p.VerifierLog)
		}
		if _, err := fmt.Sscanf(p.VerifierLog[i:], "processed %d insns", &n); err != nil {
			t.Fatalf("%s: %v: %s", name, err, p.VerifierLog)
		}
		if n > 20000 {
			t.Errorf("%s: the verifier processed %d instructions, want at most 20,000 (a loop bpf_loop should run?)", name, n)
		}
	}
}
