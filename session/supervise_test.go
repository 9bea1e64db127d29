package session

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/procgroup"
)

// fakeDaemon is the daemon's end of a supervisor's line, driven by a
// test.
type fakeDaemon struct {
	t     *testing.T
	conn  *os.File
	lines chan string
}

// say sends a line to the supervisor.
func (d *fakeDaemon) say(line string) {
	d.t.Helper()
	if _, err := fmt.Fprintln(d.conn, line); err != nil {
		d.t.Fatalf("telling the supervisor %q: %v", line, err)
	}
}

// expect waits for the supervisor's next line and checks it.
func (d *fakeDaemon) expect(want string) {
	d.t.Helper()
	if got := d.next(want); got != want {
		d.t.Fatalf("the supervisor said %q, want %q", got, want)
	}
}

// next waits for the supervisor's next line (what is wanted, for the
// failure).
func (d *fakeDaemon) next(want string) string {
	d.t.Helper()
	select {
	case got, ok := <-d.lines:
		if !ok {
			d.t.Fatalf("the supervisor closed the line; want %q", want)
		}
		return got
	case <-time.After(20 * time.Second):
		d.t.Fatalf("the supervisor said nothing in 20s; want %q", want)
	}
	return ""
}

// supervised is a supervisor under test, its run loop going.
type supervised struct {
	s      *process
	cmd    *exec.Cmd      // the first start
	opts   ProcessOptions // the run's
	daemon *fakeDaemon
	starts string // the file each start of the command appends to
	stderr *lockedBuffer
	code   chan int // the run loop's result
}

// lockedBuffer is a strings.Builder safe for the run loop and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startSupervised runs script (sh -c) under a supervisor with opts and a
// fake daemon, or skips where no cgroup can be made.
func startSupervised(t *testing.T, opts Supervision, script string) *supervised {
	t.Helper()
	sv := newSupervised(t, opts, script)
	sv.run()
	sv.waitStarts(1)
	return sv
}

// newSupervised starts script under a supervisor (see startSupervised),
// without its run loop: run starts it.
func newSupervised(t *testing.T, opts Supervision, script string) *supervised {
	t.Helper()
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	project := t.TempDir()
	out := t.TempDir()
	t.Setenv("AGENTFS_TEST_OUT", out) // for script
	rec, err := Create(project, project, []string{"sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	sv := &supervised{starts: filepath.Join(out, "starts"), stderr: &lockedBuffer{}, code: make(chan int, 1)}
	sv.s = &process{rec: rec, stderr: sv.stderr}
	if err := sv.s.prepareSupervision(opts); err != nil {
		if errors.Is(err, procgroup.ErrUnavailable) {
			testenv.Skip(t, testenv.Cgroups, "no cgroup here: %v", err)
		}
		t.Fatal(err)
	}
	v := sv.s.super
	v.tty = nil // the test's terminal, if any, is not the run's
	v.selfStopDelay = 50 * time.Millisecond
	d := &fakeDaemon{t: t, conn: v.daemonEnd, lines: make(chan string, 16)}
	v.daemonEnd = nil // the fake daemon's now
	sv.daemon = d
	go func() {
		defer close(d.lines)
		sc := bufio.NewScanner(d.conn)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		sv.s.closeSupervision()
		_ = d.conn.Close() // the test's end
	})
	d.expect("group " + v.group.Path())
	d.expect(fmt.Sprintf("relaunches %d", opts.MaxRestarts))
	sv.opts = ProcessOptions{Command: []string{"sh", "-c", "echo start ${AGENTFS_RELAUNCH:-0} >> " + sv.starts + "; " + script}, NsUid: -1, NsGid: -1}
	sv.cmd = sv.s.command(sv.opts.Command, sv.opts.NsUid, sv.opts.NsGid, nil)
	sv.cmd.Stdin, sv.cmd.Stdout, sv.cmd.Stderr = nil, nil, nil
	if err := sv.s.start(sv.cmd); err != nil {
		t.Fatal(err)
	}
	return sv
}

// run starts the run loop, and drain after it.
func (sv *supervised) run() {
	go func() {
		code := sv.s.supervise(sv.cmd, sv.opts)
		go sv.s.super.drain()
		sv.code <- code
	}()
}

// waitExit waits until the first command has exited, without reaping
// it (the run loop does).
func (sv *supervised) waitExit() {
	sv.daemon.t.Helper()
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, sv.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		sv.daemon.t.Fatalf("waiting for the command's exit: %v", err)
	}
}

