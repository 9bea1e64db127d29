package integration

// Per-process branch binding (the binding issue): agentfs branch
// bind/unbind/current, agentfs exec -b, agentfs tournament, and the
// isolation of processes in different branches at the same paths with
// the kernel's caches on.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/procfs"
	"golang.org/x/sys/unix"
)

// branchesFrom makes branches names from a snapshot of the mount's
// current state and returns the snapshot id.
func branchesFrom(t *testing.T, m *harness.Mount, names ...string) string {
	t.Helper()
	id := takeSnapshot(t, m.Dir, "base")
	for _, n := range names {
		mustC(t, m.Dir, "branch", "create", "--from", id, n)
	}
	return id
}

// execIn returns a command that runs args bound to branch, in dir
// (as root: through a branch mount in a mount namespace of its own).
func execIn(m *harness.Mount, branch, dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(harness.Bin(), append([]string{"exec", "-b", branch, "-C", m.Dir, "--"}, args...)...)
	cmd.Dir = dir
	return cmd
}

// execRootIn is execIn bound through the mount root (--no-namespace),
// as agentfs branch bind binds a shell.
func execRootIn(m *harness.Mount, branch, dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(harness.Bin(), append([]string{"exec", "--no-namespace", "-b", branch, "-C", m.Dir, "--"}, args...)...)
	cmd.Dir = dir
	return cmd
}

// TestBindIsolation: workers in three branches and one unbound, at the
// same paths at the same time, write then read, stat, rename, list and
// mmap thousands of times; none ever sees another branch's data,
// attributes or listing. Then each branch holds its own worker's last
// write, and main its own. With -short (the repeated passes of make
// test) they loop 300 times instead of 1,500.
func TestBindIsolation(t *testing.T) {
	t.Run("root", func(t *testing.T) { testBindIsolation(t, execRootIn) })
	t.Run("namespace", func(t *testing.T) { testBindIsolation(t, execIn) })
}

func testBindIsolation(t *testing.T, execIn func(m *harness.Mount, branch, dir string, args ...string) *exec.Cmd) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("shared.txt", "lower\n"), harness.LowerFile("dir/a", "lower a\n")))
	branchesFrom(t, m, "b1", "b2", "b3")
	iters := 1500
	if testing.Short() {
		iters = 300
	}
	helper := harness.HelperPath(t)
	workers := []string{"b1", "b2", "b3", "main"}
	results := make([]harness.Result, len(workers))
	var wg sync.WaitGroup
	for i, b := range workers {
		var cmd *exec.Cmd
		if b == "main" {
			cmd = exec.Command(helper) // unbound: the mount's branch
			cmd.Dir = m.Dir
		} else {
			cmd = execIn(m, b, m.Dir, helper)
		}
		cmd.Env = append(os.Environ(), isolationEnv+"="+b, isolationRootEnv+"="+m.Dir, fmt.Sprintf("%s=%d", isolationItersEnv, iters))
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = harness.RunCmd(t, cmd, []string{"isolation worker", b})
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.Code != 0 || !strings.Contains(r.Stdout, fmt.Sprintf("ok %d", iters)) {
			t.Errorf("worker in %s:\n%s", workers[i], r)
		}
	}
	for _, b := range workers {
		want := fmt.Sprintf("%s %d\n", b, iters-1)
		r := harness.RunCmd(t, execIn(m, b, m.Dir, "cat", "shared.txt", "dir/a"), nil)
		if b == "main" {
			r = harness.RunCmd(t, exec.Command("cat", m.Path("shared.txt"), m.Path("dir/a")), nil)
		}
		if r.Code != 0 || r.Stdout != want+want {
			t.Errorf("branch %s after the run: shared.txt and dir/a = %q, want %q twice:\n%s", b, r.Stdout, want, r)
		}
	}
}

