package integration

import (
	"os"
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
