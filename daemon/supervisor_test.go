package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/procgroup"
	"github.com/agentfs/agentfs/workspace"
)

// linkPair is a supervisorLink and the supervisor's end of its line.
func linkPair(t *testing.T) (*supervisorLink, *os.File, *bufio.Scanner) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := newSupervisorLink(os.NewFile(uintptr(fds[0]), "daemon"))
	sup := os.NewFile(uintptr(fds[1]), "supervisor")
	t.Cleanup(func() {
		l.close()
		_ = sup.Close() // the test's end
	})
	return l, sup, bufio.NewScanner(sup)
}

// TestSupervisorLinkSequence: a stop is answered by its own number only:
// the late answer to an earlier rewind is dropped; "final" says no
// relaunch follows.
func TestSupervisorLinkSequence(t *testing.T) {
	l, sup, sc := linkPair(t)
	fmt.Fprintln(sup, "relaunches 0")
	l.mu.Lock()
	defer l.mu.Unlock()
	type result struct {
		relaunch bool
		dropped  string
		err      error
	}
	done := make(chan result, 1)
	stop := func(asker string) {
		go func() {
			r, dropped, err := l.stopLocked(asker)
			done <- result{r, dropped, err}
		}()
	}
	stop("")
	if !sc.Scan() || sc.Text() != "stop 1" {
		t.Fatalf("the daemon said %q, want stop 1", sc.Text())
	}
	fmt.Fprintln(sup, "stopped 0 relaunch") // a rewind given up on
	fmt.Fprintln(sup, "stopped 1 final")
	if r := <-done; r.err != nil || r.relaunch {
		t.Errorf("stop = relaunch %v, %v; want final (the stale answer dropped)", r.relaunch, r.err)
	}
	if left := l.left.Load(); left != 0 {
		t.Errorf("relaunches left = %d, want 0", left)
	}
	stop("")
	if !sc.Scan() || sc.Text() != "stop 2" {
		t.Fatalf("the daemon said %q, want stop 2", sc.Text())
	}
	fmt.Fprintln(sup, "error 2 the agent would not die")
	if r := <-done; r.err == nil || !strings.Contains(r.err.Error(), "the agent would not die") {
		t.Errorf("stop answered with an error = %v", r.err)
	}
	// A self-rewind names the start that asked it; the supervisor may
	// drop it, and a relaunch counts at once against the ones left.
	fmt.Fprintln(sup, "relaunches 2")
	for l.left.Load() != 2 {
		time.Sleep(10 * time.Millisecond)
	}
	stop("run-1")
	if !sc.Scan() || sc.Text() != "stop 3 self run-1" {
		t.Fatalf("the daemon said %q, want stop 3 self run-1", sc.Text())
	}
	fmt.Fprintln(sup, "dropped 3 an earlier rewind stopped run-1")
	if r := <-done; r.err != nil || r.relaunch || r.dropped != "an earlier rewind stopped run-1" {
		t.Errorf("a dropped self-rewind = %+v, want dropped with the reason", r)
	}
	stop("run-2")
	if !sc.Scan() || sc.Text() != "stop 4 self run-2" {
		t.Fatalf("the daemon said %q, want stop 4 self run-2", sc.Text())
	}
	fmt.Fprintln(sup, "stopped 4 relaunch")
	if r := <-done; r.err != nil || !r.relaunch {
		t.Errorf("a self-rewind = %+v, want relaunch", r)
	}
	if left := l.left.Load(); left != 1 {
		t.Errorf("relaunches left after a relaunch answered = %d, want 1 (before the supervisor says)", left)
	}
}

