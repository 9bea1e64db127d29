package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// TestWritebackCacheMount: with --writeback-cache the kernel holds
// writes back, and agentfs still answers on every byte written before a
// request: a snapshot of a file still open for writing has what was
// written; a project file edited from outside while the mount holds it
// open shows its new size; status says how I/O is served.
func TestWritebackCacheMount(t *testing.T) {
	m := harness.NewMount(t, harness.WithArgs("--writeback-cache"),
		harness.WithLower(harness.LowerFile("f", "lower content"), harness.LowerFile("g", "short")))
	st, err := m.FetchStatus()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Writeback || st.Passthrough || !strings.Contains(st.IOMode, "writeback cache") {
		t.Errorf("status --json: writeback cache %v, passthrough %v, io mode %q; want the writeback cache alone", st.Writeback, st.Passthrough, st.IOMode)
	}

	w, err := os.OpenFile(m.Path("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt([]byte("BEFORE"), 0); err != nil {
		t.Fatal(err)
	}
	id := takeSnapshot(t, m.Dir, "f open")
	checkSnapshotContent(t, m, id, map[string]string{"f": "BEFOREcontent"})

	held, err := os.Open(m.Path("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if got := harness.ReadFile(t, m.Path("g")); got != "short" {
		t.Fatalf("g = %q", got)
	}
	if err := os.WriteFile(m.LowerPath("g"), []byte("much longer contents"), 0644); err != nil {
		t.Fatal(err)
	}
	m.AcceptLower() // the edit is the test's, not the mount's
	// Waiting for the watcher, not timing it.
	if !harness.WaitFor(func() bool { b, _ := os.ReadFile(m.Path("g")); return string(b) == "much longer contents" }) {
		b, _ := os.ReadFile(m.Path("g"))
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
	harness.RequireFUSE(t) // exec -b mounts the branch in a namespace of its own
	m := harness.NewMount(t, harness.WithArgs("--writeback-cache"), harness.WithLower(harness.LowerFile("f", "lower content")))
	branchesFrom(t, m, "x")
	h := harness.StartHelperCmd(t, execIn(m, "x", m.Dir, harness.HelperPath(t)),
		harness.OpWriteKeep(m.Path("f"), os.O_TRUNC, "held back data"), harness.OpHold())
	defer h.Release()
	if len(h.Results) != 2 || h.Results[0].Errno != "ok" {
		t.Fatalf("the writer in branch x: %v", h.Results)
	}
	if got := harness.ReadFile(t, filepath.Join(exportRef(t, m, "x"), "f")); got != "held back data" {
		t.Errorf("export of branch x has f = %q while its writer holds it open, want %q", got, "held back data")
	}
	if got := harness.ReadFile(t, m.Path("f")); got != "lower content" {
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
	m := harness.NewMount(t, harness.WithArgs("--writeback-cache"), harness.WithLower(harness.LowerFile("d/m1", "abc\n"), harness.LowerHardlink("e/m2", "d/m1")))
	for _, p := range []string{"d/m1", "e/m2"} {
		if got := harness.ReadFile(t, m.Path(p)); got != "abc\n" {
			t.Fatalf("%s = %q", p, got)
		}
	}
	f, err := os.OpenFile(m.LowerPath("d/m1"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("defgh\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m.AcceptLower() // the edit is the test's, not the mount's
	for _, p := range []string{"d/m1", "e/m2"} {
		// Waiting for the watcher and the name's lifetime, not timing them.
		if !harness.WaitFor(func() bool { b, _ := os.ReadFile(m.Path(p)); return string(b) == "abc\ndefgh\n" }) {
			b, _ := os.ReadFile(m.Path(p))
			var st unix.Stat_t
			if err := unix.Stat(m.Path(p), &st); err != nil {
				t.Errorf("stat %s: %v", p, err)
			}
			t.Errorf("%s reads %q (%d links) after the project file was appended to, want %q", p, b, st.Nlink, "abc\ndefgh\n")
		}
	}
}
