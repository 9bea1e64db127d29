package overlay

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// dropLowerCache writes back and drops the page cache of the lower file
// p, and fails the test if the lower file system keeps it cached (its
// lower tree is on a disk: newEnvIn with testenv.DiskDir).
func (e *env) dropLowerCache(p string) {
	e.t.Helper()
	f, err := os.Open(filepath.Join(e.lower, p))
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		e.t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		e.t.Fatal(err)
	}
	if c := cachedPages(e.t, filepath.Join(e.lower, p)); c != 0 {
		e.t.Fatalf("the page cache keeps %d pages of %s after fdatasync and FADV_DONTNEED, on a disk-backed file system", c, p)
	}
}

// cachedPages is how many pages of file p the page cache holds.
func cachedPages(t testing.TB, p string) uint64 {
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

// alignedBuf is n bytes at the start of a page, outside the Go heap.
func alignedBuf(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Munmap(b); err != nil {
			t.Errorf("munmap: %v", err)
		}
	})
	return b
}

// TestReadFromDisk: a range of a lower file that the lower file system
// does not cache is read with O_DIRECT, and stays uncached there (the
// mount's page cache is the one copy); a range it caches, an unaligned
// buffer and a file copied up since are left to ReadAt; every read
// returns the file's bytes.
func TestReadFromDisk(t *testing.T) {
	const size = 1<<20 + 1000 // a short last read
	data := make([]byte, size)
	rand.New(rand.NewSource(1)).Read(data)
	e := newEnvIn(t, testenv.DiskDir(t), map[string]string{"f": string(data)})
	e.dropLowerCache("f")
	f, err := e.view.Open(e.must("f"), unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, f)
	const chunk = 256 << 10
	buf := alignedBuf(t, chunk)

	if !f.FromDisk(0, chunk) {
		t.Fatal("FromDisk(0, 256 KiB) of an uncached lower file = false")
	}
	n, ok, err := f.ReadFromDisk(buf, 0)
	if err != nil || !ok || n != chunk || !bytes.Equal(buf, data[:chunk]) {
		t.Fatalf("ReadFromDisk(0) = %d, %v, %v (equal %v): want %d bytes of the file, from the disk", n, ok, err, bytes.Equal(buf[:n], data[:n]), chunk)
	}
	if c := cachedPages(t, filepath.Join(e.lower, "f")); c != 0 {
		t.Errorf("the lower file system caches %d pages of the file after a read from the disk: want none", c)
	}
	n, ok, err = f.ReadFromDisk(buf, 1<<20)
	if err != nil || !ok || n != 1000 || !bytes.Equal(buf[:n], data[1<<20:]) {
		t.Fatalf("ReadFromDisk at 1 MiB = %d, %v, %v: want the last 1000 bytes, from the disk", n, ok, err)
	}

	// A range the lower cache holds in part: copied from the cache.
	lf, err := os.Open(filepath.Join(e.lower, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if _, err := lf.ReadAt(make([]byte, 4096), chunk+4096); err != nil {
		t.Fatal(err)
	}
	if f.FromDisk(chunk, chunk) {
		t.Error("FromDisk of a range the lower file system caches in part = true")
	}
	if n, ok, err := f.ReadFromDisk(buf, chunk); ok || err != nil || n != 0 {
		t.Errorf("ReadFromDisk of a range cached in part = %d, %v, %v: want nothing read (ReadAt's turn)", n, ok, err)
	}
	// An unaligned buffer or offset: ReadAt's turn.
	if _, ok, _ := f.ReadFromDisk(buf[1:chunk/2+1], 2*chunk); ok {
		t.Error("ReadFromDisk into an unaligned buffer read from the disk")
	}
	if f.FromDisk(2*chunk+512, chunk/2) {
		t.Error("FromDisk at an unaligned offset = true")
	}
	if n, err := f.ReadAt(buf, chunk); err != nil || n != chunk || !bytes.Equal(buf, data[chunk:2*chunk]) {
		t.Errorf("ReadAt(256 KiB) = %d, %v: want the file's bytes", n, err)
	}

	// After a copy-up the file follows its node to the upper object,
	// which ReadFromDisk leaves to ReadAt.
	e.write("f", "UPPER")
	if f.FromDisk(0, chunk) {
		t.Error("FromDisk after a copy-up = true")
	}
	if _, ok, err := f.ReadFromDisk(buf, 0); ok || err != nil {
		t.Errorf("ReadFromDisk after a copy-up = %v, %v: want nothing read", ok, err)
	}
	if n, err := f.ReadAt(buf, 0); n != 5 || string(buf[:n]) != "UPPER" {
		t.Errorf("ReadAt after a copy-up = %q, %v: want UPPER", buf[:n], err)
	}
}

// TestReadFromDiskReplacedLower: a project file replaced by another
// (renamed over it) after a read-only open is still read as the file
// the open found: ReadFromDisk, which opens the lower path again, must
// not read the new one.
func TestReadFromDiskReplacedLower(t *testing.T) {
	const size = 1 << 20
	old := bytes.Repeat([]byte("o"), size)
	e := newEnvIn(t, testenv.DiskDir(t), map[string]string{"f": string(old)})
	f, err := e.view.Open(e.must("f"), unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, f)
	buf := alignedBuf(t, 256<<10)
	if _, err := f.ReadAt(buf[:4096], 0); err != nil { // opens the lower file
		t.Fatal(err)
	}
	lf, err := os.Open(filepath.Join(e.lower, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	repl := filepath.Join(e.lower, "f.new")
	if err := os.WriteFile(repl, bytes.Repeat([]byte("N"), size), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(repl, filepath.Join(e.lower, "f")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(int(lf.Fd())); err != nil {
		t.Fatalf("fdatasync the replaced lower file: %v", err)
	}
	if err := unix.Fadvise(int(lf.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatalf("drop the replaced lower file's cache: %v", err)
	}
	if !f.FromDisk(256<<10, len(buf)) {
		t.Fatalf("FromDisk of the replaced file after its cache was dropped = false: the disk-backed %s keeps it cached", e.lower)
	}
	n, ok, err := f.ReadFromDisk(buf, 256<<10)
	if ok {
		if n > 0 && buf[0] != 'o' {
			t.Fatalf("ReadFromDisk read the file renamed over the one opened (%q...)", buf[:8])
		}
		t.Fatal("ReadFromDisk read from the disk through a path that names another file now")
	}
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.ReadAt(buf, 256<<10); err != nil || n != len(buf) || !bytes.Equal(buf, old[:len(buf)]) {
		t.Errorf("ReadAt after the project file was replaced = %d, %v (first byte %q): want the opened file's bytes", n, err, buf[:1])
	}
}
