package integration

// agentfs run --supervise: a rewind stops every process of the agent
// (background and double-forked ones too), restores, and starts the
// agent again.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/procfs"
)

// mcpRewinderEnv makes this test binary an MCP client that calls the
// rewind tool of `agentfs mcp` (started in its working directory) on
// the checkpoint the variable names, then waits: an agent rewinding
// itself (runMCPRewinder).
const mcpRewinderEnv = "AGENTFS_TEST_MCP_REWIND"

// isMCPRewinder reports whether this process is the rewinding agent.
func isMCPRewinder() bool { return os.Getenv(mcpRewinderEnv) != "" }

// runMCPRewinder is the rewinding agent: it prints the rewind's text,
// then waits to be stopped (the supervisor ends it).
func runMCPRewinder() int {
	cmd := exec.Command(os.Getenv("AGENTFS_TEST_AGENTFS"), "mcp")
	c := mcp.NewClient(&mcp.Implementation{Name: "rewinder", Version: "1"}, nil)
	ctx := context.Background()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rewinder: %v\n", err)
		return 1
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "rewind", Arguments: map[string]any{"checkpoint": os.Getenv(mcpRewinderEnv)}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "rewinder: %v\n", err)
		return 1
	}
	fmt.Println(mcpText(res))
	time.Sleep(time.Minute) // the supervisor stops this process
	return 2
}

// supervisedAgent is a scripted agent: each start appends "start N
// <a.txt>" to starts (N is AGENTFS_RELAUNCH, 0 at first), then it
// writes into the project, leaves a background process and a
// double-forked one running (their pids and its own appended to pids),
// and waits until quit exists, then exits 7.
func supervisedAgent(e *runEnv, out string) string {
	return e.script("agent.sh", fmt.Sprintf(`out=%s
echo "start ${AGENTFS_RELAUNCH:-0} ${AGENTFS_RELAUNCH_SNAPSHOT:-none} $(cat a.txt)" >> $out/starts
echo "written by start ${AGENTFS_RELAUNCH:-0}" > a.txt
sleep 600 & echo $! >> $out/pids
(sleep 601 & echo $! >> $out/pids) &
setsid sh -c "echo \$\$ >> $out/pids; exec sleep 602" &
echo $$ >> $out/pids
while [ ! -e $out/quit ]; do sleep 0.05; done
exit 7
`, out))
}

// lines reads the lines of p (none when it does not exist yet).
func lines(p string) []string {
	b, _ := os.ReadFile(p) // not written yet is no lines
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// rewindSupervised waits for the first start of a supervised agent that
// appends a line to out/starts at each start, restores its session to
// the pre-run snapshot, and waits for the agent's second start; it
// returns the session.
func rewindSupervised(t *testing.T, e *runEnv, out string, output *strings.Builder) runSessionInfo {
	t.Helper()
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "starts"))) == 1 }) {
		t.Fatalf("the agent did not start:\n%s", output)
	}
	s := e.sessions()[0]
	if r := e.agentfs("restore", "-s", s.ID, s.PreRun); r.Code != 0 || !strings.Contains(r.Stdout, "its supervisor starts it again") {
		t.Fatalf("agentfs restore -s of the supervised session:\n%s", r)
	}
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "starts"))) == 2 }) {
		t.Fatalf("the agent did not start again after the rewind: %q\n%s", lines(filepath.Join(out, "starts")), output)
	}
	return s
}

// startRun starts agentfs run with args in the project, its output
// gathered.
func startRun(t *testing.T, e *runEnv, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(harness.Bin(), append([]string{"run"}, args...)...)
	cmd.Dir, cmd.Env = e.project, e.env()
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	// Killed on a failure, it may leave processes that hold its output:
	// Wait gives up on them.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // the test failed with the run going
			_ = cmd.Wait()
		}
	})
	return cmd, out
}

