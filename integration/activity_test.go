package integration

// The activity log (agentfs log), automatic snapshots (agentfs mount
// --auto-snapshot), their configuration files and agentfs snapshot
// prune, driven through the CLI on real mounts.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/exectrace"
	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
	"golang.org/x/sys/unix"
)

// logEntry is one line of agentfs log --json.
type logEntry struct {
	Time    time.Time `json:"time"`
	Pid     int       `json:"pid"`
	Tid     int       `json:"tid"`
	Uid     uint32    `json:"uid"`
	Command string    `json:"command"`
	Branch  string    `json:"branch"`
	Op      string    `json:"op"`
	Path    string    `json:"path"`
	Path2   string    `json:"path2"`
	Attrs   string    `json:"attrs"`
	Count   int64     `json:"count"`
}

// readLog runs agentfs log --json on the mount.
func readLog(t testing.TB, dir string, args ...string) []logEntry {
	t.Helper()
	r := mustC(t, dir, append([]string{"log", "--json"}, args...)...)
	var out []logEntry
	for line := range strings.Lines(r.Stdout) {
		var e logEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("agentfs log --json: line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// runIn runs a command with its working directory in dir and returns
// its pid once it has exited.
func runIn(t testing.TB, dir string, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return cmd.Process.Pid
}

// findEntry returns the first entry with op and path (and path2, when
// not empty), or nil.
func findEntry(entries []logEntry, op, path, path2 string) *logEntry {
	for i, e := range entries {
		if e.Op == op && e.Path == path && (path2 == "" || e.Path2 == path2) {
			return &entries[i]
		}
	}
	return nil
}

func TestActivityLog(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("old.txt", "old\n"), harness.LowerFile("gone.txt", "x"), harness.LowerDir("dir")))
	type step struct {
		op, path, path2 string
		cmd             []string
	}
	steps := []step{
		{"create", "new.txt", "", []string{"touch", "new.txt"}},
		{"write", "old.txt", "", []string{"sh", "-c", "echo more >> old.txt"}},
		{"rename", "new.txt", "renamed.txt", []string{"mv", "new.txt", "renamed.txt"}},
		{"setattr", "renamed.txt", "", []string{"chmod", "600", "renamed.txt"}},
		{"unlink", "gone.txt", "", []string{"rm", "gone.txt"}},
		{"mkdir", "dir/sub", "", []string{"mkdir", "dir/sub"}},
		{"rmdir", "dir/sub", "", []string{"rmdir", "dir/sub"}},
		{"symlink", "link", "", []string{"ln", "-s", "old.txt", "link"}},
		{"link", "old.txt", "hard", []string{"ln", "old.txt", "hard"}},
		{"truncate", "old.txt", "", []string{"sh", "-c", ": > old.txt"}},
	}
	pids := make([]int, len(steps))
	for i, s := range steps {
		pids[i] = runIn(t, m.Dir, s.cmd[0], s.cmd[1:]...)
	}
	var entries []logEntry
	// The writer appends moments after each operation.
	if !harness.WaitFor(func() bool {
		entries = readLog(t, m.Dir)
		return findEntry(entries, "truncate", "old.txt", "") != nil
	}) {
		t.Fatalf("the last operation never showed in agentfs log --json: %+v", entries)
	}
	for i, s := range steps {
		e := findEntry(entries, s.op, s.path, s.path2)
		if e == nil {
			t.Errorf("no %s of %s in the log: %+v", s.op, s.path, entries)
			continue
		}
		if s.op == "write" || s.op == "truncate" {
			// The shell's child or the shell itself: the command says sh.
			if !strings.HasPrefix(e.Command, "sh -c") {
				t.Errorf("%s of %s: command %q, want the sh -c that did it", s.op, s.path, e.Command)
			}
		} else if e.Pid != pids[i] || !strings.HasPrefix(e.Command, s.cmd[0]+" ") {
			t.Errorf("%s of %s: pid %d command %q, want pid %d command %q", s.op, s.path, e.Pid, e.Command, pids[i], strings.Join(s.cmd, " "))
		}
		if e.Branch != "main" || e.Time.IsZero() || e.Uid != uint32(os.Getuid()) {
			t.Errorf("%s of %s: branch %q time %v uid %d, want main, a time and uid %d", s.op, s.path, e.Branch, e.Time, e.Uid, os.Getuid())
		}
	}
	if e := findEntry(entries, "setattr", "renamed.txt", ""); e != nil && e.Attrs != "mode" {
		t.Errorf("chmod logged attrs %q, want mode", e.Attrs)
	}
	// Reads are not logged without --log-reads.
	runIn(t, m.Dir, "cat", "old.txt")
	runIn(t, m.Dir, "ls", "dir")
	for _, e := range readLog(t, m.Dir) {
		if e.Op == "open" || e.Op == "lookup" || e.Op == "readdir" {
			t.Errorf("a read was logged without --log-reads: %+v", e)
		}
	}
	// The text form shows the same, one line each, with the command.
	r := mustC(t, m.Dir, "log")
	for _, want := range []string{"mv new.txt renamed.txt", "new.txt -> renamed.txt", "mkdir dir/sub"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("agentfs log does not show %q:\n%s", want, r.Stdout)
		}
	}
	if n := len(strings.Split(strings.TrimSpace(mustC(t, m.Dir, "log", "-n", "2").Stdout), "\n")); n != 2 {
		t.Errorf("agentfs log -n 2 printed %d lines, want 2", n)
	}
	if r := mustC(t, m.Dir, "log", "--since", "2000-01-01"); !strings.Contains(r.Stdout, "renamed.txt") {
		t.Errorf("agentfs log --since 2000-01-01 misses entries:\n%s", r.Stdout)
	}
	if r := mustC(t, m.Dir, "log", "--since", "2999-01-01"); r.Stdout != "" {
		t.Errorf("agentfs log --since 2999-01-01 printed entries:\n%s", r.Stdout)
	}
	if r := agentfsC(t, m.Dir, "log", "--since", "yesterday-ish"); r.Code != 2 || !strings.Contains(r.Stderr, "duration") {
		t.Errorf("a bad --since: want exit 2 and how to write it:\n%s", r)
	}
}

