package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/workspace"
)

// connect serves a new workspace over a project holding files to an
// in-memory MCP client; it returns the client and the workspace (for
// the test to change files through its view).
func connect(t *testing.T, allowApply bool, files map[string]string) (*mcp.ClientSession, *workspace.Workspace) {
	t.Helper()
	lower := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(lower, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := workspace.Open(workspace.Options{Store: t.TempDir(), Lower: lower, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	dial := func() (*workspace.Client, error) {
		// Each call gets a client of its own, as over a mount; closing
		// it must not close the workspace the others share.
		return workspace.Local(w, "test store", nil, func() error { return nil }), nil
	}
	s, err := newServer(Options{AllowApply: allowApply, Version: "test"}, dial)
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() }) // the client's Close ends it first
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Error(err)
		}
	})
	return cs, w
}

// callTool calls name and decodes its structured result into out; it
// returns the result (for IsError and the text).
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if out != nil && !res.IsError {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured result %s: %v", name, b, err)
		}
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestTools lists the tools with their schemas; apply only when allowed.
func TestTools(t *testing.T) {
	for _, allow := range []bool{false, true} {
		cs, _ := connect(t, allow, nil)
		list, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]*mcp.Tool{}
		for _, tool := range list.Tools {
			got[tool.Name] = tool
		}
		want := []string{"status", "checkpoint", "list_checkpoints", "changes", "rewind", "branch_create", "branch_list", "run_in_branch", "merge_branch", "activity"}
		if allow {
			want = append(want, "apply")
		}
		if len(got) != len(want) {
			t.Errorf("allow-apply %v: %d tools, want %d (%v)", allow, len(got), len(want), want)
		}
		for _, name := range want {
			tool := got[name]
			if tool == nil {
				t.Errorf("allow-apply %v: no tool %s", allow, name)
				continue
			}
			if len(tool.Description) < 80 || tool.InputSchema == nil || tool.OutputSchema == nil {
				t.Errorf("tool %s: description %q, schemas %v %v", name, tool.Description, tool.InputSchema != nil, tool.OutputSchema != nil)
			}
		}
		if rw := got["rewind"]; rw != nil && !strings.Contains(mustJSON(t, rw.InputSchema), `"checkpoint"`) {
			t.Errorf("rewind's input schema does not name checkpoint: %s", mustJSON(t, rw.InputSchema))
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCheckpointChangesRewind: a checkpoint, a change, the change seen,
// a rewind that takes it back, and the way back from the rewind.
func TestCheckpointChangesRewind(t *testing.T) {
	cs, w := connect(t, true, map[string]string{"a.txt": "one\n"})
	var cp Checkpoint
	if res := callTool(t, cs, "checkpoint", map[string]any{"label": "clean"}, &cp); res.IsError || cp.ID == "" || cp.Label != "clean" {
		t.Fatalf("checkpoint: %s %+v", text(res), cp)
	}
	writeView(t, w, "a.txt", "two\n")
	writeView(t, w, "b.txt", "new\n")
	var st StatusOut
	callTool(t, cs, "status", nil, &st)
	if st.Changes.Created != 1 || st.Changes.Modified != 1 || st.Checkpoints != 1 || st.Branch != "main" || st.Running {
		t.Errorf("status = %+v", st)
	}
	var ch ChangesOut
	res := callTool(t, cs, "changes", map[string]any{"from": cp.ID, "patch": true}, &ch)
	if len(ch.Changes) != 2 || !strings.Contains(ch.Patch, "+two") || !strings.Contains(text(res), "M a.txt") {
		t.Errorf("changes from the checkpoint: %+v\n%s", ch, text(res))
	}
	callTool(t, cs, "changes", map[string]any{"from": cp.ID, "patch": true, "paths": []string{"b.txt"}, "max_bytes": 10}, &ch)
	if len(ch.Changes) != 1 || !ch.Truncated || len(ch.Patch) > 10 || !strings.Contains(ch.Notice, "raise max_bytes") {
		t.Errorf("changes of b.txt cut at 10 bytes: %+v", ch)
	}
	var rw RewindOut
	callTool(t, cs, "rewind", map[string]any{"checkpoint": cp.ID, "dry_run": true}, &rw)
	if !rw.DryRun || len(rw.Changes) != 2 || rw.Safety != nil || rw.Relaunch {
		t.Errorf("rewind dry run: %+v", rw)
	}
	res = callTool(t, cs, "rewind", map[string]any{"checkpoint": cp.ID[:6]}, &rw)
	if res.IsError || rw.Safety == nil || rw.Relaunch || !strings.Contains(rw.Note, "no process is stopped") {
		t.Fatalf("rewind: %s %+v", text(res), rw)
	}
	if b, err := w.View().ReadFile("a.txt", 100); err != nil || string(b) != "one\n" {
		t.Errorf("a.txt after the rewind: %q, %v", b, err)
	}
	callTool(t, cs, "rewind", map[string]any{"checkpoint": rw.Safety.ID}, &rw)
	if b, err := w.View().ReadFile("b.txt", 100); err != nil || string(b) != "new\n" {
		t.Errorf("b.txt after rewinding to the safety checkpoint: %q, %v", b, err)
	}
	var list ListOut
	callTool(t, cs, "list_checkpoints", nil, &list)
	if len(list.Checkpoints) != 3 || list.Checkpoints[1].Kind != "safety" {
		t.Errorf("checkpoints: %+v", list)
	}
	var ap ApplyOut
	callTool(t, cs, "apply", map[string]any{"paths": []string{"b.txt"}, "dry_run": true}, &ap)
	if len(ap.Applied) != 1 || !ap.DryRun {
		t.Errorf("apply dry run: %+v", ap)
	}
	if _, err := os.Stat(filepath.Join(w.Lower(), "b.txt")); !os.IsNotExist(err) {
		t.Errorf("the dry run wrote the project: %v", err)
	}
}

// TestErrors: a failed operation is a tool error with the CLI's message.
func TestErrors(t *testing.T) {
	cs, _ := connect(t, false, nil)
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"rewind", map[string]any{"checkpoint": "nope"}, `no snapshot or tag "nope": agentfs snapshot list shows the ids and tags`},
		{"rewind", map[string]any{}, `missing properties: ["checkpoint"]`},
		{"rewind", map[string]any{"checkpoint": ""}, "no snapshot given"},
		{"branch_create", map[string]any{"name": "a/b"}, "choose a branch name"},
		{"changes", map[string]any{"from": "gone"}, `"gone" is neither "lower", a branch, a snapshot id nor a tag`},
		{"changes", map[string]any{"max_bytes": -1}, "max_bytes -1"},
		{"activity", map[string]any{"since": "yesterday-ish"}, "since"},
		{"activity", map[string]any{"limit": -1}, "limit -1: give 1 to 100000 (0 for 100)"},
		{"activity", map[string]any{"limit": 100001}, "limit 100001: give 1 to 100000 (0 for 100)"},
		// One rule for the paths of every tool: relative to the root.
		{"activity", map[string]any{"path_prefix": "/src"}, `activity: "/src" is not a path inside the mount (relative to its root)`},
		{"activity", map[string]any{"path_prefix": "src/../.."}, `activity: "src/../.." is not a path inside the mount`},
		{"changes", map[string]any{"paths": []string{"/src"}}, `diff: "/src" is not a path inside the mount (relative to its root)`},
		{"run_in_branch", map[string]any{"branch": "main", "command": " "}, "no command given"},
	} {
		res := callTool(t, cs, c.tool, c.args, nil)
		if !res.IsError || !strings.Contains(text(res), c.want) {
			t.Errorf("%s %v: error %v, %q; want a tool error saying %q", c.tool, c.args, res.IsError, text(res), c.want)
		}
	}
	// apply is not offered without --allow-apply.
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "apply", Arguments: map[string]any{}}); err == nil {
		t.Error("apply was called on a server without --allow-apply")
	}
}

