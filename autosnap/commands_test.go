package autosnap

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultPatterns(t *testing.T) {
	if got := len(DefaultPatterns()); got != len(DefaultBuildPatterns) {
		t.Fatalf("%d patterns of %d", got, len(DefaultBuildPatterns))
	}
	for _, bad := range []string{"", "   ", "make [x"} {
		if _, err := ParsePattern(bad); err == nil {
			t.Errorf("ParsePattern(%q) = nil error", bad)
		}
	}
}

func TestPatternMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		argv    string
		want    bool
	}{
		{"make", "make", true},
		{"make", "/usr/bin/make -j4 all", true},
		{"make", "cmake ..", false},
		{"go test", "go test -run X ./...", true},
		{"go test", "go -v test ./...", true},
		{"go test", "go -C sub test ./...", false}, // -C's value reads as a subcommand
		{"go test", "go run ./cmd test", false},
		{"python* -m pytest", "python3 -m pip install pytest", false},
		{"cargo build", "cargo watch -x build", false},
		{"make", "env -u HOME make", true},
		{"go test", "go build ./...", false},
		{"go test", "go", false},
		{"npm run build*", "npm run build:prod", true},
		{"npm run build*", "npm run lint", false},
		// npm is a node script: node runs it, env may run node.
		{"npm test", "node /usr/lib/node_modules/npm/bin/npm-cli.js test", false},
		{"npm test", "node /usr/bin/npm test", true},
		{"npm test", "/usr/bin/env node /usr/bin/npm test", true},
		{"gradlew", "/bin/sh ./gradlew build", true},
		{"python* -m pytest", "python3 -m pytest -q", true},
		{"pytest", "python3 /usr/bin/pytest -q", true},
		{"make", "sh -c make", false}, // the shell starts make, which is traced itself
		{"make", "env -i PATH=/bin make", true},
	} {
		p, err := ParsePattern(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Match(strings.Fields(tc.argv)); got != tc.want {
			t.Errorf("%q matches %q = %v, want %v", tc.pattern, tc.argv, got, tc.want)
		}
	}
}

func TestGitSubcommand(t *testing.T) {
	for argv, want := range map[string]string{
		"git commit -m x":               "commit",
		"git -C sub -c a=b commit":      "commit",
		"/usr/bin/git --no-pager tag v": "tag",
		"git":                           "",
		"gitk":                          "",
		"git --git-dir .git status":     "status",
	} {
		if got := gitSubcommand(strings.Fields(argv)); got != want {
			t.Errorf("gitSubcommand(%q) = %q, want %q", argv, got, want)
		}
	}
}

// clock is a fake clock for the triggers.
type clock struct{ now time.Time }

func (c *clock) at(d time.Duration) time.Time { c.now = c.now.Add(d); return c.now }

func start(c *Commands, at time.Time, pid, ppid int, argv string) {
	startOn(c, at, pid, ppid, argv, "")
}

// startOn starts argv, a command working on branch.
func startOn(c *Commands, at time.Time, pid, ppid int, argv, branch string) {
	c.Add(Command{Time: at, Pid: pid, Ppid: ppid, Argv: strings.Fields(argv), Branch: branch})
}

func end(c *Commands, at time.Time, pid int, ok bool, started time.Time) {
	c.Add(Command{Time: at, Pid: pid, End: true, OK: ok, Start: started})
}

func TestBuildTrigger(t *testing.T) {
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := &Commands{Build: true}
	t0 := clk.at(0)
	start(c, t0, 1, 0, "claude")
	// make runs a shell that runs go build: only make's end counts.
	startOn(c, clk.at(time.Second), 10, 1, "make -j2 build", "main")
	start(c, clk.at(time.Millisecond), 11, 10, "/bin/sh -c go build ./...")
	start(c, clk.at(time.Millisecond), 12, 11, "go build ./...")
	end(c, clk.at(time.Second), 12, true, t0)
	end(c, clk.at(time.Millisecond), 11, true, t0)
	if due := c.Take(clk.now); len(due) != 0 {
		t.Fatalf("a build under a running build made snapshots: %+v", due)
	}
	makeStart := t0.Add(time.Second)
	end(c, clk.at(100*time.Millisecond), 10, true, makeStart)
	next, ok := c.Next()
	if !ok || next.After(clk.now) {
		t.Fatalf("Next() = %v, %v: want a snapshot due now", next, ok)
	}
	due := c.Take(clk.now)
	if len(due) != 1 || due[0].Kind != KindBuild || due[0].Branch != "main" || due[0].Command != "make -j2 build" {
		t.Fatalf("due = %+v", due)
	}
	if l := due[0].Label(nil); l != "make -j2 build: succeeded in 1.1s" {
		t.Errorf("label = %q", l)
	}
	// A failing test, a command that is no build, a build killed by a
	// signal: none.
	start(c, clk.at(time.Second), 20, 1, "go test ./...")
	end(c, clk.at(time.Second), 20, false, clk.now)
	start(c, clk.at(time.Second), 21, 1, "ls -l")
	end(c, clk.at(time.Second), 21, true, clk.now)
	if due := c.Take(clk.now); len(due) != 0 {
		t.Fatalf("due = %+v", due)
	}
	// Another branch's build.
	startOn(c, clk.at(time.Second), 30, 1, "cargo test", "exp")
	end(c, clk.at(time.Second), 30, true, clk.now)
	if due := c.Take(clk.now); len(due) != 1 || due[0].Branch != "exp" {
		t.Fatalf("due = %+v", due)
	}
	// Off: none.
	c.Build = false
	start(c, clk.at(time.Second), 40, 1, "make")
	end(c, clk.at(time.Second), 40, true, clk.now)
	if due := c.Take(clk.now); len(due) != 0 {
		t.Fatalf("with the build trigger off: %+v", due)
	}
}

