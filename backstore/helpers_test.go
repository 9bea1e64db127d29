package backstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

var isRoot = os.Geteuid() == 0

// needRoot skips a test that only root can run (testenv.RequireRoot:
// on CI, which runs as root, it fails instead). In the run as nobody
// (TestAsNonRoot) it skips.
func needRoot(t *testing.T, why string) {
	t.Helper()
	testenv.RequireRoot(t, why)
}

func openStore(t *testing.T, o Options) *Store {
	t.Helper()
	s, err := Open(o)
	if err != nil {
		t.Fatalf("Open(%+v): %v", o, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// closeStore closes s, failing the test on an error. Closing twice is
// harmless, so it can be deferred where the test also closes s.
func closeStore(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func hostfsStore(t *testing.T) *Store {
	return openStore(t, Options{Dir: t.TempDir()})
}

// objPath is a path of the object that l* calls can use (they do not
// follow the object itself).
func objPath(s *Store, id string) string {
	l := s.Loc(id)
	return fmt.Sprintf("/proc/self/fd/%d/%s", l.Dirfd, l.Name)
}

func lstatObj(t *testing.T, s *Store, id string) unix.Stat_t {
	t.Helper()
	st, err := s.Lstat(id)
	if err != nil {
		t.Fatalf("Lstat(%s): %v", id, err)
	}
	return st
}

func lstatPath(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// lxattr reads an xattr without following; ok is false when it is missing.
func lxattr(t *testing.T, p, name string) (val string, ok bool) {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Lgetxattr(p, name, buf)
	if err == unix.ENODATA {
		return "", false
	}
	if err != nil {
		t.Fatalf("lgetxattr(%s, %s): %v", p, name, err)
	}
	return string(buf[:n]), true
}

func lsetxattr(t *testing.T, p, name, val string) {
	t.Helper()
	if err := unix.Lsetxattr(p, name, []byte(val), 0); err != nil {
		t.Fatalf("lsetxattr(%s, %s): %v", p, name, err)
	}
}

func setTimes(t *testing.T, p string, atime, mtime unix.Timespec) {
	t.Helper()
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{atime, mtime}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p string, data []byte, mode uint32) {
	t.Helper()
	if err := os.WriteFile(p, data, 0600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// openSrc opens a lower file for copy-up as the overlay does, with its lstat.
func openSrc(t *testing.T, p string) (*os.File, unix.Stat_t) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return f, st
}

func readObj(t *testing.T, s *Store, id string) []byte {
	t.Helper()
	f, err := s.Open(id, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatalf("fstat object %s: %v", id, err)
	}
	buf := make([]byte, st.Size)
	if _, err := f.ReadAt(buf, 0); err != nil && st.Size > 0 {
		t.Fatalf("reading object %s: %v", id, err)
	}
	return buf
}

func listObjects(t *testing.T, s *Store) []string {
	t.Helper()
	var ids []string
	if err := s.Objects(func(id string) error { ids = append(ids, id); return nil }); err != nil {
		t.Fatalf("Objects: %v", err)
	}
	slices.Sort(ids)
	return ids
}

// dataRanges maps the data extents of an open file (SEEK_DATA/SEEK_HOLE).
func dataRanges(t *testing.T, f *os.File) [][2]int64 {
	t.Helper()
	fd := int(f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	var r [][2]int64
	for off := int64(0); off < st.Size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break
		}
		if err != nil {
			t.Fatalf("SEEK_DATA: %v", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			t.Fatalf("SEEK_HOLE: %v", err)
		}
		r = append(r, [2]int64{data, hole})
		off = hole
	}
	return r
}

func objRanges(t *testing.T, s *Store, id string) [][2]int64 {
	t.Helper()
	f, err := s.Open(id, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return dataRanges(t, f)
}

func wantErrno(t *testing.T, what string, err error, want unix.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

// spillPath is where a spilled object must be on disk.
func spillPath(dir, id string) string { return filepath.Join(dir, "spill", id[:2], id) }

// pattern returns n non-zero, non-repeating-looking bytes.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x>>24) | 1
	}
	return b
}

// testOwner is the owner tests give new objects: another user as root,
// ourselves otherwise (only root can give files away).
func testOwner() (uid, gid int) {
	if isRoot {
		return 1234, 5678
	}
	return os.Geteuid(), os.Getegid()
}

// wantModeOwner checks an object's full mode and its owner.
func wantModeOwner(t *testing.T, what string, st unix.Stat_t, mode uint32, uid, gid int) {
	t.Helper()
	if st.Mode != mode {
		t.Errorf("%s: mode = %o, want %o", what, st.Mode, mode)
	}
	if int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("%s: owner = %d:%d, want %d:%d", what, st.Uid, st.Gid, uid, gid)
	}
}

// sparseFile creates a file of size bytes holding chunks at their
// offsets and holes elsewhere.
func sparseFile(t *testing.T, p string, size int64, chunks map[int64][]byte) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off, b := range chunks {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// copyUp copies up the file at p as the overlay does and returns the
// object, the open source and its lstat.
func copyUp(t *testing.T, s *Store, p string, withData bool) (string, *os.File, unix.Stat_t) {
	t.Helper()
	in, st := openSrc(t, p)
	id, err := s.CopyUp(in, &st, withData)
	if err != nil {
		t.Fatalf("CopyUp(%s): %v", p, err)
	}
	return id, in, st
}

// newFile creates a regular file object of mode holding data.
func newFile(t *testing.T, s *Store, mode uint32, data []byte) string {
	t.Helper()
	id, f, err := s.CreateFile(mode, -1, -1)
	if err != nil {
		t.Fatalf("CreateFile(%o): %v", mode, err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatalf("writing object %s: %v", id, err)
	}
	return id
}

// wantContent checks that object id holds what f holds.
func wantContent(t *testing.T, s *Store, id string, f *os.File) {
	t.Helper()
	obj, err := s.Open(id, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if fileSum(t, obj) != fileSum(t, f) {
		t.Errorf("object %s's content differs from %s", id, f.Name())
	}
}
