package integration

// agentfs mcp driven by a real MCP client: the official Go SDK's,
// spawning the built binary over stdio as an agent host does.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentfs/agentfs/integration/harness"
)

// mcpClient starts `agentfs mcp args...` in dir with env (nil: the
// test's) and connects an MCP client to it over its stdin and stdout.
func mcpClient(t *testing.T, dir string, env []string, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(harness.Bin(), append([]string{"mcp"}, args...)...)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, env, os.Stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "agentfs-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to agentfs mcp %v: %v", args, err)
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Errorf("closing the MCP session: %v", err)
		}
	})
	return cs
}

// mcpCall calls tool name; with out it decodes the structured result
// (of a call that succeeded). It returns the result, for IsError and
// the text.
func mcpCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tool %s %v: %v", name, args, err)
	}
	if out != nil && !res.IsError {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("tool %s: its structured result %s: %v", name, b, err)
		}
	}
	return res
}

// mcpText is the text content of a result.
func mcpText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// mcpTextOf is the text of res, which may be nil.
func mcpTextOf(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	return mcpText(res)
}

// mcpOK calls a tool that must succeed.
func mcpOK(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	res := mcpCall(t, cs, name, args, out)
	if res.IsError {
		t.Fatalf("tool %s %v failed: %s", name, args, mcpText(res))
	}
	return mcpText(res)
}

// mcpFails calls a tool that must fail with an error that says want.
func mcpFails(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want string) {
	t.Helper()
	res := mcpCall(t, cs, name, args, nil)
	if !res.IsError || !strings.Contains(mcpText(res), want) {
		t.Errorf("tool %s %v: error %v, %q; want a tool error saying %q", name, args, res.IsError, mcpText(res), want)
	}
}

// The tools' results, as the tests read them.
type (
	mcpCheckpoint struct {
		ID, Label, Kind, Branch string
	}
	mcpStatus struct {
		Project    string `json:"project"`
		Branch     string `json:"branch"`
		Session    bool   `json:"session"`
		Running    bool   `json:"running"`
		Supervised bool   `json:"supervised"`
		Changes    struct {
			Created, Modified, Deleted int
		} `json:"changes"`
		Checkpoints int `json:"checkpoints"`
	}
	mcpChanges struct {
		Changes []struct{ Path, Kind string } `json:"changes"`
		Patch   string                        `json:"patch"`
	}
	mcpRewind struct {
		Safety   *mcpCheckpoint `json:"safety"`
		Relaunch bool           `json:"relaunch"`
		Note     string         `json:"note"`
	}
	mcpRun struct {
		ExitCode int    `json:"exit_code"`
		TimedOut bool   `json:"timed_out"`
		Output   string `json:"output"`
	}
)

// paths lists the changed paths of a changes result.
func (c mcpChanges) paths() string {
	var ps []string
	for _, ch := range c.Changes {
		ps = append(ps, ch.Kind+" "+ch.Path)
	}
	return strings.Join(ps, ", ")
}

