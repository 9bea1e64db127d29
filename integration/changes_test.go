package integration

// Diff, restore --dry-run, export, gc and fsck (the snapshots issue),
// driven as a user does.

import (
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// diffJSON is agentfs diff --json.
type diffJSON struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Changes []struct {
		Path      string `json:"path"`
		Kind      string `json:"kind"`
		SizeDelta int64  `json:"size_delta"`
	} `json:"changes"`
	Patch string `json:"patch"`
}

// diffKinds runs agentfs diff --json with args and returns path → kind.
func diffKinds(t *testing.T, dir string, args ...string) map[string]string {
	t.Helper()
	r := mustC(t, dir, append([]string{"diff", "--json"}, args...)...)
	var d diffJSON
	if err := json.Unmarshal([]byte(r.Stdout), &d); err != nil {
		t.Fatalf("diff --json: %v\n%s", err, r.Stdout)
	}
	out := map[string]string{}
	for _, c := range d.Changes {
		out[c.Path] = c.Kind
	}
	return out
}

func sameKinds(got, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for p, k := range want {
		if got[p] != k {
			return false
		}
	}
	return true
}

// TestDiff: by default the project to the current branch; FROM and TO
// may be lower, snapshots (id, prefix, tag) and branches; --stat and
// the plain listing name every change.
func TestDiff(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a", "lower a"), harness.LowerFile("b", "b"), harness.LowerFile("d/x", "x"), harness.LowerFile("mode", "m")))
	if got := diffKinds(t, m.Dir); len(got) != 0 {
		t.Errorf("diff of a fresh mount = %v, want nothing", got)
	}
	harness.WriteFile(t, m.Path("a"), "upper a")
	must(t, os.Remove(m.Path("b")))
	harness.WriteFile(t, m.Path("d/new"), "new")
	must(t, os.Chmod(m.Path("mode"), 0o600))
	id := takeSnapshot(t, m.Dir, "s1")
	mustC(t, m.Dir, "tag", "s1", id)
	want := map[string]string{"a": "modified", "b": "deleted", "d/new": "created", "mode": "mode-changed"}
	if got := diffKinds(t, m.Dir); !sameKinds(got, want) {
		t.Errorf("diff = %v, want %v", got, want)
	}
	for _, args := range [][]string{{"lower", id}, {"lower", "s1"}, {"lower", id[:4]}, {"lower", "main"}} {
		if got := diffKinds(t, m.Dir, args...); !sameKinds(got, want) {
			t.Errorf("diff %v = %v, want %v", args, got, want)
		}
	}
	mustC(t, m.Dir, "branch", "create", "two")
	harness.WriteFile(t, m.Path("later"), "later")
	if got, want := diffKinds(t, m.Dir, "s1"), map[string]string{"later": "created"}; !sameKinds(got, want) {
		t.Errorf("diff s1 (to the current branch) = %v, want %v", got, want)
	}
	if got, want := diffKinds(t, m.Dir, "main", "two"), map[string]string{"later": "deleted"}; !sameKinds(got, want) {
		t.Errorf("diff main two = %v, want %v", got, want)
	}
	if got := diffKinds(t, m.Dir, id, "two"); len(got) != 0 {
		t.Errorf("diff %s two (made from the same state) = %v, want nothing", id, got)
	}

	out := mustC(t, m.Dir, "diff").Stdout
	for _, line := range []string{"M  a\n", "D  b\n", "A  d/new\n", "A  later\n", "P  mode  (mode 0644 to 0600)\n"} {
		if !strings.Contains(out, line) {
			t.Errorf("diff does not list %q:\n%s", line, out)
		}
	}
	stat := mustC(t, m.Dir, "diff", "--stat").Stdout
	if !strings.Contains(stat, "5 changed: 2 created, 1 modified, 1 deleted, 1 mode-changed") {
		t.Errorf("diff --stat has no right summary:\n%s", stat)
	}
	patch := mustC(t, m.Dir, "diff", "--patch").Stdout
	for _, want := range []string{"--- a/a\n+++ b/a\n", "-lower a\n", "+upper a\n", "--- a/b\n+++ /dev/null\n", "+++ b/d/new\n", "+new\n"} {
		if !strings.Contains(patch, want) {
			t.Errorf("diff --patch does not contain %q:\n%s", want, patch)
		}
	}
	failC(t, m.Dir, []string{`"nope" is neither "lower", a branch, a snapshot id nor a tag`}, "diff", "nope")
}