// TestRunSupervise: a restore from outside stops every process of the
// agent (their pids are gone), the agent starts again and sees the
// restored files; the relaunch is in agentfs sessions and agentfs log;
// when the agent exits by itself the run ends with its exit code.
func TestRunSupervise(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	run, output := startRun(t, e, "--supervise", "--stop-grace", "2s", "--", supervisedAgent(e, out))
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "pids"))) == 4 }) {
		t.Fatalf("the agent did not start its processes: %q\n%s", lines(filepath.Join(out, "pids")), output)
	}
	first := lines(filepath.Join(out, "pids"))
	s := e.sessions()[0]
	if r := e.agentfs("restore", "-s", s.ID, s.PreRun); r.Code != 0 || !strings.Contains(r.Stdout, "its supervisor starts it again") {
		t.Fatalf("agentfs restore -s of the supervised session:\n%s", r)
	}
	for _, p := range first {
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		if procfs.Alive(pid) {
			t.Errorf("process %d of the first start is still alive after the rewind (%s)", pid, procfs.CommandLine(pid))
		}
	}
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "starts"))) == 2 }) {
		t.Fatalf("the agent did not start again: %q\n%s", lines(filepath.Join(out, "starts")), output)
	}
	starts := lines(filepath.Join(out, "starts"))
	// The relaunched agent saw the project's a.txt again: the first
	// start's write was rewound.
	if want := "start 1 " + s.PreRun + " hello"; starts[1] != want {
		t.Errorf("second start = %q, want %q", starts[1], want)
	}
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "pids"))) == 8 }) {
		t.Fatalf("the relaunched agent did not start its processes")
	}
	second := lines(filepath.Join(out, "pids"))[4:]
	got := e.session(s.ID)
	if !got.Supervised || len(got.Relaunches) != 1 || got.Relaunches[0].Snapshot != s.PreRun || got.Relaunches[0].ExitCode != 143 {
		t.Errorf("the session record: supervised %v, relaunches %+v", got.Supervised, got.Relaunches)
	}
	if r := e.agentfs("log", "-s", s.ID); !strings.Contains(r.Stdout, "rewind") || !strings.Contains(r.Stdout, "snapshot "+s.PreRun) {
		t.Errorf("agentfs log does not show the rewind:\n%s", r)
	}
	must(t, os.WriteFile(filepath.Join(out, "quit"), nil, 0o644))
	if code := waitCode(t, run); code != 7 {
		t.Errorf("agentfs run --supervise exited %d, want the agent's 7\n%s", code, output)
	}
	// What the agent left running ended with the run.
	for _, p := range second {
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		if procfs.Alive(pid) {
			t.Errorf("process %d of the agent is alive after the run ended", pid)
		}
	}
}

// TestRunSuperviseSelfRewind: an agent that rewinds itself through the
// MCP rewind tool is stopped and started again on the rewound files.
func TestRunSuperviseSelfRewind(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	agent := e.script("agent.sh", fmt.Sprintf(`out=%s
echo "start ${AGENTFS_RELAUNCH:-0} $(cat a.txt)" >> $out/starts
if [ -n "$AGENTFS_RELAUNCH" ]; then exit 4; fi
echo "changed" > a.txt
pre=$(%s snapshot list --json | tr -d ' \n' | sed 's/.*"id":"\([0-9a-f]*\)","label":"[^"]*","branch":"main","kind":"pre-run".*/\1/')
AGENTFS_TEST_AGENTFS=%s %s=$pre %s >> $out/rewinder 2>&1
echo "the rewinder returned" >> $out/starts
`, out, harness.Bin(), harness.Bin(), mcpRewinderEnv, self))
	run, output := startRun(t, e, "--supervise", "--", agent)
	if code := waitCode(t, run); code != 4 {
		t.Errorf("agentfs run --supervise exited %d, want the relaunched agent's 4\n%s\nrewinder: %q", code, output, lines(filepath.Join(out, "rewinder")))
	}
	if got := strings.Join(lines(filepath.Join(out, "starts")), " | "); got != "start 0 hello | start 1 hello" {
		t.Errorf("starts = %q: want the first start, then the relaunched one on the rewound a.txt", got)
	}
}

