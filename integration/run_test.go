package integration

// agentfs run and its sessions: a scripted "agent" edits, creates and
// deletes files and commits with git in the project, through its own
// private overlay at the project's path; the project itself must stay
// byte for byte as it was. Then the session is inspected (sessions,
// diff -s, snapshot list -s, status -s, export -s) while it runs and
// after, and discarded. Also: Ctrl-C and signals, a second run of the
// same project at the same time, bad input, and a normal user (through
// a user namespace, or the clear refusal when the system forbids it).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/procfs"
	"golang.org/x/sys/unix"
)

// runEnv is a project (a git repository) and a state directory for
// sessions.
type runEnv struct {
	t       *testing.T
	project string
	state   string
	scripts string // where agent scripts live (outside the project)
	before  harness.Tree
}

// newRunEnv makes a project with a git history of one commit. Its tree
// is checked at the end of the test (and by checkProject): nothing
// agentfs run does may change it.
func newRunEnv(t *testing.T) *runEnv {
	t.Helper()
	harness.RequireFUSE(t)
	requireTool(t, "git")
	e := &runEnv{t: t, project: harness.NewMountpoint(t), state: t.TempDir(), scripts: harness.NewMountpoint(t)}
	for p, content := range map[string]string{"a.txt": "hello\n", "b.txt": "to be deleted\n", "src/main.go": "package main\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(e.project, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		harness.WriteFile(t, filepath.Join(e.project, p), content)
	}
	e.git("init", "-q", ".")
	e.git("add", "-A")
	e.git("commit", "-qm", "first")
	e.before = harness.SnapshotTree(e.project)
	if e.before.Err != nil {
		t.Fatalf("recording the project: %v", e.before.Err)
	}
	t.Cleanup(func() { e.checkProject() })
	return e
}

// requireTool skips (or, with AGENTFS_REQUIRE_FUSE=1, fails) a test
// that needs a program that is not installed (testenv.RequireProgram).
func requireTool(t *testing.T, name string) {
	t.Helper()
	testenv.RequireProgram(t, name)
}