// TestRestoreDryRun: restore --dry-run lists the changes restore would
// make and makes none.
func TestRestoreDryRun(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a", "lower a"), harness.LowerFile("b", "b")))
	harness.WriteFile(t, m.Path("a"), "snap")
	id := takeSnapshot(t, m.Dir, "")
	harness.WriteFile(t, m.Path("a"), "later")
	must(t, os.Remove(m.Path("b")))
	harness.WriteFile(t, m.Path("c"), "c")
	before := harness.SnapshotTree(m.Dir)
	nsnaps := len(listSnapshots(t, m.Dir))
	r := mustC(t, m.Dir, "restore", "--dry-run", id)
	for _, want := range []string{"M  a\n", "A  b\n", "D  c\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("restore --dry-run does not list %s:\n%s", want, r)
		}
	}
	if strings.Contains(r.Stdout, "to undo") {
		t.Errorf("restore --dry-run prints an undo line:\n%s", r)
	}
	for _, d := range harness.DiffMountTrees(before, harness.SnapshotTree(m.Dir)) {
		t.Errorf("restore --dry-run changed the mount: %s", d)
	}
	if n := len(listSnapshots(t, m.Dir)); n != nsnaps {
		t.Errorf("restore --dry-run: %d snapshots, want %d (no safety snapshot)", n, nsnaps)
	}
}

// gcJSON is agentfs gc --json.
type gcJSON struct {
	Removed int   `json:"removed"`
	Freed   int64 `json:"freed"`
	InUse   int   `json:"in_use"`
}

func runGC(t *testing.T, dir string) gcJSON {
	t.Helper()
	r := mustC(t, dir, "gc", "--grace", "1s", "--json")
	var g gcJSON
	if err := json.Unmarshal([]byte(r.Stdout), &g); err != nil {
		t.Fatalf("gc --json: %v\n%s", err, r.Stdout)
	}
	return g
}

