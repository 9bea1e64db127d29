package activity

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProc makes a /proc tree with thread tid of process pid running
// cmdline (NUL-separated), started at start.
func fakeProc(t *testing.T, root string, tid, pid int, cmdline, start string) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(tid))
	if err := os.MkdirAll(dir, 0755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (%s) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %s 0 0", tid, "worker) x", start)
	files := map[string]string{
		"status":  fmt.Sprintf("Name:\tworker\nUmask:\t0022\nTgid:\t%d\nPid:\t%d\n", pid, tid),
		"stat":    stat,
		"cmdline": cmdline,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0644); err != nil {
			t.Fatal(err)
		}
	}
}

func readAll(t *testing.T, dir string) []Entry {
	t.Helper()
	var out []Entry
	if err := Read(dir, Activity, func(l Line) error { out = append(out, l.Entry); return nil }); err != nil {
		t.Fatalf("Read: %v", err)
	}
	return out
}

func TestLogRecordsWhoDidWhat(t *testing.T) {
	dir, procRoot := t.TempDir(), t.TempDir()
	fakeProc(t, procRoot, 101, 100, "sh\x00-c\x00echo hi > a\x00", "500")
	fakeProc(t, procRoot, 100, 100, "make\x00", "400")
	l, err := Open(Options{Dir: dir, procRoot: procRoot})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	l.Record(Entry{Time: now, Tid: 101, Uid: 1000, Branch: "main", Op: "create", Path: "a"})
	l.Record(Entry{Time: now, Tid: 100, Branch: "main", Op: "rename", Path: "a", Path2: "b"})
	l.Record(Entry{Time: now, Tid: 0, Op: "setattr", Path: "b", Attrs: "mode"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, dir)
	if len(got) != 3 {
		t.Fatalf("read %d entries, want 3: %+v", len(got), got)
	}
	if e := got[0]; e.Pid != 100 || e.Tid != 101 || e.Command != "sh -c 'echo hi > a'" || e.Op != "create" || e.Path != "a" || e.Uid != 1000 || e.Branch != "main" || !e.Time.Equal(now) {
		t.Errorf("entry 0 = %+v, want pid 100, tid 101, the shell's command line, create a", e)
	}
	if e := got[1]; e.Pid != 100 || e.Tid != 0 || e.Command != "make" || e.Path2 != "b" {
		t.Errorf("entry 1 = %+v, want pid 100 (main thread: no tid), make, a -> b", e)
	}
	if e := got[2]; e.Pid != 0 || e.Command != "" || e.Attrs != "mode" {
		t.Errorf("entry 2 = %+v, want no process, attrs mode", e)
	}
}

func TestLogCountsDrops(t *testing.T) {
	dir := t.TempDir()
	hold := make(chan struct{})
	l, err := Open(Options{Dir: dir, Queue: 2, hold: hold, procRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		l.Record(Entry{Time: time.Now(), Op: "unlink", Path: fmt.Sprint("f", i)})
	}
	close(hold)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, e := range readAll(t, dir) {
		ops = append(ops, fmt.Sprintf("%s %s %d", e.Op, e.Path, e.Count))
	}
	want := []string{"dropped  3", "unlink f0 0", "unlink f1 0"}
	if strings.Join(ops, "|") != strings.Join(want, "|") {
		t.Errorf("log = %q, want %q", ops, want)
	}
}

func TestLogStaysBounded(t *testing.T) {
	dir := t.TempDir()
	const max = MinMaxBytes
	l, err := Open(Options{Dir: dir, MaxBytes: max, procRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	for i := range n {
		l.Record(Entry{Time: time.Now(), Op: "create", Path: fmt.Sprintf("dir/file%05d", i)})
		if i%100 == 0 {
			time.Sleep(time.Millisecond) // let the writer keep up: no drops
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, name := range []string{Activity.cur(), Activity.old()} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		total += st.Size()
	}
	if total > max {
		t.Errorf("the log takes %d bytes, want at most %d", total, max)
	}
	got := readAll(t, dir)
	if len(got) == 0 || len(got) == n {
		t.Fatalf("read %d entries of %d, want the most recent ones only", len(got), n)
	}
	last := 0
	for i, e := range got {
		if e.Op == OpDropped {
			continue
		}
		var k int
		if _, err := fmt.Sscanf(e.Path, "dir/file%05d", &k); err != nil {
			t.Fatalf("entry %d: path %q: %v", i, e.Path, err)
		}
		if i > 0 && k != last+1 {
			t.Fatalf("entry %d is file %d after file %d: the log is not in order or has a gap", i, k, last)
		}
		last = k
	}
	if last != n-1 {
		t.Errorf("the last entry is file %d, want %d", last, n-1)
	}
	// Reopening appends to what is there.
	l, err = Open(Options{Dir: dir, MaxBytes: max, procRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Entry{Time: time.Now(), Op: "mkdir", Path: "again"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, dir); got[len(got)-1].Path != "again" {
		t.Errorf("the last entry after reopening is %+v, want mkdir again", got[len(got)-1])
	}
}

func TestOpenRefusesTinyBound(t *testing.T) {
	if _, err := Open(Options{Dir: t.TempDir(), MaxBytes: 100}); err == nil {
		t.Errorf("Open with a 100-byte bound succeeded, want an error")
	}
}

func TestFollowAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, MaxBytes: MinMaxBytes, procRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Entry{Time: time.Now(), Op: "create", Path: "before"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines := make(chan string, 10000)
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, dir, Activity, 5*time.Millisecond, func(l Line) error { lines <- l.Path; return nil }, func() error { return nil })
	}()
	guard := time.After(30 * time.Second) // against a hang, not a timing check
	next := func() string {
		select {
		case p := <-lines:
			return p
		case <-guard:
			t.Fatal("Follow stopped delivering entries")
		}
		return ""
	}
	if p := next(); p != "before" {
		t.Fatalf("first entry %q, want before", p)
	}
	// Enough entries to rotate several times; Follow must see each
	// once. Batches are smaller than a segment, and each is read before
	// the next is written: at most one rotation between two reads (with
	// two segments, a reader that sleeps through two loses one).
	const batches, batch = 30, 50
	for b := range batches {
		for i := range batch {
			l.Record(Entry{Time: time.Now(), Op: "create", Path: fmt.Sprint(b*batch + i)})
		}
		for i := range batch {
			if p, want := next(), fmt.Sprint(b*batch+i); p != want {
				t.Fatalf("entry %q, want %q: lost or repeated across a rotation", p, want)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, Activity.old())); err != nil {
		t.Errorf("the log never rotated: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Follow = %v after cancel, want nil", err)
	}
	// A store that goes away ends Follow.
	go func() {
		done <- Follow(context.Background(), dir, Activity, 5*time.Millisecond, func(Line) error { return nil }, func() error { return nil })
	}()
	time.Sleep(20 * time.Millisecond)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrGone) {
			t.Errorf("Follow of a removed store = %v, want ErrGone", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Follow did not notice the store went away")
	}
}

func TestReadMissingLog(t *testing.T) {
	err := Read(t.TempDir(), Activity, func(Line) error { return nil })
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read of a store without a log = %v, want ErrNotExist", err)
	}
}

// TestReadDuringRotation reads the log between the steps of every
// rotation: it is never missing, and holds every entry written so far
// but the ones the bound dropped, in order, each once.
func TestReadDuringRotation(t *testing.T) {
	dir := t.TempDir()
	steps := 0
	var stepErr error
	var stepLast int
	check := func(step string) {
		steps++
		var got []string
		err := Read(dir, Activity, func(l Line) error { got = append(got, l.Path); return nil })
		if err != nil {
			stepErr = fmt.Errorf("Read at step %q of a rotation: %w", step, err)
			return
		}
		last := -1
		for _, p := range got {
			var k int
			if _, err := fmt.Sscanf(p, "f%05d", &k); err != nil {
				stepErr = fmt.Errorf("Read at step %q of a rotation: path %q: %w", step, p, err)
				return
			}
			if last >= 0 && k != last+1 {
				stepErr = fmt.Errorf("Read at step %q of a rotation: file %d after file %d", step, k, last)
				return
			}
			last = k
		}
		if last < stepLast {
			stepErr = fmt.Errorf("Read at step %q of a rotation: the last entry is file %d, an earlier read had %d", step, last, stepLast)
		}
		stepLast = last
	}
	l, err := Open(Options{Dir: dir, MaxBytes: MinMaxBytes, procRoot: t.TempDir(), rotateStep: check})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		l.Record(Entry{Time: time.Now(), Op: "create", Path: fmt.Sprintf("f%05d", i)})
		if i%100 == 0 {
			time.Sleep(time.Millisecond) // let the writer keep up: no drops
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if stepErr != nil {
		t.Fatal(stepErr)
	}
	if steps < 2 {
		t.Fatalf("%d rotations, want several", steps)
	}
	for _, n := range []string{Activity.newName(), Activity.tmpName()} {
		if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after rotations: %v, want it gone", n, err)
		}
	}
}

// TestExecStream: an exec log lives in exec.log beside the activity
// log, and Add keeps the pid it is given (a traced process may be gone
// by the time the writer runs).
func TestExecStream(t *testing.T) {
	dir, procRoot := t.TempDir(), t.TempDir()
	l, err := Open(Options{Dir: dir, Stream: Exec, procRoot: procRoot})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l.Add(Entry{Time: start, Pid: 4242, Ppid: 1, Op: OpExec, Argv: []string{"make", "build"}, Cwd: "/p"})
	l.Add(Entry{Time: start.Add(time.Second), Pid: 4242, Op: OpExit, Start: start, Exit: new(0), DurationNs: int64(time.Second)})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, string(Activity))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an exec log made %s: %v", Activity, err)
	}
	var got []Entry
	if err := Read(dir, Exec, func(l Line) error { got = append(got, l.Entry); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Pid != 4242 || got[0].Argv[1] != "build" || got[1].Exit == nil || *got[1].Exit != 0 || !got[1].Start.Equal(start) {
		t.Errorf("exec log = %+v", got)
	}
}