// TestRunSuperviseMaxRestarts: past --max-restarts a rewind stops the
// agent and the run ends.
func TestRunSuperviseMaxRestarts(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	run, output := startRun(t, e, "--supervise", "--max-restarts", "0", "--", supervisedAgent(e, out))
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "pids"))) == 4 }) {
		t.Fatalf("the agent did not start: %s", output)
	}
	s := e.sessions()[0]
	if r := e.agentfs("restore", "-s", s.ID, s.PreRun); r.Code != 0 || !strings.Contains(r.Stdout, "does not start it again") {
		t.Fatalf("agentfs restore -s past --max-restarts does not say the agent is not started again:\n%s", r)
	}
	if code := waitCode(t, run); code != 143 {
		t.Errorf("agentfs run exited %d, want 143 (the stopped agent's)\n%s", code, output)
	}
	if r := e.agentfs("log", "-s", s.ID); !strings.Contains(r.Stdout, "the command is not started again") {
		t.Errorf("agentfs log does not say the rewind ended the run:\n%s", r)
	}
	if !strings.Contains(output.String(), "--max-restarts 0") {
		t.Errorf("the run does not say why it ended:\n%s", output)
	}
	if n := len(lines(filepath.Join(out, "starts"))); n != 1 {
		t.Errorf("the agent started %d times, want once", n)
	}
}

// TestRunSuperviseCtrlC: Ctrl-C (SIGINT to the terminal's foreground
// process group) ends a supervised agent, and the run with it: no
// relaunch, the agent's exit code, and nothing of it left running.
func TestRunSuperviseCtrlC(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	cmd := exec.Command(harness.Bin(), "run", "--supervise", "--", supervisedAgent(e, out))
	cmd.Dir, cmd.Env = e.project, e.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "pids"))) == 4 }) {
		_ = cmd.Process.Kill() // the test fails here either way
		t.Fatalf("the agent did not start:\n%s", output.String())
	}
	mustf(t, unix.Kill(-cmd.Process.Pid, unix.SIGINT), "SIGINT to the process group of agentfs run")
	if code := waitCode(t, cmd); code != 130 {
		t.Errorf("agentfs run --supervise after Ctrl-C exited %d, want 130\n%s", code, output.String())
	}
	for _, p := range lines(filepath.Join(out, "pids")) {
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		if procfs.Alive(pid) {
			t.Errorf("process %d of the agent is alive after Ctrl-C ended the run", pid)
		}
	}
	if n := len(lines(filepath.Join(out, "starts"))); n != 1 {
		t.Errorf("the agent started %d times, want once", n)
	}
}

// restoreAsync runs agentfs restore -s ID SNAPSHOT in the background.
func restoreAsync(t *testing.T, e *runEnv, id, snap string) (*exec.Cmd, chan harness.Result) {
	t.Helper()
	cmd := exec.Command(harness.Bin(), "restore", "-s", id, snap)
	cmd.Dir, cmd.Env = e.project, e.env()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	res := make(chan harness.Result, 1)
	go func() {
		err := cmd.Wait()
		code := 0
		if err != nil {
			code = -1
			if cmd.ProcessState != nil {
				code = cmd.ProcessState.ExitCode()
			}
		}
		res <- harness.Result{Code: code, Stdout: stdout.String(), Stderr: stderr.String()}
	}()
	return cmd, res
}

// result waits for a restoreAsync.
func result(t *testing.T, res chan harness.Result) harness.Result {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(waitCodeTimeout):
		t.Fatalf("agentfs restore did not end within %v", waitCodeTimeout)
		return harness.Result{}
	}
}

// pidsDead checks that none of the pids (decimal strings) is alive.
func pidsDead(t *testing.T, what string, pids []string) {
	t.Helper()
	for _, p := range pids {
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		if procfs.Alive(pid) {
			t.Errorf("process %d of %s is still alive (%s)", pid, what, procfs.CommandLine(pid))
		}
	}
}

