package backstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

func TestOpenHostfs(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir})
	got := s.Info()
	got.Reflink = false // depends on the filesystem of TMPDIR
	want := Info{Kind: "hostfs", Mode: "dir", Root: filepath.Join(dir, "objects")}
	if got != want {
		t.Errorf("Info = %+v, want %+v", got, want)
	}
	if names := readNames(t, want.Root); !slices.Equal(names, []string{openMarker}) {
		t.Errorf("a new store's objects/ holds %q, want only %s (shards are made when needed)", names, openMarker)
	}
}

// TestShardsMadeWhenNeeded: a shard is made with its first object, and
// a store opened again finds the objects of the shards it made.
func TestShardsMadeWhenNeeded(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	root := s.Info().Root
	id, err := s.Symlink("target", -1, -1) // no pool: one object, one shard
	if err != nil {
		t.Fatal(err)
	}
	if names := readNames(t, root); !slices.Equal(names, []string{id[:2], openMarker}) {
		t.Errorf("after one object objects/ holds %q, want its shard %s and %s", names, id[:2], openMarker)
	}
	missing := "00000000000000ff"
	if id[:2] == "00" {
		missing = "ff000000000000ff"
	}
	if _, err := s.Lstat(missing); err != unix.ENOENT {
		t.Errorf("Lstat(%s), in a shard not made yet = %v, want ENOENT", missing, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, Options{Dir: dir})
	if _, err := s.Lstat(id); err != nil {
		t.Errorf("Lstat(%s) after reopening: %v", id, err)
	}
	var ids []string
	if err := s.Objects(func(id string) error { ids = append(ids, id); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{id}) {
		t.Errorf("Objects after reopening = %q, want [%s]", ids, id)
	}
	id2, err := s.Symlink("other", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lstat(id2); err != nil {
		t.Errorf("Lstat(%s), made after reopening: %v", id2, err)
	}
}

// TestSpreadChildren: where the filesystem has inode flags (ext4), a
// directory given to SpreadChildren carries TOPDIR, and keeps its other
// flags.
func TestSpreadChildren(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	before, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err == unix.ENOTTY || err == unix.EOPNOTSUPP || err == unix.EINVAL {
		testenv.Skip(t, testenv.InodeFlags, "the filesystem of %s has no inode flags (%v)", dir, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		t.Fatal(err)
	}
	SpreadChildren(dir)
	SpreadChildren(dir) // twice: no change
	after, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatal(err)
	}
	if sfs.Type == unix.EXT4_SUPER_MAGIC && after != before|fsTopdirFL {
		t.Errorf("flags on ext4 %#x, then %#x: want %#x (TOPDIR added)", before, after, before|fsTopdirFL)
	}
}

func readNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestOpenRejectsBadOptions(t *testing.T) {
	_, err := Open(Options{Kind: "floppy", Dir: t.TempDir()})
	if !errors.Is(err, ErrBadKind) {
		t.Errorf("Open(kind floppy) = %v, want ErrBadKind", err)
	}
	_, err = Open(Options{})
	wantErrno(t, "Open(no dir)", err, unix.EINVAL)
}

func TestObjectIDs(t *testing.T) {
	s := hostfsStore(t)
	id := newFile(t, s, 0644, nil)
	if len(id) != 16 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Errorf("id = %q, want 16 lowercase hex characters", id)
	}
	if _, err := os.Lstat(filepath.Join(s.Info().Root, id[:2], id)); err != nil {
		t.Errorf("object %s not in its shard: %v", id, err)
	}
	for _, bad := range []string{"", "../../etc/passwd", "/etc/passwd", "0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", "0123456789abcdeg"} {
		if got := s.Loc(bad); got != (Loc{Dirfd: -1}) {
			t.Errorf("Loc(%q) = %+v, want {-1 \"\"}", bad, got)
		}
		if _, err := s.Lstat(bad); !errors.Is(err, ErrBadID) {
			t.Errorf("Lstat(%q) = %v, want ErrBadID", bad, err)
		}
		if _, err := s.Open(bad, unix.O_RDONLY); !errors.Is(err, ErrBadID) {
			t.Errorf("Open(%q) = %v, want ErrBadID", bad, err)
		}
		if err := s.Remove(bad); !errors.Is(err, ErrBadID) {
			t.Errorf("Remove(%q) = %v, want ErrBadID", bad, err)
		}
	}
}

func TestCreateFile(t *testing.T) {
	old := unix.Umask(0077)
	defer unix.Umask(old)
	s := hostfsStore(t)
	uid, gid := testOwner()
	for _, mode := range []uint32{0644, 0777, 0, 04755, 02755, 01644, 06711} {
		id, f, err := s.CreateFile(mode, uid, gid)
		if err != nil {
			t.Fatalf("CreateFile(%o): %v", mode, err)
		}
		wantModeOwner(t, fmt.Sprintf("CreateFile(%o)", mode), lstatObj(t, s, id), unix.S_IFREG|mode, uid, gid)
		// The fd is writable whatever the mode (a write by non-root
		// then clears setuid, as the kernel does for any file).
		if _, err := f.Write([]byte("data")); err != nil {
			t.Errorf("write to new object: %v", err)
		}
		f.Close()
		if st := lstatObj(t, s, id); st.Size != 4 {
			t.Errorf("CreateFile(%o): size = %d, want 4", mode, st.Size)
		}
	}
}

func TestCreateFileIsRegularAndExclusive(t *testing.T) {
	s := hostfsStore(t)
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		id := newFile(t, s, 0600, nil)
		if seen[id] {
			t.Fatalf("id %s handed out twice", id)
		}
		seen[id] = true
	}
}

func TestMkdir(t *testing.T) {
	old := unix.Umask(0077)
	defer unix.Umask(old)
	s := hostfsStore(t)
	uid, gid := testOwner()
	for _, mode := range []uint32{0755, 01777, 02750, 0} {
		id, err := s.Mkdir(mode, uid, gid)
		if err != nil {
			t.Fatalf("Mkdir(%o): %v", mode, err)
		}
		wantModeOwner(t, fmt.Sprintf("Mkdir(%o)", mode), lstatObj(t, s, id), unix.S_IFDIR|mode, uid, gid)
	}
}

func TestSymlink(t *testing.T) {
	s := hostfsStore(t)
	uid, gid := testOwner()
	for _, target := range []string{"../x", "/etc/passwd", strings.Repeat("long/", 800) + "end"} {
		id, err := s.Symlink(target, uid, gid)
		if err != nil {
			t.Fatalf("Symlink(%.20q): %v", target, err)
		}
		wantModeOwner(t, "Symlink", lstatObj(t, s, id), unix.S_IFLNK|0777, uid, gid)
		l := s.Loc(id)
		got, err := readlinkat(l.Dirfd, l.Name)
		if err != nil || got != target {
			t.Errorf("readlink = %.20q (%v), want %.20q", got, err, target)
		}
	}
}

func TestMknod(t *testing.T) {
	s := hostfsStore(t)
	type node struct {
		mode uint32
		rdev uint64
	}
	nodes := []node{{unix.S_IFIFO | 0640, 0}, {unix.S_IFSOCK | 0600, 0}, {unix.S_IFIFO | 01666, 0}}
	if isRoot {
		nodes = append(nodes, node{unix.S_IFCHR | 0620, unix.Mkdev(1, 3)}, node{unix.S_IFBLK | 0600, unix.Mkdev(7, 200)})
	}
	for _, n := range nodes {
		id, err := s.Mknod(n.mode, n.rdev, -1, -1)
		if err != nil {
			t.Fatalf("Mknod(%o, %x): %v", n.mode, n.rdev, err)
		}
		st := lstatObj(t, s, id)
		if st.Mode != n.mode || st.Rdev != n.rdev {
			t.Errorf("Mknod(%o, %x): mode %o rdev %x, want %o %x", n.mode, n.rdev, st.Mode, st.Rdev, n.mode, n.rdev)
		}
	}
	if !isRoot {
		_, err := s.Mknod(unix.S_IFCHR|0600, unix.Mkdev(1, 3), -1, -1)
		wantErrno(t, "Mknod(char) as non-root", err, unix.EPERM)
		if got := listObjects(t, s); len(got) != len(nodes) {
			t.Errorf("after a failed Mknod: %d objects, want %d", len(got), len(nodes))
		}
	}
}

func TestOpen(t *testing.T) {
	s := hostfsStore(t)
	id := newFile(t, s, 0600, []byte("hello"))
	r, err := s.Open(id, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	n, _ := r.Read(buf)
	if string(buf[:n]) != "hello" {
		t.Errorf("read %q, want hello", buf[:n])
	}
	if fl, _ := unix.FcntlInt(r.Fd(), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("object fd without FD_CLOEXEC")
	}
	r.Close()

	link, err := s.Symlink(objPath(s, id), -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Open(link, unix.O_RDONLY)
	wantErrno(t, "Open(symlink object)", err, unix.ELOOP)

	missing := "0123456789abcdef"
	_, err = s.Open(missing, unix.O_RDWR|unix.O_CREAT)
	wantErrno(t, "Open(missing, O_CREAT)", err, unix.ENOENT)
	if _, err := s.Lstat(missing); err != unix.ENOENT {
		t.Errorf("Lstat(missing) = %v, want bare ENOENT", err)
	}
}

func TestRemove(t *testing.T) {
	s := hostfsStore(t)
	fid := newFile(t, s, 0600, nil)
	did, err := s.Mkdir(0500, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	lid, err := s.Symlink("nowhere", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	nid, err := s.Mknod(unix.S_IFIFO|0600, 0, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{fid, did, lid, nid} {
		if err := s.Remove(id); err != nil {
			t.Errorf("Remove(%s): %v", id, err)
		}
		if _, err := s.Lstat(id); err != unix.ENOENT {
			t.Errorf("Lstat after Remove(%s) = %v, want ENOENT", id, err)
		}
		if err := s.Remove(id); err != nil {
			t.Errorf("second Remove(%s) = %v, want nil", id, err)
		}
	}
	if got := listObjects(t, s); len(got) != 0 {
		t.Errorf("objects after removing all: %v", got)
	}
}

func TestObjects(t *testing.T) {
	s := hostfsStore(t)
	var want []string
	for i := 0; i < 30; i++ {
		var id string
		var err error
		switch i % 3 {
		case 0:
			var f *os.File
			id, f, err = s.CreateFile(0600, -1, -1)
			if f != nil {
				f.Close()
			}
		case 1:
			id, err = s.Mkdir(0700, -1, -1)
		case 2:
			id, err = s.Symlink("t", -1, -1)
		}
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	// Names that are not object ids are not objects. Shard ab is made
	// through the store, which lists only the shards it has open.
	if _, err := s.main.shard(0xab); err != nil {
		t.Fatalf("making shard ab: %v", err)
	}
	for _, name := range []string{"stray", "cd0123456789abcd" /* wrong shard */} {
		if err := os.WriteFile(filepath.Join(s.Info().Root, "ab", name), nil, 0600); err != nil {
			t.Fatalf("writing ab/%s: %v", name, err)
		}
	}
	slices.Sort(want)
	if got := listObjects(t, s); !slices.Equal(got, want) {
		t.Errorf("Objects = %v\nwant %v", got, want)
	}

	stop := errors.New("stop")
	calls := 0
	err := s.Objects(func(string) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Errorf("Objects with a failing fn: err %v after %d calls, want stop after 1", err, calls)
	}
}

func TestUsage(t *testing.T) {
	s := hostfsStore(t)
	id := newFile(t, s, 0600, pattern(1<<20, 1))
	for i := 0; i < 3; i++ {
		if _, err := s.Mkdir(0700, -1, -1); err != nil {
			t.Fatal(err)
		}
	}
	u, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.Objects != 4 {
		t.Errorf("Usage.Objects = %d, want 4", u.Objects)
	}
	st := lstatObj(t, s, id)
	if u.Bytes < st.Blocks*512 || u.Bytes < 1<<20 {
		t.Errorf("Usage.Bytes = %d, want >= %d (the 1 MiB file's blocks)", u.Bytes, st.Blocks*512)
	}
	var statfs unix.Statfs_t
	if err := unix.Statfs(s.Info().Root, &statfs); err != nil {
		t.Fatalf("statfs %s: %v", s.Info().Root, err)
	}
	if want := int64(statfs.Blocks) * statfs.Bsize; u.FsSize != want {
		t.Errorf("Usage.FsSize = %d, want %d", u.FsSize, want)
	}
	if u.FsFree <= 0 || u.FsFree > u.FsSize {
		t.Errorf("Usage.FsFree = %d, want in (0, %d]", u.FsFree, u.FsSize)
	}
}

func TestReopenHostfs(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	id := newFile(t, s, 0640, []byte("kept"))
	did, err := s.Mkdir(0750, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	want := listObjects(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	s = openStore(t, Options{Kind: "hostfs", Dir: dir})
	if got := listObjects(t, s); !slices.Equal(got, want) {
		t.Errorf("reopened store lists %v, want %v", got, want)
	}
	if got := readObj(t, s, id); string(got) != "kept" {
		t.Errorf("reopened object holds %q, want kept", got)
	}
	if st := lstatObj(t, s, did); st.Mode != unix.S_IFDIR|0750 {
		t.Errorf("reopened dir mode = %o, want %o", st.Mode, unix.S_IFDIR|0750)
	}
}

func TestConcurrentCreates(t *testing.T) {
	s := hostfsStore(t)
	var mu sync.Mutex
	ids := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				id, f, err := s.CreateFile(0600, -1, -1)
				if err != nil {
					errs <- err
					return
				}
				fmt.Fprintf(f, "%s", id)
				f.Close()
				mu.Lock()
				ids[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := listObjects(t, s); len(got) != 400 || len(ids) != 400 {
		t.Fatalf("%d objects, %d distinct ids, want 400", len(got), len(ids))
	}
	for id := range ids {
		if got := readObj(t, s, id); !bytes.Equal(got, []byte(id)) {
			t.Errorf("object %s holds %q", id, got)
		}
	}
}