// TestBindShell: a shell binds itself, sees the branch at the mount and
// in agentfs branch current, status and branch list; unbind brings it
// back to the mount's branch; other processes never see its branch.
func TestBindShell(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "lower\n")))
	branchesFrom(t, m, "try2")
	mustC(t, m.Dir, "branch", "create", "try3")
	harness.WriteFile(t, m.Path("f"), "main\n")
	if r := harness.RunCmd(t, execIn(m, "try2", m.Dir, "sh", "-c", "echo try2 > f"), nil); r.Code != 0 {
		t.Fatalf("writing f in try2:\n%s", r)
	}
	script := `set -e
agentfs branch bind try2
echo "cat: $(cat f)"
echo "current: $(agentfs branch current)"
agentfs status --json | grep -c '"branch": "try2"' | sed 's/^/status bindings: /'
agentfs branch list | grep '^\*' | sed 's/^/list: /'
cat f > /dev/null
echo "other: $(cat ` + m.Path("f") + `)"
agentfs branch unbind
echo "after: $(cat f) $(agentfs branch current)"
`
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = m.Dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(harness.Bin())+":"+os.Getenv("PATH"))
	r := harness.RunCmd(t, cmd, []string{"bound shell"})
	if r.Code != 0 {
		t.Fatalf("the bound shell:\n%s", r)
	}
	for _, want := range []string{
		"now see branch try2",
		"cat: try2\n",
		"current: try2 (bound: process ",
		"status bindings: 1\n",
		"list: * try2",
		"other: try2\n",
		"after: main main (the mount's branch: not bound)\n",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("the bound shell's output lacks %q:\n%s", want, r)
		}
	}
	if got := harness.ReadFile(t, m.Path("f")); got != "main\n" {
		t.Errorf("an unbound process reads f = %q, want main", got)
	}
	if st := mountStatusOf(t, m.Dir); len(st.Bindings) != 0 {
		t.Errorf("bindings after unbind: %+v", st.Bindings)
	}
	// The nearest bound ancestor wins.
	nested := execIn(m, "try2", m.Dir, "sh", "-c", harness.Bin()+" exec -b try3 -- cat f; cat f")
	if r := harness.RunCmd(t, nested, nil); r.Code != 0 || r.Stdout != "lower\ntry2\n" {
		t.Errorf("try3 inside try2 then try2: %q, want lower then try2:\n%s", r.Stdout, r)
	}
}

// statusJSON decodes agentfs status --json -C dir into v.
func statusJSON(t testing.TB, dir string, v any) {
	t.Helper()
	r := mustC(t, dir, "status", "--json")
	if err := json.Unmarshal([]byte(r.Stdout), v); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
}

// mountStatusOf runs agentfs status --json -C dir.
func mountStatusOf(t testing.TB, dir string) (st struct {
	Branch   string `json:"branch"`
	Bindings []struct {
		Pid    int    `json:"pid"`
		Branch string `json:"branch"`
	} `json:"bindings"`
}) {
	t.Helper()
	statusJSON(t, dir, &st)
	return st
}

// TestBindEndsWithProcess: a binding ends when its process exits.
func TestBindEndsWithProcess(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "lower\n")))
	branchesFrom(t, m, "b1")
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	pid := sleeper.Process.Pid
	mustC(t, m.Dir, "branch", "bind", "--pid", fmt.Sprint(pid), "b1")
	if r := mustC(t, m.Dir, "branch", "current", "--pid", fmt.Sprint(pid)); !strings.HasPrefix(r.Stdout, "b1 (bound: process "+fmt.Sprint(pid)) {
		t.Errorf("current of the bound sleeper:\n%s", r)
	}
	if err := sleeper.Process.Kill(); err != nil {
		t.Fatalf("killing the bound sleeper: %v", err)
	}
	_ = sleeper.Wait() // "signal: killed": the kill above
	if !harness.WaitFor(func() bool { return len(mountStatusOf(t, m.Dir).Bindings) == 0 }) {
		t.Errorf("the binding of pid %d outlived its process: %+v", pid, mountStatusOf(t, m.Dir).Bindings)
	}
	// A new process never inherits it, whatever its pid.
	if got := harness.ReadFile(t, m.Path("f")); got != "lower\n" {
		t.Errorf("f after the bound process exited = %q", got)
	}
}

// startUntil starts cmd with a pipe as its stdin and waits until its
// output (stdout and stderr) holds want; the test fails if it never
// does. Closing the pipe lets the command go on past a read.
func startUntil(t *testing.T, cmd *exec.Cmd, want string) (io.WriteCloser, *syncBuffer) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(func() bool { return strings.Contains(out.String(), want) }) {
		_ = cmd.Process.Kill() // it may have exited; the test fails below either way
		_ = cmd.Wait()         // reaps it; the output below says more than its status
		t.Fatalf("%v did not get going (no %q in its output):\n%s", cmd.Args, want, out.String())
	}
	return stdin, out
}