// TestRunSuperviseRelaunchAfterKill: an agent that ignores SIGTERM is
// killed after its grace, and started again all the same (a cgroup that
// was killed kills what is started into it: each start has a fresh
// one).
func TestRunSuperviseRelaunchAfterKill(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	agent := e.script("agent.sh", fmt.Sprintf(`out=%s
trap '' TERM
echo "start ${AGENTFS_RELAUNCH:-0}" >> $out/starts
while [ ! -e $out/quit ]; do sleep 0.05; done
exit 7
`, out))
	run, output := startRun(t, e, "--supervise", "--stop-grace", "500ms", "--", agent)
	s := rewindSupervised(t, e, out, output)
	must(t, os.WriteFile(filepath.Join(out, "quit"), nil, 0o644))
	if code := waitCode(t, run); code != 7 {
		t.Errorf("agentfs run exited %d, want the relaunched agent's 7\n%s", code, output)
	}
	if rl := e.session(s.ID).Relaunches; len(rl) != 1 || rl[0].ExitCode != 137 {
		t.Errorf("relaunches = %+v, want one of an agent killed (137)", rl)
	}
}

// TestRunSuperviseConcurrentRewinds: two rewinds at once each stop a
// running agent (the second the agent the first started again), and
// every process of the stopped starts is gone.
func TestRunSuperviseConcurrentRewinds(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	agent := e.script("agent.sh", fmt.Sprintf(`out=%s
n=${AGENTFS_RELAUNCH:-0}
sleep 600 & echo $! >> $out/pids.$n
(sleep 601 & echo $! >> $out/pids.$n) &
echo $$ >> $out/pids.$n
echo "start $n" >> $out/starts
while [ ! -e $out/quit ]; do sleep 0.05; done
exit 7
`, out))
	run, output := startRun(t, e, "--supervise", "--stop-grace", "2s", "--", agent)
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "starts"))) == 1 }) {
		t.Fatalf("the agent did not start:\n%s", output)
	}
	s := e.sessions()[0]
	_, a := restoreAsync(t, e, s.ID, s.PreRun)
	_, b := restoreAsync(t, e, s.ID, s.PreRun)
	for _, r := range []harness.Result{result(t, a), result(t, b)} {
		if r.Code != 0 || !strings.Contains(r.Stdout, "its supervisor starts it again") {
			t.Errorf("one of two rewinds at once:\n%s", r)
		}
	}
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "pids.2"))) == 3 }) {
		t.Fatalf("the agent did not start a third time: starts %q\n%s", lines(filepath.Join(out, "starts")), output)
	}
	pidsDead(t, "the first start", lines(filepath.Join(out, "pids.0")))
	pidsDead(t, "the second start", lines(filepath.Join(out, "pids.1")))
	rl := e.session(s.ID).Relaunches
	if len(rl) != 2 || rl[0].ExitCode != 143 || rl[1].ExitCode != 143 {
		t.Errorf("relaunches = %+v, want two, each of an agent stopped by SIGTERM", rl)
	}
	must(t, os.WriteFile(filepath.Join(out, "quit"), nil, 0o644))
	if code := waitCode(t, run); code != 7 {
		t.Errorf("agentfs run exited %d, want 7\n%s", code, output)
	}
	pidsDead(t, "the third start", lines(filepath.Join(out, "pids.2")))
}