func (e *runEnv) git(args ...string) string {
	e.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	cmd.Dir = e.project
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// checkProject fails the test if the project changed in any way.
func (e *runEnv) checkProject() {
	e.t.Helper()
	harness.AssertUnchanged(e.t, e.before, harness.SnapshotTree(e.project))
}

// env is the environment agentfs gets: the test's, with the sessions
// in the test's state directory.
func (e *runEnv) env() []string {
	return append(os.Environ(), "XDG_STATE_HOME="+e.state)
}

// agentfs runs agentfs in the project directory.
func (e *runEnv) agentfs(args ...string) harness.Result {
	e.t.Helper()
	cmd := exec.Command(harness.Bin(), args...)
	cmd.Dir, cmd.Env = e.project, e.env()
	return harness.RunCmd(e.t, cmd, args)
}

// script writes an agent script (sh) outside the project.
func (e *runEnv) script(name, body string) string {
	e.t.Helper()
	p := filepath.Join(e.scripts, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// runSessionInfo is the part of agentfs sessions --json the tests use.
type runSessionInfo struct {
	ID            string     `json:"id"`
	State         string     `json:"state"`
	Project       string     `json:"project"`
	Command       []string   `json:"command"`
	Started       time.Time  `json:"started"`
	Ended         *time.Time `json:"ended"`
	ExitCode      *int       `json:"exit_code"`
	Store         string     `json:"store"`
	Mountpoint    string     `json:"mountpoint"`
	DaemonPid     int        `json:"daemon_pid"`
	UserNamespace bool       `json:"user_namespace"`
	PreRun        string     `json:"pre_run_snapshot"`
	PostRun       string     `json:"post_run_snapshot"`
	Snapshots     *int       `json:"snapshots"`
	Changes       *struct {
		Created  int `json:"created"`
		Modified int `json:"modified"`
		Deleted  int `json:"deleted"`
	} `json:"changes"`
	Problem    string `json:"problem"`
	Supervised bool   `json:"supervised"`
	Relaunches []struct {
		Snapshot string `json:"snapshot"`
		Safety   string `json:"safety"`
		ExitCode int    `json:"exit_code"`
	} `json:"relaunches"`
}

// sessions returns agentfs sessions --json (with extra args).
func (e *runEnv) sessions(args ...string) []runSessionInfo {
	e.t.Helper()
	r := e.agentfs(append([]string{"sessions", "--json"}, args...)...)
	if r.Code != 0 {
		e.t.Fatalf("agentfs sessions:\n%s", r)
	}
	var out struct {
		Sessions []runSessionInfo `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		e.t.Fatalf("parsing sessions --json: %v\n%s", err, r.Stdout)
	}
	return out.Sessions
}

// session returns the one session with id, failing when it is not
// listed.
func (e *runEnv) session(id string) runSessionInfo {
	e.t.Helper()
	for _, s := range e.sessions("--all") {
		if s.ID == id {
			return s
		}
	}
	e.t.Fatalf("session %s is not listed by agentfs sessions --all", id)
	return runSessionInfo{}
}

// sessionIDOf finds the session id in agentfs run's summary.
func sessionIDOf(t *testing.T, r harness.Result) string {
	t.Helper()
	_, rest, ok := strings.Cut(r.Stderr, "agentfs run: session ")
	if !ok {
		t.Fatalf("no session in agentfs run's output:\n%s", r)
	}
	id, _, _ := strings.Cut(rest, " ")
	return id
}

// snapshotsOf returns snapshot list -s id --json.
func (e *runEnv) snapshotsOf(id string) []struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Label string `json:"label"`
} {
	e.t.Helper()
	r := e.agentfs("snapshot", "list", "-s", id, "--json")
	if r.Code != 0 {
		e.t.Fatalf("snapshot list -s:\n%s", r)
	}
	var list struct {
		Snapshots []struct {
			ID    string `json:"id"`
			Kind  string `json:"kind"`
			Label string `json:"label"`
		} `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		e.t.Fatalf("parsing snapshot list --json: %v\n%s", err, r.Stdout)
	}
	return list.Snapshots
}

// wantLines checks that out has each of lines as a whole line.
func wantLines(t *testing.T, what, out string, lines ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		have[strings.TrimRight(l, " ")] = true
	}
	for _, l := range lines {
		if !have[l] {
			t.Errorf("%s has no line %q:\n%s", what, l, out)
		}
	}
}

const agentScript = `set -e
echo "AGENT pwd=$PWD session=$AGENTFS_SESSION"
echo "more" >> a.txt
echo "new file" > new.txt
rm b.txt
mkdir -p gen && echo generated > gen/out.txt
echo absolute > "$PWD/abs-path"
echo "AGENT abs=$(cat "$PWD/abs-path") new=$(cat "$(pwd)/new.txt")"
git -c user.name=agent -c user.email=agent@example.com add -A
git -c user.name=agent -c user.email=agent@example.com commit -qm "agent's work"
echo "AGENT commits=$(git rev-list --count HEAD)"
exit 3
`

// TestRunSession is the agent workflow: run, sessions, diff, snapshot
// list, status, export, discard.
func TestRunSession(t *testing.T) {
	e := newRunEnv(t)
	agent := e.script("agent.sh", agentScript)
	r := e.agentfs("run", "--", agent)
	if r.Code != 3 {
		t.Fatalf("agentfs run exit %d, want the command's 3:\n%s", r.Code, r)
	}
	e.checkProject()
	id := sessionIDOf(t, r)
	// The agent saw the project at its own path, its writes through
	// absolute paths, and git worked.
	wantLines(t, "the agent's output", r.Stdout,
		"AGENT pwd="+e.project+" session="+id,
		"AGENT abs=absolute new=new file",
		"AGENT commits=2")
	for _, want := range []string{
		"agentfs run: session " + id + " ended: " + agent + " exited with code 3",
		"created:", "modified:", "deleted:",
		"review:   agentfs diff -s " + id,
		"apply:    agentfs apply -s " + id,
		"discard:  agentfs discard -s " + id,
	} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("the summary does not say %q:\n%s", want, r.Stderr)
		}
	}

	s := e.session(id)
	switch {
	case s.State != "ended":
		t.Errorf("state = %q, want ended", s.State)
	case s.Project != e.project || s.Mountpoint != e.project:
		t.Errorf("project, mountpoint = %s, %s; want %s for both", s.Project, s.Mountpoint, e.project)
	case len(s.Command) != 1 || s.Command[0] != agent:
		t.Errorf("command = %q, want [%s]", s.Command, agent)
	case s.ExitCode == nil || *s.ExitCode != 3:
		t.Errorf("exit_code = %s, want 3", intp(s.ExitCode))
	case s.Ended == nil || s.Ended.Before(s.Started) || s.Started.IsZero():
		t.Errorf("started %v, ended %v", s.Started, s.Ended)
	case s.Snapshots == nil || *s.Snapshots < 2:
		t.Errorf("snapshots = %s, want at least 2 (pre-run, post-run)", intp(s.Snapshots))
	case s.Changes == nil || s.Changes.Created < 4 || s.Changes.Modified < 2 || s.Changes.Deleted != 1:
		t.Errorf("changes = %+v, want at least 4 created (new.txt, gen, gen/out.txt, abs-path, git objects), 2 modified (a.txt, the git index), 1 deleted (b.txt)", s.Changes)
	case !strings.HasPrefix(s.Store, filepath.Join(e.state, "agentfs", "sessions", id)):
		t.Errorf("store %s is not in the state directory %s", s.Store, e.state)
	case s.DaemonPid == 0 || procfs.Alive(s.DaemonPid):
		t.Errorf("daemon pid %d: recorded and gone expected", s.DaemonPid)
	}
	if r := e.agentfs("sessions"); r.Code != 0 || !strings.Contains(r.Stdout, id) || !strings.Contains(r.Stdout, "ended") {
		t.Errorf("agentfs sessions does not list %s as ended:\n%s", id, r)
	}

	// diff -s, by the id's last part.
	short := id[strings.LastIndexByte(id, '-')+1:]
	d := e.agentfs("diff", "-s", short)
	if d.Code != 0 {
		t.Fatalf("diff -s:\n%s", d)
	}
	wantLines(t, "diff -s", d.Stdout, "M  a.txt", "D  b.txt", "A  new.txt", "A  gen/", "A  gen/out.txt", "A  abs-path", "M  .git/index")
	// The pre-run snapshot, automatic ones (the agent's commit may
	// make one before it exits), and the post-run one, of the end.
	snaps := e.snapshotsOf(id)
	if n := len(snaps); n < 2 || snaps[0].Kind != "pre-run" || snaps[0].Label != agent || snaps[0].ID != s.PreRun ||
		snaps[n-1].Kind != "post-run" || snaps[n-1].Label != agent+" (exit 3)" || snaps[n-1].ID != s.PostRun {
		t.Errorf("snapshots = %+v, want the pre-run snapshot %s labelled %s first and the post-run one %s last", snaps, s.PreRun, agent, s.PostRun)
	}
	for _, sn := range snaps[1 : len(snaps)-1] {
		if sn.Kind != "auto" && sn.Kind != "git" && sn.Kind != "build" {
			t.Errorf("a snapshot of kind %s during the run: %+v", sn.Kind, sn)
		}
	}
	if d := e.agentfs("diff", "-s", id, s.PostRun); d.Code != 0 || d.Stdout != "" {
		t.Errorf("the session's end differs from its post-run snapshot:\n%s", d)
	}
	// Since the pre-run snapshot: the same changes.
	if d2 := e.agentfs("diff", "-s", id, s.PreRun); d2.Stdout != d.Stdout {
		t.Errorf("diff -s %s %s differs from diff -s %s:\n%s\nvs\n%s", id, s.PreRun, id, d2, d.Stdout)
	}
	st := e.agentfs("status", "-s", id, "--json")
	var status struct {
		Lower   string `json:"lower"`
		Offline bool   `json:"offline"`
		Pid     int    `json:"pid"`
	}
	if st.Code != 0 || json.Unmarshal([]byte(st.Stdout), &status) != nil || !status.Offline || status.Lower != e.project || status.Pid != 0 {
		t.Errorf("status -s of an ended session: %+v\n%s", status, st)
	}
	// The session's view, exported: the agent's commit is in it.
	out := filepath.Join(t.TempDir(), "export")
	if x := e.agentfs("export", "-s", id, "main", "--to", out); x.Code != 0 {
		t.Fatalf("export -s:\n%s", x)
	}
	if got := harness.ReadFile(t, filepath.Join(out, "a.txt")); got != "hello\nmore\n" {
		t.Errorf("exported a.txt = %q", got)
	}
	if c, err := exec.Command("git", "-C", out, "log", "--format=%s").Output(); err != nil || string(c) != "agent's work\nfirst\n" {
		t.Errorf("the exported repository's log: %q, %v; want the agent's commit over the first", c, err)
	}

	// discard -s: the store goes, the record stays as discarded.
	if x := e.agentfs("discard", "-s", id); x.Code != 0 || !strings.Contains(x.Stdout, "discarded session "+id) {
		t.Fatalf("discard -s:\n%s", x)
	}
	if _, err := os.Stat(s.Store); !os.IsNotExist(err) {
		t.Errorf("the store %s is still there after discard: %v", s.Store, err)
	}
	if l := e.sessions(); len(l) != 0 {
		t.Errorf("sessions lists %d sessions after the only one was discarded: %+v", len(l), l)
	}
	if s := e.session(id); s.State != "discarded" {
		t.Errorf("state after discard = %q, want discarded", s.State)
	}
	assertRefused(t, e.agentfs("diff", "-s", id), refusal{code: 1, phrase: "discarded"}, "")
	assertRefused(t, e.agentfs("discard", "-s", id), refusal{code: 1, phrase: "discarded already"}, "")
}

