package autosnap

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeClock runs a Scheduler as Runner does, with time given by the test.
type fakeClock struct {
	t   *testing.T
	s   *Scheduler
	now time.Time
}

func (c *fakeClock) change(branch string, paths ...string) {
	c.s.Add(Change{Time: c.now, Branch: branch, Paths: paths})
}

// advance moves the clock by d and returns what fell due on the way,
// taken at the times they fell due.
func (c *fakeClock) advance(d time.Duration) []Due {
	end := c.now.Add(d)
	var due []Due
	for {
		next, ok := c.s.Next()
		if !ok || next.After(end) {
			break
		}
		c.now = next
		due = append(due, c.s.Take(c.now)...)
	}
	c.now = end
	return due
}

func newClock(t *testing.T, s *Scheduler) *fakeClock { return &fakeClock{t: t, s: s, now: epoch} }

func TestSchedulerDebounces(t *testing.T) {
	c := newClock(t, &Scheduler{Quiet: 2 * time.Second})
	c.change("main", "a.go")
	if due := c.advance(1500 * time.Millisecond); len(due) != 0 {
		t.Fatalf("due after 1.5s: %+v, want nothing (quiet period 2s)", due)
	}
	c.change("main", "b.go") // restarts the quiet period
	c.change("main", "a.go") // the same path again
	if due := c.advance(1900 * time.Millisecond); len(due) != 0 {
		t.Fatalf("due 1.9s after the last change: %+v", due)
	}
	due := c.advance(200 * time.Millisecond)
	if len(due) != 1 {
		t.Fatalf("due 2.1s after the last change: %+v, want one snapshot", due)
	}
	if got, want := due[0].Paths, []string{"a.go", "b.go"}; !slices.Equal(got, want) || due[0].Branch != "main" {
		t.Errorf("due = %+v, want paths %v on main", due[0], want)
	}
	if got, want := due[0].Label(nil), "edited a.go and b.go"; got != want {
		t.Errorf("label = %q, want %q", got, want)
	}
	if _, ok := c.s.Next(); ok {
		t.Errorf("something is still pending after the snapshot")
	}
	if due := c.advance(time.Hour); len(due) != 0 {
		t.Errorf("due without changes: %+v", due)
	}
}

func TestSchedulerBranchesApart(t *testing.T) {
	c := newClock(t, &Scheduler{Quiet: time.Second})
	c.change("main", "a")
	c.advance(600 * time.Millisecond)
	c.change("try", "b")
	due := c.advance(500 * time.Millisecond)
	if len(due) != 1 || due[0].Branch != "main" {
		t.Fatalf("due = %+v, want main's snapshot only", due)
	}
	due = c.advance(600 * time.Millisecond)
	if len(due) != 1 || due[0].Branch != "try" || !slices.Equal(due[0].Paths, []string{"b"}) {
		t.Fatalf("due = %+v, want try's snapshot of b", due)
	}
}

func TestSchedulerIgnores(t *testing.T) {
	m, err := NewIgnore(IgnoreOptions{Patterns: []string{"build/", "*.log"}})
	if err != nil {
		t.Fatal(err)
	}
	c := newClock(t, &Scheduler{Quiet: time.Second, Ignore: m})
	c.change("main", "build/out.o", "x.log")
	c.s.Add(Change{Time: c.now, Branch: "main", Paths: []string{"build"}, Dir: true})
	if due := c.advance(time.Minute); len(due) != 0 {
		t.Fatalf("ignored paths made a snapshot due: %+v", due)
	}
	c.change("main", "src/a.go")
	c.advance(900 * time.Millisecond)
	c.change("main", "build/more.o") // neither delays nor shows
	due := c.advance(200 * time.Millisecond)
	if len(due) != 1 || !slices.Equal(due[0].Paths, []string{"src/a.go"}) {
		t.Fatalf("due = %+v, want one snapshot of src/a.go, on time", due)
	}
}