func TestActivityLogReads(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a.txt", "a"), harness.LowerDir("d")), harness.WithArgs("--log-reads"))
	pid := runIn(t, m.Dir, "cat", "a.txt")
	runIn(t, m.Dir, "ls", "d")
	var entries []logEntry
	if !harness.WaitFor(func() bool {
		entries = readLog(t, m.Dir)
		return findEntry(entries, "readdir", "d", "") != nil
	}) {
		t.Fatalf("no readdir of d in the log with --log-reads: %+v", entries)
	}
	if e := findEntry(entries, "open", "a.txt", ""); e == nil || e.Pid != pid {
		t.Errorf("open of a.txt by cat (pid %d): %+v", pid, e)
	}
	if findEntry(entries, "lookup", "a.txt", "") == nil {
		t.Errorf("no lookup of a.txt in the log with --log-reads")
	}
}

func TestActivityLogFollow(t *testing.T) {
	m := harness.NewMount(t)
	runIn(t, m.Dir, "mkdir", "before")
	cmd := exec.Command(harness.Bin(), "log", "--follow", "--json", "-C", m.Dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // it may have ended with the mount
		_ = cmd.Wait()         // "signal: killed": the kill above
	})
	lines := make(chan logEntry, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e logEntry
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				lines <- e
			}
		}
		close(lines)
	}()
	wait := func(path string) {
		t.Helper()
		guard := time.After(30 * time.Second) // against a hang, not a timing check
		for {
			select {
			case e, ok := <-lines:
				if !ok {
					t.Fatalf("agentfs log --follow ended before it showed %s", path)
				}
				if e.Op == "mkdir" && e.Path == path {
					return
				}
			case <-guard:
				t.Fatalf("agentfs log --follow never showed the mkdir of %s", path)
			}
		}
	}
	wait("before")
	runIn(t, m.Dir, "mkdir", "after")
	wait("after")
	// A private store goes away at unmount: --follow ends by itself.
	m.Unmount()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agentfs log --follow after unmount: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("agentfs log --follow did not end when the mount's private store went away")
	}
}

