package integration

// agentfs apply on the session of agentfs run: the only way the
// project changes.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
)

// TestRunApply: after a scripted agent's run, apply --dry-run changes
// nothing, a partial apply by path takes only that path, a file edited
// in the project since the agent changed it is a conflict (refused,
// listed, then taken with --force), and in the end the project is the
// session's state: the agent's files and its git commit.
func TestRunApply(t *testing.T) {
	e := newRunEnv(t)
	// The agent lingers after its commit, so that the automatic
	// snapshot after a git commit falls due while it runs.
	agent := e.script("agent.sh", strings.Replace(agentScript, "exit 3", "sleep 1\nexit 3", 1))
	r := e.agentfs("run", "--quiet-period", "200ms", "--", agent)
	if r.Code != 3 {
		t.Fatalf("agentfs run exit %d, want 3:\n%s", r.Code, r)
	}
	id := sessionIDOf(t, r)

	// The snapshots: pre-run, and an automatic one after the commit.
	var kinds []string
	gitSnap := false
	for _, s := range e.snapshotsOf(id) {
		kinds = append(kinds, s.Kind)
		gitSnap = gitSnap || s.Kind == "git" && strings.Contains(s.Label, "git commit") && strings.Contains(s.Label, "agent's work")
	}
	if len(kinds) < 2 || kinds[0] != "pre-run" || !gitSnap {
		t.Errorf("snapshots of the session: kinds %v; want pre-run first, then an automatic one labelled with the agent's git commit", kinds)
	}
	// The log: what the agent did, with its pid and command.
	lg := e.agentfs("log", "-s", id, "--json")
	if lg.Code != 0 {
		t.Fatalf("log -s:\n%s", lg)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(lg.Stdout), "\n") {
		var ent struct {
			Pid     int    `json:"pid"`
			Command string `json:"command"`
			Branch  string `json:"branch"`
			Op      string `json:"op"`
			Path    string `json:"path"`
		}
		if json.Unmarshal([]byte(line), &ent) != nil {
			t.Errorf("log -s --json line is not JSON: %q", line)
			continue
		}
		if ent.Pid > 0 && ent.Branch == "main" && ent.Command != "" {
			seen[ent.Op+" "+ent.Path] = true
		}
	}
	for _, want := range []string{"create new.txt", "unlink b.txt", "mkdir gen"} {
		if !seen[want] {
			t.Errorf("log -s %s lacks %q with a pid, command and branch; it has %v", id, want, seen)
		}
	}
	want := filepath.Join(t.TempDir(), "want")
	if x := e.agentfs("export", "-s", id, "main", "--to", want); x.Code != 0 {
		t.Fatalf("export -s:\n%s", x)
	}

	dry := e.agentfs("apply", "-s", id, "--dry-run")
	if dry.Code != 0 || !strings.Contains(dry.Stdout, "would apply") {
		t.Fatalf("apply --dry-run:\n%s", dry)
	}
	wantLines(t, "apply --dry-run", dry.Stdout, "A  new.txt", "M  a.txt", "D  b.txt")
	e.checkProject()

	part := e.agentfs("apply", "-s", id, "new.txt")
	if part.Code != 0 {
		t.Fatalf("apply -s %s new.txt:\n%s", id, part)
	}
	if got := harness.ReadFile(t, filepath.Join(e.project, "new.txt")); got != "new file\n" {
		t.Errorf("new.txt in the project after a partial apply = %q", got)
	}
	if _, err := os.Stat(filepath.Join(e.project, "b.txt")); err != nil {
		t.Errorf("b.txt went from the project with an apply of new.txt only: %v", err)
	}
	d := e.agentfs("diff", "-s", id)
	if strings.Contains(d.Stdout, "new.txt") || !strings.Contains(d.Stdout, "a.txt") {
		t.Errorf("diff -s after applying new.txt (gone from it) :\n%s", d)
	}

	// The user edits a.txt in the project meanwhile: a conflict.
	harness.WriteFile(t, filepath.Join(e.project, "a.txt"), "edited by the user\n")
	c := e.agentfs("apply", "-s", id)
	if c.Code != 1 || !strings.Contains(c.Stdout, "conflicts") || !strings.Contains(c.Stdout, "a.txt") || !strings.Contains(c.Stderr, "--force") {
		t.Errorf("apply with a conflict: want exit 1 listing a.txt and the --force hint:\n%s", c)
	}
	if got := harness.ReadFile(t, filepath.Join(e.project, "a.txt")); got != "edited by the user\n" {
		t.Errorf("a.txt was overwritten despite the conflict: %q", got)
	}
	if _, err := os.Stat(filepath.Join(e.project, "b.txt")); !os.IsNotExist(err) {
		t.Errorf("b.txt (no conflict) was not deleted by the apply: %v", err)
	}
	f := e.agentfs("apply", "-s", id, "--force")
	if f.Code != 0 {
		t.Fatalf("apply --force:\n%s", f)
	}
	if got := harness.ReadFile(t, filepath.Join(e.project, "a.txt")); got != "hello\nmore\n" {
		t.Errorf("a.txt after --force = %q, want the agent's", got)
	}
	for _, p := range []string{"gen/out.txt", "abs-path", "src/main.go"} {
		if a, b := harness.ReadFile(t, filepath.Join(e.project, p)), harness.ReadFile(t, filepath.Join(want, p)); a != b {
			t.Errorf("%s in the project = %q, in the session %q", p, a, b)
		}
	}
	if out, err := exec.Command("git", "-C", e.project, "log", "--format=%s").Output(); err != nil || string(out) != "agent's work\nfirst\n" {
		t.Errorf("the project's git log after apply: %q, %v; want the agent's commit", out, err)
	}
	if out, err := exec.Command("git", "-C", e.project, "status", "--porcelain").Output(); err != nil || len(out) != 0 {
		t.Errorf("git status in the project after apply: %q, %v; want clean", out, err)
	}
	if s := e.session(id); s.State != "applied" {
		t.Errorf("session state after a full apply = %q, want applied", s.State)
	}
	// The project changed through apply only: that is the new baseline.
	e.before = harness.SnapshotTree(e.project)
}