// queue says line to the supervisor and waits until it is queued for
// the run loop (which has not started).
func (sv *supervised) queue(line string) {
	sv.daemon.t.Helper()
	n := len(sv.s.super.lines)
	sv.daemon.say(line)
	for deadline := time.Now().Add(10 * time.Second); len(sv.s.super.lines) == n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			sv.daemon.t.Fatalf("%q did not reach the run loop's queue", line)
		}
	}
}

// waitStarts waits until the command has started n times.
func (sv *supervised) waitStarts(n int) {
	sv.daemon.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(sv.startLines()) < n {
		if time.Now().After(deadline) {
			sv.daemon.t.Fatalf("the command started %d times, want %d\n%s", len(sv.startLines()), n, sv.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (sv *supervised) startLines() []string {
	b, _ := os.ReadFile(sv.starts) // none yet, at first
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), "start ", ""))
}

// relaunches reads the relaunches in the session's record, as saved.
func (sv *supervised) relaunches() []Relaunch {
	sv.daemon.t.Helper()
	r, err := Load(sv.s.rec.SessionDir())
	if err != nil {
		sv.daemon.t.Fatal(err)
	}
	return r.Relaunches
}

// ended waits for the run loop's exit code.
func (sv *supervised) ended() int {
	sv.daemon.t.Helper()
	select {
	case code := <-sv.code:
		return code
	case <-time.After(30 * time.Second):
		sv.daemon.t.Fatalf("the run loop did not end in 30s\n%s", sv.stderr)
		return -1
	}
}

// TestSuperviseRewind: a stop, its answer, the outcome, the relaunch
// (recorded), and the relaunches left told the daemon.
func TestSuperviseRewind(t *testing.T) {
	sv := startSupervised(t, Supervision{MaxRestarts: 2, Grace: 5 * time.Second}, "exec sleep 300")
	sv.daemon.say("restored 9 stale outcome") // no stop waits for it
	sv.daemon.say("stop 1")
	sv.daemon.expect("stopped 1 relaunch")
	sv.daemon.say("restored 1 snap safe")
	sv.daemon.expect("relaunches 1")
	sv.waitStarts(2)
	if got := sv.relaunches(); len(got) != 1 || got[0].Snapshot != "snap" || got[0].Safety != "safe" || got[0].ExitCode != 143 {
		t.Errorf("relaunches = %+v, want one to snap after safe, of the command that ended of SIGTERM", got)
	}
	if got := sv.startLines(); fmt.Sprint(got) != "[0 1]" {
		t.Errorf("starts = %v, want [0 1]", got)
	}
}

// TestSuperviseStopAfterOutcome: a stop that comes right after the
// previous rewind's outcome waits for the relaunched command, which it
// then stops: it is never answered against the empty group.
func TestSuperviseStopAfterOutcome(t *testing.T) {
	sv := startSupervised(t, Supervision{MaxRestarts: 5, Grace: 5 * time.Second}, "exec sleep 300")
	sv.daemon.say("stop 1")
	sv.daemon.expect("stopped 1 relaunch")
	sv.daemon.say("restored 1 a b")
	sv.daemon.say("stop 2")
	// The relaunch is told before the second stop is answered: that
	// stop is the relaunched command's.
	sv.daemon.expect("relaunches 4")
	sv.daemon.expect("stopped 2 relaunch")
	sv.daemon.say("restored 2 c d")
	sv.daemon.expect("relaunches 3")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.HasSuffix(strings.Join(sv.startLines(), " "), "2") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := sv.startLines(); len(got) == 0 || got[len(got)-1] != "2" {
		t.Errorf("starts = %v, want the second relaunch last", got)
	}
	rl := sv.relaunches()
	if len(rl) != 2 || rl[1].ExitCode != 143 || rl[1].Snapshot != "c" {
		t.Errorf("relaunches = %+v; want the second of a relaunched command stopped by SIGTERM", rl)
	}
}

// TestSuperviseFinal: past --max-restarts the stop is answered "final",
// and the run ends with the stopped command's code once restored.
func TestSuperviseFinal(t *testing.T) {
	sv := startSupervised(t, Supervision{MaxRestarts: 0, Grace: 5 * time.Second}, "exec sleep 300")
	sv.daemon.say("stop 1")
	sv.daemon.expect("stopped 1 final")
	sv.daemon.say("restored 1 a b")
	if code := sv.ended(); code != 143 {
		t.Errorf("the run ended with %d, want 143", code)
	}
	if n := len(sv.startLines()); n != 1 {
		t.Errorf("the command started %d times, want once", n)
	}
	// A rewind asked once the run has ended is answered at once.
	sv.daemon.say("stop 2")
	sv.daemon.expect("stopped 2 final")
}

// TestSuperviseSignalDuringRewind: a termination signal during a rewind
// (the command being stopped, or the restore under way) ends the run:
// no relaunch.
func TestSuperviseSignalDuringRewind(t *testing.T) {
	for _, when := range []string{"stopping", "restoring"} {
		t.Run(when, func(t *testing.T) {
			sv := startSupervised(t, Supervision{MaxRestarts: 5, Grace: 500 * time.Millisecond}, "trap '' TERM; while :; do sleep 0.05; done")
			sv.daemon.say("stop 1")
			if when == "stopping" {
				time.Sleep(100 * time.Millisecond) // within the grace
				sv.s.super.signal(syscall.SIGINT)
				sv.daemon.expect("stopped 1 final")
			} else {
				sv.daemon.expect("stopped 1 relaunch")
				sv.s.super.signal(syscall.SIGTERM)
			}
			sv.daemon.say("restored 1 a b")
			if code := sv.ended(); code != 137 {
				t.Errorf("the run ended with %d, want 137 (the command killed after its grace)", code)
			}
			if n := len(sv.startLines()); n != 1 {
				t.Errorf("the command started %d times, want once", n)
			}
			if !strings.Contains(sv.stderr.String(), "during a rewind: not starting") {
				t.Errorf("the run does not say why it ended:\n%s", sv.stderr)
			}
		})
	}
}

// TestSuperviseEndedByItself: a command that ended by itself ends the
// run with its code, even with a stop right behind; that stop is
// answered "final".
func TestSuperviseEndedByItself(t *testing.T) {
	sv := startSupervised(t, Supervision{MaxRestarts: 5, Grace: 5 * time.Second}, "sleep 0.2; exit 7")
	time.Sleep(300 * time.Millisecond)
	sv.daemon.say("stop 1")
	sv.daemon.expect("stopped 1 final")
	if code := sv.ended(); code != 7 {
		t.Errorf("the run ended with %d, want the command's 7", code)
	}
	if rl := sv.relaunches(); len(rl) != 0 {
		t.Errorf("relaunches = %+v, want none", rl)
	}
}

// TestSuperviseCommandLeftGroup: a command that moved itself out of its
// cgroup (root can) outlives the group's stop; the supervisor kills it
// (its child) rather than wait for it forever, and the rewind goes on.
func TestSuperviseCommandLeftGroup(t *testing.T) {
	script := `mnt=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
p=$(sed -n 's/^0:://p' /proc/self/cgroup)
[ -n "$AGENTFS_RELAUNCH" ] || echo $$ > "$mnt$(dirname "$(dirname "$p")")/cgroup.procs"
touch $AGENTFS_TEST_OUT/moved
exec sleep 300`
	sv := startSupervised(t, Supervision{MaxRestarts: 2, Grace: time.Second}, script)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(filepath.Dir(sv.starts), "moved")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command did not move itself out of its cgroup\n%s", sv.stderr)
		}
	}
	sv.daemon.say("stop 1")
	sv.daemon.expect("stopped 1 relaunch")
	sv.daemon.say("restored 1 a b")
	sv.daemon.expect("relaunches 1")
	sv.waitStarts(2)
	if got := sv.stderr.String(); !strings.Contains(got, "left its cgroup") {
		t.Errorf("the supervisor does not say the command left its cgroup:\n%s", got)
	}
	if rl := sv.relaunches(); len(rl) != 1 || rl[0].ExitCode != 137 {
		t.Errorf("relaunches = %+v, want one of a command killed (137)", rl)
	}
}

