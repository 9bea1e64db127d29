package backstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

var (
	atime = unix.Timespec{Sec: 1_000_000_000, Nsec: 123_456_789}
	mtime = unix.Timespec{Sec: 1_200_000_000, Nsec: 987_654_321}
)

// capability is a valid security.capability value (v2, cap_net_raw+ep).
func capability() []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000001)
	binary.LittleEndian.PutUint32(b[4:], 1<<unix.CAP_NET_RAW)
	return b
}

// wantAttrs checks that object id has st's mode, owner, atime and mtime.
func wantAttrs(t *testing.T, s *Store, id string, want unix.Stat_t) {
	t.Helper()
	got := lstatObj(t, s, id)
	if got.Mode != want.Mode {
		t.Errorf("mode = %o, want %o", got.Mode, want.Mode)
	}
	if got.Uid != want.Uid || got.Gid != want.Gid {
		t.Errorf("owner = %d:%d, want %d:%d", got.Uid, got.Gid, want.Uid, want.Gid)
	}
	if got.Atim != want.Atim || got.Mtim != want.Mtim {
		t.Errorf("atime, mtime = %v, %v, want %v, %v", got.Atim, got.Mtim, want.Atim, want.Mtim)
	}
}

func TestCopyUpPreservesAttrs(t *testing.T) {
	s := hostfsStore(t)
	src := filepath.Join(t.TempDir(), "setid")
	writeFile(t, src, []byte("#!/bin/sh\necho hi\n"), 0600)
	lsetxattr(t, src, "user.color", "blue")
	lsetxattr(t, src, "user.empty", "")
	want := map[string]string{"user.color": "blue", "user.empty": ""}
	if isRoot {
		lsetxattr(t, src, "trusted.origin", "lower")
		want["trusted.origin"] = "lower"
		if err := unix.Lchown(src, 1234, 5678); err != nil {
			t.Fatal(err)
		}
		if err := unix.Lsetxattr(src, "security.capability", capability(), 0); err != nil {
			t.Fatal(err)
		}
		v, _ := lxattr(t, src, "security.capability")
		want["security.capability"] = v
	}
	mode := uint32(06755)
	if !isRoot {
		mode = 04755 // setgid needs the group; ours may not be the file's
	}
	if err := unix.Chmod(src, mode); err != nil {
		t.Fatal(err)
	}
	setTimes(t, src, atime, mtime)

	in, st := openSrc(t, src)
	if _, err := in.Seek(5, 0); err != nil {
		t.Fatalf("seeking the source to 5: %v", err)
	}
	id, err := s.CopyUp(in, &st, true)
	if err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, s, id, st)
	if st.Mode&07777 != mode {
		t.Fatalf("source mode %o, want %o: the test set it up wrong", st.Mode, mode)
	}
	if got := readObj(t, s, id); string(got) != "#!/bin/sh\necho hi\n" {
		t.Errorf("content = %q", got)
	}
	for name, v := range want {
		if got, ok := lxattr(t, objPath(s, id), name); !ok || got != v {
			t.Errorf("xattr %s = %q (present %v), want %q", name, got, ok, v)
		}
	}
	if off, _ := in.Seek(0, 1); off != 5 {
		t.Errorf("source offset after CopyUp = %d, want 5 (unchanged)", off)
	}
}

