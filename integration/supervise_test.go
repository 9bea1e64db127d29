package integration

// agentfs run --supervise: a rewind stops every process of the agent
// (background and double-forked ones too), restores, and starts the
// agent again.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/procfs"
	"golang.org/x/sys/unix"
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

// startRun starts agentfs run with args in the project, its output
// gathered.
func startRun(t *testing.T, e *runEnv, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(harness.Bin(), append([]string{"run"}, args...)...)
	cmd.Dir, cmd.Env = e.project, e.env()
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
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
	if r := e.agentfs("restore", "-s", s.ID, s.PreRun); r.Code != 0 {
		t.Fatalf("agentfs restore -s:\n%s", r)
	}
	if code := waitCode(t, run); code != 143 {
		t.Errorf("agentfs run exited %d, want 143 (the stopped agent's)\n%s", code, output)
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