// TestGC: gc frees what deleted snapshots and restores left behind, and
// prints the bytes; it spares what a snapshot or an open file holds.
func TestGC(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a", "a")))
	empty := takeSnapshot(t, m.Dir, "empty")
	harness.WriteFile(t, m.Path("big"), strings.Repeat("x", 1<<20))
	id := takeSnapshot(t, m.Dir, "big")
	must(t, os.Remove(m.Path("big")))
	held, err := os.OpenFile(m.Path("held"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.WriteString(strings.Repeat("h", 64<<10)); err != nil {
		t.Fatal(err)
	}
	mustC(t, m.Dir, "restore", empty) // held's file now belongs to nothing but the descriptor
	time.Sleep(1100 * time.Millisecond)
	if g := runGC(t, m.Dir); g.Freed >= 1<<20 || g.InUse < 1 {
		t.Errorf("gc = %+v while snapshot %s holds the 1 MiB file and a descriptor the file held: want less than 1 MiB freed, 1 file in use", g, id)
	}
	buf := make([]byte, 4)
	if n, err := held.ReadAt(buf, 100); err != nil || string(buf[:n]) != "hhhh" {
		t.Errorf("a file held open across restore and gc reads %q, %v", buf[:n], err)
	}
	mustC(t, m.Dir, "snapshot", "delete", id)
	r := mustC(t, m.Dir, "gc", "--grace", "1s")
	if !strings.Contains(r.Stdout, "freed ") || !strings.Contains(r.Stdout, " bytes") {
		t.Errorf("gc does not print the bytes freed:\n%s", r)
	}
	var freed int64
	if _, err := fmt.Sscanf(r.Stdout, "freed %d bytes", &freed); err != nil {
		t.Errorf("gc does not print \"freed N bytes\" first (%v):\n%s", err, r)
	} else if freed < 1<<20 {
		t.Errorf("gc after deleting snapshot %s freed %d bytes, want at least the 1 MiB file:\n%s", id, freed, r)
	}
	if got := harness.ReadFile(t, m.Path("a")); got != "a" {
		t.Errorf("a after gc = %q", got)
	}
}

// TestExport: a branch the mount does not show, the current branch and
// the project export as they show; a target in the project, in the
// mount or not empty is refused, and nothing is written there.
func TestExport(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a", "lower a"), harness.LowerFile("d/x", "x")))
	project := harness.SnapshotTree(m.Dir)
	harness.WriteFile(t, m.Path("a"), "main")
	mustC(t, m.Dir, "branch", "create", "other")
	mustC(t, m.Dir, "branch", "switch", "other")
	harness.WriteFile(t, m.Path("only-other"), "other")
	other := harness.SnapshotTree(m.Dir)
	mustC(t, m.Dir, "branch", "switch", "main")
	mainTree := harness.SnapshotTree(m.Dir)
	for _, c := range []struct {
		ref  string
		want harness.Tree
	}{{"other", other}, {"main", mainTree}, {"lower", project}} {
		for _, d := range diffExport(c.want, harness.SnapshotTree(exportRef(t, m, c.ref))) {
			t.Errorf("export %s: %s", c.ref, d)
		}
	}

	notEmpty := t.TempDir()
	harness.WriteFile(t, filepath.Join(notEmpty, "f"), "f")
	failC(t, m.Dir, []string{"is inside the project", "choose a directory outside it"}, "export", "main", "--to", m.LowerPath("d/out"))
	failC(t, m.Dir, []string{"is inside the mount", "choose a directory outside it"}, "export", "main", "--to", m.Path("out"))
	failC(t, m.Dir, []string{"is not empty"}, "export", "main", "--to", notEmpty)
	failC(t, m.Dir, []string{`"nope" is neither`}, "export", "nope", "--to", filepath.Join(t.TempDir(), "x"))
	if r := agentfsC(t, m.Dir, "export", "main"); r.Code != 2 || !strings.Contains(r.Stderr, "--to DIR is required") {
		t.Errorf("export without --to: want exit 2 and '--to DIR is required':\n%s", r)
	}
	if e := errnoOfStat(m.Path("out")); e != unix.ENOENT {
		t.Errorf("the refused export into the mount left %s: %s", m.Path("out"), harness.ErrName(e))
	}
}

// TestFsck: a clean store checks clean; a file lost from the backstore
// is reported (exit 1) and --repair deletes the entry that named it,
// which every process sees at once; then the store checks clean.
func TestFsck(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a", "a")))
	harness.WriteFile(t, m.Path("a"), "upper a")
	harness.WriteFile(t, m.Path("victim"), "the victim's unique content")
	checkFsckClean(t, m.Dir)

	// Lose victim's file from the backstore, behind agentfs's back.
	lost := ""
	err := filepath.WalkDir(m.Status.BackingRoot, func(p string, d os.DirEntry, err error) error {
		// The daemon runs: a file it removes meanwhile is no longer
		// there (ENOENT); any other error is one.
		if errors.Is(err, iofs.ErrNotExist) && p != m.Status.BackingRoot {
			return nil
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return err
		}
		if string(b) == "the victim's unique content" {
			lost = p
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking the backstore %s: %v", m.Status.BackingRoot, err)
	}
	if lost == "" {
		t.Fatalf("victim's file is not in the backstore %s", m.Status.BackingRoot)
	}
	if err := os.Remove(lost); err != nil {
		t.Fatal(err)
	}
	r := failC(t, m.Dir, []string{"run agentfs fsck --repair"}, "fsck")
	if !strings.Contains(r.Stdout, "/victim: missing-object") {
		t.Errorf("fsck does not report victim's missing file:\n%s", r)
	}
	r = mustC(t, m.Dir, "fsck", "--repair")
	if !strings.Contains(r.Stdout, "/victim: missing-object") || !strings.Contains(r.Stdout, "repaired: entry deleted") {
		t.Errorf("fsck --repair does not say it deleted victim's entry:\n%s", r)
	}
	if e := errnoOfStat(m.Path("victim")); e != unix.ENOENT {
		t.Errorf("victim after the repair: %s, want ENOENT", harness.ErrName(e))
	}
	if got := harness.ReadFile(t, m.Path("a")); got != "upper a" {
		t.Errorf("a after the repair = %q", got)
	}
	checkFsckClean(t, m.Dir)
}