// TestRunSuperviseControlCallDuringStop: an agent that ignores SIGTERM
// and keeps making control calls (agentfs snapshot list) is stopped and
// started again: the rewind does not hold the lock those calls wait
// for while it stops them.
func TestRunSuperviseControlCallDuringStop(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	agent := e.script("agent.sh", fmt.Sprintf(`out=%s
trap '' TERM
echo "start ${AGENTFS_RELAUNCH:-0}" >> $out/starts
if [ -n "$AGENTFS_RELAUNCH" ]; then exit 5; fi
while :; do %s snapshot list >/dev/null 2>&1; echo c >> $out/calls; done
`, out, harness.Bin()))
	run, output := startRun(t, e, "--supervise", "--stop-grace", "1s", "--", agent)
	// Control calls under way: one has ended, the next has begun.
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "calls"))) >= 1 }) {
		t.Fatalf("the agent made no control call:\n%s", output)
	}
	s := e.sessions()[0]
	if r := e.agentfs("restore", "-s", s.ID, s.PreRun); r.Code != 0 {
		t.Fatalf("agentfs restore -s of an agent in control calls:\n%s", r)
	}
	if code := waitCode(t, run); code != 5 {
		t.Errorf("agentfs run exited %d, want the relaunched agent's 5\n%s", code, output)
	}
	if got := strings.Join(lines(filepath.Join(out, "starts")), " | "); got != "start 0 | start 1" {
		t.Errorf("starts = %q", got)
	}
}

// TestRunSuperviseSignalDuringRewind: SIGTERM to agentfs run while a
// rewind is stopping the agent ends the run: the agent is not started
// again. SIGTERM to the agentfs restore that asked, during its call,
// takes effect once it has printed the outcome.
func TestRunSuperviseSignalDuringRewind(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	agent := e.script("agent.sh", fmt.Sprintf(`out=%s
trap 'echo t >> $out/terms' TERM
echo "start ${AGENTFS_RELAUNCH:-0}" >> $out/starts
while :; do sleep 0.05; done
`, out))
	run, output := startRun(t, e, "--supervise", "--stop-grace", "10s", "--", agent)
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "starts"))) == 1 }) {
		t.Fatalf("the agent did not start:\n%s", output)
	}
	s := e.sessions()[0]
	restore, res := restoreAsync(t, e, s.ID, s.PreRun)
	// The rewind is stopping the agent, within its grace: the agent has
	// had the SIGTERM it ignores, and the restore waits for the stop.
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "terms"))) >= 1 }) {
		t.Fatalf("the agent got no SIGTERM from the rewind:\n%s", output)
	}
	mustf(t, restore.Process.Signal(syscall.SIGTERM), "SIGTERM to agentfs restore")
	mustf(t, run.Process.Signal(syscall.SIGTERM), "SIGTERM to agentfs run")
	if code := waitCode(t, run); code != 137 {
		t.Errorf("agentfs run exited %d, want 137 (the agent killed after its grace)\n%s", code, output)
	}
	if r := result(t, res); r.Code != 143 || !strings.Contains(r.Stdout, "restored snapshot "+s.PreRun) || !strings.Contains(r.Stdout, "does not start it again") {
		t.Errorf("the rewind during which the run was ended, its agentfs restore sent SIGTERM: want the outcome printed, then exit 143:\n%s", r)
	}
	if n := len(lines(filepath.Join(out, "starts"))); n != 1 {
		t.Errorf("the agent started %d times, want once\n%s", n, output)
	}
	if !strings.Contains(output.String(), "during a rewind: not starting") {
		t.Errorf("the run does not say why it ended:\n%s", output)
	}
}