func TestCopyUpSparseKeepsHoles(t *testing.T) {
	s := hostfsStore(t)
	src := filepath.Join(t.TempDir(), "sparse")
	const size = 1 << 30
	chunks := map[int64][]byte{0: pattern(4096, 1), 256<<20 + 8192: pattern(8192, 2), size - 4096: pattern(4096, 3)}
	sparseFile(t, src, size, chunks)
	id, in, st := copyUp(t, s, src, true)
	got := lstatObj(t, s, id)
	if got.Size != size {
		t.Errorf("size = %d, want %d", got.Size, size)
	}
	if got.Blocks > st.Blocks+64 {
		t.Errorf("st_blocks = %d, source has %d: holes were filled", got.Blocks, st.Blocks)
	}
	if want, got := dataRanges(t, in), objRanges(t, s, id); !slices.Equal(got, want) {
		t.Errorf("data ranges = %v, want %v", got, want)
	}
	obj, err := s.Open(id, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	for off, b := range chunks {
		buf := make([]byte, len(b))
		if _, err := obj.ReadAt(buf, off); err != nil || !bytes.Equal(buf, b) {
			t.Errorf("data at %d differs (%v)", off, err)
		}
	}
	buf := make([]byte, 4096)
	if _, err := obj.ReadAt(buf, 512<<20); err != nil || !bytes.Equal(buf, zeroBlock[:]) {
		t.Errorf("hole at 512 MiB does not read as zeros (%v)", err)
	}
}

func TestCopyUpWithoutData(t *testing.T) {
	s := hostfsStore(t)
	src := filepath.Join(t.TempDir(), "ro")
	writeFile(t, src, pattern(1<<20, 4), 0600)
	lsetxattr(t, src, "user.k", "v")
	if err := unix.Chmod(src, 0444); err != nil {
		t.Fatalf("chmod %s 0444: %v", src, err)
	}
	setTimes(t, src, atime, mtime)
	in, st := openSrc(t, src)
	id, err := s.CopyUp(in, &st, false)
	if err != nil {
		t.Fatal(err)
	}
	got := lstatObj(t, s, id)
	if got.Size != 0 || got.Blocks != 0 {
		t.Errorf("O_TRUNC copy-up: size %d blocks %d, want 0 0", got.Size, got.Blocks)
	}
	st.Size = 0
	wantAttrs(t, s, id, st)
	// A read-only mode does not stop the xattrs (set before chmod).
	if v, ok := lxattr(t, objPath(s, id), "user.k"); !ok || v != "v" {
		t.Errorf("xattr user.k = %q (present %v), want v", v, ok)
	}
}

func TestCopyUpRejectsNonRegular(t *testing.T) {
	s := hostfsStore(t)
	dir := t.TempDir()
	f, st := openSrc(t, dir)
	_, err := s.CopyUp(f, &st, true)
	wantErrno(t, "CopyUp(directory)", err, unix.EINVAL)
	if got := listObjects(t, s); len(got) != 0 {
		t.Errorf("objects left: %v", got)
	}
}

func TestCopyAttrsDirectory(t *testing.T) {
	s := hostfsStore(t)
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0700); err != nil {
		t.Fatal(err)
	}
	lsetxattr(t, dir, "user.dir", "yes")
	if isRoot {
		if err := unix.Lchown(dir, 1234, 5678); err != nil {
			t.Fatalf("lchown %s 1234:5678: %v", dir, err)
		}
		lsetxattr(t, dir, "trusted.opaque", "y")
	}
	mode := uint32(03750)
	if !isRoot {
		mode = 01750
	}
	if err := unix.Chmod(dir, mode); err != nil {
		t.Fatalf("chmod %s %o: %v", dir, mode, err)
	}
	setTimes(t, dir, atime, mtime)
	f, st := openSrc(t, dir)

	id, err := s.Mkdir(0700, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CopyAttrs(id, &st, f); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, s, id, st)
	if v, ok := lxattr(t, objPath(s, id), "user.dir"); !ok || v != "yes" {
		t.Errorf("xattr user.dir = %q (present %v), want yes", v, ok)
	}
	if isRoot {
		if v, ok := lxattr(t, objPath(s, id), "trusted.opaque"); !ok || v != "y" {
			t.Errorf("xattr trusted.opaque = %q (present %v), want y", v, ok)
		}
	}
}

