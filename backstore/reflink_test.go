package backstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// mountXFS mounts a fresh reflink-capable XFS image (testenv.MountXFS).
func mountXFS(t *testing.T) string { return testenv.MountXFS(t) }

// mountImage mounts a fresh image made by mkfs.TYPE (testenv.MountImage).
func mountImage(t *testing.T, typ, pkg string, args ...string) string {
	return testenv.MountImage(t, typ, pkg, args...)
}

const (
	fsIocFiemap          = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync       = 0x1
	fiemapExtentLast     = 0x1
	fiemapExtentDelalloc = 0x4
	fiemapExtentShared   = 0x2000
	fiemapHeaderSize     = 32
	fiemapExtentSize     = 56
)

type extent struct {
	logical, length int64
	flags           uint32
}

// fiemap returns the extents of an open file (FS_IOC_FIEMAP), after
// writing its dirty data out.
func fiemap(t *testing.T, f *os.File) []extent {
	t.Helper()
	return fiemapFlags(t, f, fiemapFlagSync)
}

// fiemapFlags is fiemap with the request's flags: without
// fiemapFlagSync, extents not written yet are reported as such
// (fiemapExtentDelalloc).
func fiemapFlags(t *testing.T, f *os.File, reqFlags uint32) []extent {
	t.Helper()
	const batch = 64
	buf := make([]byte, fiemapHeaderSize+batch*fiemapExtentSize)
	le := binary.LittleEndian
	var out []extent
	for start := uint64(0); ; {
		clear(buf)
		le.PutUint64(buf[0:], start)
		le.PutUint64(buf[8:], ^uint64(0)-start)
		le.PutUint32(buf[16:], reqFlags)
		le.PutUint32(buf[24:], batch)
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0])))
		if errno != 0 {
			t.Fatalf("FIEMAP: %v", errno)
		}
		n := le.Uint32(buf[20:])
		if n == 0 {
			return out
		}
		for i := 0; i < int(n); i++ {
			e := buf[fiemapHeaderSize+i*fiemapExtentSize:]
			x := extent{logical: int64(le.Uint64(e[0:])), length: int64(le.Uint64(e[16:])), flags: le.Uint32(e[40:])}
			out = append(out, x)
			start = uint64(x.logical + x.length)
			if x.flags&fiemapExtentLast != 0 {
				return out
			}
		}
	}
}

// sharedBytes sums the extents of object id that FIEMAP marks shared,
// and all of them.
func sharedBytes(t *testing.T, s *Store, id string) (shared, total int64) {
	t.Helper()
	f, err := s.Open(id, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, e := range fiemap(t, f) {
		total += e.length
		if e.flags&fiemapExtentShared != 0 {
			shared += e.length
		}
	}
	return shared, total
}

func freeBytes(t *testing.T, p string) int64 {
	t.Helper()
	unix.Sync()
	var statfs unix.Statfs_t
	if err := unix.Statfs(p, &statfs); err != nil {
		t.Fatal(err)
	}
	return int64(statfs.Bfree) * statfs.Bsize
}

func fileSum(t *testing.T, f *os.File) [32]byte {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<40)); err != nil {
		t.Fatal(err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

func TestReflinkOnXFS(t *testing.T) {
	mnt := mountXFS(t)
	s := openStore(t, Options{Dir: filepath.Join(mnt, "store")})
	if !s.Info().Reflink {
		t.Errorf("Info().Reflink = false on XFS with reflink=1")
	}

	const size = 100 << 20
	src := filepath.Join(mnt, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	chunk := pattern(1<<20, 13)
	for off := int64(0); off < size; off += int64(len(chunk)) {
		chunk[0]++ // every MiB differs
		if _, err := f.WriteAt(chunk, off); err != nil {
			t.Fatal(err)
		}
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		t.Fatalf("fsync %s: %v", src, err)
	}
	setTimes(t, src, atime, mtime)
	in, st := openSrc(t, src)

	before := freeBytes(t, mnt)
	id, err := s.CopyUp(in, &st, true)
	if err != nil {
		t.Fatal(err)
	}
	after := freeBytes(t, mnt)
	if used := before - after; used > 4<<20 {
		t.Errorf("CopyUp of 100 MiB allocated %d bytes: not a reflink", used)
	}
	if shared, total := sharedBytes(t, s, id); total != size || shared != size {
		t.Errorf("copy-up's extents: %d of %d bytes shared, want %d of %d", shared, total, size, size)
	}
	wantAttrs(t, s, id, st)
	wantContent(t, s, id, in)

	before = freeBytes(t, mnt)
	cid, err := s.Clone(id)
	if err != nil {
		t.Fatal(err)
	}
	if used := before - freeBytes(t, mnt); used > 4<<20 {
		t.Errorf("Clone of 100 MiB allocated %d bytes: not a reflink", used)
	}
	if shared, total := sharedBytes(t, s, cid); total != size || shared != size {
		t.Errorf("clone's extents: %d of %d bytes shared, want %d of %d", shared, total, size, size)
	}
	// Writing the clone unshares only what is written.
	w, err := s.Open(cid, unix.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("changed"), 0); err != nil {
		t.Fatalf("writing the clone %s: %v", cid, err)
	}
	err = w.Sync()
	w.Close()
	if err != nil {
		t.Fatalf("fsync the clone %s: %v", cid, err)
	}
	r, err := s.Open(id, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	head := make([]byte, 7)
	if _, err := r.ReadAt(head, 0); err != nil || bytes.Equal(head, []byte("changed")) {
		t.Errorf("writing the clone changed the copy-up object")
	}
}

// A source on another filesystem cannot be reflinked: CopyUp falls back
// to copying, into the reflink-capable store.
func TestReflinkStoreCopiesAcrossFilesystems(t *testing.T) {
	mnt := mountXFS(t)
	s := openStore(t, Options{Dir: filepath.Join(mnt, "store")})
	src := filepath.Join(t.TempDir(), "elsewhere")
	data := pattern(1<<20, 14)
	sparseFile(t, src, 65<<20, map[int64][]byte{0: data, 64 << 20: data})
	id, in, st := copyUp(t, s, src, true)
	if got := lstatObj(t, s, id); got.Size != st.Size || got.Blocks > st.Blocks+256 {
		t.Errorf("size %d blocks %d, want %d and about %d blocks", got.Size, got.Blocks, st.Size, st.Blocks)
	}
	wantContent(t, s, id, in)
}
