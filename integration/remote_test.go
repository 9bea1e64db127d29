package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/s3test"
)

// The remote tests: sessions pushed to and pulled from a real S3
// server (Versity's gateway, started per test by s3test), between
// "machines" that are separate state and configuration directories.

const remoteBucket = "agent-runs"

// machine is one machine's agentfs: its sessions (XDG_STATE_HOME), its
// remotes (XDG_CONFIG_HOME) and its AWS credentials.
type machine struct {
	t      *testing.T
	state  string
	config string
	env    []string // added to the test's environment
}

func newMachine(t *testing.T, srv *s3test.Server) *machine {
	t.Helper()
	return newMachineAt(t, srv.Endpoint)
}

// newMachineAt is newMachine with the remote's endpoint given (a gate's,
// s3test.StartGate).
func newMachineAt(t *testing.T, endpoint string) *machine {
	t.Helper()
	m := &machine{t: t, state: t.TempDir(), config: t.TempDir()}
	m.env = []string{
		"XDG_STATE_HOME=" + m.state, "XDG_CONFIG_HOME=" + m.config,
		"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey,
		"AWS_PROFILE=", "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(m.config, "no-aws-credentials"),
		"AWS_CONFIG_FILE=" + filepath.Join(m.config, "no-aws-config"),
	}
	if r := m.agentfs("", "remote", "add", "team", "s3://"+remoteBucket+"/acme", "--endpoint", endpoint); r.Code != 0 {
		t.Fatalf("remote add: %s", r)
	}
	return m
}

// cmd prepares agentfs args in dir (the test's directory when ""), with
// the machine's environment and extra.
func (m *machine) cmd(dir string, extra []string, args ...string) *exec.Cmd {
	cmd := exec.Command(harness.Bin(), args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), m.env...), extra...)
	return cmd
}

func (m *machine) agentfs(dir string, args ...string) harness.Result {
	m.t.Helper()
	return harness.RunCmd(m.t, m.cmd(dir, nil, args...), args)
}

// run runs script (sh) as an agentfs run session of project and
// returns the session's id. Without automatic snapshots: one taken
// while a file is being written (a loaded machine is slow at it) would
// hold another object, part of the file, and the tests count objects.
func (m *machine) run(project, script string) string {
	m.t.Helper()
	r := m.agentfs(project, "run", "--auto-snapshot=false", "--", "sh", "-c", script)
	if r.Code != 0 {
		m.t.Fatalf("agentfs run: %s", r)
	}
	return sessionIDOf(m.t, r)
}

// newProject makes a project directory with files (path → content).
func newProject(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := harness.NewMountpoint(t)
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		harness.WriteFile(t, filepath.Join(dir, p), content)
	}
	return dir
}

// pushReply is agentfs push --json's output.
type pushReply struct {
	Session   string   `json:"session"`
	Snapshots []string `json:"snapshots"`
	Objects   int      `json:"objects"`
	Sent      int      `json:"sent"`
	Skipped   int      `json:"skipped"`
}

func (m *machine) push(args ...string) pushReply {
	m.t.Helper()
	r := m.agentfs("", append([]string{"push", "--json"}, args...)...)
	if r.Code != 0 {
		m.t.Fatalf("push: %s", r)
	}
	var rep pushReply
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		m.t.Fatalf("push --json: %v\n%s", err, r)
	}
	return rep
}

// TestPushSession pushes a session and checks what the server holds:
// an object for each file the session wrote (identical contents once),
// a document for each snapshot, the branch and the session; remote ls
// lists it.
func TestPushSession(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a := newMachine(t, srv)
	project := newProject(t, map[string]string{"a.txt": "hello\n", "b.txt": "bye\n", "src/main.go": "package main\n"})
	id := a.run(project, "echo changed > a.txt; rm b.txt; echo twin > t1; echo twin > t2; mkdir d; ln -s ../a.txt d/l")
	rep := a.push("-s", id)
	if rep.Session != id || rep.Sent != 2 || rep.Objects != 2 || len(rep.Snapshots) < 2 {
		t.Errorf("push = %+v, want session %s, 2 objects sent (a.txt, the twins), 2 snapshots or more", rep, id)
	}
	if got := srv.Objects(t, remoteBucket, "acme/objects/"); len(got) != 2 {
		t.Errorf("server objects = %q, want 2", got)
	}
	docs := srv.Objects(t, remoteBucket, "acme/snapshots/")
	if len(docs) != len(rep.Snapshots)+1 {
		t.Errorf("server snapshot documents = %q, want %d (the snapshots and branch main)", docs, len(rep.Snapshots)+1)
	}
	if got := srv.Objects(t, remoteBucket, "acme/sessions/"); len(got) != 1 || got[0] != "acme/sessions/"+id+".json" {
		t.Errorf("server session documents = %q, want %s", got, id)
	}
	r := a.agentfs("", "remote", "ls", "team")
	if r.Code != 0 || !strings.Contains(r.Stdout, id) || !strings.Contains(r.Stdout, rep.Snapshots[0]) {
		t.Errorf("remote ls team does not list the session and its snapshots: %s", r)
	}
}

