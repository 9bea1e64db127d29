package integration

// Helpers of the snapshot, branch and change tests (snapshot_test.go,
// restore_test.go, branch_test.go, changes_test.go): they drive the
// agentfs binary as a user does, with -C or from inside the mount.

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// agentfsC runs agentfs with -C dir after args (the command words come
// first: agentfs snapshot create ... -C dir).
func agentfsC(t testing.TB, dir string, args ...string) harness.Result {
	t.Helper()
	return harness.Run(t, append(args, "-C", dir)...)
}

// agentfsIn runs agentfs with its current directory in dir, as a user
// inside the mount does.
func agentfsIn(t testing.TB, dir string, args ...string) harness.Result {
	t.Helper()
	cmd := exec.Command(harness.Bin(), args...)
	cmd.Dir = dir
	return harness.RunCmd(t, cmd, args)
}

// mustC is agentfsC that fails the test unless the command succeeds.
func mustC(t testing.TB, dir string, args ...string) harness.Result {
	t.Helper()
	r := agentfsC(t, dir, args...)
	if r.Code != 0 {
		t.Fatalf("want success:\n%s", r)
	}
	return r
}

// failC is agentfsC that fails the test unless the command exits 1 and
// its stderr contains every want.
func failC(t testing.TB, dir string, want []string, args ...string) harness.Result {
	t.Helper()
	r := agentfsC(t, dir, args...)
	if r.Code != 1 {
		t.Errorf("exit %d, want 1:\n%s", r.Code, r)
	}
	for _, w := range want {
		if !strings.Contains(r.Stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, r)
		}
	}
	return r
}

// diffStates compares two recordings of a mount as diffMountTrees does,
// but for ctimes: a restore or a branch switch, like a remount, shows
// the time of its copy as the ctime of a file copied up but never
// changed (docs/semantics.md, known differences), where the mount showed the
// project file's until then.
func diffStates(before, after harness.Tree) []string {
	return harness.DiffMountTrees(withoutCtimes(before), withoutCtimes(after))
}

func withoutCtimes(tr harness.Tree) harness.Tree {
	out := tr
	out.Nodes = map[string]harness.Node{}
	for p, n := range tr.Nodes {
		n.Ctime = unix.Timespec{}
		out.Nodes[p] = n
	}
	return out
}

var snapshotIDRe = regexp.MustCompile(`^[0-9a-f]{8}$`)

// takeSnapshot runs agentfs snapshot create -m label and returns the id
// printed alone on the last line of stdout.
func takeSnapshot(t testing.TB, dir, label string) string {
	t.Helper()
	r := mustC(t, dir, "snapshot", "create", "-m", label)
	lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
	id := lines[len(lines)-1]
	if !snapshotIDRe.MatchString(id) {
		t.Fatalf("the last line of snapshot create's stdout is %q, want a snapshot id (8 hex digits):\n%s", id, r)
	}
	return id
}

// snapshotJSON is one snapshot of agentfs snapshot list --json.
type snapshotJSON struct {
	ID        string    `json:"id"`
	Label     string    `json:"label"`
	Branch    string    `json:"branch"`
	Kind      string    `json:"kind"`
	Created   time.Time `json:"created"`
	SizeAdded int64     `json:"size_added"`
	Tags      []string  `json:"tags"`
}

// listSnapshots runs agentfs snapshot list --json.
func listSnapshots(t testing.TB, dir string) []snapshotJSON {
	t.Helper()
	var list struct {
		Snapshots []snapshotJSON `json:"snapshots"`
	}
	r := mustC(t, dir, "snapshot", "list", "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatalf("snapshot list --json: %v\n%s", err, r.Stdout)
	}
	return list.Snapshots
}

// findSnapshot returns the snapshot with the id, or nil.
func findSnapshot(snaps []snapshotJSON, id string) *snapshotJSON {
	for i := range snaps {
		if snaps[i].ID == id {
			return &snaps[i]
		}
	}
	return nil
}

// branchJSON is one branch of agentfs branch list --json.
type branchJSON struct {
	Name    string    `json:"name"`
	Origin  string    `json:"origin"`
	Created time.Time `json:"created"`
	Current bool      `json:"current"`
}

// listBranches runs agentfs branch list --json.
func listBranches(t testing.TB, dir string) []branchJSON {
	t.Helper()
	var list struct {
		Branches []branchJSON `json:"branches"`
	}
	r := mustC(t, dir, "branch", "list", "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatalf("branch list --json: %v\n%s", err, r.Stdout)
	}
	return list.Branches
}

// currentBranch returns the branch agentfs status --json reports.
func currentBranch(t testing.TB, dir string) string {
	t.Helper()
	var st struct {
		Branch string `json:"branch"`
	}
	statusJSON(t, dir, &st)
	return st.Branch
}

// undoID returns the id in restore's "to undo: agentfs restore ID" line.
func undoID(t testing.TB, r harness.Result) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^to undo: agentfs restore ([0-9a-f]{8})$`).FindStringSubmatch(r.Stdout)
	if m == nil {
		t.Fatalf("restore did not print \"to undo: agentfs restore ID\":\n%s", r)
	}
	return m[1]
}