// TestRunSuperviseSelfRewindTwice: two self-rewinds the agent asks at
// once are one stop and one relaunch: the second, asked by the start
// the first stopped, is dropped, and agentfs log says so.
func TestRunSuperviseSelfRewindTwice(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	agent := e.script("agent.sh", fmt.Sprintf(`out=%s
echo "start ${AGENTFS_RELAUNCH:-0} $(cat a.txt)" >> $out/starts
if [ -n "$AGENTFS_RELAUNCH" ]; then
	while [ ! -e $out/quit ]; do sleep 0.05; done
	exit 4
fi
echo "changed" > a.txt
pre=$(%s snapshot list --json | tr -d ' \n' | sed 's/.*"id":"\([0-9a-f]*\)","label":"[^"]*","branch":"main","kind":"pre-run".*/\1/')
%s restore $pre > $out/r1 2>&1 &
%s restore $pre > $out/r2 2>&1 &
sleep 600
`, out, harness.Bin(), harness.Bin(), harness.Bin()))
	run, output := startRun(t, e, "--supervise", "--", agent)
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "starts"))) >= 2 }) {
		t.Fatalf("the agent did not start again: %q\n%s", lines(filepath.Join(out, "starts")), output)
	}
	s := e.sessions()[0]
	// Each answer printed is a rewind asked. On a loaded machine the
	// second agentfs restore may not have asked before the stop.
	asked := 0
	for _, f := range []string{"r1", "r2"} {
		if strings.Contains(strings.Join(lines(filepath.Join(out, f)), " "), "restoring snapshot") {
			asked++
		}
	}
	if asked == 2 {
		if !harness.WaitFor(func() bool {
			return strings.Contains(e.agentfs("log", "-s", s.ID).Stdout, "dropped: the start of the command that asked it (run-1) is no longer running")
		}) {
			t.Errorf("agentfs log has no line of the second self-rewind dropped:\n%s", e.agentfs("log", "-s", s.ID))
		}
	} else {
		t.Logf("only %d of the two self-rewinds was asked before the stop", asked)
	}
	must(t, os.WriteFile(filepath.Join(out, "quit"), nil, 0o644))
	if code := waitCode(t, run); code != 4 {
		t.Errorf("agentfs run exited %d, want the relaunched agent's 4\n%s", code, output)
	}
	if got := strings.Join(lines(filepath.Join(out, "starts")), " | "); got != "start 0 hello | start 1 hello" {
		t.Errorf("starts = %q: want one relaunch, on the rewound a.txt", got)
	}
	if rl := e.session(s.ID).Relaunches; len(rl) != 1 {
		t.Errorf("relaunches = %+v, want one", rl)
	}
}

// TestRunSuperviseSelfRewindFinal: an agent past --max-restarts that
// rewinds itself is told that it is not started again.
func TestRunSuperviseSelfRewindFinal(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	agent := e.script("agent.sh", fmt.Sprintf(`out=%s
echo "start ${AGENTFS_RELAUNCH:-0}" >> $out/starts
pre=$(%s snapshot list --json | tr -d ' \n' | sed 's/.*"id":"\([0-9a-f]*\)","label":"[^"]*","branch":"main","kind":"pre-run".*/\1/')
%s restore $pre > $out/restore 2>&1
sleep 600
`, out, harness.Bin(), harness.Bin()))
	run, output := startRun(t, e, "--supervise", "--max-restarts", "0", "--", agent)
	if code := waitCode(t, run); code != 143 {
		t.Errorf("agentfs run exited %d, want the stopped agent's 143\n%s", code, output)
	}
	if got := strings.Join(lines(filepath.Join(out, "restore")), "\n"); !strings.Contains(got, "does not start the command again") {
		t.Errorf("the agent's own restore said %q, want that it is not started again", got)
	}
	if n := len(lines(filepath.Join(out, "starts"))); n != 1 {
		t.Errorf("the agent started %d times, want once", n)
	}
}

// ttyAgentEnv makes this test binary an agent that takes the terminal
// (runTTYAgent); the variable names the directory it reports to.
const ttyAgentEnv = "AGENTFS_TEST_TTY_AGENT"

func isTTYAgent() bool { return os.Getenv(ttyAgentEnv) != "" }