// A shell that replaces itself with make (one pid, two programs): the
// end is make's.
func TestBuildTriggerExecInPlace(t *testing.T) {
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := &Commands{Build: true}
	start(c, clk.now, 5, 1, "sh -c make")
	start(c, clk.at(time.Millisecond), 5, 1, "make")
	end(c, clk.at(time.Second), 5, true, clk.now)
	if due := c.Take(clk.now); len(due) != 1 || due[0].Command != "make" || due[0].Branch != "" {
		t.Fatalf("due = %+v", due)
	}
	if len(c.builds) != 0 {
		t.Errorf("%d builds still counted as running", len(c.builds))
	}
	// mvn's script replaces itself with java: still the build, to its end.
	start(c, clk.at(time.Second), 6, 1, "/bin/sh /usr/bin/mvn -q package")
	start(c, clk.at(time.Millisecond), 6, 1, "/usr/lib/jvm/bin/java -classpath boot.jar org.codehaus.plexus.classworlds.launcher.Launcher -q package")
	end(c, clk.at(time.Second), 6, true, clk.now)
	if due := c.Take(clk.now); len(due) != 1 || due[0].Command != "/bin/sh /usr/bin/mvn -q package" {
		t.Fatalf("mvn's build: %+v", due)
	}
	// Two builds of one branch that end together: one snapshot.
	start(c, clk.at(time.Second), 7, 1, "make a")
	start(c, clk.now, 8, 1, "make b")
	end(c, clk.at(time.Second), 7, true, clk.now)
	end(c, clk.now, 8, true, clk.now)
	if due := c.Take(clk.now); len(due) != 1 || due[0].Command != "make b" || due[0].Label(nil) != "make b: succeeded in 1s (and 1 more build)" {
		t.Fatalf("two builds at once: %+v", due)
	}
}

func TestIdleTrigger(t *testing.T) {
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := &Commands{Build: true, Idle: 30 * time.Second}
	if _, ok := c.Next(); ok {
		t.Fatal("idle due before any activity")
	}
	start(c, clk.now, 1, 0, "claude")
	start(c, clk.at(time.Second), 2, 1, "ls")
	end(c, clk.at(time.Millisecond), 2, true, clk.now)
	last := clk.now
	next, ok := c.Next()
	if !ok || !next.Equal(last.Add(30*time.Second)) {
		t.Fatalf("Next() = %v, %v; want %v", next, ok, last.Add(30*time.Second))
	}
	if due := c.Take(last.Add(29 * time.Second)); len(due) != 0 {
		t.Fatalf("idle before the threshold: %+v", due)
	}
	due := c.Take(last.Add(31 * time.Second))
	if len(due) != 1 || due[0].Kind != KindIdle || due[0].Branch != "" || due[0].Command != "ls" {
		t.Fatalf("due = %+v", due)
	}
	if l := due[0].Label(nil); l != "idle for 31s after ls" {
		t.Errorf("label = %q", l)
	}
	// Once per idle period.
	if due := c.Take(last.Add(time.Hour)); len(due) != 0 {
		t.Fatalf("a second idle snapshot in one idle period: %+v", due)
	}
	if _, ok := c.Next(); ok {
		t.Fatal("idle due again without activity")
	}
	// Changes on two branches: one snapshot of each.
	clk.now = last.Add(time.Hour)
	c.Change(clk.at(0), "main")
	c.Change(clk.at(time.Second), "exp")
	c.Change(clk.at(time.Second), "main")
	due = c.Take(clk.now.Add(30 * time.Second))
	if len(due) != 2 || due[0].Branch != "main" || due[1].Branch != "exp" {
		t.Fatalf("due = %+v", due)
	}
	// A build that runs long and quiet keeps the mount from being idle;
	// its end (a failure) starts the idle period.
	testStart := clk.at(time.Minute)
	start(c, testStart, 3, 1, "go test ./...")
	if next, ok := c.Next(); !ok || !next.Equal(testStart.Add(5*time.Minute)) {
		t.Fatalf("Next() while a test runs = %v, %v; want 10 idle thresholds after it started", next, ok)
	}
	if due := c.Take(testStart.Add(4 * time.Minute)); len(due) != 0 {
		t.Fatalf("idle while a test runs: %+v", due)
	}
	end(c, clk.at(4*time.Minute), 3, false, testStart)
	if next, ok := c.Next(); !ok || !next.Equal(clk.now.Add(30*time.Second)) {
		t.Fatalf("Next() after the test = %v, %v", next, ok)
	}
	c.Take(clk.now.Add(time.Hour))
	// A build that never ends (make serve, a watcher, a lost exit)
	// holds the mount busy for 10 idle thresholds, no longer.
	serveStart := clk.at(time.Hour)
	start(c, serveStart, 4, 1, "make serve")
	if due := c.Take(serveStart.Add(4 * time.Minute)); len(due) != 0 {
		t.Fatalf("idle while make serve is young: %+v", due)
	}
	if due := c.Take(serveStart.Add(5 * time.Minute)); len(due) != 1 || due[0].Kind != KindIdle {
		t.Fatalf("idle after make serve ran 10 thresholds: %+v", due)
	}
	// Off.
	c.Idle = 0
	if _, ok := c.Next(); ok {
		t.Fatal("idle due with the trigger off")
	}
}