// syncBuffer is a strings.Builder that a command's output goroutines
// and the test may use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBindDeletedBranch: a process bound to a branch that is deleted
// gets ENOENT, never another branch's files.
func TestBindDeletedBranch(t *testing.T) {
	t.Run("root", func(t *testing.T) { testBindDeletedBranch(t, execRootIn) })
	t.Run("namespace", func(t *testing.T) { testBindDeletedBranch(t, execIn) })
}

func testBindDeletedBranch(t *testing.T, execIn func(m *harness.Mount, branch, dir string, args ...string) *exec.Cmd) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "lower\n")))
	branchesFrom(t, m, "doomed")
	cmd := execIn(m, "doomed", m.Dir, "sh", "-c", `echo mine > f; cat f; read x; cat f; cat `+m.Path("f")+`; ls; echo done`)
	stdin, out := startUntil(t, cmd, "mine")
	mustC(t, m.Dir, "branch", "delete", "doomed")
	if err := stdin.Close(); err != nil {
		t.Fatalf("closing the bound shell's stdin: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the bound shell: %v\n%s", err, out.String())
	}
	got := out.String()
	if strings.Count(got, "mine") != 1 || strings.Contains(got, "lower") {
		t.Errorf("after its branch was deleted, the bound shell read:\n%s\nwant errors, never main's f", got)
	}
	if !strings.Contains(got, "No such file or directory") && !strings.Contains(got, "Stale file handle") {
		t.Errorf("the bound shell got no ENOENT/ESTALE:\n%s", got)
	}
}

// TestBindBadInput: unknown branch, missing pid, nothing to unbind.
func TestBindBadInput(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "f")))
	failC(t, m.Dir, []string{`no branch "nope"`, "agentfs branch list"}, "branch", "bind", "nope")
	failC(t, m.Dir, []string{"no process 2147483", "running process"}, "branch", "bind", "--pid", "2147483", "main")
	failC(t, m.Dir, []string{"not bound"}, "branch", "unbind", "--pid", fmt.Sprint(os.Getpid()))
	failC(t, m.Dir, []string{"daemon"}, "branch", "bind", "--pid", fmt.Sprint(m.Status.Pid), "main")
	if r := harness.Run(t, "exec", "-C", m.Dir, "--", "true"); r.Code != 2 || !strings.Contains(r.Stderr, "needs a branch") {
		t.Errorf("exec without -b:\n%s", r)
	}
	if r := harness.Run(t, "exec", "-b", "nope", "-C", m.Dir, "--", "true"); r.Code != 1 || !strings.Contains(r.Stderr, `no branch "nope"`) {
		t.Errorf("exec -b nope:\n%s", r)
	}
	// exec passes the exit code through.
	mustC(t, m.Dir, "branch", "create", "b")
	if r := harness.RunCmd(t, execIn(m, "b", m.Dir, "sh", "-c", "exit 7"), nil); r.Code != 7 {
		t.Errorf("exec -b b -- sh -c 'exit 7': exit %d", r.Code)
	}
}

// TestBindCwdAfterRebind: a shell whose working directory is inside the
// mount keeps that directory of its old branch after a rebind, until it
// changes directory through the mount (documented, like chroot).
func TestBindCwdAfterRebind(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("d/f", "lower\n")))
	branchesFrom(t, m, "b1")
	script := `cd d
agentfs branch bind b1
echo "stay: $(cat f)"
echo b1 > ` + m.Path("d/f") + `
echo "still: $(cat f)"
python3 -c 'import os
try:
    os.rename("f", "../moved")
    print("rename across branches: ok")
except OSError as e:
    print("rename across branches:", os.strerror(e.errno))'
cd "$PWD"
echo "re-entered: $(cat f)"
`
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = m.Dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(harness.Bin())+":"+os.Getenv("PATH"))
	r := harness.RunCmd(t, cmd, []string{"rebind with cwd inside"})
	for _, want := range []string{"stay: lower\n", "still: lower\n", "rename across branches: Invalid cross-device link\n", "re-entered: b1\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r)
		}
	}
}

