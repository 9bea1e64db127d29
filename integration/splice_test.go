package integration

import (
	"bytes"
	"math/rand"
	"os"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
	"golang.org/x/sys/unix"
)

// readStats returns the READ counters of `agentfs status --json`.
func readStats(t *testing.T, m *harness.Mount) (reads, spliced uint64) {
	t.Helper()
	var st struct {
		Reads   uint64 `json:"reads"`
		Spliced uint64 `json:"reads_spliced"`
	}
	statusJSON(t, m.Dir, &st)
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
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("big", string(data))), harness.WithArgs("--no-io-uring"))

	reads0, spliced0 := readStats(t, m)
	got, err := os.ReadFile(m.Path("big"))
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

	r, err := os.Open(m.Path("big"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(m.Path("big"), os.O_RDWR, 0)
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
	lf, err := os.OpenFile(m.LowerPath("big"), os.O_RDONLY|unix.O_NOATIME, 0)
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

// TestReadFromDisk: a cold read of a project file, one the lower file
// system does not cache, is read from the disk with O_DIRECT, over
// io_uring and over /dev/fuse: the bytes are the project's, and only the
// mount caches them (the lower file stays out of the page cache). The
// file is a whole number of 512 KiB READs: a READ under 64 KiB (a
// file's tail, a small file) is read through the lower cache. The
// project is on a disk (testenv.DiskDir), where its pages can be
// dropped.
func TestReadFromDisk(t *testing.T) {
	const size = 4 << 20
	data := make([]byte, size)
	rand.New(rand.NewSource(8)).Read(data)
	for _, tc := range []struct {
		name string
		args []string
	}{{"default", nil}, {"dev-fuse", []string{"--no-io-uring"}}} {
		t.Run(tc.name, func(t *testing.T) {
			m := harness.NewMount(t, harness.WithExistingLower(testenv.DiskDir(t)),
				harness.WithLower(harness.LowerFile("big", string(data))), harness.WithArgs(tc.args...))
			if !dropCache(t, m.LowerPath("big")) {
				t.Fatalf("the page cache keeps pages of %s after fdatasync and FADV_DONTNEED, on a disk-backed file system", m.LowerPath("big"))
			}
			var st0 struct {
				FromDisk uint64 `json:"reads_from_disk"`
			}
			statusJSON(t, m.Dir, &st0)
			got, err := os.ReadFile(m.Path("big"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes through the mount, not the project's %d (first difference at %d)", len(got), len(data), firstDiff(string(got), string(data)))
			}
			st := st0
			statusJSON(t, m.Dir, &st)
			if st.FromDisk == st0.FromDisk {
				t.Errorf("status: reads_from_disk %d before and after a cold read of a 4 MiB project file", st.FromDisk)
			}
			if c := cachedPages(t, m.LowerPath("big")); c != 0 {
				t.Errorf("the lower file system caches %d pages of the project file after a cold read through the mount: want none (one copy, the mount's)", c)
			}
		})
	}
}

// dropCache writes back and drops the page cache of file p (outside
// the mount), and reports whether its file system let go of it.
func dropCache(t *testing.T, p string) bool {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	return cachedPages(t, p) == 0
}

// cachedPages is how many pages of file p the page cache holds.
func cachedPages(t *testing.T, p string) uint64 {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &st, 0); err != nil {
		testenv.Skip(t, testenv.Cachestat, "cachestat: %v (Linux 6.5 or later)", err)
	}
	return st.Cache
}