// TestMCPMount: every tool against a mount, from a client started
// inside it (as an agent's host starts it): the tools and their
// schemas, a checkpoint, changes, a rewind that takes them back,
// branches and a command run in one, the activity log, errors, and two
// clients at once.
func TestMCPMount(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a.txt", "one\n"), harness.LowerDir("src")))
	cs := mcpClient(t, m.Dir, nil)

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s has no description or schema: %+v", tool.Name, tool)
		}
	}
	if got := strings.Join(names, " "); got != "activity branch_create branch_list changes checkpoint list_checkpoints merge_branch rewind run_in_branch status" {
		t.Errorf("tools = %s", got)
	}

	var st mcpStatus
	mcpOK(t, cs, "status", nil, &st)
	if st.Project != m.Lower || st.Branch != "main" || !st.Running || st.Session || st.Changes.Created != 0 {
		t.Errorf("status of a fresh mount = %+v", st)
	}
	var cp mcpCheckpoint
	mcpOK(t, cs, "checkpoint", map[string]any{"label": "clean"}, &cp)
	harness.WriteFile(t, m.Path("a.txt"), "two\n")
	harness.WriteFile(t, m.Path("src/new.go"), "package src\n")
	var ch mcpChanges
	mcpOK(t, cs, "changes", map[string]any{"from": cp.ID, "patch": true}, &ch)
	if ch.paths() != "modified a.txt, created src/new.go" || !strings.Contains(ch.Patch, "+two") {
		t.Errorf("changes since the checkpoint: %s\n%s", ch.paths(), ch.Patch)
	}
	mcpOK(t, cs, "status", nil, &st)
	if st.Changes.Created != 1 || st.Changes.Modified != 1 || st.Checkpoints != 1 {
		t.Errorf("status after the changes = %+v", st)
	}

	var rw mcpRewind
	mcpOK(t, cs, "rewind", map[string]any{"checkpoint": cp.ID}, &rw)
	if rw.Safety == nil || rw.Relaunch {
		t.Errorf("rewind of an unsupervised mount = %+v", rw)
	}
	if got := harness.ReadFile(t, m.Path("a.txt")); got != "one\n" {
		t.Errorf("a.txt after the rewind = %q", got)
	}
	if _, err := os.Stat(m.Path("src/new.go")); !os.IsNotExist(err) {
		t.Errorf("src/new.go after the rewind: %v", err)
	}

	mcpOK(t, cs, "branch_create", map[string]any{"name": "side", "from": rw.Safety.ID}, nil)
	var run mcpRun
	mcpOK(t, cs, "run_in_branch", map[string]any{"branch": "side", "command": "cat a.txt; echo side > s.txt; exit 3"}, &run)
	if run.ExitCode != 3 || run.Output != "two\n" || run.TimedOut {
		t.Errorf("run_in_branch side = %+v", run)
	}
	if _, err := os.Stat(m.Path("s.txt")); !os.IsNotExist(err) {
		t.Errorf("s.txt, written in branch side, shows in main: %v", err)
	}
	mcpOK(t, cs, "changes", map[string]any{"from": "main", "to": "side"}, &ch)
	if !strings.Contains(ch.paths(), "created s.txt") {
		t.Errorf("changes from main to side: %s", ch.paths())
	}
	mcpOK(t, cs, "run_in_branch", map[string]any{"branch": "side", "command": "sleep 30", "timeout_seconds": 1}, &run)
	if !run.TimedOut || run.ExitCode != 137 {
		t.Errorf("a command past its time limit: %+v", run)
	}
	var branches struct {
		Branches []struct{ Name string } `json:"branches"`
	}
	mcpOK(t, cs, "branch_list", nil, &branches)
	if len(branches.Branches) != 2 {
		t.Errorf("branch_list = %+v", branches)
	}
	var act struct {
		Entries []struct{ Op, Path, Path2 string } `json:"entries"`
	}
	if !harness.WaitFor(func() bool {
		mcpOK(t, cs, "activity", map[string]any{"path_prefix": "./src/"}, &act)
		return len(act.Entries) > 0
	}) {
		t.Errorf("no activity under src: %+v", act)
	}
	under := func(p string) bool {
		p = strings.TrimPrefix(p, "/")
		return p == "src" || strings.HasPrefix(p, "src/")
	}
	for _, e := range act.Entries {
		if !under(e.Path) && !under(e.Path2) {
			t.Errorf("activity under src lists %+v", e)
		}
	}
	mcpFails(t, cs, "activity", map[string]any{"path_prefix": "/src"}, "is not a path inside the mount")

	mcpFails(t, cs, "rewind", map[string]any{"checkpoint": "nope"}, `no snapshot or tag "nope"`)
	mcpFails(t, cs, "run_in_branch", map[string]any{"branch": "gone", "command": "true"}, `no branch "gone"`)
	mcpFails(t, cs, "branch_create", map[string]any{"name": "side"}, "exists already")

	// Two clients at once, each taking checkpoints.
	other := mcpClient(t, "/", nil, "-C", m.Dir)
	var wg sync.WaitGroup
	ids := make([][]string, 2)
	for i, c := range []*mcp.ClientSession{cs, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Not mcpCall: t.Fatal must not be called from here.
			for j := range 5 {
				res, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "checkpoint",
					Arguments: map[string]any{"label": fmt.Sprintf("client %d #%d", i, j)}})
				if err != nil || res.IsError {
					t.Errorf("client %d: checkpoint: %v %s", i, err, mcpTextOf(res))
					return
				}
				var cp mcpCheckpoint
				if b, err := json.Marshal(res.StructuredContent); err != nil || json.Unmarshal(b, &cp) != nil {
					t.Errorf("client %d: checkpoint result %v", i, res.StructuredContent)
					return
				}
				ids[i] = append(ids[i], cp.ID)
			}
		}()
	}
	wg.Wait()
	var list struct {
		Checkpoints []mcpCheckpoint `json:"checkpoints"`
	}
	mcpOK(t, other, "list_checkpoints", nil, &list)
	seen := map[string]bool{}
	for _, c := range list.Checkpoints {
		seen[c.ID] = true
	}
	for i, cids := range ids {
		for _, id := range cids {
			if !seen[id] {
				t.Errorf("checkpoint %s of client %d is not listed", id, i)
			}
		}
	}
}

