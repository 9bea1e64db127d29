package integration

// Diff, restore --dry-run, export, gc and fsck (the snapshots issue),
// driven as a user does.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("diff --json: %v\n%s", err, r.stdout)
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
	m := newMount(t, withLower(lowerFile("a", "lower a"), lowerFile("b", "b"), lowerFile("d/x", "x"), lowerFile("mode", "m")))
	if got := diffKinds(t, m.dir); len(got) != 0 {
		t.Errorf("diff of a fresh mount = %v, want nothing", got)
	}
	writeFile(t, m.path("a"), "upper a")
	os.Remove(m.path("b"))
	writeFile(t, m.path("d/new"), "new")
	os.Chmod(m.path("mode"), 0o600)
	id := takeSnapshot(t, m.dir, "s1")
	mustC(t, m.dir, "tag", "s1", id)
	want := map[string]string{"a": "modified", "b": "deleted", "d/new": "created", "mode": "mode-changed"}
	if got := diffKinds(t, m.dir); !sameKinds(got, want) {
		t.Errorf("diff = %v, want %v", got, want)
	}
	for _, args := range [][]string{{"lower", id}, {"lower", "s1"}, {"lower", id[:4]}, {"lower", "main"}} {
		if got := diffKinds(t, m.dir, args...); !sameKinds(got, want) {
			t.Errorf("diff %v = %v, want %v", args, got, want)
		}
	}
	mustC(t, m.dir, "branch", "create", "two")
	writeFile(t, m.path("later"), "later")
	if got, want := diffKinds(t, m.dir, "s1"), map[string]string{"later": "created"}; !sameKinds(got, want) {
		t.Errorf("diff s1 (to the current branch) = %v, want %v", got, want)
	}
	if got, want := diffKinds(t, m.dir, "main", "two"), map[string]string{"later": "deleted"}; !sameKinds(got, want) {
		t.Errorf("diff main two = %v, want %v", got, want)
	}
	if got := diffKinds(t, m.dir, id, "two"); len(got) != 0 {
		t.Errorf("diff %s two (made from the same state) = %v, want nothing", id, got)
	}

	out := mustC(t, m.dir, "diff").stdout
	for _, line := range []string{"M  a\n", "D  b\n", "A  d/new\n", "A  later\n", "P  mode  (mode 0644 to 0600)\n"} {
		if !strings.Contains(out, line) {
			t.Errorf("diff does not list %q:\n%s", line, out)
		}
	}
	stat := mustC(t, m.dir, "diff", "--stat").stdout
	if !strings.Contains(stat, "5 changed: 2 created, 1 modified, 1 deleted, 1 mode-changed") {
		t.Errorf("diff --stat has no right summary:\n%s", stat)
	}
	patch := mustC(t, m.dir, "diff", "--patch").stdout
	for _, want := range []string{"--- a/a\n+++ b/a\n", "-lower a\n", "+upper a\n", "--- a/b\n+++ /dev/null\n", "+++ b/d/new\n", "+new\n"} {
		if !strings.Contains(patch, want) {
			t.Errorf("diff --patch does not contain %q:\n%s", want, patch)
		}
	}
	failC(t, m.dir, []string{`"nope" is neither "lower", a branch, a snapshot id nor a tag`}, "diff", "nope")
}

// TestRestoreDryRun: restore --dry-run lists the changes restore would
// make and makes none.
func TestRestoreDryRun(t *testing.T) {
	m := newMount(t, withLower(lowerFile("a", "lower a"), lowerFile("b", "b")))
	writeFile(t, m.path("a"), "snap")
	id := takeSnapshot(t, m.dir, "")
	writeFile(t, m.path("a"), "later")
	os.Remove(m.path("b"))
	writeFile(t, m.path("c"), "c")
	before := snapshotTree(m.dir)
	nsnaps := len(listSnapshots(t, m.dir))
	r := mustC(t, m.dir, "restore", "--dry-run", id)
	for _, want := range []string{"M  a\n", "A  b\n", "D  c\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("restore --dry-run does not list %s:\n%s", want, r)
		}
	}
	if strings.Contains(r.stdout, "to undo") {
		t.Errorf("restore --dry-run prints an undo line:\n%s", r)
	}
	for _, d := range diffMountTrees(before, snapshotTree(m.dir)) {
		t.Errorf("restore --dry-run changed the mount: %s", d)
	}
	if n := len(listSnapshots(t, m.dir)); n != nsnaps {
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
	if err := json.Unmarshal([]byte(r.stdout), &g); err != nil {
		t.Fatalf("gc --json: %v\n%s", err, r.stdout)
	}
	return g
}