// TestTournament: three candidates in parallel, each in its own branch;
// the test passes for two; the first of those in order wins and is
// tagged; --prune deletes the others.
func TestTournament(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("answer", "0\n")))
	id := takeSnapshot(t, m.Dir, "before")
	cands := []string{
		"sleep 0.3; echo 1 > answer",
		"echo 42 > answer; echo extra > new",
		"echo 42 > answer; rm -f answer2",
	}
	args := append([]string{"tournament", "--from", id, "--test", `test "$(cat answer)" = 42`, "--name", "t", "--prune", "-C", m.Dir, "--"}, cands...)
	t.Setenv("TMPDIR", t.TempDir()) // the candidates' logs
	r := harness.Run(t, args...)
	if r.Code != 0 {
		t.Fatalf("tournament:\n%s", r)
	}
	for _, want := range []string{"winner: candidate 2, branch t-2", "t-1 ", "t-3 "} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("tournament report lacks %q:\n%s", want, r)
		}
	}
	var win *snapshotJSON
	for _, s := range listSnapshots(t, m.Dir) {
		for _, tag := range s.Tags {
			if tag == "winner" {
				win = &s
			}
		}
	}
	if win == nil || win.Branch != "t-2" {
		t.Errorf("the winner tag: %+v, want a snapshot of branch t-2", win)
	}
	if bs := listBranches(t, m.Dir); len(bs) != 2 || bs[1].Name != "t-2" {
		t.Errorf("branches after --prune: %+v, want main and t-2", bs)
	}
	if got := harness.ReadFile(t, m.Path("answer")); got != "0\n" {
		t.Errorf("main's answer = %q: the candidates leaked into the mount's branch", got)
	}
	// No candidate passes: exit 1, branches kept.
	r = harness.Run(t, "tournament", "--from", id, "--test", "false", "--name", "u", "-C", m.Dir, "--", "true", "true")
	if r.Code != 1 || !strings.Contains(r.Stdout, "no winner") {
		t.Errorf("a tournament nobody wins:\n%s", r)
	}
	if bs := listBranches(t, m.Dir); len(bs) != 4 {
		t.Errorf("branches after a tournament without winner: %+v", bs)
	}
}