// TestSuperviseStopAfterExit: a stop that comes with the command's own
// exit is answered only once what the command left running has ended
// (the daemon restores on the answer): its background process, which
// ignores SIGTERM, is killed after the grace first.
func TestSuperviseStopAfterExit(t *testing.T) {
	for i := range 3 { // the loop may see the exit or the stop first
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			sv := newSupervised(t, Supervision{MaxRestarts: 5, Grace: time.Second}, `(trap '' TERM; exec sleep 300) & exit 7`)
			sv.waitExit()
			sv.queue("stop 1")
			sv.run()
			sv.daemon.expect("stopped 1 final")
			if pids, err := sv.s.super.group.Pids(); err != nil || len(pids) != 0 {
				t.Errorf("when the stop was answered the command's group held %v (%v): what it left running was not stopped first", pids, err)
			}
			if code := sv.ended(); code != 7 {
				t.Errorf("the run ended with %d, want the command's 7", code)
			}
		})
	}
}

// TestSuperviseSelfRewind: a self-rewind is stopped after the delay
// that lets its answer reach the asker, and started again; one asked by
// a start that an earlier rewind stopped is dropped, stopping nothing;
// one asked once the run has ended is dropped, saying why.
func TestSuperviseSelfRewind(t *testing.T) {
	sv := startSupervised(t, Supervision{MaxRestarts: 5, Grace: 5 * time.Second}, "exec sleep 300")
	sv.s.super.selfStopDelay = 300 * time.Millisecond
	asked := time.Now()
	sv.daemon.say("stop 1 self run-1")
	sv.daemon.expect("stopped 1 relaunch")
	if took := time.Since(asked); took < 300*time.Millisecond {
		t.Errorf("the self-rewind stopped the command after %v, before its delay of 300ms", took)
	}
	sv.daemon.say("restored 1 a b")
	sv.daemon.expect("relaunches 4")
	sv.waitStarts(2)
	// A second self-rewind of the first start (asked at once with the
	// first, say): that start is gone.
	sv.daemon.say("stop 2 self run-1")
	if got := sv.daemon.next("dropped 2 ..."); !strings.HasPrefix(got, "dropped 2 the start of the command that asked it (run-1) is no longer running") {
		t.Errorf("a self-rewind of a start stopped already: the supervisor said %q, want it dropped", got)
	}
	sv.daemon.say("stop 3")
	sv.daemon.expect("stopped 3 relaunch")
	sv.daemon.say("restored 3 c d")
	sv.daemon.expect("relaunches 3")
	sv.waitStarts(3)
	if got := sv.startLines(); fmt.Sprint(got) != "[0 1 2]" {
		t.Errorf("starts = %v, want [0 1 2]: the dropped rewind started nothing", got)
	}
}