// TestRewindingLogsWhatIsNotDone: a rewind that is not carried out (a
// self-rewind dropped, a command not stopped) has its rewind line in
// the activity log, saying why; one carried out says whether the
// command starts again.
func TestRewindingLogsWhatIsNotDone(t *testing.T) {
	ws, err := workspace.Open(workspace.Options{Store: t.TempDir(), Lower: t.TempDir(), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() }) // only read
	store := t.TempDir()
	alog, err := activity.Open(activity.Options{Dir: store})
	if err != nil {
		t.Fatal(err)
	}
	l, sup, sc := linkPair(t)
	d := &Daemon{log: slog.New(slog.DiscardHandler), super: l, activity: &activityHook{log: alog}}
	d.activity.d = d
	d.shown.Store(ws.View())
	branch := ws.View().Layer().Name()
	answer := func(line string) {
		go func() {
			if sc.Scan() {
				fmt.Fprintf(sup, line+"\n", strings.Fields(sc.Text())[1])
			}
		}()
	}
	answer("dropped %s the start that asked it (run-1) is no longer running")
	if _, err := d.Rewinding(branch, "1a2b3c4d", "run-1"); !errors.Is(err, workspace.ErrRewindDropped) {
		t.Errorf("a dropped self-rewind: %v, want ErrRewindDropped", err)
	}
	answer("error %s the agent would not die")
	if _, err := d.Rewinding(branch, "5e6f7a8b", ""); err == nil {
		t.Error("a rewind whose command was not stopped: no error")
	}
	answer("stopped %s final")
	rw, err := d.Rewinding(branch, "9c0d1e2f", "run-2")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = sc.Scan() }() // the outcome
	rw.Done("9c0d1e2f", "3a4b5c6d", nil)
	if err := alog.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := activity.Read(store, activity.Activity, func(line activity.Line) error {
		if line.Op == activity.OpRewind {
			got = append(got, line.Detail)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"asked by the command (run-1): snapshot 1a2b3c4d not restored, nothing stopped by it: dropped: the start that asked it (run-1) is no longer running",
		"snapshot 5e6f7a8b not restored, nothing stopped by it: the session's supervisor could not stop the command: the agent would not die",
		"asked by the command (run-2): snapshot 9c0d1e2f, safety snapshot 3a4b5c6d: the command is not started again: the run ends",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rewind lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLineMessage: a message on the supervisor's line is one line of
// at most MaxLineMessage bytes, however long the error.
func TestLineMessage(t *testing.T) {
	long := strings.Repeat("pid 123456 ", 10000) + "\nend"
	got := LineMessage(long)
	if len(got) > MaxLineMessage || strings.Contains(got, "\n") || !strings.HasSuffix(got, "(cut)") {
		t.Errorf("LineMessage of %d bytes = %d bytes, newline %v, ends %q", len(long), len(got), strings.Contains(got, "\n"), got[max(0, len(got)-10):])
	}
	if got := LineMessage("a\nb"); got != "a b" {
		t.Errorf("LineMessage(a, newline, b) = %q", got)
	}
}

// TestSupervisorLinkInGroup: a process is the command's when its cgroup
// is the group's top or below it.
func TestSupervisorLinkInGroup(t *testing.T) {
	l, sup, _ := linkPair(t)
	self := procgroup.Of(os.Getpid())
	if self == "" {
		testenv.Skip(t, testenv.Cgroups, "no version-2 cgroup here")
	}
	cases := []struct {
		group string
		want  bool
	}{{self, true}, {strings.TrimSuffix(self, "/") + "/run-1", false}, {strings.TrimSuffix(self, "/") + "x", false}}
	if parent := filepath.Dir(self); self != "/" {
		cases = append(cases, struct {
			group string
			want  bool
		}{parent, true})
	}
	for _, tc := range cases {
		fmt.Fprintln(sup, "group "+tc.group)
		for i := 0; i < 500 && (l.group.Load() == nil || *l.group.Load() != tc.group); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if got, _ := l.startOf(uint32(os.Getpid())); got != tc.want {
			t.Errorf("in group %q (this process in %q) = %v, want %v", tc.group, self, got, tc.want)
		}
	}
}

// TestSupervisorLinkInLeaf: a process started into a procgroup (in a
// leaf below the group's top) is the command's.
func TestSupervisorLinkInLeaf(t *testing.T) {
	g, err := procgroup.New(fmt.Sprintf("agentfs-daemon-test-%d", time.Now().UnixNano()))
	if err != nil {
		testenv.RequireRoot(t, "a cgroup")
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
		if cmd.Process != nil {
			_ = cmd.Wait() // Close killed it
		}
	})
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	l, sup, _ := linkPair(t)
	fmt.Fprintln(sup, "group "+g.Path())
	for i := 0; i < 500 && l.group.Load() == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if inside, run := l.startOf(uint32(cmd.Process.Pid)); !inside || run != "run-1" {
		t.Errorf("process %d in cgroup %s: in the group %s %v, start %q; want in it, run-1", cmd.Process.Pid, procgroup.Of(cmd.Process.Pid), g.Path(), inside, run)
	}
	if inside, _ := l.startOf(uint32(os.Getpid())); inside {
		t.Errorf("the test itself is in the group %s", g.Path())
	}
}