// TestGC: gc frees what deleted snapshots and restores left behind, and
// prints the bytes; it spares what a snapshot or an open file holds.
func TestGC(t *testing.T) {
	m := newMount(t, withLower(lowerFile("a", "a")))
	empty := takeSnapshot(t, m.dir, "empty")
	writeFile(t, m.path("big"), strings.Repeat("x", 1<<20))
	id := takeSnapshot(t, m.dir, "big")
	os.Remove(m.path("big"))
	held, err := os.OpenFile(m.path("held"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.WriteString(strings.Repeat("h", 64<<10))
	mustC(t, m.dir, "restore", empty) // held's file now belongs to nothing but the descriptor
	time.Sleep(1100 * time.Millisecond)
	if g := runGC(t, m.dir); g.Freed >= 1<<20 || g.InUse < 1 {
		t.Errorf("gc = %+v while snapshot %s holds the 1 MiB file and a descriptor the file held: want less than 1 MiB freed, 1 file in use", g, id)
	}
	buf := make([]byte, 4)
	if n, err := held.ReadAt(buf, 100); err != nil || string(buf[:n]) != "hhhh" {
		t.Errorf("a file held open across restore and gc reads %q, %v", buf[:n], err)
	}
	mustC(t, m.dir, "snapshot", "delete", id)
	r := mustC(t, m.dir, "gc", "--grace", "1s")
	if !strings.Contains(r.stdout, "freed ") || !strings.Contains(r.stdout, " bytes") {
		t.Errorf("gc does not print the bytes freed:\n%s", r)
	}
	var freed int64
	fmt.Sscanf(r.stdout, "freed %d bytes", &freed)
	if freed < 1<<20 {
		t.Errorf("gc after deleting snapshot %s freed %d bytes, want at least the 1 MiB file:\n%s", id, freed, r)
	}
	if got := readFile(t, m.path("a")); got != "a" {
		t.Errorf("a after gc = %q", got)
	}
}

// TestExport: a branch the mount does not show, the current branch and
// the project export as they show; a target in the project, in the
// mount or not empty is refused, and nothing is written there.
func TestExport(t *testing.T) {
	m := newMount(t, withLower(lowerFile("a", "lower a"), lowerFile("d/x", "x")))
	project := snapshotTree(m.dir)
	writeFile(t, m.path("a"), "main")
	mustC(t, m.dir, "branch", "create", "other")
	mustC(t, m.dir, "branch", "switch", "other")
	writeFile(t, m.path("only-other"), "other")
	other := snapshotTree(m.dir)
	mustC(t, m.dir, "branch", "switch", "main")
	mainTree := snapshotTree(m.dir)
	for _, c := range []struct {
		ref  string
		want tree
	}{{"other", other}, {"main", mainTree}, {"lower", project}} {
		for _, d := range diffExport(c.want, snapshotTree(exportRef(t, m, c.ref))) {
			t.Errorf("export %s: %s", c.ref, d)
		}
	}

	notEmpty := t.TempDir()
	writeFile(t, filepath.Join(notEmpty, "f"), "f")
	failC(t, m.dir, []string{"is inside the project", "choose a directory outside it"}, "export", "main", "--to", m.lowerPath("d/out"))
	failC(t, m.dir, []string{"is inside the mount", "choose a directory outside it"}, "export", "main", "--to", m.path("out"))
	failC(t, m.dir, []string{"is not empty"}, "export", "main", "--to", notEmpty)
	failC(t, m.dir, []string{`"nope" is neither`}, "export", "nope", "--to", filepath.Join(t.TempDir(), "x"))
	if r := agentfsC(t, m.dir, "export", "main"); r.code != 2 || !strings.Contains(r.stderr, "--to DIR is required") {
		t.Errorf("export without --to: want exit 2 and '--to DIR is required':\n%s", r)
	}
	if e := errnoOfStat(m.path("out")); e != unix.ENOENT {
		t.Errorf("the refused export into the mount left %s: %s", m.path("out"), errName(e))
	}
}

// TestFsck: a clean store checks clean; a file lost from the backstore
// is reported (exit 1) and --repair deletes the entry that named it,
// which every process sees at once; then the store checks clean.
func TestFsck(t *testing.T) {
	m := newMount(t, withLower(lowerFile("a", "a")))
	writeFile(t, m.path("a"), "upper a")
	writeFile(t, m.path("victim"), "the victim's unique content")
	checkFsckClean(t, m.dir)

	// Lose victim's file from the backstore, behind agentfs's back.
	lost := ""
	filepath.WalkDir(m.status.BackingRoot, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); string(b) == "the victim's unique content" {
				lost = p
			}
		}
		return nil
	})
	if lost == "" {
		t.Fatalf("victim's file is not in the backstore %s", m.status.BackingRoot)
	}
	if err := os.Remove(lost); err != nil {
		t.Fatal(err)
	}
	r := failC(t, m.dir, []string{"run agentfs fsck --repair"}, "fsck")
	if !strings.Contains(r.stdout, "/victim: missing-object") {
		t.Errorf("fsck does not report victim's missing file:\n%s", r)
	}
	r = mustC(t, m.dir, "fsck", "--repair")
	if !strings.Contains(r.stdout, "/victim: missing-object") || !strings.Contains(r.stdout, "repaired: entry deleted") {
		t.Errorf("fsck --repair does not say it deleted victim's entry:\n%s", r)
	}
	if e := errnoOfStat(m.path("victim")); e != unix.ENOENT {
		t.Errorf("victim after the repair: %s, want ENOENT", errName(e))
	}
	if got := readFile(t, m.path("a")); got != "upper a" {
		t.Errorf("a after the repair = %q", got)
	}
	checkFsckClean(t, m.dir)
}