// TestBranches: branch_create and branch_list.
func TestBranches(t *testing.T) {
	cs, _ := connect(t, false, nil)
	var b Branch
	if res := callTool(t, cs, "branch_create", map[string]any{"name": "try"}, &b); res.IsError || b.Name != "try" || b.Origin == "" {
		t.Fatalf("branch_create: %s %+v", text(res), b)
	}
	var list BranchListOut
	callTool(t, cs, "branch_list", nil, &list)
	if len(list.Branches) != 2 || list.Branches[0].Name != "main" || !list.Branches[0].Current {
		t.Errorf("branch_list: %+v", list)
	}
	var act ActivityOut
	if res := callTool(t, cs, "activity", map[string]any{"since": "10m"}, &act); res.IsError || len(act.Entries) != 0 {
		t.Errorf("activity of a store nothing logged in: %s %+v", text(res), act)
	}
}

// TestMergeBranch: merge_branch merges main's changes into a branch
// made before them (dry run first), and says how to undo it.
func TestMergeBranch(t *testing.T) {
	cs, w := connect(t, false, map[string]string{"f": "one\n"})
	var b Branch
	if res := callTool(t, cs, "branch_create", map[string]any{"name": "try"}, &b); res.IsError {
		t.Fatalf("branch_create: %s", text(res))
	}
	writeView(t, w, "new", "from main\n")
	writeView(t, w, "f", "two\n")
	var dry MergeOut
	if res := callTool(t, cs, "merge_branch", map[string]any{"branch": "main", "into": "try", "dry_run": true}, &dry); res.IsError || len(dry.Changes) != 2 || dry.Safety != nil {
		t.Fatalf("merge_branch dry run: %s %+v", text(res), dry)
	}
	var out MergeOut
	res := callTool(t, cs, "merge_branch", map[string]any{"branch": "main", "into": "try"}, &out)
	if res.IsError || out.Unresolved != 0 || out.Safety == nil || out.Base != b.Origin || !strings.Contains(text(res), "to undo: rewind to "+out.Safety.ID) {
		t.Fatalf("merge_branch: %s %+v", text(res), out)
	}
	var ch ChangesOut
	callTool(t, cs, "changes", map[string]any{"from": "main", "to": "try"}, &ch)
	if len(ch.Changes) != 0 {
		t.Errorf("try differs from main after merging main into it: %+v", ch.Changes)
	}
	if res := callTool(t, cs, "merge_branch", map[string]any{"branch": "nope"}, nil); !res.IsError || !strings.Contains(text(res), `no branch "nope"`) {
		t.Errorf("merge_branch of a missing branch: %s", text(res))
	}
}

