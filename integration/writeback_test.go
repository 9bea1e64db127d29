package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWritebackCacheMount: with --writeback-cache the kernel holds
// writes back, and agentfs still answers on every byte written before a
// request: a snapshot of a file still open for writing has what was
// written; a project file edited from outside while the mount holds it
// open shows its new size; status says how I/O is served.
func TestWritebackCacheMount(t *testing.T) {
	m := newMount(t, withArgs("--writeback-cache"),
		withLower(lowerFile("f", "lower content"), lowerFile("g", "short")))
	st, err := m.fetchStatus()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Writeback || st.Passthrough || !strings.Contains(st.IOMode, "writeback cache") {
		t.Errorf("status --json: writeback cache %v, passthrough %v, io mode %q; want the writeback cache alone", st.Writeback, st.Passthrough, st.IOMode)
	}

	w, err := os.OpenFile(m.path("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt([]byte("BEFORE"), 0); err != nil {
		t.Fatal(err)
	}
	id := takeSnapshot(t, m.dir, "f open")
	checkSnapshotContent(t, m, id, map[string]string{"f": "BEFOREcontent"})

	held, err := os.Open(m.path("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if got := readFile(t, m.path("g")); got != "short" {
		t.Fatalf("g = %q", got)
	}
	if err := os.WriteFile(m.lowerPath("g"), []byte("much longer contents"), 0644); err != nil {
		t.Fatal(err)
	}
	m.before = snapshotTree(m.lower) // the edit is the test's, not the mount's
	// Waiting for the watcher, not timing it.
	if !waitFor(func() bool { b, _ := os.ReadFile(m.path("g")); return string(b) == "much longer contents" }) {
		b, _ := os.ReadFile(m.path("g"))
		t.Errorf("g reads %q after the project file was edited from outside, want the new contents", b)
	}
}

// TestWritebackCacheBranchMount: a process bound to another branch by
// agentfs exec -b (as root: a branch mount of its own, with the same
// writeback cache) writes to a file and keeps it open; an export of
// that branch, asked through the main mount, has what it wrote. The
// write-back before a control request covers every mount the daemon
// serves, not only the one the request came through.
func TestWritebackCacheBranchMount(t *testing.T) {
	requireFUSE(t) // exec -b mounts the branch in a namespace of its own
	m := newMount(t, withArgs("--writeback-cache"), withLower(lowerFile("f", "lower content")))
	branchesFrom(t, m, "x")
	h := startHelperCmd(t, execIn(m, "x", m.dir, helperPath(t)),
		opWriteKeep(m.path("f"), os.O_TRUNC, "held back data"), opHold())
	defer h.release()
	if len(h.result) != 2 || h.result[0].Errno != "ok" {
		t.Fatalf("the writer in branch x: %v", h.result)
	}
	if got := readFile(t, filepath.Join(exportRef(t, m, "x"), "f")); got != "held back data" {
		t.Errorf("export of branch x has f = %q while its writer holds it open, want %q", got, "held back data")
	}
	if got := readFile(t, m.path("f")); got != "lower content" {
		t.Errorf("the main branch reads f = %q, want the project's %q", got, "lower content")
	}
}

// TestWritebackCacheLowerHardlinks: a project file with two names, both
// read through the mount, is appended to from outside through one of
// them; with a writeback cache the kernel takes no size from agentfs,
// so the file gets a new inode, and the other name shows it too within
// about a second (not the old inode, with its old size and no links,
// for as long as the kernel kept that name).
func TestWritebackCacheLowerHardlinks(t *testing.T) {
	m := newMount(t, withArgs("--writeback-cache"), withLower(lowerFile("d/m1", "abc\n"), lowerHardlink("e/m2", "d/m1")))
	for _, p := range []string{"d/m1", "e/m2"} {
		if got := readFile(t, m.path(p)); got != "abc\n" {
			t.Fatalf("%s = %q", p, got)
		}
	}
	f, err := os.OpenFile(m.lowerPath("d/m1"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("defgh\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m.before = snapshotTree(m.lower) // the edit is the test's, not the mount's
	for _, p := range []string{"d/m1", "e/m2"} {
		// Waiting for the watcher and the name's lifetime, not timing them.
		if !waitFor(func() bool { b, _ := os.ReadFile(m.path(p)); return string(b) == "abc\ndefgh\n" }) {
			b, _ := os.ReadFile(m.path(p))
			var st unix.Stat_t
			unix.Stat(m.path(p), &st)
			t.Errorf("%s reads %q (%d links) after the project file was appended to, want %q", p, b, st.Nlink, "abc\ndefgh\n")
		}
	}
}