// TestMCPRewindDeletedBranch: a client bound to a branch that is then
// deleted gets a tool error, and nothing else changes.
func TestMCPRewindDeletedBranch(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a.txt", "one\n")))
	cp := strings.TrimSpace(lastLine(harness.Run(t, "snapshot", "create", "-C", m.Dir).Stdout))
	if r := harness.Run(t, "branch", "create", "-C", m.Dir, "--from", cp, "doomed"); r.Code != 0 {
		t.Fatal(r)
	}
	cs := mcpClient(t, m.Dir, nil)
	// The server runs bound to branch doomed, as a command agentfs exec
	// starts.
	bound := mcpClientExec(t, m.Dir, "doomed")
	var st mcpStatus
	mcpOK(t, bound, "status", nil, &st)
	if st.Branch != "doomed" {
		t.Fatalf("the bound server sees branch %s, want doomed", st.Branch)
	}
	if r := harness.Run(t, "branch", "delete", "-C", m.Dir, "doomed"); r.Code != 0 {
		t.Fatal(r)
	}
	res := mcpCall(t, bound, "rewind", map[string]any{"checkpoint": cp}, nil)
	if !res.IsError {
		t.Errorf("rewind of a deleted branch succeeded: %s", mcpText(res))
	}
	// The mount's own branch is as it was.
	var ch mcpChanges
	mcpOK(t, cs, "changes", nil, &ch)
	if len(ch.Changes) != 0 {
		t.Errorf("changes in main after the refused rewind: %s", ch.paths())
	}
}

