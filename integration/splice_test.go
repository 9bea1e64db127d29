package integration

import (
	"bytes"
	"math/rand"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// readStats returns the READ counters of `agentfs status --json`.
func readStats(t *testing.T, m *mount) (reads, spliced uint64) {
	t.Helper()
	var st struct {
		Reads   uint64 `json:"reads"`
		Spliced uint64 `json:"reads_spliced"`
	}
	statusJSON(t, m.dir, &st)
	return st.Reads, st.Spliced
}

// TestSpliceRead: large READs of a project file are answered by
// splicing its pages into the reply, byte for byte, and a descriptor
// opened before a copy-up still reads the data written after it when
// its pages come back through a spliced READ. Splicing applies to
// replies written to /dev/fuse; over io_uring a READ is copied into the
// ring's buffer.
func TestSpliceRead(t *testing.T) {
	const size = 4<<20 + 12345 // not a multiple of a READ: a short last one
	data := make([]byte, size)
	rand.New(rand.NewSource(7)).Read(data)
	m := newMount(t, withLower(lowerFile("big", string(data))), withArgs("--no-io-uring"))

	reads0, spliced0 := readStats(t, m)
	got, err := os.ReadFile(m.path("big"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes through the mount, not the project's %d (first difference at %d)", len(got), len(data), firstDiff(string(got), string(data)))
	}
	reads, spliced := readStats(t, m)
	if reads == reads0 {
		t.Fatalf("status: reads %d before and after reading a project file: the daemon served no READ", reads)
	}
	if spliced == spliced0 {
		t.Errorf("status: %d READs served, none spliced (reads_spliced %d)", reads-reads0, spliced)
	}

	r, err := os.Open(m.path("big"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(m.path("big"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	upper := bytes.Repeat([]byte("U"), 1<<20)
	if _, err := w.WriteAt(upper, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	copy(data[1<<20:], upper)
	// Drop the mount's cached pages of the file, so that the reader's
	// next read goes to the daemon again (READ, spliced).
	if err := unix.Fadvise(int(r.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	_, spliced0 = readStats(t, m)
	buf := make([]byte, size)
	n, err := r.ReadAt(buf, 0)
	if n != size {
		t.Fatalf("the descriptor opened before the copy-up read %d bytes (%v), want %d", n, err, size)
	}
	if !bytes.Equal(buf, data) {
		t.Errorf("the descriptor opened before the copy-up reads other data than was written (first difference at %d)", firstDiff(string(buf), string(data)))
	}
	if _, spliced = readStats(t, m); spliced == spliced0 {
		t.Errorf("status: the reads after the copy-up were not spliced (reads_spliced %d)", spliced)
	}
	lf, err := os.OpenFile(m.lowerPath("big"), os.O_RDONLY|unix.O_NOATIME, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	lower := make([]byte, 1<<20)
	if _, err := lf.ReadAt(lower, 1<<20); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(lower, upper) {
		t.Errorf("the write reached the project file")
	}
}
