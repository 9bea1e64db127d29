package integration

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	cmd := execIn(m, "x", m.dir, helperPath(t))
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	ops, _ := json.Marshal([]helperOp{opWriteKeep(m.path("f"), os.O_TRUNC, "held back data"), opHold()})
	if _, err := stdin.Write(append(ops, '\n')); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	for i := 0; i < 2; i++ {
		var r helperResult
		if !out.Scan() || json.Unmarshal(out.Bytes(), &r) != nil || r.Errno != "ok" {
			t.Fatalf("the writer in branch x: %q (%v)", out.Text(), out.Err())
		}
	}
	if got := readFile(t, filepath.Join(exportRef(t, m, "x"), "f")); got != "held back data" {
		t.Errorf("export of branch x has f = %q while its writer holds it open, want %q", got, "held back data")
	}
	if got := readFile(t, m.path("f")); got != "lower content" {
		t.Errorf("the main branch reads f = %q, want the project's %q", got, "lower content")
	}
}