// runTTYAgent is an agent that, at its first start, puts itself in a
// process group of its own in the terminal's foreground and the terminal
// in raw mode (as a job-control shell or a full-screen program does),
// then waits to be stopped. Started again, it reports whether it is in
// the foreground and the terminal in canonical mode with echo, turns raw
// mode on again, and exits 3 on Ctrl-C (4 when none comes in 20 s).
func runTTYAgent() int {
	out := os.Getenv(ttyAgentEnv)
	raw := func() {
		tio, err := unix.IoctlGetTermios(0, unix.TCGETS)
		if err == nil {
			tio.Lflag &^= unix.ICANON | unix.ECHO
			_ = unix.IoctlSetTermios(0, unix.TCSETS, tio)
		}
	}
	if os.Getenv("AGENTFS_RELAUNCH") == "" {
		signal.Ignore(syscall.SIGTTOU)
		if err := unix.Setpgid(0, 0); err != nil {
			fmt.Fprintf(os.Stderr, "tty agent: setpgid: %v\n", err)
			return 1
		}
		if err := unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp()); err != nil {
			fmt.Fprintf(os.Stderr, "tty agent: tcsetpgrp: %v\n", err)
			return 1
		}
		raw()
		_ = os.WriteFile(filepath.Join(out, "first"), []byte("taken\n"), 0o644)
		time.Sleep(time.Minute) // the supervisor stops it
		return 2
	}
	ints := make(chan os.Signal, 1)
	signal.Notify(ints, syscall.SIGINT)
	fg, _ := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	tio, err := unix.IoctlGetTermios(0, unix.TCGETS)
	report := fmt.Sprintf("foreground %v canonical %v echo %v", fg == unix.Getpgrp(), err == nil && tio.Lflag&unix.ICANON != 0, err == nil && tio.Lflag&unix.ECHO != 0)
	raw()
	_ = os.WriteFile(filepath.Join(out, "relaunch"), []byte(report+"\n"), 0o644)
	select {
	case <-ints:
		return 3
	case <-time.After(20 * time.Second):
		return 4
	}
}

// openPty opens a pseudo-terminal: its master and its slave.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		testenv.Skip(t, testenv.Pty, "no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = master.Close() }) // the test's
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pseudo-terminal's number: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slave.Close() }) // the test's
	return master, slave
}

// TestRunSuperviseTerminal: an agent that took the terminal's
// foreground and put it in raw mode is started again with the terminal
// given back: in the foreground (Ctrl-C reaches it), in canonical mode
// with echo; and the run leaves the terminal as it found it.
func TestRunSuperviseTerminal(t *testing.T) {
	e := newRunEnv(t)
	out := t.TempDir()
	master, slave := openPty(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := exec.Command(harness.Bin(), "run", "--supervise", "--", self)
	run.Dir, run.Env = e.project, append(e.env(), ttyAgentEnv+"="+out)
	run.Stdin, run.Stdout, run.Stderr = slave, slave, slave
	// agentfs run leads a session whose terminal is the slave, as a
	// login shell's job would.
	run.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	var output strings.Builder
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&output, master) // until the master is closed, or EIO
		close(copied)
	}()
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if run.ProcessState == nil {
			_ = run.Process.Kill() // the test failed with the run going
			_ = run.Wait()
		}
	})
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "first"))) == 1 }) {
		t.Fatalf("the agent did not take the terminal")
	}
	s := e.sessions()[0]
	if r := e.agentfs("restore", "-s", s.ID, s.PreRun); r.Code != 0 {
		t.Fatalf("agentfs restore -s:\n%s", r)
	}
	if !harness.WaitFor(func() bool { return len(lines(filepath.Join(out, "relaunch"))) == 1 }) {
		t.Fatalf("the agent did not start again")
	}
	if got, want := lines(filepath.Join(out, "relaunch"))[0], "foreground true canonical true echo true"; got != want {
		t.Errorf("the relaunched agent found the terminal: %s; want %s", got, want)
	}
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	if code := waitCode(t, run); code != 3 {
		t.Errorf("agentfs run exited %d, want 3 (the relaunched agent got Ctrl-C)", code)
	}
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil || tio.Lflag&unix.ICANON == 0 || tio.Lflag&unix.ECHO == 0 {
		t.Errorf("after the run the terminal is not in canonical mode with echo: %+v, %v", tio, err)
	}
	_ = slave.Close() // with no slave open, the master reads EIO: the copy ends
	select {
	case <-copied:
	case <-time.After(5 * time.Second): // a process of the run still holds the slave: the output is partial
	}
	if t.Failed() {
		t.Logf("the terminal's output:\n%s", output.String())
	}
}