func TestSchedulerGitCommit(t *testing.T) {
	c := newClock(t, &Scheduler{Quiet: 2 * time.Second, GitQuiet: 300 * time.Millisecond})
	// .git internals alone start nothing.
	c.change("main", ".git/index", ".git/objects/ab/cdef")
	if due := c.advance(time.Minute); len(due) != 0 {
		t.Fatalf(".git internals made a snapshot due: %+v", due)
	}
	c.change("main", "a.go")
	c.change("main", ".git/objects/12/3456")
	c.change("main", ".git/refs/heads/main.lock", ".git/refs/heads/main") // the rename of the ref
	c.change("main", ".git/refs/heads/main")                              // its close, seen after the rename
	c.advance(200 * time.Millisecond)
	c.change("main", ".git/logs/HEAD") // git is still writing: wait
	if due := c.advance(200 * time.Millisecond); len(due) != 0 {
		t.Fatalf("due while git still writes: %+v", due)
	}
	due := c.advance(200 * time.Millisecond)
	if len(due) != 1 {
		t.Fatalf("due = %+v, want one snapshot soon after the commit", due)
	}
	if got, want := due[0].Refs, []GitRef{{Name: "refs/heads/main"}}; !slices.Equal(got, want) {
		t.Errorf("refs = %+v, want %+v (each ref once)", got, want)
	}
	if got, want := due[0].Paths, []string{"a.go"}; !slices.Equal(got, want) {
		t.Errorf("paths = %v, want %v (.git internals are not listed)", got, want)
	}
}

// TestSchedulerRefsOnce: a ref changed twice counts once, in the place
// of its last change.
func TestSchedulerRefsOnce(t *testing.T) {
	c := newClock(t, &Scheduler{Quiet: 2 * time.Second, GitQuiet: 300 * time.Millisecond})
	c.change("main", ".git/refs/heads/main")
	c.change("main", ".git/refs/tags/v1")
	c.change("main", ".git/refs/heads/main")
	due := c.advance(time.Second)
	if len(due) != 1 {
		t.Fatalf("due = %+v, want one snapshot", due)
	}
	if got, want := due[0].Refs, []GitRef{{Name: "refs/tags/v1"}, {Name: "refs/heads/main"}}; !slices.Equal(got, want) {
		t.Errorf("refs = %+v, want %+v", got, want)
	}
}

func TestSchedulerLostChanges(t *testing.T) {
	c := newClock(t, &Scheduler{Quiet: time.Second})
	c.s.Add(Change{Time: c.now, Branch: "main", Lost: 5})
	due := c.advance(2 * time.Second)
	if len(due) != 1 || due[0].More != 5 {
		t.Fatalf("due = %+v, want a snapshot counting 5 unknown changes", due)
	}
	if got, want := due[0].Label(nil), "edited 5 files (too many changes at once to name them)"; got != want {
		t.Errorf("label = %q, want %q", got, want)
	}
}

func TestSchedulerManyPaths(t *testing.T) {
	c := newClock(t, &Scheduler{Quiet: time.Second})
	for i := range maxPaths + 10 {
		c.change("main", "f"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	c.change("main", "fzz", "fzz") // counted once
	due := c.advance(2 * time.Second)
	if len(due) != 1 || len(due[0].Paths) != maxPaths || due[0].More != 11 {
		t.Fatalf("due: %d paths and %d more, want %d and 11", len(due[0].Paths), due[0].More, maxPaths)
	}
}

func TestSchedulerForget(t *testing.T) {
	c := newClock(t, &Scheduler{Quiet: time.Second})
	c.change("main", "a")
	c.s.Forget("main")
	if due := c.advance(time.Minute); len(due) != 0 {
		t.Errorf("due after Forget: %+v", due)
	}
}

func TestChangeLabel(t *testing.T) {
	long := "very/long/path/" + strings.Repeat("a", 90) + "/file.go"
	for _, tc := range []struct {
		paths []string
		more  int
		want  string
	}{
		{[]string{"a.go"}, 0, "edited a.go"},
		{[]string{"a.go", "b.go"}, 0, "edited a.go and b.go"},
		{[]string{"a.go", "b.go", "c.go"}, 0, "edited a.go, b.go and c.go"},
		{[]string{"a.go", "b.go", "c.go", "d.go"}, 0, "edited a.go, b.go and 2 more"},
		{[]string{"a.go", "b.go"}, 12, "edited a.go, b.go and 12 more"},
		{[]string{long}, 0, "edited …/file.go"},
		{nil, 0, "edited files"},
	} {
		if got := ChangeLabel(tc.paths, tc.more); got != tc.want {
			t.Errorf("ChangeLabel(%v, %d) = %q, want %q", tc.paths, tc.more, got, tc.want)
		}
	}
}