// TestRunConcurrent inspects a running session from outside (through
// its daemon), runs a second session of the same project at the same
// time, and checks that a running session cannot be discarded.
func TestRunConcurrent(t *testing.T) {
	e := newRunEnv(t)
	ready, goOn := filepath.Join(e.scripts, "ready"), filepath.Join(e.scripts, "go")
	agent := e.script("slow.sh", fmt.Sprintf(`echo first > inside.txt
touch %s
while [ ! -e %s ]; do sleep 0.05; done
cat inside.txt
`, ready, goOn))
	first := exec.Command(harness.Bin(), "run", "--", agent)
	first.Dir, first.Env = e.project, e.env()
	var stdout, stderr strings.Builder
	first.Stdout, first.Stderr = &stdout, &stderr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	var firstErr error
	firstDone := make(chan struct{})
	go func() { firstErr = first.Wait(); close(firstDone) }()
	t.Cleanup(func() {
		if err := os.WriteFile(goOn, nil, 0o644); err != nil {
			t.Errorf("letting the first session's command end: %v", err)
		}
		select {
		case <-firstDone:
		case <-time.After(30 * time.Second):
			_ = first.Process.Kill() // it may have ended just now
		}
	})
	if !harness.WaitFor(func() bool { _, err := os.Stat(ready); return err == nil }) {
		t.Fatalf("the first session's command did not start:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(e.project, "inside.txt")); !os.IsNotExist(err) {
		t.Errorf("inside.txt, written in the session, shows in the project: %v", err)
	}
	list := e.sessions()
	if len(list) != 1 || list[0].State != "running" || !procfs.Alive(list[0].DaemonPid) {
		t.Fatalf("sessions while running: %+v", list)
	}
	s := list[0]
	if s.Changes == nil || s.Changes.Created != 1 || s.Snapshots == nil || *s.Snapshots != 1 {
		t.Errorf("a running session's numbers (from its daemon): changes %+v, snapshots %s; want 1 created, 1 snapshot", s.Changes, intp(s.Snapshots))
	}
	if d := e.agentfs("diff", "-s", s.ID); d.Code != 0 || d.Stdout != "A  inside.txt\n" {
		t.Errorf("diff -s of a running session:\n%s", d)
	}
	var status struct {
		Pid     int  `json:"pid"`
		Offline bool `json:"offline"`
	}
	if st := e.agentfs("status", "-s", s.ID, "--json"); st.Code != 0 || json.Unmarshal([]byte(st.Stdout), &status) != nil || status.Offline || status.Pid != s.DaemonPid {
		t.Errorf("status -s of a running session: %+v, want the daemon's pid %d\n%s", status, s.DaemonPid, st)
	}
	if c := e.agentfs("snapshot", "create", "-s", s.ID, "-m", "while running"); c.Code != 0 {
		t.Errorf("snapshot create -s of a running session:\n%s", c)
	}
	assertRefused(t, e.agentfs("discard", "-s", s.ID), refusal{code: 1, phrase: "end the command first"}, "")

	// A second session of the same project, meanwhile: it sees the
	// project, not the first session's changes.
	second := e.agentfs("run", "--", "sh", "-c", "test ! -e inside.txt && echo second > second.txt && cat second.txt")
	if second.Code != 0 || second.Stdout != "second\n" {
		t.Fatalf("a second run of the same project while the first runs:\n%s", second)
	}
	id2 := sessionIDOf(t, second)
	if d := e.agentfs("diff", "-s", id2); d.Stdout != "A  second.txt\n" {
		t.Errorf("the second session's diff:\n%s", d)
	}
	e.checkProject()

	must(t, os.WriteFile(goOn, nil, 0o644))
	select {
	case <-firstDone:
		if firstErr != nil {
			t.Fatalf("the first run: %v\n%s", firstErr, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first run did not end")
	}
	if stdout.String() != "first\n" {
		t.Errorf("the first session's command read %q from inside.txt, want its own first\\n", stdout.String())
	}
	s = e.session(s.ID)
	if s.State != "ended" || s.Snapshots == nil || *s.Snapshots != 2 || procfs.Alive(s.DaemonPid) {
		t.Errorf("the first session after its end: state %s, snapshots %s (want 2), daemon %d alive %v", s.State, intp(s.Snapshots), s.DaemonPid, procfs.Alive(s.DaemonPid))
	}
	if d := e.agentfs("diff", "-s", s.ID); d.Stdout != "A  inside.txt\n" {
		t.Errorf("diff -s of the ended session:\n%s", d)
	}
}

// TestRunSignals: Ctrl-C reaches the command and not agentfs, which
// passes the command's exit code through; a command killed by a signal
// gives 128+N.
func TestRunSignals(t *testing.T) {
	e := newRunEnv(t)
	ready := filepath.Join(e.scripts, "ready")
	agent := e.script("trap.sh", fmt.Sprintf(`trap 'echo interrupted > int.txt; exit 42' INT
touch %s
while :; do sleep 0.05; done
`, ready))
	// A terminal sends Ctrl-C to its foreground process group: agentfs
	// run, its session process and the command.
	cmd := exec.Command(harness.Bin(), "run", "--", agent)
	cmd.Dir, cmd.Env = e.project, e.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(func() bool { _, err := os.Stat(ready); return err == nil }) {
		_ = cmd.Process.Kill() // it may have exited; the test fails here either way
		t.Fatalf("the command did not start:\n%s", stderr.String())
	}
	mustf(t, unix.Kill(-cmd.Process.Pid, unix.SIGINT), "SIGINT to the process group of agentfs run")
	if got := waitCode(t, cmd); got != 42 {
		t.Errorf("exit code after Ctrl-C = %d, want the command's 42:\n%s", got, stderr.String())
	}
	if !strings.Contains(stderr.String(), "exited with code 42") {
		t.Errorf("agentfs did not summarize after Ctrl-C:\n%s", stderr.String())
	}
	id := sessionIDOf(t, harness.Result{Stderr: stderr.String()})
	if d := e.agentfs("diff", "-s", id); d.Stdout != "A  int.txt\n" {
		t.Errorf("diff -s after Ctrl-C:\n%s", d)
	}

	r := e.agentfs("run", "--", "sh", "-c", "kill -TERM $$")
	if r.Code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code of a command killed by SIGTERM = %d, want %d:\n%s", r.Code, 128+int(syscall.SIGTERM), r)
	}
	id = sessionIDOf(t, r)
	if s := e.session(id); s.ExitCode == nil || *s.ExitCode != 143 {
		t.Errorf("recorded exit code %v, want 143", s.ExitCode)
	}
}

// TestRunBadInput: each mistake is refused with a message that says
// what is wrong, a non-zero exit, and no session left behind.
func TestRunBadInput(t *testing.T) {
	e := newRunEnv(t)
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	for _, c := range []struct {
		name string
		args []string
		want refusal
	}{
		{"no command", []string{"run"}, refusal{2, "needs a command"}},
		{"no command after --", []string{"run", "--"}, refusal{2, "needs a command"}},
		{"missing project", []string{"run", "-C", missing, "--", "true"}, refusal{1, "does not exist"}},
		{"command not found", []string{"run", "--", "no-such-command-agentfs"}, refusal{127, "cannot run no-such-command-agentfs"}},
		{"unknown session", []string{"diff", "-s", "nosuch"}, refusal{1, `no session "nosuch"`}},
		{"unknown session (discard)", []string{"discard", "-s", "nosuch"}, refusal{1, `no session "nosuch"`}},
		{"unknown session (snapshot list)", []string{"snapshot", "list", "-s", "20200101-000000-0000"}, refusal{1, "agentfs sessions lists them"}},
		{"discard without -s", []string{"discard"}, refusal{2, "-s SESSION"}},
		{"-C and -s", []string{"diff", "-C", e.project, "-s", "x"}, refusal{2, "give one"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assertRefused(t, e.agentfs(c.args...), c.want, "")
		})
	}
	if l := e.sessions("--all"); len(l) != 0 {
		t.Errorf("refused runs left sessions: %+v", l)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("run -C created the missing directory: %v", err)
	}
}

// TestRunNonRoot runs agentfs run as user nobody: it works through a
// user namespace where the system allows it, or says why it cannot.
// Both outcomes are tested where they can be: a plain run as nobody
// gets whatever this system gives (with /dev/fuse 0600, the refusal);
// a run in a private mount namespace where /dev/fuse is usable by all
// then either works (user namespaces allowed) or names the restriction.
// The test says which paths ran; where user namespaces are not allowed
// the unprivileged run itself goes unchecked, which CI does not accept
// (testenv.Reduced).
func TestRunNonRoot(t *testing.T) {
	harness.RequireFUSE(t)
	for _, tool := range []string{"setpriv", "unshare", "mknod"} {
		requireTool(t, tool)
	}
	const nobody = 65534
	e := &runEnv{t: t, project: harness.NewMountpoint(t), state: harness.NewMountpoint(t), scripts: harness.NewMountpoint(t)}
	harness.WriteFile(t, filepath.Join(e.project, "a.txt"), "hello\n")
	for _, d := range []string{e.project, filepath.Join(e.project, "a.txt"), e.state} {
		if err := os.Lchown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	e.before = harness.SnapshotTree(e.project)
	t.Cleanup(func() { e.checkProject() })
	// The binary where nobody may run it.
	bin := filepath.Join(e.scripts, "agentfs")
	copyAgentfs(t, bin)
	agent := e.script("agent.sh", `echo "AGENT uid=$(id -u)"
echo more >> a.txt
echo new > new.txt
echo "AGENT owner=$(stat -c %u new.txt)"
exit 5
`)
	asNobody := fmt.Sprintf("setpriv --reuid %d --regid %d --clear-groups env HOME=%s XDG_STATE_HOME=%s", nobody, nobody, e.state, e.state)
	runAs := func(prefix, script string) harness.Result {
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = e.project
		return harness.RunCmd(t, cmd, []string{prefix})
	}

	fuseOpen := canOpenAs(t, nobody, "/dev/fuse")
	usernsOK := exec.Command("setpriv", "--reuid", strconv.Itoa(nobody), "--regid", strconv.Itoa(nobody), "--clear-groups",
		"unshare", "--user", "--map-root-user", "--mount", "true").Run() == nil
	t.Logf("as nobody: /dev/fuse usable: %v; user namespaces: %v", fuseOpen, usernsOK)
	if !usernsOK {
		testenv.Reduced(t, testenv.UserNamespaces,
			"nobody may not make a user namespace here: only the refusals are checked, not a run of agentfs as nobody")
	}

	// 1. As nobody, on the system as it is.
	r := runAs("run as nobody", fmt.Sprintf("%s %s run -- %s", asNobody, bin, agent))
	switch {
	case !fuseOpen:
		t.Logf("1. as nobody, /dev/fuse as it is: the refusal (/dev/fuse not usable by nobody)")
		assertRefused(t, r, refusal{1, "/dev/fuse cannot be opened (permission denied): agentfs run as a normal user"}, "")
	case !usernsOK:
		t.Logf("1. as nobody, /dev/fuse as it is: the refusal (no user namespace)")
		assertRefused(t, r, refusal{1, "needs a user namespace"}, "")
	default:
		t.Logf("1. as nobody, /dev/fuse as it is: a run through a user namespace")
		checkNobodyRun(t, e, r, asNobody+" "+bin)
	}
	e.checkProject()

	// 2. With /dev/fuse usable by all (in a private mount namespace of
	// this test only).
	// It writes its record (agentfs run --record) as nobody too.
	fdev := harness.NewMountpoint(t)
	rec := filepath.Join(e.state, "record")
	r = runAs("run as nobody with /dev/fuse 0666", fmt.Sprintf(`set -e
unshare --mount --propagation private sh -c 'mount -t tmpfs -o mode=755 agentfs-test %s && mknod -m 666 %s/fuse c 10 229 && mount --bind %s/fuse /dev/fuse && exec %s %s run --record %s -- %s'`,
		fdev, fdev, fdev, asNobody, bin, rec, agent))
	if usernsOK {
		t.Logf("2. as nobody, /dev/fuse 0666: a run through a user namespace")
		checkNobodyRun(t, e, r, asNobody+" "+bin)
		checkNobodyRecord(t, rec, e.project, nobody)
	} else {
		t.Logf("2. as nobody, /dev/fuse 0666: the refusal (no user namespace)")
		assertRefused(t, r, refusal{1, "needs a user namespace"}, "")
	}
	e.checkProject()
}

// checkNobodyRun checks a run of the nobody agent that worked, then
// looks at its session as nobody (agentfs is the command line that
// runs agentfs as nobody: root must not write into nobody's store).
func checkNobodyRun(t *testing.T, e *runEnv, r harness.Result, agentfs string) {
	t.Helper()
	if r.Code != 5 {
		t.Fatalf("agentfs run as nobody: exit %d, want the command's 5:\n%s", r.Code, r)
	}
	wantLines(t, "the agent's output", r.Stdout, "AGENT uid=65534", "AGENT owner=65534")
	id := sessionIDOf(t, r)
	as := func(args string) harness.Result {
		cmd := exec.Command("sh", "-c", agentfs+" "+args)
		return harness.RunCmd(t, cmd, []string{args})
	}
	l := as("sessions --json")
	var list struct {
		Sessions []runSessionInfo `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(l.Stdout), &list); err != nil || len(list.Sessions) == 0 {
		t.Fatalf("sessions --json as nobody: %v\n%s", err, l)
	}
	s := list.Sessions[len(list.Sessions)-1]
	if s.ID != id || !s.UserNamespace || s.State != "ended" || s.Changes == nil || s.Changes.Created != 1 || s.Changes.Modified != 1 {
		t.Errorf("the session of nobody's run: %+v", s)
	}
	if d := as("diff -s " + id); d.Stdout != "M  a.txt\nA  new.txt\n" {
		t.Errorf("diff -s of nobody's session, as nobody:\n%s", d)
	}
	// Tracing needs root: the run says so, and still ran.
	if l := as("log --exec -s " + id); l.Code != 0 || !strings.Contains(l.Stdout, "commands are NOT traced (off: agentfs runs as a normal user") {
		t.Errorf("log --exec of nobody's session:\n%s", l)
	}
	if st := as("status -s " + id); !strings.Contains(st.Stdout, "NOT traced: agentfs runs as a normal user") {
		t.Errorf("status -s of nobody's session:\n%s", st)
	}
}

// checkNobodyRecord checks the record of nobody's run: written by
// nobody, of nobody's command, with what the agent did.
func checkNobodyRecord(t *testing.T, rec, project string, nobody uint32) {
	t.Helper()
	m, _ := readManifest(t, rec)
	if m.Uid == nil || *m.Uid != nobody || m.Gid == nil || *m.Gid != nobody || m.ExitStatus == nil || *m.ExitStatus != 5 {
		t.Errorf("the record of nobody's run: uid %v gid %v exit %v, want %d, %d, 5", m.Uid, m.Gid, intp(m.ExitStatus), nobody, nobody)
	}
	ops := map[string][]string{}
	for _, f := range m.Files {
		ops[f.Path] = f.Operations
	}
	for _, p := range []string{"a.txt", "new.txt"} {
		if !slices.Contains(ops[filepath.Join(project, p)], "write") {
			t.Errorf("the record of nobody's run: %s has operations %q, want a write", p, ops[filepath.Join(project, p)])
		}
	}
	for _, name := range []string{rec, filepath.Join(rec, "manifest.json"), filepath.Join(rec, "blobs.parquet")} {
		var st unix.Stat_t
		if err := unix.Stat(name, &st); err != nil || st.Uid != nobody {
			t.Errorf("%s: owner %d (%v), want nobody", name, st.Uid, err)
		}
	}
}

// canOpenAs reports whether uid can open p for reading and writing.
func canOpenAs(t *testing.T, uid int, p string) bool {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return false
	}
	perm := st.Mode & 0o777
	switch {
	case int(st.Uid) == uid:
		return perm&0o600 == 0o600
	default:
		return perm&0o006 == 0o006
	}
}

// copyAgentfs copies the binary under test to bin, and the agentfs-core
// beside it (the full program, which it runs most commands in) beside
// bin.
func copyAgentfs(t *testing.T, bin string) {
	t.Helper()
	copyExecutable(t, harness.Bin(), bin)
	copyExecutable(t, filepath.Join(filepath.Dir(harness.Bin()), "agentfs-core"), filepath.Join(filepath.Dir(bin), "agentfs-core"))
}

// copyExecutable copies the file src to dst with mode 0755.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRunSeesProjectEdits: under agentfs run the daemon's own mount
// covers the project's path; edits made to the project from outside
// still show in the session (the daemon watches the project through a
// descriptor opened before mounting), at the root and below.
func TestRunSeesProjectEdits(t *testing.T) {
	e := newRunEnv(t)
	ready, goOn := filepath.Join(e.scripts, "ready"), filepath.Join(e.scripts, "go")
	// The kernel caches what the command looks at first (attributes,
	// the absent name, data) for long: only the daemon's notices make
	// the edits show.
	agent := e.script("reader.sh", fmt.Sprintf(`cat a.txt src/main.go > /dev/null; stat a.txt src/main.go > /dev/null; ls -la . src > /dev/null
[ ! -e src/added.go ] || exit 9
touch %s
while [ ! -e %s ]; do sleep 0.05; done
i=0
while [ "$(stat -c %%s a.txt)" != 15 ] || [ "$(cat src/main.go)" != "package edited" ] || [ ! -e src/added.go ]; do
	i=$((i+1)); [ $i -lt 200 ] || { echo "STALE a.txt=$(stat -c %%s a.txt) main.go=$(cat src/main.go)"; ls src; exit 1; }
	sleep 0.05
done
echo SEEN
`, ready, goOn))
	cmd := exec.Command(harness.Bin(), "run", "--", agent)
	cmd.Dir, cmd.Env = e.project, e.env()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(func() bool { _, err := os.Stat(ready); return err == nil }) {
		_ = cmd.Process.Kill() // it may have exited; the test fails here either way
		t.Fatalf("the command did not start:\n%s", stderr.String())
	}
	// The test, not agentfs, edits the project.
	harness.WriteFile(t, filepath.Join(e.project, "a.txt"), "edited outside\n")
	harness.WriteFile(t, filepath.Join(e.project, "src", "main.go"), "package edited\n")
	harness.WriteFile(t, filepath.Join(e.project, "src", "added.go"), "package main\n")
	e.before = harness.SnapshotTree(e.project)
	must(t, os.WriteFile(goOn, nil, 0o644))
	if code := waitCode(t, cmd); code != 0 || stdout.String() != "SEEN\n" {
		t.Errorf("the session did not see the project's edits: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
}

// waitCode waits for cmd and returns its exit code (-1: killed by a
// signal); an error other than an exit status fails the test.
//
// A run that has not exited within waitCodeTimeout is killed and the
// test fails: a hung supervisor must not hang the suite.
func waitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(waitCodeTimeout):
		_ = cmd.Process.Kill() // it hangs: the test fails either way
		t.Fatalf("%v did not exit within %v: killed (%v)", cmd.Args, waitCodeTimeout, <-done)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("waiting for %v: %v", cmd.Args, err)
	}
	return cmd.ProcessState.ExitCode()
}

// waitCodeTimeout bounds waitCode: far longer than any run of the tests
// takes, even on a loaded machine.
const waitCodeTimeout = 3 * time.Minute

// intp formats an optional number of a session's record.
func intp(p *int) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(*p)
}