// TestTournamentInterrupt: SIGINT stops every candidate: the tournament
// exits 130, and no process of a candidate's process group is left (each
// candidate's shell writes its pid, then sleeps longer than the test's
// guard against a hang).
func TestTournamentInterrupt(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "f")))
	id := takeSnapshot(t, m.Dir, "before")
	marker := filepath.Join(t.TempDir(), "pid")
	t.Setenv("TMPDIR", t.TempDir()) // the candidates' logs
	cmd := exec.Command(harness.Bin(), "tournament", "--from", id, "--test", "true", "-C", m.Dir, "--",
		"echo $$ > "+marker+"1.tmp && mv "+marker+"1.tmp "+marker+"1; sleep 600",
		"echo $$ > "+marker+"2.tmp && mv "+marker+"2.tmp "+marker+"2; sleep 600")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(func() bool { return fileExists(marker+"1") && fileExists(marker+"2") }) {
		_ = cmd.Process.Kill() // it may have exited; the test fails here either way
		t.Fatalf("the candidates did not start:\n%s", out.String())
	}
	var groups []int // the candidates' process groups
	for _, f := range []string{marker + "1", marker + "2"} {
		b, err := os.ReadFile(f)
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || perr != nil {
			t.Fatalf("the pid a candidate wrote to %s: %q, %v %v", f, b, err, perr)
		}
		pgid, err := unix.Getpgid(pid)
		if err != nil {
			t.Fatalf("the process group of candidate %d: %v", pid, err)
		}
		groups = append(groups, pgid)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("sending SIGINT to the tournament: %v\n%s", err, out.String())
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(60 * time.Second): // against a hang, not a timing check
		_ = cmd.Process.Kill()
		t.Fatalf("the tournament did not exit after SIGINT:\n%s", out.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Errorf("tournament after SIGINT: %v (want exit 130):\n%s", err, out.String())
	}
	// Killed processes are reaped a moment after the tournament exits.
	var left []int
	if !harness.WaitFor(func() bool { left = liveInGroups(groups); return len(left) == 0 }) {
		t.Errorf("processes %v of the candidates' process groups %v are left after the tournament exited", left, groups)
		for _, pid := range left {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// liveInGroups lists the processes, zombies aside, whose process group is
// one of groups.
func liveInGroups(groups []int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pgid, err := unix.Getpgid(pid); err == nil && slices.Contains(groups, pgid) && procfs.Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestBindUnprivileged: on a mount owned by an ordinary user, the owner
// binds its own processes, and binding another user's process is EPERM
// with a message that says why.
func TestBindUnprivileged(t *testing.T) {
	lower, mp, home, before := unprivilegedDirs(t, harness.LowerFile("f", "lower\n", harness.WithOwner(userUID, userGID)))
	script := unprivilegedPrelude + `as_user "$BIN" mount --lower "$LOWER" "$MP"
as_user "$BIN" branch create b1 -C "$MP" >/dev/null
echo "== own"
as_user "$BIN" exec -b b1 -C "$MP" -- sh -c 'echo b1 > "$1/f"; cat "$1/f"' sh "$MP"
as_user cat "$MP/f"
echo "== other user"
setpriv --reuid 65534 --regid 65534 --clear-groups sleep 30 &
other=$!
sleep 0.2
as_user "$BIN" branch bind --pid $other b1 -C "$MP" 2>&1 || echo "exit $?"
kill $other
as_user "$BIN" unmount "$MP"
`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "BIN="+userExecutable(t), "LOWER="+lower, "MP="+mp, "HOME_DIR="+home)
	r := harness.RunCmd(t, cmd, []string{"(as uid 1000 in a private mount namespace)"})
	if r.Code != 0 {
		t.Fatalf("binding on an unprivileged mount:\n%s", r)
	}
	for _, want := range []string{"== own\nb1\nlower\n", "belongs to uid 65534, not to you", "only root may bind another user's processes", "exit 1"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r)
		}
	}
	harness.AssertUnchanged(t, before, harness.SnapshotTree(lower))
}

// TestBindNamespaceRules: as root, agentfs exec -b runs its command in
// a mount namespace of its own over a branch mount; while it runs, the
// branch cannot also be shown through the mount root (bound or switched
// to), a process inside cannot be bound through the root, nested exec
// works, and the branch mount goes when the command ends.
func TestBindNamespaceRules(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "lower\n")))
	branchesFrom(t, m, "b1", "b2")
	bin := filepath.Dir(harness.Bin())
	cmd := execIn(m, "b1", m.Dir, "sh", "-c", `echo b1 > f; agentfs branch current; agentfs exec -b b2 -- cat f; agentfs branch bind b2 2>&1; echo "bind: $?"; read x; cat f`)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	stdin, out := startUntil(t, cmd, "bind: ")
	failC(t, m.Dir, []string{"in use by 1 process", "agentfs exec -b b1"}, "branch", "bind", "--pid", fmt.Sprint(os.Getpid()), "b1")
	failC(t, m.Dir, []string{"in use by 1 process"}, "branch", "switch", "b1")
	st := mountStatusOf(t, m.Dir)
	if err := stdin.Close(); err != nil {
		t.Fatalf("closing the namespaced command's stdin: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the namespaced command: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"b1 (bound: process", "lower\n", "own mount namespace", "bind: 1", "\nb1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the namespaced command's output lacks %q:\n%s", want, got)
		}
	}
	if len(st.Bindings) != 1 || st.Bindings[0].Branch != "b1" {
		t.Errorf("status while it ran: bindings %+v, want one to b1", st.Bindings)
	}
	if got := harness.ReadFile(t, m.Path("f")); got != "lower\n" {
		t.Errorf("f through the mount = %q: the namespaced write leaked", got)
	}
	if !harness.WaitFor(func() bool {
		for _, mp := range harness.MountsUnder(m.Status.Store) {
			if strings.Contains(mp, "branch-") {
				return false
			}
		}
		return true
	}) {
		t.Errorf("branch mounts are left after the command ended: %v", harness.MountsUnder(m.Status.Store))
	}
	mustC(t, m.Dir, "branch", "switch", "b1") // free again
	if got := harness.ReadFile(t, m.Path("f")); got != "b1\n" {
		t.Errorf("f after switching to b1 = %q", got)
	}
}