// A symlink's attributes are its own: CopyAttrs reads the xattrs of the
// link (not of its target) through an O_PATH fd, and never follows the
// symlink object.
func TestCopyAttrsSymlink(t *testing.T) {
	s := hostfsStore(t)
	tmp := t.TempDir()
	target := filepath.Join(tmp, "target")
	writeFile(t, target, []byte("t"), 0640)
	lsetxattr(t, target, "user.target", "not mine")
	link := filepath.Join(tmp, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if isRoot {
		lsetxattr(t, link, "trusted.link", "mine")
		if err := unix.Lchown(link, 1234, 5678); err != nil {
			t.Fatal(err)
		}
	}
	setTimes(t, link, atime, mtime)
	var st unix.Stat_t
	if err := unix.Lstat(link, &st); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(link, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), link)
	defer f.Close()

	// The object points at the real target: following it anywhere
	// would change the target's mode, times or xattrs.
	id, err := s.Symlink(target, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	before := lstatPath(t, target)
	if err := s.CopyAttrs(id, &st, f); err != nil {
		t.Fatal(err)
	}
	got := lstatObj(t, s, id)
	if got.Uid != st.Uid || got.Gid != st.Gid || got.Atim != st.Atim || got.Mtim != st.Mtim {
		t.Errorf("symlink owner %d:%d times %v %v, want %d:%d %v %v", got.Uid, got.Gid, got.Atim, got.Mtim, st.Uid, st.Gid, st.Atim, st.Mtim)
	}
	if _, ok := lxattr(t, objPath(s, id), "user.target"); ok {
		t.Errorf("the target's xattr user.target was copied onto the symlink")
	}
	if isRoot {
		if v, ok := lxattr(t, objPath(s, id), "trusted.link"); !ok || v != "mine" {
			t.Errorf("xattr trusted.link = %q (present %v), want mine", v, ok)
		}
		if _, ok := lxattr(t, target, "trusted.link"); ok {
			t.Errorf("trusted.link landed on the symlink's target")
		}
	}
	after := lstatPath(t, target)
	if after.Mode != before.Mode || after.Mtim != before.Mtim || after.Atim != before.Atim {
		t.Errorf("target changed: mode %o→%o mtime %v→%v", before.Mode, after.Mode, before.Mtim, after.Mtim)
	}
}

func TestCopyAttrsFifoFromOPath(t *testing.T) {
	s := hostfsStore(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(fifo, 0624); err != nil {
		t.Fatalf("chmod %s 0624: %v", fifo, err)
	}
	if isRoot {
		lsetxattr(t, fifo, "trusted.k", "fifo")
		if err := unix.Lchown(fifo, 1234, 5678); err != nil {
			t.Fatalf("lchown %s 1234:5678: %v", fifo, err)
		}
	}
	setTimes(t, fifo, atime, mtime)
	st := lstatPath(t, fifo)
	fd, err := unix.Open(fifo, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), fifo)
	defer f.Close()

	id, err := s.Mknod(st.Mode, 0, int(st.Uid), int(st.Gid))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CopyAttrs(id, &st, f); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, s, id, st)
	if isRoot {
		if v, ok := lxattr(t, objPath(s, id), "trusted.k"); !ok || v != "fifo" {
			t.Errorf("xattr trusted.k = %q (present %v), want fifo", v, ok)
		}
	}
}

func TestCopyAttrsWithoutXattrSource(t *testing.T) {
	s := hostfsStore(t)
	id := newFile(t, s, 0600, nil)
	st := lstatObj(t, s, id)
	st.Mode = unix.S_IFREG | 0751
	st.Atim, st.Mtim = atime, mtime
	if err := s.CopyAttrs(id, &st, nil); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, s, id, st)
	err := s.CopyAttrs("0123456789abcdef", &st, nil)
	wantErrno(t, "CopyAttrs(missing)", err, unix.ENOENT)
}

func TestCloneRegular(t *testing.T) {
	s := hostfsStore(t)
	id, f, err := s.CreateFile(0600, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(64<<10, 5)
	for _, off := range []int64{0, 32 << 20} { // a hole in between
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatalf("writing object %s at %d: %v", id, off, err)
		}
	}
	f.Close()
	lsetxattr(t, objPath(s, id), "user.x", "1")
	st := lstatObj(t, s, id)
	st.Mode = unix.S_IFREG | 02640
	if !isRoot {
		st.Mode = unix.S_IFREG | 0640
	}
	st.Atim, st.Mtim = atime, mtime
	if err := s.CopyAttrs(id, &st, nil); err != nil {
		t.Fatal(err)
	}
	st = lstatObj(t, s, id)

	cid, err := s.Clone(id)
	if err != nil {
		t.Fatal(err)
	}
	if cid == id {
		t.Fatalf("Clone returned the same id")
	}
	// Reading the original for the copy left its atime alone.
	wantAttrs(t, s, id, st)
	wantAttrs(t, s, cid, st)
	if got, want := objRanges(t, s, cid), objRanges(t, s, id); !slices.Equal(got, want) {
		t.Errorf("clone's data ranges = %v, want %v", got, want)
	}
	if !bytes.Equal(readObj(t, s, cid), readObj(t, s, id)) {
		t.Errorf("clone's content differs")
	}
	if v, ok := lxattr(t, objPath(s, cid), "user.x"); !ok || v != "1" {
		t.Errorf("clone's xattr user.x = %q (present %v), want 1", v, ok)
	}
	// The clone is independent.
	w, err := s.Open(cid, unix.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("changed"), 0); err != nil {
		t.Fatalf("writing the clone %s: %v", cid, err)
	}
	w.Close()
	if got := readObj(t, s, id); !bytes.Equal(got[:7], data[:7]) {
		t.Errorf("writing the clone changed the original: %q", got[:7])
	}
}