// TestSuperviseSelfRewindEndedInWait: a command that ends by itself
// while its own rewind waits is stopped for the rewind all the same
// (what it left running too) and started again, as its answer said.
func TestSuperviseSelfRewindEndedInWait(t *testing.T) {
	sv := newSupervised(t, Supervision{MaxRestarts: 5, Grace: 5 * time.Second}, `[ -n "$AGENTFS_RELAUNCH" ] && exec sleep 300; sleep 300 & exit 3`)
	sv.s.super.selfStopDelay = time.Hour // only the exit ends the wait
	sv.waitExit()
	sv.queue("stop 1 self run-1")
	sv.run()
	sv.daemon.expect("stopped 1 relaunch")
	if pids, err := sv.s.super.group.Pids(); err != nil || len(pids) != 0 {
		t.Errorf("when the stop was answered the command's group held %v (%v)", pids, err)
	}
	sv.daemon.say("restored 1 a b")
	sv.daemon.expect("relaunches 4")
	sv.waitStarts(2)
	if rl := sv.relaunches(); len(rl) != 1 || rl[0].ExitCode != 3 {
		t.Errorf("relaunches = %+v, want one of the command that exited 3 by itself", rl)
	}
}

// TestSuperviseSelfRewindAfterEnd: a self-rewind that comes once the run
// has ended (its command exited by itself first) is dropped, saying why;
// one from outside is answered "final".
func TestSuperviseSelfRewindAfterEnd(t *testing.T) {
	sv := startSupervised(t, Supervision{MaxRestarts: 5, Grace: 5 * time.Second}, "exit 7")
	if code := sv.ended(); code != 7 {
		t.Errorf("the run ended with %d, want 7", code)
	}
	sv.daemon.say("stop 1 self run-1")
	sv.daemon.expect("dropped 1 the run has ended: the command ended by itself (exit code 7)")
	sv.daemon.say("stop 2")
	sv.daemon.expect("stopped 2 final")
}