// TestPushDedup pushes two sessions of the same project: the second
// uploads only the file it wrote that the first did not, counted from
// the server's access log.
func TestPushDedup(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a := newMachine(t, srv)
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("src/f%02d.txt", i)] = strings.Repeat(fmt.Sprintf("line %d\n", i), 100)
	}
	project := newProject(t, files)
	first := a.run(project, "for f in src/*.txt; do echo edited >> $f; done")
	a.push("-s", first)
	before := srv.Requests(t, "PutObject", "acme/objects/")
	if before != 20 {
		t.Fatalf("first push: the server stored %d objects, want 20", before)
	}
	second := a.run(project, "for f in src/*.txt; do echo edited >> $f; done; echo more >> src/f00.txt")
	rep := a.push("-s", second)
	if sent := srv.Requests(t, "PutObject", "acme/objects/") - before; sent != 1 || rep.Sent != 1 || rep.Skipped != 19 {
		t.Errorf("second push: the server stored %d objects (reply %+v), want 1 sent and 19 already there", sent, rep)
	}
}

// TestPushResume kills a push half way and pushes again: no document
// was written by the killed push, and the second sends only what had
// not arrived. To stop the push at a point the test knows, the server
// is paused (SIGSTOP) once ten objects arrived, the push is killed
// (SIGKILL), and the server with the request it held is killed too and
// started again on the same directory.
func TestPushResume(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a := newMachine(t, srv)
	project := newProject(t, map[string]string{"seed": "x\n"})
	const n = 100
	id := a.run(project, fmt.Sprintf("i=0; while [ $i -lt %d ]; do head -c 1048576 /dev/urandom > f$i; i=$((i+1)); done", n))
	cmd := a.cmd("", nil, "push", "-s", id, "--parallel", "1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	arrivedTen := harness.WaitFor(func() bool { return len(srv.Objects(t, remoteBucket, "acme/objects/")) >= 10 })
	srv.Pause(t)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	srv.Stop()
	if !arrivedTen {
		t.Fatal("the push stored no 10 objects")
	}
	if got := srv.Objects(t, remoteBucket, "acme/sessions/"); len(got) != 0 {
		t.Fatalf("the killed push wrote the session's document: %q", got)
	}
	if got := srv.Objects(t, remoteBucket, "acme/snapshots/"); len(got) != 0 {
		t.Fatalf("the killed push wrote snapshot documents: %q", got)
	}
	arrived := len(srv.Objects(t, remoteBucket, "acme/objects/"))
	if arrived >= n {
		t.Fatalf("the push was not killed half way: all %d objects arrived", arrived)
	}
	srv.Restart(t)
	for _, args := range [][]string{{"remote", "rm", "team"}, {"remote", "add", "team", "s3://" + remoteBucket + "/acme", "--endpoint", srv.Endpoint}} {
		if r := a.agentfs("", args...); r.Code != 0 {
			t.Fatalf("%s", r)
		}
	}
	before := srv.Requests(t, "PutObject", "acme/objects/")
	rep := a.push("-s", id)
	sent := srv.Requests(t, "PutObject", "acme/objects/") - before
	if sent != n-arrived || rep.Sent != sent || rep.Skipped != arrived {
		t.Errorf("the resumed push stored %d objects (reply %+v), want %d sent and %d already there", sent, rep, n-arrived, arrived)
	}
	if got := srv.Objects(t, remoteBucket, "acme/sessions/"); len(got) != 1 {
		t.Errorf("after the resumed push the server holds the session documents %q, want one", got)
	}
}

// TestRemoteBadInput: an unknown remote, refused credentials, a
// missing bucket, no credentials: each a clear error, exit 1, nothing
// stored.
func TestRemoteBadInput(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a := newMachine(t, srv)
	project := newProject(t, map[string]string{"a.txt": "a\n"})
	id := a.run(project, "echo b > a.txt")
	if r := a.agentfs("", "remote", "add", "nobucket", "s3://no-such-bucket/x", "--endpoint", srv.Endpoint); r.Code != 0 {
		t.Fatalf("remote add: %s", r)
	}
	for _, c := range []struct {
		name  string
		args  []string
		env   []string
		words []string
	}{
		{"unknown remote", []string{"push", "-s", id, "--remote", "nope"}, nil, []string{`"nope"`, "agentfs remote add"}},
		{"two remotes, none named", []string{"push", "-s", id}, nil, []string{"--remote"}},
		{"wrong secret", []string{"push", "-s", id, "--remote", "team"}, []string{"AWS_SECRET_ACCESS_KEY=wrong"}, []string{"refused the credentials", "AWS_SECRET_ACCESS_KEY"}},
		{"no credentials", []string{"push", "-s", id, "--remote", "team"}, []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="}, []string{"AWS_ACCESS_KEY_ID"}},
		{"missing bucket", []string{"push", "-s", id, "--remote", "nobucket"}, nil, []string{"no-such-bucket", "does not exist"}},
		{"remote ls of a missing bucket", []string{"remote", "ls", "nobucket"}, nil, []string{"no-such-bucket"}},
		{"bad URL", []string{"remote", "add", "x", "http://bucket/p"}, nil, []string{"s3://BUCKET"}},
		{"mount --from an unknown snapshot", []string{"mount", "--lower", project, "--from", "team/0badcafe", harness.NewMountpoint(t)}, nil, []string{"no snapshot", "remote ls team"}},
		{"mount --from an unknown remote", []string{"mount", "--lower", project, "--from", "nope/0badcafe", harness.NewMountpoint(t)}, nil, []string{`"nope"`}},
	} {
		r := harness.RunCmd(t, a.cmd("", c.env, c.args...), c.args)
		if r.Code != 1 {
			t.Errorf("%s: exit %d, want 1: %s", c.name, r.Code, r)
			continue
		}
		for _, w := range c.words {
			if !strings.Contains(r.Stderr, w) {
				t.Errorf("%s: stderr %q does not say %q", c.name, r.Stderr, w)
			}
		}
	}
	if got := srv.Objects(t, remoteBucket, ""); len(got) != 0 {
		t.Errorf("bad pushes stored %q", got)
	}
	store := filepath.Join(t.TempDir(), "store")
	if r := a.agentfs("", "mount", "--lower", project, "--from", "team/0badcafe", "--store", store, harness.NewMountpoint(t)); r.Code != 1 || !strings.Contains(r.Stderr, `no snapshot "0badcafe"`) {
		t.Errorf("mount --from a missing snapshot with --store: %s; want exit 1 naming it", r)
	}
	if _, err := os.Stat(filepath.Join(store, "meta")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mount --from a missing snapshot made the store's metadata (%v): want the store left as it was", err)
	}
}

// pullReply is agentfs pull --json's output.
type pullReply struct {
	Session   string            `json:"session"`
	Snapshots map[string]string `json:"snapshots"`
	Fetched   int               `json:"fetched"`
	Conflicts []string          `json:"conflicts"`
}

func (m *machine) pull(project, ref string) pullReply {
	m.t.Helper()
	r := m.agentfs(project, "pull", "--json", ref)
	if r.Code != 0 {
		m.t.Fatalf("pull: %s", r)
	}
	var rep pullReply
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		m.t.Fatalf("pull --json: %v\n%s", err, r)
	}
	// --json writes the progress as JSON lines on stderr: at least the
	// fetch's last.
	var ev struct {
		Progress struct {
			Op    string `json:"op"`
			Done  int    `json:"done"`
			Total int    `json:"total"`
		} `json:"progress"`
	}
	lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ev); err != nil || ev.Progress.Op != "pull" || ev.Progress.Done != ev.Progress.Total {
		m.t.Errorf("pull --json: the last line on stderr is no final progress event of the pull (%v): %q", err, r.Stderr)
	}
	return rep
}