// writeView writes name in the root of the workspace's view.
func writeView(t *testing.T, w *workspace.Workspace, name, content string) {
	t.Helper()
	v := w.View()
	n, _, err := v.Lookup(v.Root(), name)
	var f interface {
		WriteAt([]byte, int64) (int, error)
		Release() error
	}
	if err == nil {
		f, err = v.Open(n, os.O_WRONLY|os.O_TRUNC)
	} else {
		_, f, _, err = v.Create(v.Root(), name, os.O_WRONLY, 0o644, overlay.Caller{})
	}
	if err != nil {
		t.Fatalf("opening %s: %v", name, err)
	}
	if _, err := f.WriteAt([]byte(content), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestChangesBounds: a patch past max_bytes is cut at a character
// with a notice, not repeated in the text; the list of changes stops at
// maxListedChanges and the text at maxTextChanges, the counts whole.
func TestChangesBounds(t *testing.T) {
	cs, w := connect(t, false, nil)
	writeView(t, w, "u.txt", strings.Repeat("é", 1000)+"\n")
	var ch ChangesOut
	res := callTool(t, cs, "changes", map[string]any{"patch": true, "max_bytes": 101}, &ch)
	if res.IsError || !ch.Truncated || len(ch.Patch) > 101 || !utf8.ValidString(ch.Patch) || !strings.Contains(ch.Notice, "the patch was cut at 101 bytes") {
		t.Errorf("a patch cut at 101 bytes: %s\n%+v", text(res), ch)
	}
	if strings.Contains(text(res), "é") || !strings.Contains(text(res), "in the patch field") {
		t.Errorf("the text repeats the patch, or does not say where it is: %s", text(res))
	}
	ch = ChangesOut{}
	callTool(t, cs, "changes", map[string]any{"patch": true}, &ch)
	if ch.Truncated || ch.Notice != "" || !strings.Contains(ch.Patch, "+"+strings.Repeat("é", 1000)) {
		t.Errorf("a patch within the default limit: %+v", ch)
	}

	for i := range maxListedChanges + 5 {
		writeView(t, w, fmt.Sprintf("f%04d", i), "x")
	}
	ch = ChangesOut{}
	res = callTool(t, cs, "changes", nil, &ch)
	if n := maxListedChanges + 6; ch.Counts.Created != n || len(ch.Changes) != maxListedChanges || !ch.ChangesTruncated ||
		!strings.Contains(ch.Notice, fmt.Sprintf("%d paths changed and the first %d are listed", n, maxListedChanges)) {
		t.Errorf("%d changes: counts %+v, %d listed, truncated %v, notice %q", n, ch.Counts, len(ch.Changes), ch.ChangesTruncated, ch.Notice)
	}
	if lines := strings.Count(text(res), "\n"); lines > maxTextChanges+3 {
		t.Errorf("the text has %d lines, want at most %d", lines, maxTextChanges+3)
	}
}

// TestRewindNote: the note says truthfully what happens to the agent.
func TestRewindNote(t *testing.T) {
	for _, tc := range []struct {
		dryRun, deferred, stopped, relaunch bool
		want                                string
	}{
		{false, false, false, false, "no process is stopped"},
		{false, false, true, true, "starts the agent again"},
		{false, false, true, false, "the run ends"},
		{false, true, true, true, "with AGENTFS_RELAUNCH set"},
		{false, true, true, true, "this rewind is dropped"},
		{false, true, true, false, "so the run then ends"},
		{false, true, true, false, "if another rewind stops the agent first"},
		{true, false, true, true, "would stop every process of the agent and start it again"},
		{true, false, true, false, "the run would end"},
		{true, false, false, false, "nothing was changed"},
	} {
		if got := rewindNote(tc.dryRun, tc.deferred, tc.stopped, tc.relaunch); !strings.Contains(got, tc.want) {
			t.Errorf("rewindNote(%v, %v, %v, %v) = %q, want %q in it", tc.dryRun, tc.deferred, tc.stopped, tc.relaunch, got, tc.want)
		}
	}
}
