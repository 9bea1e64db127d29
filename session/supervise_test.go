package session

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
	select {
	case got, ok := <-d.lines:
		if !ok {
			d.t.Fatalf("the supervisor closed the line; want %q", want)
		}
		if got != want {
			d.t.Fatalf("the supervisor said %q, want %q", got, want)
		}
	case <-time.After(20 * time.Second):
		d.t.Fatalf("the supervisor said nothing in 20s; want %q", want)
	}
}

// supervised is a supervisor under test, its run loop going.
type supervised struct {
	s      *process
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
	o := ProcessOptions{Command: []string{"sh", "-c", "echo start ${AGENTFS_RELAUNCH:-0} >> " + sv.starts + "; " + script}, NsUid: -1, NsGid: -1}
	cmd := sv.s.command(o.Command, o.NsUid, o.NsGid, nil)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
	if err := sv.s.start(cmd); err != nil {
		t.Fatal(err)
	}
	go func() {
		code := sv.s.supervise(cmd, o)
		go v.drain()
		sv.code <- code
	}()
	sv.waitStarts(1)
	return sv
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
