package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/exectrace"
	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
)

// requireTrace skips (or, on CI, fails) a test of the exec trace where
// it cannot run.
func requireTrace(t *testing.T) {
	t.Helper()
	if err := exectrace.Available(); err != nil {
		testenv.Skip(t, testenv.EBPF, "%v", err)
	}
}

// execLine is an object of agentfs log --exec --json.
type execLine struct {
	Time       time.Time `json:"time"`
	Op         string    `json:"op"`
	Pid        int       `json:"pid"`
	Ppid       int       `json:"ppid"`
	Argv       []string  `json:"argv"`
	Cwd        string    `json:"cwd"`
	Start      time.Time `json:"start"`
	Exit       *int      `json:"exit"`
	Signal     int       `json:"signal"`
	DurationNs int64     `json:"duration_ns"`
	Detail     string    `json:"detail"`
	Count      int       `json:"count"`
}

func parseExecLog(t *testing.T, out string) []execLine {
	t.Helper()
	var lines []execLine
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var e execLine
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("a line of log --exec --json: %v\n%s", err, l)
		}
		lines = append(lines, e)
	}
	return lines
}

// TestRunExecTrace: a scripted agent runs a build, a failing test, a
// git commit, a loop of short-lived commands and a command outside the
// project, then goes idle and writes once more: agentfs log --exec has
// every command with its exit code and duration, and the snapshots are
// pre-run, build, git, idle and post-run, labelled as they should be.
func TestRunExecTrace(t *testing.T) {
	e := newRunEnv(t)
	requireTrace(t)
	requireTool(t, "make")
	harness.WriteFile(t, filepath.Join(e.project, "Makefile"), "build:\n\techo built > out.txt\ntest:\n\t@echo 'a test failed'; exit 1\n")
	e.git("add", "-A")
	e.git("commit", "-qm", "a Makefile")
	e.before = harness.SnapshotTree(e.project)
	// The idle threshold, short for the test, from the user's file; a
	// quiet period longer than the test, so that the triggers alone
	// take snapshots.
	cfg := filepath.Join(e.state, "config")
	if err := os.MkdirAll(filepath.Join(cfg, "agentfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	harness.WriteFile(t, filepath.Join(cfg, "agentfs", "config"), "[auto-snapshot]\nidle = 2s\nquiet-period = 1h\n")
	outside := t.TempDir()
	agent := e.script("agent.sh", fmt.Sprintf(`set -e
make build
make test || echo "the test failed, as expected"
echo more >> a.txt
git -c user.name=agent -c user.email=agent@example.com commit -qam "agent commit"
i=0; while [ $i -lt 1000 ]; do /bin/true loop$i; i=$((i+1)); done
(cd %s && /bin/ls -a > /dev/null)
echo notes > notes.txt
sleep 3.5
echo last > last.txt
`, outside))
	cmd := []string{"run", "--", agent}
	r := harness.RunCmd(t, commandIn(e, cfg, cmd), cmd)
	if r.Code != 0 {
		t.Fatalf("agentfs run: %s", r)
	}
	id := sessionIDOf(t, r)

	lr := e.agentfs("log", "-s", id, "--exec", "--json")
	if lr.Code != 0 {
		t.Fatalf("log --exec --json: %s", lr)
	}
	lines := parseExecLog(t, lr.Stdout)
	if len(lines) == 0 || lines[0].Op != "trace" || !strings.HasPrefix(lines[0].Detail, "on: ") {
		t.Fatalf("the exec log does not start by saying commands are traced: %+v", lines[:min(len(lines), 1)])
	}
	byCmd := map[string][]execLine{}
	for _, l := range lines[1:] {
		switch l.Op {
		case "dropped":
			t.Errorf("%d commands dropped", l.Count)
		case "exit":
			byCmd[strings.Join(l.Argv, " ")] = append(byCmd[strings.Join(l.Argv, " ")], l)
		default:
			t.Errorf("a command whose end was not recorded: %+v", l)
		}
	}
	one := func(argv string, code int) execLine {
		t.Helper()
		ls := byCmd[argv]
		if len(ls) != 1 {
			t.Fatalf("%d records of %q, want 1 (commands: %d)", len(ls), argv, len(byCmd))
		}
		l := ls[0]
		if l.Exit == nil || *l.Exit != code || l.Pid == 0 || l.Ppid == 0 || l.Start.IsZero() || l.Time.Before(l.Start) {
			t.Errorf("%q: %+v, want exit %d with its pid, parent and times", argv, l, code)
		}
		return l
	}
	script := one("/bin/sh "+agent, 0)
	if script.Cwd != e.project {
		t.Errorf("the agent's working directory = %q, want %s", script.Cwd, e.project)
	}
	if mk := one("make build", 0); mk.Ppid != script.Pid {
		t.Errorf("make build's parent = %d, want the agent %d", mk.Ppid, script.Pid)
	}
	one("make test", 2)
	one("git -c user.name=agent -c user.email=agent@example.com commit -qam agent commit", 0)
	if ls := one("/bin/ls -a", 0); ls.Cwd != outside {
		t.Errorf("the command outside the project ran in %q, want %s", ls.Cwd, outside)
	}
	if sl := one("sleep 3.5", 0); sl.DurationNs < int64(3*time.Second) {
		t.Errorf("sleep 3.5 took %v by the log", time.Duration(sl.DurationNs))
	}
	for i := range 1000 {
		one(fmt.Sprintf("/bin/true loop%d", i), 0)
	}

	// The text form: one line per command.
	tr := e.agentfs("log", "-s", id, "--exec", "-n", "3")
	if tr.Code != 0 || !strings.Contains(tr.Stdout, "exit 0") || !strings.Contains(tr.Stdout, "sleep 3.5") || strings.Count(tr.Stdout, "\n") != 3 {
		t.Errorf("log --exec -n 3:\n%s", tr)
	}

	var kinds []string
	for _, s := range e.snapshotsOf(id) {
		if s.Kind == "idle" && strings.Contains(s.Label, " after "+agent) {
			continue // after the agent ended: post-run and the unmount took over 2s (a loaded machine)
		}
		kinds = append(kinds, s.Kind)
		var ok bool
		switch s.Kind {
		case "pre-run":
			ok = s.Label == agent
		case "build":
			ok = strings.HasPrefix(s.Label, "make build: succeeded in ")
		case "git":
			ok = strings.Contains(s.Label, ": agent commit") && strings.HasSuffix(s.Label, "(by git -c user.name=agent -c user.email=agent@example.com commit -qam 'agent commit')")
		case "idle":
			ok = strings.HasPrefix(s.Label, "idle for ") && strings.HasSuffix(s.Label, " after sleep 3.5")
		case "post-run":
			ok = s.Label == agent+" (exit 0)"
		}
		if !ok {
			t.Errorf("snapshot %s of kind %s: label %q", s.ID, s.Kind, s.Label)
		}
	}
	if got := strings.Join(kinds, " "); got != "pre-run build git idle post-run" {
		t.Errorf("snapshot kinds = %s, want pre-run build git idle post-run", got)
	}
	// The post-run snapshot holds the last write.
	posts := e.snapshotsOf(id)
	last := posts[len(posts)-1]
	if d := e.agentfs("diff", "-s", id, last.ID); d.Code != 0 || strings.TrimSpace(d.Stdout) != "" {
		t.Errorf("the session's end differs from its post-run snapshot:\n%s", d)
	}
	if st := e.agentfs("status", "-s", id); !strings.Contains(st.Stdout, "commands:") || !strings.Contains(st.Stdout, "traced (agentfs log --exec)") {
		t.Errorf("status -s does not say commands were traced:\n%s", st)
	}
}

// commandIn is agentfs args in the project, with the user's
// configuration in cfg.
func commandIn(e *runEnv, cfg string, args []string) *exec.Cmd {
	cmd := exec.Command(harness.Bin(), args...)
	cmd.Dir = e.project
	cmd.Env = append(e.env(), "XDG_CONFIG_HOME="+cfg)
	return cmd
}

// TestMountExecTrace: on a plain mount, the commands of processes
// working in it are traced (and what they start elsewhere); with
// --trace=false log --exec says they are not.
func TestMountExecTrace(t *testing.T) {
	harness.RequireFUSE(t)
	requireTrace(t)
	lower, mnt := harness.NewMountpoint(t), harness.NewMountpoint(t)
	harness.WriteFile(t, filepath.Join(lower, "a.txt"), "a\n")
	if r := harness.Run(t, "mount", "--lower", lower, mnt); r.Code != 0 {
		t.Fatalf("mount: %s", r)
	}
	t.Cleanup(func() { harness.Run(t, "unmount", mnt) })
	sh := exec.Command("/bin/sh", "-c", "/bin/cat a.txt > /dev/null; cd / && /bin/echo elsewhere > /dev/null")
	sh.Dir = mnt
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	other := exec.Command("/bin/echo", "not-in-the-mount")
	other.Dir = t.TempDir()
	if err := other.Run(); err != nil {
		t.Fatal(err)
	}
	var lines []execLine
	argvs := map[string]string{}
	ok := harness.WaitFor(func() bool {
		r := harness.Run(t, "log", "-C", mnt, "--exec", "--json")
		lines = parseExecLog(t, r.Stdout)
		clear(argvs)
		for _, l := range lines {
			argvs[strings.Join(l.Argv, " ")] = l.Op + " " + l.Cwd
		}
		return strings.HasPrefix(argvs["/bin/cat a.txt"], "exit") && strings.HasPrefix(argvs["/bin/echo elsewhere"], "exit")
	})
	if !ok || argvs["/bin/cat a.txt"] != "exit "+mnt || argvs["/bin/echo elsewhere"] != "exit /" {
		t.Errorf("log --exec of the mount: %v", argvs)
	}
	if _, found := argvs["/bin/echo not-in-the-mount"]; found {
		t.Error("a command outside the mount was traced")
	}
	if st := harness.Run(t, "status", "-C", mnt); !strings.Contains(st.Stdout, "traced (agentfs log --exec), the processes working in the mount") {
		t.Errorf("status:\n%s", st)
	}

	// --follow: an exec object as a command starts, an exit one as it
	// ends.
	follow := exec.Command(harness.Bin(), "log", "-C", mnt, "--exec", "--follow", "--json")
	var out syncBuffer
	follow.Stdout = &out
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = follow.Process.Kill(); _ = follow.Wait() }()
	harness.WaitFor(func() bool { return strings.Contains(out.String(), `"op":"trace"`) })
	sleeper := exec.Command("/bin/sleep", "0.5")
	sleeper.Dir = mnt
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	seen := func(op string) bool {
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, `"op":"`+op+`"`) && strings.Contains(l, `"argv":["/bin/sleep","0.5"]`) {
				return true
			}
		}
		return false
	}
	started := harness.WaitFor(func() bool { return seen("exec") })
	_ = sleeper.Wait()
	ended := harness.WaitFor(func() bool { return seen("exit") })
	if !started || !ended {
		t.Errorf("log --exec --follow --json (start seen %v, end seen %v):\n%s", started, ended, out.String())
	}

	// Turned off.
	lower2, mnt2 := harness.NewMountpoint(t), harness.NewMountpoint(t)
	if r := harness.Run(t, "mount", "--lower", lower2, "--trace=false", mnt2); r.Code != 0 {
		t.Fatalf("mount --trace=false: %s", r)
	}
	t.Cleanup(func() { harness.Run(t, "unmount", mnt2) })
	r := harness.Run(t, "log", "-C", mnt2, "--exec")
	if r.Code != 0 || !strings.Contains(r.Stdout, "commands are NOT traced (off: turned off (--trace=false") {
		t.Errorf("log --exec with --trace=false:\n%s", r)
	}
	if st := harness.Run(t, "status", "-C", mnt2); !strings.Contains(st.Stdout, "NOT traced: turned off") {
		t.Errorf("status with --trace=false:\n%s", st)
	}
}