// mcpClientExec starts agentfs mcp bound to branch, through agentfs
// exec, in dir.
func mcpClientExec(t *testing.T, dir, branch string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(harness.Bin(), "exec", "-b", branch, "--", harness.Bin(), "mcp")
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "agentfs-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to agentfs exec -b %s -- agentfs mcp: %v", branch, err)
	}
	t.Cleanup(func() { _ = cs.Close() }) // its branch may be gone: the server may have ended
	return cs
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestMCPSession: the tools against a session, from outside it: while
// it runs (run_in_branch enters its mount namespace) and after it ended
// (its store is opened by the server for each call).
func TestMCPSession(t *testing.T) {
	e := newRunEnv(t)
	gate := filepath.Join(e.scripts, "go")
	started := filepath.Join(e.scripts, "started")
	agent := e.script("agent.sh", fmt.Sprintf(`echo new > n.txt
touch %s
while [ ! -e %s ]; do sleep 0.05; done
`, started, gate))
	run := exec.Command(harness.Bin(), "run", "--", agent)
	run.Dir, run.Env = e.project, e.env()
	var out strings.Builder
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if run.ProcessState == nil {
			_ = run.Process.Kill() // the test failed before the agent ended
			_ = run.Wait()
		}
	}()
	if !harness.WaitFor(func() bool { _, err := os.Stat(started); return err == nil }) {
		t.Fatalf("the agent did not start:\n%s", out.String())
	}
	sessions := e.sessions()
	if len(sessions) != 1 {
		t.Fatalf("sessions = %+v", sessions)
	}
	id := sessions[0].ID

	live := mcpClient(t, "/", e.env(), "-s", id)
	var st mcpStatus
	mcpOK(t, live, "status", nil, &st)
	if !st.Running || !st.Session || st.Project != e.project || st.Changes.Created != 1 {
		t.Errorf("status of the running session = %+v", st)
	}
	var run1 mcpRun
	mcpOK(t, live, "run_in_branch", map[string]any{"branch": "main", "command": "cat n.txt; pwd"}, &run1)
	if run1.ExitCode != 0 || run1.Output != "new\n"+e.project+"\n" {
		t.Errorf("run_in_branch main of the running session = %+v", run1)
	}
	mcpOK(t, live, "branch_create", map[string]any{"name": "try"}, nil)
	mcpOK(t, live, "run_in_branch", map[string]any{"branch": "try", "command": "echo try > t.txt"}, &run1)
	if _, err := os.Stat(filepath.Join(e.project, "t.txt")); !os.IsNotExist(err) {
		t.Errorf("run_in_branch of the session wrote the project: %v", err)
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(); err != nil {
		t.Fatalf("agentfs run: %v\n%s", err, out.String())
	}
	ended := mcpClient(t, "/", e.env(), "-s", id)
	mcpOK(t, ended, "status", nil, &st)
	if st.Running || !st.Session || st.Changes.Created != 1 {
		t.Errorf("status of the ended session = %+v", st)
	}
	var list struct {
		Checkpoints []mcpCheckpoint `json:"checkpoints"`
	}
	mcpOK(t, ended, "list_checkpoints", nil, &list)
	pre := ""
	for _, c := range list.Checkpoints {
		if c.Kind == "pre-run" {
			pre = c.ID
		}
	}
	if pre == "" {
		t.Fatalf("no pre-run checkpoint: %+v", list)
	}
	var ch mcpChanges
	mcpOK(t, ended, "changes", map[string]any{"to": "try"}, &ch)
	if ch.paths() != "created n.txt, created t.txt" {
		t.Errorf("changes of branch try: %s", ch.paths())
	}
	mcpOK(t, ended, "rewind", map[string]any{"checkpoint": pre}, nil)
	mcpOK(t, ended, "changes", nil, &ch)
	if len(ch.Changes) != 0 {
		t.Errorf("changes after rewinding the ended session to its pre-run checkpoint: %s", ch.paths())
	}
	mcpFails(t, ended, "run_in_branch", map[string]any{"branch": "main", "command": "true"}, "is not running")
	// The other tools against the ended session too.
	var cp mcpCheckpoint
	mcpOK(t, ended, "checkpoint", map[string]any{"label": "after review"}, &cp)
	var branches struct {
		Branches []struct{ Name string } `json:"branches"`
	}
	mcpOK(t, ended, "branch_list", nil, &branches)
	if len(branches.Branches) != 2 {
		t.Errorf("branch_list of the ended session = %+v", branches)
	}
	var act struct {
		Entries []struct{ Op, Path string } `json:"entries"`
	}
	mcpOK(t, ended, "activity", map[string]any{"path_prefix": "n.txt"}, &act)
	if len(act.Entries) == 0 {
		t.Errorf("no activity of n.txt in the ended session")
	}
	applier := mcpClient(t, "/", e.env(), "-s", id, "--allow-apply")
	var ap struct {
		Applied []struct{ Path string } `json:"applied"`
	}
	mcpOK(t, applier, "apply", map[string]any{"branch": "try", "dry_run": true}, &ap)
	if len(ap.Applied) != 2 {
		t.Errorf("apply --dry-run of branch try = %+v, want n.txt and t.txt", ap)
	}
	// The CLI sees what the tools did.
	if r := e.agentfs("diff", "-s", id); r.Code != 0 || strings.TrimSpace(r.Stdout) != "" {
		t.Errorf("agentfs diff -s after the rewind:\n%s", r)
	}
}