// A non-root daemon cannot open its own mode-0000 object; Clone lends
// itself read permission and gives the mode back.
func TestCloneUnreadable(t *testing.T) {
	s := hostfsStore(t)
	id := newFile(t, s, 0000, []byte("secret"))
	st := lstatObj(t, s, id)
	cid, err := s.Clone(id)
	if err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, s, id, st)
	// Mode 0000, as the original was made: S_IFREG and no permission
	// bits.
	if got := lstatObj(t, s, cid); got.Mode != unix.S_IFREG || got.Size != 6 {
		t.Errorf("clone mode %o size %d, want %o 6", got.Mode, got.Size, unix.S_IFREG)
	}
}

func TestCloneSpecial(t *testing.T) {
	s := hostfsStore(t)
	did, err := s.Mkdir(01755, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	lsetxattr(t, objPath(s, did), "user.d", "dir")
	lid, err := s.Symlink("some/where", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	fid, err := s.Mknod(unix.S_IFIFO|0604, 0, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{did, lid, fid}
	if isRoot {
		lsetxattr(t, objPath(s, lid), "trusted.l", "link")
		cid, err := s.Mknod(unix.S_IFCHR|0660, unix.Mkdev(1, 5), 1234, 5678)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cid)
	}
	for _, id := range ids {
		l := s.Loc(id)
		ts := []unix.Timespec{atime, mtime}
		if err := unix.UtimesNanoAt(l.Dirfd, l.Name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		st := lstatObj(t, s, id)
		nid, err := s.Clone(id)
		if err != nil {
			t.Fatalf("Clone(%o): %v", st.Mode, err)
		}
		wantAttrs(t, s, nid, st)
		if got := lstatObj(t, s, nid); got.Rdev != st.Rdev || got.Ino == st.Ino {
			t.Errorf("Clone(%o): rdev %x ino %d, want rdev %x and a new inode", st.Mode, got.Rdev, got.Ino, st.Rdev)
		}
	}
	if v, _ := lxattr(t, objPath(s, did), "user.d"); v != "dir" {
		t.Fatalf("setup: user.d = %q", v)
	}
	nd, _ := s.Clone(did)
	if v, ok := lxattr(t, objPath(s, nd), "user.d"); !ok || v != "dir" {
		t.Errorf("dir clone's xattr user.d = %q (present %v), want dir", v, ok)
	}
	nl, _ := s.Clone(lid)
	l := s.Loc(nl)
	if got, err := readlinkat(l.Dirfd, l.Name); got != "some/where" {
		t.Errorf("symlink clone points to %q (%v), want some/where", got, err)
	}
	if isRoot {
		if v, ok := lxattr(t, objPath(s, nl), "trusted.l"); !ok || v != "link" {
			t.Errorf("symlink clone's xattr trusted.l = %q (present %v), want link", v, ok)
		}
	}
	_, err = s.Clone("0123456789abcdef")
	if !errors.Is(err, unix.ENOENT) {
		t.Errorf("Clone(missing) = %v, want ENOENT", err)
	}
}

// The read/write fallback leaves all-zero blocks as holes and copies
// everything else exactly.
func TestReadWriteCopyKeepsZeroBlocksAsHoles(t *testing.T) {
	dir := t.TempDir()
	src, err := os.Create(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var data []byte
	data = append(data, pattern(4096, 1)...)
	data = append(data, make([]byte, 3*4096)...)         // zero blocks: holes
	data = append(data, pattern(100, 2)...)              // unaligned
	data = append(data, make([]byte, 4096+50)...)        // zero, not block-aligned
	data = append(data, pattern(4096*3, 3)...)           // data
	data = append(data, make([]byte, 2<<20)...)          // more than one buffer of zeros
	data = append(data, append(pattern(10, 4), 0, 0)...) // tail ending in zeros
	if _, err := src.Write(data); err != nil {
		t.Fatalf("writing %s: %v", src.Name(), err)
	}
	dst, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	c := &extentCopier{dfd: int(dst.Fd()), sfd: int(src.Fd()), rw: true}
	n, err := c.copy(0, int64(len(data)))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("copy = %d, %v, want %d, nil", n, err, len(data))
	}
	got, _ := os.ReadFile(dst.Name())
	if !bytes.Equal(got, data) {
		t.Fatalf("copied content differs (len %d, want %d)", len(got), len(data))
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(dst.Fd()), &st); err != nil {
		t.Fatalf("fstat %s: %v", dst.Name(), err)
	}
	if max := int64(len(data)-2<<20)/512 + 8; st.Blocks > max {
		t.Errorf("st_blocks = %d, want at most %d: zero blocks were written", st.Blocks, max)
	}
}