func TestActivityLogBounded(t *testing.T) {
	m := harness.NewMount(t, harness.WithArgs("--log-size", "16K"))
	const files = 600
	for i := range files {
		p := m.Path(fmt.Sprintf("file-with-a-longish-name-%04d", i))
		if err := os.WriteFile(p, nil, 0644); err != nil {
			t.Fatal(err)
		}
	}
	last := fmt.Sprintf("file-with-a-longish-name-%04d", files-1)
	var entries []logEntry
	if !harness.WaitFor(func() bool {
		entries = readLog(t, m.Dir)
		return findEntry(entries, "create", last, "") != nil
	}) {
		t.Fatalf("the last create never showed in the log")
	}
	var total int64
	for _, name := range []string{"activity.log", "activity.log.1"} {
		st, err := os.Stat(filepath.Join(m.Status.Store, name))
		if err != nil {
			t.Fatalf("the log's segment %s: %v", name, err)
		}
		total += st.Size()
	}
	if total > 16<<10 {
		t.Errorf("the log takes %d bytes, want at most 16K", total)
	}
	if findEntry(entries, "create", "file-with-a-longish-name-0000", "") != nil {
		t.Errorf("the first create is still in a log bounded far below %d entries", files)
	}
}

// waitSnapshot polls agentfs snapshot list until one satisfies ok.
func waitSnapshot(t testing.TB, dir string, what string, ok func(snapshotJSON) bool) snapshotJSON {
	t.Helper()
	var found snapshotJSON
	var snaps []snapshotJSON
	if !harness.WaitFor(func() bool {
		snaps = listSnapshots(t, dir)
		for _, s := range snaps {
			if ok(s) {
				found = s
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no %s appeared; snapshots: %+v", what, snaps)
	}
	return found
}

func autoSnapshots(snaps []snapshotJSON) []snapshotJSON {
	var out []snapshotJSON
	for _, s := range snaps {
		if s.Kind == "auto" {
			out = append(out, s)
		}
	}
	return out
}

func TestAutoSnapshotAfterQuietPeriod(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a.go", "package a\n")), harness.WithArgs("--auto-snapshot", "--quiet-period", "200ms"))
	harness.WriteFile(t, m.Path("a.go"), "package a // changed\n")
	harness.WriteFile(t, m.Path("b.go"), "package a\n")
	s := waitSnapshot(t, m.Dir, "automatic snapshot", func(s snapshotJSON) bool { return s.Kind == "auto" })
	if s.Label != "edited a.go and b.go" || s.Branch != "main" {
		t.Errorf("automatic snapshot %+v, want label %q on main", s, "edited a.go and b.go")
	}
	// It holds the files as they were.
	harness.WriteFile(t, m.Path("a.go"), "package a // later\n")
	mustC(t, m.Dir, "restore", s.ID)
	if got := harness.ReadFile(t, m.Path("a.go")); got != "package a // changed\n" {
		t.Errorf("a.go restored from the automatic snapshot = %q", got)
	}
}

// TestAutoSnapshotOffByDefault: without --auto-snapshot, changes and a
// manual snapshot make no automatic one. That nothing came is concluded
// only well after one would have: a mount with --auto-snapshot and the
// same quiet period, written the same, shows when that is on this
// machine (its snapshot appears), and the test waits twice as long
// again, and at least a second (50 quiet periods, 50 of the runner's
// 20 ms batches), before it looks.
func TestAutoSnapshotOffByDefault(t *testing.T) {
	const quiet = "20ms"
	m := harness.NewMount(t, harness.WithArgs("--quiet-period", quiet))
	on := harness.NewMount(t, harness.WithArgs("--auto-snapshot", "--quiet-period", quiet))
	start := time.Now()
	harness.WriteFile(t, on.Path("a"), "a")
	harness.WriteFile(t, m.Path("a"), "a")
	waitSnapshot(t, on.Dir, "automatic snapshot with --auto-snapshot", func(s snapshotJSON) bool { return s.Kind == "auto" })
	due := time.Since(start)
	takeSnapshot(t, m.Dir, "marker")
	harness.WriteFile(t, m.Path("b"), "b")
	time.Sleep(max(3*due, time.Second) - time.Since(start))
	if auto := autoSnapshots(listSnapshots(t, m.Dir)); len(auto) != 0 {
		t.Errorf("automatic snapshots without --auto-snapshot, %v after the first change (one with it came after %v): %+v",
			time.Since(start).Round(time.Millisecond), due.Round(time.Millisecond), auto)
	}
}

func TestAutoSnapshotGitCommit(t *testing.T) {
	requireTool(t, "git")
	lower := harness.NewLowerDir(t, harness.LowerFile("main.go", "package main\n"))
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "safe.directory=*", "-c", "maintenance.auto=false"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git(lower, "init", "-q", "-b", "main")
	git(lower, "add", ".")
	git(lower, "commit", "-q", "-m", "first")
	// A quiet period far longer than the test: only the commit can
	// make a snapshot.
	m := harness.NewMount(t, harness.WithExistingLower(lower), harness.WithArgs("--auto-snapshot", "--quiet-period", "1h"))
	harness.WriteFile(t, m.Path("main.go"), "package main // fixed\n")
	git(m.Dir, "commit", "-q", "-am", "fix the parser")
	out, err := exec.Command("git", "-c", "safe.directory=*", "-C", m.Dir, "rev-parse", "--short=7", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "git commit " + strings.TrimSpace(string(out)) + " on main: fix the parser"
	// Labelled with the commit and, where the mount is traced, the
	// command.
	s := waitSnapshot(t, m.Dir, "snapshot of the commit", func(s snapshotJSON) bool { return s.Kind == "git" })
	if exectrace.Available() != nil {
		if s.Label != want {
			t.Errorf("snapshot after the commit is labelled %q, want %q", s.Label, want)
		}
	} else if !strings.HasPrefix(s.Label, want+" (by git ") || !strings.HasSuffix(s.Label, "commit -q -am 'fix the parser')") {
		t.Errorf("snapshot after the commit is labelled %q, want %q and the command", s.Label, want)
	}
}

func TestAutoSnapshotIgnoredPaths(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile(".gitignore", "build/\n"),
		harness.LowerFile(".agentfs.conf", "[auto-snapshot]\nenabled = true\nquiet-period = 100ms\n\n[ignore]\npattern = *.tmp\n"),
	))
	// Changes only to ignored paths: from .gitignore and from the
	// project's configuration (which also turned automatic snapshots on).
	if err := os.MkdirAll(m.Path("build/obj"), 0755); err != nil {
		t.Fatal(err)
	}
	harness.WriteFile(t, m.Path("build/obj/x.o"), "obj")
	harness.WriteFile(t, m.Path("scratch.tmp"), "tmp")
	// Then one that counts. Had the ignored ones started a snapshot, it
	// would have come first, or this one would name them.
	harness.WriteFile(t, m.Path("marker.txt"), "m")
	s := waitSnapshot(t, m.Dir, "automatic snapshot", func(s snapshotJSON) bool { return s.Kind == "auto" })
	if s.Label != "edited marker.txt" {
		t.Errorf("automatic snapshot labelled %q, want %q (ignored paths neither start nor show)", s.Label, "edited marker.txt")
	}
	if auto := autoSnapshots(listSnapshots(t, m.Dir)); len(auto) != 1 {
		t.Errorf("%d automatic snapshots, want 1: %+v", len(auto), auto)
	}
}

func TestBadConfigMountsNothing(t *testing.T) {
	harness.RequireFUSE(t)
	lower := harness.NewLowerDir(t, harness.LowerFile(".agentfs.conf", "[auto-snapshot]\nquiet-period = soon\n"))
	mp := harness.NewMountpoint(t)
	r := harness.Run(t, "mount", "--lower", lower, mp)
	if r.Code != 1 {
		t.Errorf("mount with a bad configuration: exit %d, want 1:\n%s", r.Code, r)
	}
	for _, want := range []string{filepath.Join(lower, ".agentfs.conf") + ":2:", "quiet-period = soon", "500ms"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("the error does not say %q:\n%s", want, r)
		}
	}
	if harness.IsMounted(mp) {
		t.Errorf("%s was mounted despite the bad configuration", mp)
		harness.Run(t, "unmount", mp)
	}
}

func TestSnapshotPrune(t *testing.T) {
	m := harness.NewMount(t, harness.WithArgs("--auto-snapshot", "--quiet-period", "50ms", "--auto-snapshot-keep", "3"))
	// makeAuto changes a file and waits for its automatic snapshot.
	makeAuto := func(name string) string {
		t.Helper()
		harness.WriteFile(t, m.Path(name), name)
		return waitSnapshot(t, m.Dir, "automatic snapshot of "+name, func(s snapshotJSON) bool {
			return s.Kind == "auto" && s.Label == "edited "+name
		}).ID
	}
	first := makeAuto("f1")
	mustC(t, m.Dir, "tag", "keepme", first)
	manual := takeSnapshot(t, m.Dir, "by hand")
	var autos []string
	for _, name := range []string{"f2", "f3", "f4", "f5"} {
		autos = append(autos, makeAuto(name))
	}
	// The count limit (3) thinned the untagged ones after each.
	got := listSnapshots(t, m.Dir)
	ids := func(snaps []snapshotJSON) []string {
		var out []string
		for _, s := range snaps {
			out = append(out, s.ID)
		}
		return out
	}
	if want := []string{first, manual, autos[1], autos[2], autos[3]}; !slices.Equal(ids(got), want) {
		t.Errorf("snapshots after 5 automatic ones with --auto-snapshot-keep 3 = %v, want %v (tagged and manual kept, the oldest untagged automatic one gone)", ids(got), want)
	}
	r := mustC(t, m.Dir, "snapshot", "prune", "--keep", "1", "--dry-run")
	for _, id := range autos[1:3] {
		if !strings.Contains(r.Stdout, "would delete "+id) {
			t.Errorf("prune --dry-run does not name %s:\n%s", id, r.Stdout)
		}
	}
	if after := listSnapshots(t, m.Dir); len(after) != len(got) {
		t.Errorf("prune --dry-run deleted snapshots: %v", ids(after))
	}
	mustC(t, m.Dir, "snapshot", "prune", "--keep", "1")
	if want := []string{first, manual, autos[3]}; !slices.Equal(ids(listSnapshots(t, m.Dir)), want) {
		t.Errorf("snapshots after prune --keep 1 = %v, want %v", ids(listSnapshots(t, m.Dir)), want)
	}
	// --keep 0 deletes every untagged automatic one; tagged, manual stay.
	var reply struct {
		Deleted []snapshotJSON `json:"deleted"`
		Kept    int            `json:"kept"`
	}
	r = mustC(t, m.Dir, "snapshot", "prune", "--keep", "0", "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &reply); err != nil {
		t.Fatalf("prune --json: %v\n%s", err, r.Stdout)
	}
	if len(reply.Deleted) != 1 || reply.Deleted[0].ID != autos[3] || reply.Kept != 0 {
		t.Errorf("prune --keep 0 --json = %+v, want %s deleted and 0 kept", reply, autos[3])
	}
	if want := []string{first, manual}; !slices.Equal(ids(listSnapshots(t, m.Dir)), want) {
		t.Errorf("snapshots after prune --keep 0 = %v, want %v", ids(listSnapshots(t, m.Dir)), want)
	}
	// The snapshot a branch was made from stays too.
	mustC(t, m.Dir, "branch", "create", "other")
	var origin string
	for _, b := range listBranches(t, m.Dir) {
		if b.Name == "other" {
			origin = b.Origin
		}
	}
	mustC(t, m.Dir, "snapshot", "prune", "--keep", "0")
	if s := findSnapshot(listSnapshots(t, m.Dir), origin); origin == "" || s == nil {
		t.Errorf("prune --keep 0 deleted %q, the snapshot branch other was made from", origin)
	}
	if r := agentfsC(t, m.Dir, "snapshot", "prune", "--keep", "-1"); r.Code != 2 {
		t.Errorf("prune --keep -1: want a usage error:\n%s", r)
	}
}

// BenchmarkActivityCreateUnlink times a create and an unlink through a
// mount (two round trips to the daemon, both logged) with the activity
// log, with automatic snapshots on (changes pending, none due), with
// --log-reads too, and on the native filesystem for scale. To see what
// the hook costs, run it again with AGENTFS_BIN of an agentfs built
// before the activity log (the variants with its flags are skipped).
func BenchmarkActivityCreateUnlink(b *testing.B) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"native", nil},
		{"mount", []string{}},
		{"mount-auto-snapshot", []string{"--auto-snapshot", "--quiet-period", "1h"}},
		{"mount-log-reads", []string{"--log-reads"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir, daemon := b.TempDir(), 0
			if c.args != nil {
				harness.RequireFUSE(b)
				lower, mp := b.TempDir(), harness.NewMountpoint(b)
				args := append(append([]string{"mount", "--lower", lower}, harness.ModeFlags()...), c.args...)
				r := harness.Run(b, append(args, mp)...)
				if r.Code == 2 {
					testenv.SkipByDesign(b, fmt.Sprintf("this agentfs (AGENTFS_BIN, an older one) has no %v:\n%s", c.args, r))
				}
				if r.Code != 0 {
					b.Fatalf("mount:\n%s", r)
				}
				b.Cleanup(func() { harness.Run(b, "unmount", mp) })
				dir = mp
				var st harness.MountStatus
				if r := harness.Run(b, "status", "-C", mp, "--json"); r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &st) != nil {
					b.Fatalf("status:\n%s", r)
				}
				daemon = st.Pid
			}
			p := filepath.Join(dir, "f")
			cpu0 := processCPU(b, daemon)
			b.ResetTimer()
			for range b.N {
				fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
				if err != nil {
					b.Fatal(err)
				}
				unix.Close(fd)
				if err := unix.Unlink(p); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if daemon != 0 {
				// The daemon's CPU time per iteration: less at the mercy
				// of a busy machine than the elapsed time.
				b.ReportMetric(float64(processCPU(b, daemon)-cpu0)/float64(b.N), "daemon-cpu-ns/op")
			}
		})
	}
}

// processCPU returns the user and system CPU time process pid has used,
// in nanoseconds (0 for pid 0).
func processCPU(b *testing.B, pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	var utime, stime int64
	// Fields 14 and 15: utime and stime, in clock ticks.
	if _, err := fmt.Sscan(fields[11], &utime); err != nil {
		b.Fatalf("utime in /proc/%d/stat: %v", pid, err)
	}
	if _, err := fmt.Sscan(fields[12], &stime); err != nil {
		b.Fatalf("stime in /proc/%d/stat: %v", pid, err)
	}
	const ticks = 100 // USER_HZ
	return time.Duration(utime+stime) * time.Second / ticks
}
