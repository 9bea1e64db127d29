package tournament

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/workspace"
)

// fakeAgentfs is an "agentfs" that runs what comes after "--" and
// records the branch it was asked to bind (-b BRANCH) in the command's
// environment as BRANCH: the rules of a tournament without a mount.
func fakeAgentfs(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agentfs")
	script := `#!/bin/sh
while [ "$1" != "--" ]; do
	if [ "$1" = "-b" ]; then BRANCH=$2; export BRANCH; fi
	shift
done
shift
exec "$@"
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// newClient serves a new store to this process.
func newClient(t *testing.T) *workspace.Client {
	t.Helper()
	w, err := workspace.Open(workspace.Options{Store: t.TempDir(), Lower: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c := workspace.Local(w, "test store", nil, w.Close)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// TestWinnerIsFirstToPass: every candidate runs in a branch of its own
// from the same snapshot; the first, in the order given, whose test
// passes wins and is tagged; Prune deletes the others' branches.
func TestWinnerIsFirstToPass(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	var started *Result
	r, err := Run(Options{Client: c, Root: dir, Dir: dir, From: "", Test: `[ "$(cat out.$BRANCH)" = good ]`, Prefix: "t",
		Candidates: []string{"echo bad > out.$BRANCH", "echo good > out.$BRANCH", "echo good > out.$BRANCH"},
		Prune:      true, Agentfs: fakeAgentfs(t), Started: func(r *Result) { started = r }})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if started == nil || len(started.Candidates) != 3 || started.Snapshot == "" {
		t.Errorf("Started was told %+v, want 3 candidates and their snapshot", started)
	}
	if r.Winner == nil || r.Winner.N != 2 || r.Winner.Branch != "t-2" {
		t.Fatalf("winner = %+v, want candidate 2 (the first that passes)", r.Winner)
	}
	for _, cd := range r.Candidates {
		wantTest := 0
		if cd.N == 1 {
			wantTest = 1
		}
		if cd.Code != 0 || cd.Test != wantTest || cd.Err != nil {
			t.Errorf("candidate %d: code %d, test %d, err %v; want 0, %d, nil", cd.N, cd.Code, cd.Test, cd.Err, wantTest)
		}
		b, err := os.ReadFile(cd.Log)
		if err != nil || !strings.Contains(string(b), "== test in branch "+cd.Branch) {
			t.Errorf("log of candidate %d: %q, %v", cd.N, b, err)
		}
	}
	list, err := c.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	tagged := false
	for _, s := range list.Snapshots {
		if s.ID == r.WinnerSnapshot && len(s.Tags) == 1 && s.Tags[0] == "winner" && s.Branch == "t-2" {
			tagged = true
		}
	}
	if !tagged {
		t.Errorf("no snapshot of branch t-2 tagged winner among %+v", list.Snapshots)
	}
	branches, err := c.Branches()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range branches.Branches {
		names = append(names, b.Name)
	}
	if strings.Join(names, " ") != "main t-2" {
		t.Errorf("branches after Prune = %v, want main and the winner's", names)
	}
}

// TestNoWinner: when no test passes, ErrNoWinner, nothing tagged, and
// every branch kept.
func TestNoWinner(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	r, err := Run(Options{Client: c, Root: dir, Dir: dir, Test: "exit 3", Prefix: "n",
		Candidates: []string{"true", "exit 7"}, Prune: true, Agentfs: fakeAgentfs(t)})
	if !errors.Is(err, ErrNoWinner) || r == nil || r.Winner != nil {
		t.Fatalf("Run = %+v, %v; want ErrNoWinner", r, err)
	}
	if r.Candidates[1].Code != 7 || r.Candidates[0].Test != 3 {
		t.Errorf("codes: %+v %+v", r.Candidates[0], r.Candidates[1])
	}
	if b, err := c.Branches(); err != nil || len(b.Branches) != 3 {
		t.Errorf("branches = %+v, %v; want all kept", b, err)
	}
}

// TestBadSnapshot: a tournament from nothing fails before it runs
// anything.
func TestBadSnapshot(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	_, err := Run(Options{Client: c, Root: dir, Dir: dir, From: "nope", Test: "true", Prefix: "b",
		Candidates: []string{"true"}, Agentfs: fakeAgentfs(t)})
	if !errors.Is(err, workspace.ErrNotFound) || !strings.Contains(err.Error(), "creating the branch of candidate 1") {
		t.Errorf("Run from an unknown snapshot: %v, want ErrNotFound while creating the branch", err)
	}
}