// TestSuperviseStopFailsSignalPassedOn: when the stop fails and the
// command runs on, a SIGTERM that came during the rewind is passed on
// to it, as when no rewind is under way.
func TestSuperviseStopFailsSignalPassedOn(t *testing.T) {
	sv := startSupervised(t, Supervision{MaxRestarts: 5, Grace: 5 * time.Second}, "exec sleep 300")
	v := sv.s.super
	called, release := make(chan struct{}), make(chan struct{})
	stop := v.stopGroup
	var once sync.Once
	v.stopGroup = func(grace time.Duration) error {
		failed := false
		once.Do(func() {
			close(called)
			<-release
			failed = true
		})
		if failed {
			return errors.New("the group cannot be stopped")
		}
		return stop(grace) // the run's end
	}
	sv.daemon.say("stop 1")
	<-called
	v.signal(syscall.SIGTERM)
	for deadline := time.Now().Add(10 * time.Second); len(v.signals) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the rewind did not take the signal")
		}
	}
	close(release)
	sv.daemon.expect("error 1 the group cannot be stopped")
	if code := sv.ended(); code != 143 {
		t.Errorf("the run ended with %d, want 143: the SIGTERM passed on to the command", code)
	}
}

// TestSuperviseLongStopError: an error that lists thousands of pids is
// cut to one bounded line, and the line still works after it.
func TestSuperviseLongStopError(t *testing.T) {
	sv := startSupervised(t, Supervision{MaxRestarts: 5, Grace: 5 * time.Second}, "exec sleep 300")
	v := sv.s.super
	stop := v.stopGroup
	v.stopGroup = func(time.Duration) error {
		return errors.New("did not end: " + strings.Repeat("123456 ", 20000))
	}
	sv.daemon.say("stop 1")
	if got := sv.daemon.next("error 1 ..."); !strings.HasPrefix(got, "error 1 did not end: 123456") || len(got) > 1100 {
		t.Errorf("the error line has %d bytes (%.40q...), want one of at most about %d", len(got), got, daemon.MaxLineMessage)
	}
	v.stopGroup = stop // the run loop is waiting: no race
	sv.daemon.say("stop 2")
	sv.daemon.expect("stopped 2 relaunch")
}

// TestAbandonClosesLineFirst: a session abandoned before its command
// ran closes the supervisor's line before it stops the daemon, so that
// a daemon waiting on the line for a rewind's stop (here: one that
// ignores SIGTERM and ends only when the line closes) ends at once.
func TestAbandonClosesLineFirst(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	project := t.TempDir()
	rec, err := Create(project, project, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	s := &process{rec: rec, stderr: stderr}
	if err := s.prepareSupervision(Supervision{MaxRestarts: 1, Grace: time.Second}); err != nil {
		if errors.Is(err, procgroup.ErrUnavailable) {
			testenv.Skip(t, testenv.Cgroups, "no cgroup here: %v", err)
		}
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	fake := exec.Command("sh", "-c", `trap '' TERM; : > "$1"; cat <&3 >/dev/null`, "fake-daemon", ready)
	fake.ExtraFiles = []*os.File{s.super.daemonEnd}
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break // it ignores SIGTERM from now
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake daemon did not start")
		}
	}
	s.daemon = fake
	s.super.closeDaemonEnd() // the fake daemon's now
	start := time.Now()
	want := errors.New("the command could not start")
	if got := s.abandon(want); got != want {
		t.Errorf("abandon returned %v, want its error", got)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("abandon took %v: the daemon waited on the supervisor's line\n%s", took, stderr)
	}
	if _, err := os.Stat(rec.SessionDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the abandoned session's directory is left: %v", err)
	}
}
