package integration

// agentfs exec -s trusts nothing of the session's record: a record that
// names the wrong process, or lies in a directory others can write, is
// refused before anything runs, by the CLI and by the MCP server's
// run_in_branch (as a tool error).

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/procfs"
)

// forgedSession writes the record of a running session whose daemon
// is process pid, and returns its id.
func forgedSession(t *testing.T, e *runEnv, pid int) string {
	t.Helper()
	id := "20260101-000000-beef"
	dir := filepath.Join(e.state, "agentfs", "sessions", id)
	if err := os.MkdirAll(filepath.Join(dir, "store"), 0o700); err != nil {
		t.Fatal(err)
	}
	rec := map[string]any{"id": id, "project": e.project, "dir": e.project, "command": []string{"sh"},
		"started": time.Now(), "store": filepath.Join(dir, "store"), "mountpoint": e.project, "state": "running",
		"run_pid": pid, "run_start": procfs.StartTime(pid), "daemon_pid": pid, "daemon_start": procfs.StartTime(pid),
		"user_namespace": false}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "session.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return id
}

// startSleeper starts cmd, which stays until the test ends, and waits
// until it runs the program want (its /proc/PID/exe).
func startSleeper(t *testing.T, cmd *exec.Cmd, want string) int {
	t.Helper()
	if _, err := cmd.StdinPipe(); err != nil { // agentfs mcp waits on it
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // a sleeper
		_ = cmd.Wait()
	})
	if !harness.WaitFor(func() bool {
		exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "exe"))
		return err == nil && filepath.Base(exe) == want
	}) {
		t.Fatalf("%v does not run %s", cmd.Args, want)
	}
	return cmd.Process.Pid
}

// TestExecSessionRefused: exec -s of a record naming an agentfs in a
// mount namespace of a user namespace of its own (what a normal user
// could make and point root at), a process that is not agentfs, or a
// record in a directory others can write: refused, and the command
// never runs.
func TestExecSessionRefused(t *testing.T) {
	testenv.RequireRoot(t, "agentfs exec -s")
	requireTool(t, "unshare")
	e := newRunEnv(t)
	marker := filepath.Join(e.scripts, "ran")
	exec1 := func(id string) harness.Result {
		return e.agentfs("exec", "-s", id, "-b", "main", "--", "touch", marker)
	}
	check := func(what string, r harness.Result, want string) {
		t.Helper()
		if r.Code != 1 || !strings.Contains(r.Stderr, want) {
			t.Errorf("%s: %s\nwant exit 1 saying %q", what, r, want)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("%s: the command ran (%v)", what, err)
		}
	}

	userns := startSleeper(t, exec.Command("unshare", "-U", "-r", "-m", harness.Bin(), "mcp", "-C", "/"), "agentfs-core")
	id := forgedSession(t, e, userns)
	check("a daemon in a user namespace of its own", exec1(id), "belongs to another user namespace")
	// The MCP server's run_in_branch refuses it as a tool error.
	cs := mcpClient(t, "/", e.env(), "-s", id)
	mcpFails(t, cs, "run_in_branch", map[string]any{"branch": "main", "command": "touch " + marker}, "belongs to another user namespace")

	other := startSleeper(t, exec.Command("unshare", "-m", "sleep", "60"), "sleep")
	id = forgedSession(t, e, other)
	check("a daemon that is not agentfs", exec1(id), "not agentfs")

	sessions := filepath.Join(e.state, "agentfs", "sessions")
	if err := os.Chmod(sessions, 0o777); err != nil {
		t.Fatal(err)
	}
	check("a sessions directory others can write", exec1(id), "can be written by other users")
}