// copyProject copies a project to a new directory (another checkout:
// other path, other inode numbers, same contents).
func copyProject(t *testing.T, src string) string {
	t.Helper()
	dst := harness.NewMountpoint(t)
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	return dst
}

// TestPullSession: a session run on machine A is pushed, pulled on
// machine B over B's own checkout (another path, other inodes, the same
// files), reviewed there (sessions, diff, snapshot list, export, a
// branch from a pulled snapshot) and applied without conflict: B's
// checkout then holds what A's session made.
func TestPullSession(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	project := newProject(t, map[string]string{"a.txt": "hello\n", "b.txt": "bye\n", "src/main.go": "package main\n"})
	checkoutB := copyProject(t, project)
	requireTool(t, "setfattr")
	id := a.run(project, "echo changed > a.txt; rm b.txt; mkdir -p d/e; echo deep > d/e/f; setfattr -n user.agent -v yes d/e/f; ln -s ../a.txt d/l; chmod 600 src/main.go")
	pushed := a.push("-s", id)
	rep := b.pull(checkoutB, "team/"+id)
	if rep.Session != id || len(rep.Snapshots) != len(pushed.Snapshots) || len(rep.Conflicts) != 0 {
		t.Fatalf("pull = %+v, want session %s, %d snapshots, no conflict", rep, id, len(pushed.Snapshots))
	}
	if r := b.agentfs(checkoutB, "sessions"); r.Code != 0 || !strings.Contains(r.Stdout, id) || !strings.Contains(r.Stdout, checkoutB) {
		t.Errorf("sessions on B does not list %s over %s: %s", id, checkoutB, r)
	}
	diffA, diffB := a.agentfs(project, "diff", "-s", id), b.agentfs(checkoutB, "diff", "-s", id)
	if diffA.Code != 0 || diffB.Code != 0 || diffA.Stdout != diffB.Stdout {
		t.Errorf("diff on B differs from diff on A:\nA: %s\nB: %s", diffA, diffB)
	}
	for pushedID, here := range rep.Snapshots {
		if r := b.agentfs(checkoutB, "snapshot", "list", "-s", id); !strings.Contains(r.Stdout, here) {
			t.Errorf("snapshot %s (pushed as %s) is not in B's snapshot list: %s", here, pushedID, r)
		}
	}
	exported := filepath.Join(t.TempDir(), "export")
	if r := b.agentfs(checkoutB, "export", "-s", id, "main", "--to", exported); r.Code != 0 {
		t.Errorf("export on B: %s", r)
	} else if got := harness.ReadFile(t, filepath.Join(exported, "d/e/f")); got != "deep\n" {
		t.Errorf("exported d/e/f = %q, want deep", got)
	}
	if r := b.agentfs(checkoutB, "branch", "create", "-s", id, "--from", rep.Snapshots[pushed.Snapshots[0]], "again"); r.Code != 0 {
		t.Errorf("branch create from a pulled snapshot: %s", r)
	}
	if r := b.agentfs(checkoutB, "apply", "-s", id); r.Code != 0 {
		t.Fatalf("apply on B: %s", r)
	}
	for p, want := range map[string]string{"a.txt": "changed\n", "d/e/f": "deep\n", "src/main.go": "package main\n"} {
		if got := harness.ReadFile(t, filepath.Join(checkoutB, p)); got != want {
			t.Errorf("B's %s = %q, want %q", p, got, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(checkoutB, "b.txt")); !os.IsNotExist(err) {
		t.Errorf("B's b.txt: %v, want it deleted", err)
	}
	if target, err := os.Readlink(filepath.Join(checkoutB, "d/l")); err != nil || target != "../a.txt" {
		t.Errorf("B's d/l -> %q (%v), want ../a.txt", target, err)
	}
	if st, err := os.Stat(filepath.Join(checkoutB, "src/main.go")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("B's src/main.go mode = %v (%v), want 0600", st.Mode(), err)
	}
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(filepath.Join(checkoutB, "d/e/f"), "user.agent", buf); err != nil || string(buf[:n]) != "yes" {
		t.Errorf("B's d/e/f xattr user.agent = %q (%v), want yes", buf[:max(n, 0)], err)
	}
}

// TestPullConflict: B's checkout has another a.txt than the one A's
// session changed: pull names it, apply refuses it (and applies the
// rest), apply --force takes it.
func TestPullConflict(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	project := newProject(t, map[string]string{"a.txt": "hello\n", "c.txt": "same\n"})
	checkoutB := copyProject(t, project)
	harness.WriteFile(t, filepath.Join(checkoutB, "a.txt"), "edited on B\n")
	id := a.run(project, "echo from A > a.txt; echo from A > c.txt")
	pushed := a.push("-s", id)
	rep := b.pull(checkoutB, "team/"+id)
	if len(rep.Conflicts) != 1 || rep.Conflicts[0] != "a.txt" {
		t.Errorf("pull conflicts = %q, want [a.txt]", rep.Conflicts)
	}
	// The pulled snapshots keep the conflict: restoring the last one
	// (the state main has) leaves it there.
	last := rep.Snapshots[pushed.Snapshots[len(pushed.Snapshots)-1]]
	if r := b.agentfs(checkoutB, "restore", "-s", id, last); r.Code != 0 {
		t.Fatalf("restore of the pulled snapshot %s: %s", last, r)
	}
	r := b.agentfs(checkoutB, "apply", "-s", id)
	if r.Code == 0 || !strings.Contains(r.Stdout+r.Stderr, "a.txt") {
		t.Errorf("apply over a conflict: %s; want a failure naming a.txt", r)
	}
	if got := harness.ReadFile(t, filepath.Join(checkoutB, "a.txt")); got != "edited on B\n" {
		t.Errorf("apply overwrote the conflicting a.txt: %q", got)
	}
	if got := harness.ReadFile(t, filepath.Join(checkoutB, "c.txt")); got != "from A\n" {
		t.Errorf("c.txt (no conflict) = %q, want it applied", got)
	}
	if r := b.agentfs(checkoutB, "apply", "-s", id, "--force"); r.Code != 0 {
		t.Errorf("apply --force: %s", r)
	}
	if got := harness.ReadFile(t, filepath.Join(checkoutB, "a.txt")); got != "from A\n" {
		t.Errorf("after apply --force a.txt = %q, want A's", got)
	}
}

// TestPullRefusesCorruptObject damages an object on the server: the
// pull fails naming it and no session appears on B; once the object is
// pushed again whole, the pull succeeds, fetching only what it lacked.
func TestPullRefusesCorruptObject(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	project := newProject(t, map[string]string{"a.txt": "hello\n"})
	id := a.run(project, "echo one > one; echo two > two; echo three > three")
	a.push("-s", id)
	objs := srv.Objects(t, remoteBucket, "acme/objects/")
	if len(objs) != 3 {
		t.Fatalf("server objects %q, want 3", objs)
	}
	victim := objs[1]
	harness.WriteFile(t, srv.ObjectFile(remoteBucket, victim), "tampered\n")
	checkoutB := copyProject(t, project)
	r := b.agentfs(checkoutB, "pull", "team/"+id)
	if r.Code != 1 || !strings.Contains(r.Stderr, victim) || !strings.Contains(r.Stderr, "damaged") {
		t.Errorf("pull of a damaged object: %s; want exit 1 naming %s", r, victim)
	}
	if r := b.agentfs(checkoutB, "sessions"); strings.Contains(r.Stdout, id) {
		t.Errorf("a refused pull left the session: %s", r)
	}
	if err := os.Remove(srv.ObjectFile(remoteBucket, victim)); err != nil {
		t.Fatal(err)
	}
	// The refused pull keeps the objects it had verified; which ones it
	// had when the damaged one stopped it depends on the order of the
	// parallel fetches.
	kept := b.pulledObjects(id)
	a.push("-s", id)
	rep := b.pull(checkoutB, "team/"+id)
	if want := len(objs) - len(kept); rep.Fetched != want {
		t.Errorf("the second pull fetched %d objects, want %d (the %d others were fetched before)", rep.Fetched, want, len(kept))
	}
}

// pulledObjects returns the objects a pull of session id (finished or
// not) has verified and kept on m.
func (m *machine) pulledObjects(id string) []string {
	done, err := filepath.Glob(filepath.Join(m.state, "agentfs", "sessions", id, "pull-objects", "*", "[^.]*"))
	if err != nil {
		m.t.Fatal(err)
	}
	return done
}

// TestPushSnapshotOfMount pushes one snapshot of a running mount (the
// daemon does the transfer, with the credentials the CLI found), and
// pulls nothing: the snapshot's document and objects are on the server.
func TestPushSnapshotOfMount(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a := newMachine(t, srv)
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a.txt", "hello\n")))
	harness.WriteFile(t, m.Path("a.txt"), "changed in the mount\n")
	harness.WriteFile(t, m.Path("new.txt"), "new\n")
	r := a.agentfs(m.Dir, "snapshot", "create", "-m", "to push")
	if r.Code != 0 {
		t.Fatalf("snapshot create: %s", r)
	}
	lines := strings.Fields(r.Stdout)
	id := lines[len(lines)-1] // the last line is the id alone
	rep := a.push("-C", m.Dir, id)
	if len(rep.Snapshots) != 1 || rep.Sent != 2 {
		t.Errorf("push %s = %+v, want one snapshot and 2 objects sent", id, rep)
	}
	if got := srv.Objects(t, remoteBucket, "acme/snapshots/"); len(got) != 1 || !strings.Contains(got[0], rep.Snapshots[0]) {
		t.Errorf("server snapshot documents = %q, want the one of %s", got, rep.Snapshots[0])
	}
	if got := srv.Objects(t, remoteBucket, "acme/sessions/"); len(got) != 0 {
		t.Errorf("a snapshot's push wrote session documents: %q", got)
	}
}

// TestPullResume kills a pull half way (as TestPushResume kills a
// push): no session appears, and the next pull fetches only the
// objects the first had not.
func TestPullResume(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	project := newProject(t, map[string]string{"seed": "x\n"})
	const n = 100
	id := a.run(project, fmt.Sprintf("i=0; while [ $i -lt %d ]; do head -c 1048576 /dev/urandom > f$i; i=$((i+1)); done", n))
	a.push("-s", id)
	checkoutB := copyProject(t, project)
	fetched := func() int { // complete objects, not the temporary files of those under way
		ms, _ := filepath.Glob(filepath.Join(b.state, "agentfs", "sessions", id, "pull-objects", "*", "*"))
		n := 0
		for _, m := range ms {
			if !strings.HasPrefix(filepath.Base(m), ".") {
				n++
			}
		}
		return n
	}
	cmd := b.cmd(checkoutB, nil, "pull", "--parallel", "1", "team/"+id)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fetchedTen := harness.WaitFor(func() bool { return fetched() >= 10 })
	srv.Pause(t)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	srv.Stop()
	if !fetchedTen {
		t.Fatal("the pull fetched no 10 objects")
	}
	got := fetched()
	if got >= n {
		t.Fatalf("the pull was not killed half way: all %d objects fetched", got)
	}
	if r := b.agentfs(checkoutB, "sessions"); strings.Contains(r.Stdout, id) {
		t.Errorf("a killed pull left a session: %s", r)
	}
	srv.Restart(t)
	for _, args := range [][]string{{"remote", "rm", "team"}, {"remote", "add", "team", "s3://" + remoteBucket + "/acme", "--endpoint", srv.Endpoint}} {
		if r := b.agentfs("", args...); r.Code != 0 {
			t.Fatalf("%s", r)
		}
	}
	before := srv.Requests(t, "GetObject", "acme/objects/")
	rep := b.pull(checkoutB, "team/"+id)
	// One GET for each object not fetched, but the one under way
	// (--parallel 1) when its temporary file held it whole: that one
	// is only checked (HEAD) and verified.
	if gets := srv.Requests(t, "GetObject", "acme/objects/") - before; rep.Fetched != n-got || gets != n-got && gets != n-got-1 {
		t.Errorf("the resumed pull fetched %d objects (the server answered %d GETs), want %d (%d GETs, or one less)", rep.Fetched, gets, n-got, n-got)
	}
	if r := b.agentfs(checkoutB, "diff", "-s", id, "--stat"); r.Code != 0 {
		t.Errorf("diff of the pulled session: %s", r)
	}
}

// TestPushPullProgress: push (run by a mount's daemon, with the
// progress gate of TestProgressBars) writes progress events with --json
// and draws a bar on a terminal; pull (run in the command's own
// process) draws one too, and clears it.
func TestPushPullProgress(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	// A session to pull, made before the gate is set (agentfs run's
	// own diff would wait for a watcher).
	project := newProject(t, map[string]string{"a.txt": "a\n"})
	sid := a.run(project, "for i in 1 2 3 4 5; do echo $i > n$i; done")
	a.push("-s", sid)

	t.Setenv("AGENTFS_TEST_PROGRESS_GATE", "1")
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a.txt", "hello\n")))
	for i := range 20 {
		harness.WriteFile(t, m.Path(fmt.Sprintf("f%02d", i)), strings.Repeat(fmt.Sprint(i), 4096))
	}
	r := a.agentfs(m.Dir, "snapshot", "create")
	if r.Code != 0 {
		t.Fatalf("snapshot create: %s", r)
	}
	lines := strings.Fields(r.Stdout)
	id := lines[len(lines)-1]
	r = a.agentfs(m.Dir, "push", "--json", id)
	if want := `{"progress":{"running":true,"op":"push"`; r.Code != 0 || !strings.Contains(r.Stderr, want) {
		t.Errorf("push --json: stderr lacks a progress event %s:\n%s", want, r)
	}
	tm := harness.StartTerminal(t, a.cmd(m.Dir, nil, "push", id))
	if code, out := tm.Wait(), tm.Output(); code != 0 || !strings.Contains(out, "pushing") || !strings.Contains(out, "\x1b[2K") {
		t.Errorf("push on a terminal: exit %d, want a bar (pushing) drawn and cleared:\n%q", code, out)
	}
	tm = harness.StartTerminal(t, b.cmd(copyProject(t, project), nil, "pull", "team/"+sid))
	if code, out := tm.Wait(), tm.Output(); code != 0 || !strings.Contains(out, "pulling") || !strings.Contains(out, "\x1b[2K") {
		t.Errorf("pull on a terminal: exit %d, want a bar (pulling) drawn and cleared:\n%q", code, out)
	}
}

// TestMountFromRemote: machine B mounts its checkout starting from a
// snapshot pushed by A: the listing and attributes come at once with no
// object fetched (counted by the server), the first read of a file
// fetches it (and only it), a second read fetches nothing, and apply
// writes the fetched bytes into B's project.
func TestMountFromRemote(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	project := newProject(t, map[string]string{"a.txt": "hello\n", "b.txt": "bye\n"})
	id := a.run(project, "echo changed > a.txt; rm b.txt; mkdir d; echo one > d/one; head -c 3000000 /dev/urandom > big.bin; chmod 640 d/one")
	pushed := a.push("-s", id)
	snap := pushed.Snapshots[len(pushed.Snapshots)-1]
	checkoutB := copyProject(t, project)
	mnt := harness.NewMountpoint(t)
	if r := b.agentfs("", "mount", "--lower", checkoutB, "--from", "team/"+snap, mnt); r.Code != 0 {
		t.Fatalf("mount --from: %s", r)
	}
	t.Cleanup(func() {
		if r := b.agentfs("", "unmount", mnt); r.Code != 0 {
			t.Errorf("unmount: %s", r)
		}
	})
	fetched := func() int { return srv.Requests(t, "GetObject", "acme/objects/") }

	names := harness.ListDir(t, mnt)
	if !slices.Equal(names, []string{"a.txt", "big.bin", "d"}) {
		t.Errorf("listing = %q, want a.txt big.bin d", names)
	}
	if st, err := os.Lstat(filepath.Join(mnt, "big.bin")); err != nil || st.Size() != 3000000 {
		t.Errorf("big.bin: %v (%v), want 3000000 bytes", st, err)
	}
	if st, err := os.Lstat(filepath.Join(mnt, "d/one")); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("d/one: %v (%v), want mode 0640", st, err)
	}
	if n := fetched(); n != 0 {
		t.Errorf("listing and stat fetched %d objects, want none", n)
	}
	// A snapshot's content hashes are the objects' names: its root
	// fetches nothing either.
	r := b.agentfs(mnt, "snapshot", "create")
	if r.Code != 0 {
		t.Fatalf("snapshot create: %s", r)
	}
	fields := strings.Fields(r.Stdout)
	waitRoot(t, mnt, fields[len(fields)-1])
	if n := fetched(); n != 0 {
		t.Errorf("a snapshot and its root fetched %d objects, want none", n)
	}
	if got := harness.ReadFile(t, filepath.Join(mnt, "d/one")); got != "one\n" {
		t.Errorf("d/one = %q, want one", got)
	}
	if n := fetched(); n != 1 {
		t.Errorf("reading d/one fetched %d objects, want 1", n)
	}
	if got := harness.ReadFile(t, filepath.Join(mnt, "d/one")); got != "one\n" {
		t.Errorf("d/one again = %q", got)
	}
	if n := fetched(); n != 1 {
		t.Errorf("reading d/one again: %d objects fetched in all, want still 1", n)
	}
	if r := b.agentfs("", "apply", "-C", mnt); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	if got := harness.ReadFile(t, filepath.Join(checkoutB, "a.txt")); got != "changed\n" {
		t.Errorf("applied a.txt = %q, want changed", got)
	}
	exported := filepath.Join(t.TempDir(), "a")
	if r := a.agentfs(project, "export", "-s", id, "main", "--to", exported); r.Code != 0 {
		t.Fatalf("export on A: %s", r)
	}
	want := harness.ReadFile(t, filepath.Join(exported, "big.bin"))
	if got := harness.ReadFile(t, filepath.Join(mnt, "big.bin")); got != want {
		t.Errorf("big.bin read through the mount: %d bytes, not A's %d", len(got), len(want))
	}
	if got := harness.ReadFile(t, filepath.Join(checkoutB, "big.bin")); got != want {
		t.Errorf("applied big.bin: %d bytes, not A's %d", len(got), len(want))
	}
}

// TestMountFromRemoteDamaged: a file whose object is damaged on the
// server fails its open with EIO, and nothing is kept; once the object
// is whole again, the next open fetches it.
func TestMountFromRemoteDamaged(t *testing.T) {
	harness.RequireFUSE(t)
	srv := s3test.Start(t, remoteBucket)
	a, b := newMachine(t, srv), newMachine(t, srv)
	project := newProject(t, map[string]string{"a.txt": "hello\n"})
	id := a.run(project, "echo fetched > f")
	pushed := a.push("-s", id)
	objs := srv.Objects(t, remoteBucket, "acme/objects/")
	if len(objs) != 1 {
		t.Fatalf("server objects %q, want 1", objs)
	}
	file := srv.ObjectFile(remoteBucket, objs[0])
	harness.WriteFile(t, file, "tampered\n")
	mnt := harness.NewMountpoint(t)
	if r := b.agentfs("", "mount", "--lower", copyProject(t, project), "--from", "team/"+pushed.Snapshots[len(pushed.Snapshots)-1], mnt); r.Code != 0 {
		t.Fatalf("mount --from: %s", r)
	}
	t.Cleanup(func() {
		if r := b.agentfs("", "unmount", mnt); r.Code != 0 {
			t.Errorf("unmount: %s", r)
		}
	})
	if _, err := os.ReadFile(filepath.Join(mnt, "f")); !errors.Is(err, syscall.EIO) {
		t.Errorf("reading a file whose object is damaged: %v, want EIO", err)
	}
	harness.WriteFile(t, file, "fetched\n")
	if got, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(got) != "fetched\n" {
		t.Errorf("after the object was mended: %q (%v), want fetched", got, err)
	}

	// A large object damaged in its middle, streamed: its first bytes
	// read, the read of its end fails (the check refuses the whole), and
	// the next open fetches it again.
	snap, project2, want := bigRemoteFile(t, srv, a, 3<<20)
	var big string
	for _, key := range srv.Objects(t, remoteBucket, "acme/objects/") {
		if st, err := os.Stat(srv.ObjectFile(remoteBucket, key)); err == nil && st.Size() == 3<<20 {
			big = srv.ObjectFile(remoteBucket, key)
		}
	}
	damaged := slices.Clone(want)
	damaged[len(damaged)/2] ^= 0xff
	if err := os.WriteFile(big, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	gate := s3test.StartGate(t, srv) // holds the object's end until the first bytes are read
	c := newMachineAt(t, gate.Endpoint)
	mnt2 := harness.NewMountpoint(t)
	c.mountAt(gate, mnt2, "--lower", copyProject(t, project2), "--from", "team/"+snap)
	gate.Hold(1 << 20)
	f, err := os.Open(filepath.Join(mnt2, "big.bin"))
	if err != nil {
		t.Fatalf("open of a file whose object is damaged: %v, want it to open (the fetch streams)", err)
	}
	head := make([]byte, 4096)
	if _, err := f.ReadAt(head, 0); err != nil || !bytes.Equal(head, want[:4096]) {
		t.Errorf("the first 4 KiB of a damaged object: %v, or other bytes", err)
	}
	gate.Open()
	if _, err := io.ReadAll(f); !errors.Is(err, syscall.EIO) {
		t.Errorf("reading a damaged object to its end: %v, want EIO", err)
	}
	_ = f.Close()
	if err := os.WriteFile(big, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := harness.ReadFile(t, filepath.Join(mnt2, "big.bin")); got != string(want) {
		t.Errorf("after the object was mended: %d bytes, not the object's", len(got))
	}
}