func TestGitCommand(t *testing.T) {
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := &Commands{}
	if _, ok := c.GitCommand(clk.now); ok {
		t.Fatal("a git command before any ran")
	}
	start(c, clk.now, 7, 1, "git commit -m fix")
	ref := clk.at(50 * time.Millisecond) // the ref moves while it runs
	if cmd, ok := c.GitCommand(ref); !ok || cmd != "git commit -m fix" {
		t.Fatalf("GitCommand while it runs = %q, %v", cmd, ok)
	}
	end(c, clk.at(50*time.Millisecond), 7, true, ref)
	start(c, clk.at(time.Millisecond), 8, 1, "git status") // moves no ref
	end(c, clk.at(time.Millisecond), 8, true, clk.now)
	if cmd, ok := c.GitCommand(ref.Add(300 * time.Millisecond)); !ok || cmd != "git commit -m fix" {
		t.Fatalf("GitCommand = %q, %v", cmd, ok)
	}
	if _, ok := c.GitCommand(clk.now.Add(time.Minute)); ok {
		t.Fatal("a git command that ended a minute before still named")
	}
	d := Due{Kind: KindGit, Refs: []GitRef{{Name: "refs/heads/main"}}, Command: "git commit -m fix"}
	if l := d.Label(fakeRepo{}.read); !strings.HasSuffix(l, " (by git commit -m fix)") {
		t.Errorf("label = %q", l)
	}
}

// TestSchedulerKinds: a ref that moves makes a git snapshot; with the
// git trigger off, one more change inside .git (none started).
func TestSchedulerKinds(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &Scheduler{}
	s.Add(Change{Time: t0, Branch: "main", Paths: []string{"a.go"}})
	s.Add(Change{Time: t0, Branch: "exp", Paths: []string{".git/refs/heads/exp"}})
	kinds := map[string]string{}
	for _, d := range s.Take(t0.Add(time.Hour)) {
		kinds[d.Branch] = d.Kind
	}
	if kinds["main"] != KindAuto || kinds["exp"] != KindGit {
		t.Errorf("kinds = %v", kinds)
	}
	s = &Scheduler{NoGit: true}
	s.Add(Change{Time: t0, Branch: "exp", Paths: []string{".git/refs/heads/exp"}})
	if due := s.Take(t0.Add(time.Hour)); len(due) != 0 {
		t.Errorf("with the git trigger off: %+v", due)
	}
	// A build's snapshot supersedes pending changes, not a moved ref.
	s = &Scheduler{}
	s.Add(Change{Time: t0, Branch: "main", Paths: []string{"a.go"}})
	s.Add(Change{Time: t0, Branch: "exp", Paths: []string{".git/refs/heads/exp"}})
	s.Supersede("main")
	s.Supersede("exp")
	if due := s.Take(t0.Add(time.Hour)); len(due) != 1 || due[0].Branch != "exp" {
		t.Errorf("after Supersede: %+v", due)
	}
}

// TestRunnerCommands: the runner takes a build's snapshot as the build
// ends, and drops the changes pending on its branch.
func TestRunnerCommands(t *testing.T) {
	got := make(chan Due, 4)
	r := Start(&Scheduler{Quiet: time.Hour}, &Commands{Build: true}, func(d Due) { got <- d })
	defer r.Stop()
	now := time.Now()
	r.Add(Change{Time: now, Branch: "main", Paths: []string{"out.o"}})
	if !r.IsBuild([]string{"make"}) || r.IsBuild([]string{"ls"}) {
		t.Fatal("IsBuild")
	}
	r.AddCommand(Command{Time: now, Pid: 9, Ppid: 1, Argv: []string{"make"}, Branch: "main"})
	r.AddCommand(Command{Time: now.Add(time.Millisecond), Pid: 9, End: true, OK: true, Start: now})
	select {
	case d := <-got:
		if d.Kind != KindBuild || d.Branch != "main" {
			t.Fatalf("took %+v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no build snapshot within 10s")
	}
	r.Stop() // then its state can be read
	if n, ok := r.s.pending["main"]; ok {
		t.Errorf("the changes the build's snapshot holds are still pending: %+v", n)
	}
}
