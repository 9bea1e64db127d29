package backstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// openFds counts this process's open file descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// waitPoolFull waits until s holds poolSize idle files.
func waitPoolFull(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.pool.mu.Lock()
		n := len(s.pool.idleFiles) + len(s.pool.madeFiles)
		s.pool.mu.Unlock()
		if n >= poolSize {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %d idle files after 20 s, want %d", n, poolSize)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// shardNames lists the names in the shards of hostfs store s.
func shardNames(t *testing.T, s *Store) []string {
	t.Helper()
	var names []string
	for i := range 256 {
		ents, err := os.ReadDir(filepath.Join(s.Info().Root, fmt.Sprintf("%02x", i)))
		if errors.Is(err, os.ErrNotExist) {
			continue // not made yet
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

// TestPool: file objects made from idle files have their id, mode and
// owner, are listed and collected like any other, and the idle files
// are neither listed, collected nor left open or named by Close.
func TestPool(t *testing.T) {
	for _, kind := range []string{"hostfs", "ramdisk"} {
		t.Run(kind, func(t *testing.T) {
			before := openFds(t)
			s, err := Open(Options{Kind: kind, Dir: t.TempDir(), RamdiskSize: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer closeStore(t, s)
			uid, gid := testOwner()
			// The first file starts the pool.
			ids := map[string]bool{newFile(t, s, 0600, nil): true}
			waitPoolFull(t, s)
			for i := 0; i < 2*poolSize; i++ {
				mode := uint32(0640 | i&1<<11) // every other one setuid
				uid, gid := uid, gid
				if i&2 != 0 {
					// The pool's own mode and owner (nothing to
					// change), then with setuid added.
					mode = poolMode | uint32(i&1)<<11
					uid, gid = os.Geteuid(), os.Getegid()
				}
				used := s.pool.used.Load()
				id, f, err := s.CreateFile(mode, uid, gid)
				if err != nil {
					t.Fatalf("CreateFile: %v", err)
				}
				if i == 0 && s.pool.used.Load() != used+1 {
					t.Errorf("CreateFile with a full pool did not take a file made ahead")
				}
				if ids[id] {
					t.Fatalf("id %s handed out twice", id)
				}
				ids[id] = true
				st := lstatObj(t, s, id)
				wantModeOwner(t, fmt.Sprintf("CreateFile(%o) #%d", mode, i), st, unix.S_IFREG|mode, uid, gid)
				if st.Nlink != 1 {
					t.Errorf("object %s: nlink %d, want 1", id, st.Nlink)
				}
				if _, err := f.WriteString(id); err != nil {
					t.Errorf("write to %s: %v", id, err)
				}
				f.Close()
				if b, err := os.ReadFile(objPath(s, id)); err != nil || string(b) != id {
					t.Errorf("object %s holds %q (%v), want its id", id, b, err)
				}
			}
			listed := 0
			if err := s.Objects(func(id string) error {
				if !ids[id] {
					t.Errorf("Objects lists %s, which CreateFile never returned", id)
				}
				listed++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if listed != len(ids) {
				t.Errorf("Objects lists %d objects, want the %d made (idle files are no objects)", listed, len(ids))
			}
			r, err := s.Collect(GCOptions{Referenced: func(func(string) error) error { return nil }, Grace: -1})
			if err != nil {
				t.Fatal(err)
			}
			if r.Removed != len(ids) || r.Objects != len(ids) {
				t.Errorf("Collect of an unreferenced store: %d objects, %d removed; want %d and %d", r.Objects, r.Removed, len(ids), len(ids))
			}
			last := newFile(t, s, 0600, nil)
			if last == "" {
				t.Error("no object after a collection")
			}
			if kind == "hostfs" {
				// The pool makes its idle files ahead, in a goroutine
				// of its own: wait for one.
				deadline := time.Now().Add(20 * time.Second)
				for len(shardNames(t, s)) < 2 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if n := len(shardNames(t, s)); n < 2 {
					t.Errorf("the shards hold %d names 20 s after a CreateFile, want the object and idle files", n)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if kind == "hostfs" {
				if got := shardNames(t, s); !slices.Equal(got, []string{last}) {
					t.Errorf("after Close the shards hold %d names, want only the object %s (idle files removed)", len(got), last)
				}
			}
			if after := openFds(t); after != before {
				t.Errorf("%d fds open after Close, %d before Open: the pool leaks", after, before)
			}
		})
	}
}

// TestPoolCloseBeforeUse: a store closed before it made a file, or
// closed twice, starts no goroutine and leaves nothing open.
func TestPoolCloseBeforeUse(t *testing.T) {
	before := openFds(t)
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if s.pool.started {
		t.Error("Close started the pool")
	}
	if after := openFds(t); after != before {
		t.Errorf("%d fds open after Close, %d before Open", after, before)
	}
}

// TestPoolTimes: a file object made from a file made ahead a while ago
// has the times of its creation, not of the idle file's.
func TestPoolTimes(t *testing.T) {
	s, err := Open(Options{Kind: "hostfs", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	uid, gid := testOwner()
	newFile(t, s, 0600, nil) // starts the pool
	waitPoolFull(t, s)
	time.Sleep(1200 * time.Millisecond)
	start := time.Now().Add(-50 * time.Millisecond) // file times come from a coarser clock
	used := s.pool.used.Load()
	id, f, err := s.CreateFile(0644, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if s.pool.used.Load() != used+1 {
		t.Fatalf("CreateFile did not take a file made ahead")
	}
	st := lstatObj(t, s, id)
	for name, ts := range map[string]unix.Timespec{"atime": st.Atim, "mtime": st.Mtim, "ctime": st.Ctim} {
		if got := time.Unix(ts.Unix()); got.Before(start) {
			t.Errorf("%s of a new file: %v, before its creation at %v", name, got, start)
		}
	}
}

// TestRecycle: a removed regular file object is kept emptied and idle
// where it is, and reused by the next CreateFile under the same id, with
// nothing of its past (data, extended attributes, mode, times); anything
// else, or anything past maxIdle, is removed; idle objects are no
// objects; Close removes them.
func TestRecycle(t *testing.T) {
	for _, kind := range []string{"hostfs", "ramdisk"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(Options{Kind: kind, Dir: dir, RamdiskSize: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer closeStore(t, s)
			uid, gid := testOwner()
			old := newFile(t, s, 0600, []byte("old data"))
			if err := unix.Lsetxattr(objPath(s, old), "user.old", []byte("x"), 0); err != nil && err != unix.ENOTSUP {
				t.Fatal(err)
			}
			if err := unix.Chmod(objPath(s, old), 06755); err != nil {
				t.Fatal(err)
			}
			if err := s.Recycle(old); err != nil {
				t.Fatal(err)
			}
			if !s.IsIdle(old) {
				t.Fatalf("Recycle of a regular file object: not kept")
			}
			if st := lstatObj(t, s, old); st.Size != 0 {
				t.Errorf("recycled object: size %d, want 0 (emptied)", st.Size)
			}
			time.Sleep(20 * time.Millisecond)
			start := time.Now().Add(-10 * time.Millisecond)
			id, f, err := s.CreateFile(0640, uid, gid)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if id != old || s.IsIdle(id) {
				t.Fatalf("CreateFile after Recycle(%s) made %s (idle still: %v), want the recycled object", old, id, s.IsIdle(id))
			}
			if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
				t.Errorf("reused object: open with flags %#o (%v), want no O_NONBLOCK", fl, err)
			}
			st := lstatObj(t, s, id)
			wantModeOwner(t, "reused object", st, unix.S_IFREG|0640, uid, gid)
			if st.Size != 0 {
				t.Errorf("reused object: size %d, want 0", st.Size)
			}
			if got := time.Unix(st.Mtim.Unix()); got.Before(start) {
				t.Errorf("reused object: mtime %v, before its creation at %v", got, start)
			}
			if sz, err := unix.Llistxattr(objPath(s, id), make([]byte, 256)); err == nil && sz != 0 {
				t.Errorf("reused object keeps extended attributes (%d bytes of names)", sz)
			}
			if _, err := f.WriteString("new"); err != nil {
				t.Fatal(err)
			}

			dirID, err := s.Mkdir(0755, uid, gid)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Lsetxattr(objPath(s, dirID), "user.old", []byte("x"), 0); err != nil && err != unix.ENOTSUP {
				t.Fatal(err)
			}
			if err := s.Recycle(dirID); err != nil || !s.IsIdle(dirID) {
				t.Errorf("Recycle of a directory: %v, kept %v; want it kept", err, s.IsIdle(dirID))
			}
			if sz, err := unix.Llistxattr(objPath(s, dirID), make([]byte, 256)); err == nil && sz != 0 {
				t.Errorf("recycled directory keeps extended attributes (%d bytes of names)", sz)
			}
			linkID, err := s.Symlink("target", uid, gid)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Recycle(linkID); err != nil || s.IsIdle(linkID) {
				t.Errorf("Recycle of a symlink: %v, kept %v; want it removed", err, s.IsIdle(linkID))
			}
			if _, err := s.Lstat(linkID); err != unix.ENOENT {
				t.Errorf("symlink object after Recycle: %v, want ENOENT", err)
			}

			var recycled []string
			for range maxIdle + 2 {
				recycled = append(recycled, newFile(t, s, 0600, []byte("x")))
			}
			for _, id := range recycled {
				if err := s.Recycle(id); err != nil {
					t.Fatal(err)
				}
			}
			s.pool.mu.Lock()
			idleFiles, open := len(s.pool.idleFiles), s.pool.openIdle
			s.pool.mu.Unlock()
			if idleFiles != maxIdle {
				t.Errorf("%d idle files after %d were recycled, want %d", idleFiles, len(recycled), maxIdle)
			}
			if open != idleFds {
				t.Errorf("%d idle files kept open, want %d (the rest by name)", open, idleFds)
			}
			kept := 0
			for i, id := range recycled {
				st, err := s.Lstat(id)
				switch {
				case s.IsIdle(id) && err == nil && st.Size == 0:
					kept++
				case !s.IsIdle(id) && err == unix.ENOENT:
				default:
					t.Errorf("recycled #%d: idle %v, lstat %v (size %d); want idle and empty, or removed", i, s.IsIdle(id), err, st.Size)
				}
			}
			if kept != maxIdle || !s.IsIdle(recycled[0]) {
				t.Errorf("%d of %d recycled files kept (the first: %v), want the first %d", kept, len(recycled), s.IsIdle(recycled[0]), maxIdle)
			}
			listed := 0
			if err := s.Objects(func(id string) error {
				listed++
				if s.IsIdle(id) {
					t.Errorf("Objects lists idle object %s", id)
				}
				return nil
			}); err != nil {
				t.Fatalf("Objects: %v", err)
			}
			if listed != 1 { // old, reused
				t.Errorf("Objects lists %d objects, want 1 (idle objects are no objects)", listed)
			}
			r, err := s.Collect(GCOptions{Referenced: func(func(string) error) error { return nil }, Grace: -1, DryRun: true})
			if err != nil || r.Objects != 1 {
				t.Errorf("Collect looked at %d objects (%v), want 1", r.Objects, err)
			}
			// The last recycled files are kept by name only: taken again,
			// they are opened again, and work as new files.
			reused := s.pool.reused.Load()
			for i := range 3 {
				want := []byte(fmt.Sprintf("reused %d", i))
				id := newFile(t, s, 0640, want)
				if !slices.Contains(recycled, id) {
					t.Errorf("new file %s is no recycled object", id)
				}
				obj, err := s.Open(id, unix.O_RDONLY)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(obj)
				obj.Close()
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("reused object %s holds %q, %v; want %q", id, got, err, want)
				}
			}
			if n := s.pool.reused.Load() - reused; n != 3 {
				t.Errorf("%d recycled objects reused, want 3", n)
			}
			paths := []string{objPath(s, recycled[0]), objPath(s, dirID)}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				if kind == "hostfs" {
					if _, err := os.Lstat(p); !os.IsNotExist(err) {
						t.Errorf("idle object %s after Close: %v, want it removed", p, err)
					}
				}
			}
		})
	}
}

// TestRecycleReportsRemoveError: an object that Recycle removes instead
// of keeping (a symlink) gives Recycle the error of that removal, as
// Remove would.
func TestRecycleReportsRemoveError(t *testing.T) {
	s := hostfsStore(t)
	id, err := s.Symlink("target", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	shard := filepath.Join(s.Info().Root, id[:2])
	unlock := lockDir(t, shard)
	err = s.Recycle(id)
	unlock()
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		t.Errorf("Recycle of a symlink in a shard that forbids removing it: %v, want EPERM or EACCES", err)
	}
	if s.IsIdle(id) {
		t.Errorf("symlink %s kept idle", id)
	}
	if _, err := s.Lstat(id); err != nil {
		t.Errorf("symlink %s after its removal failed: %v, want it there", id, err)
	}
	if err := s.Recycle(id); err != nil {
		t.Errorf("Recycle once the shard allows it: %v", err)
	}
}

// fsImmutableFL is FS_IMMUTABLE_FL (linux/fs.h), which x/sys/unix lacks.
const fsImmutableFL = 0x00000010

// lockDir forbids removing the entries of dir (the immutable flag as
// root, who ignores modes; mode 0500 otherwise) until the returned
// function, which t.Cleanup calls too, undoes it.
func lockDir(t *testing.T, dir string) func() {
	t.Helper()
	set := func(lock bool) error {
		if !isRoot {
			mode := uint32(0700)
			if lock {
				mode = 0500
			}
			return unix.Chmod(dir, mode)
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		if err != nil {
			return err
		}
		if lock {
			flags |= fsImmutableFL
		} else {
			flags &^= fsImmutableFL
		}
		return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags))
	}
	if err := set(true); err != nil {
		if isRoot && (err == unix.ENOTTY || err == unix.EOPNOTSUPP) {
			testenv.Skip(t, testenv.ImmutableFlag, "the filesystem of %s has no immutable flag: %v", dir, err)
		}
		t.Fatalf("locking %s: %v", dir, err)
	}
	locked := true
	unlock := func() {
		if !locked {
			return
		}
		if err := set(false); err != nil {
			t.Errorf("unlocking %s: %v", dir, err)
			return
		}
		locked = false
	}
	t.Cleanup(unlock)
	return unlock
}

// TestRecycledFileNotWrittenAtClose: on ext4, a new file that took a
// recycled object is not written out when its writer closes it, as a new
// native file is not (the truncate that emptied the object would
// otherwise make ext4 flush it at close: auto_da_alloc).
func TestRecycledFileNotWrittenAtClose(t *testing.T) {
	mnt := mountImage(t, "ext4", "e2fsprogs", "-q", "-F")
	s := openStore(t, Options{Dir: filepath.Join(mnt, "store")})
	data := bytes.Repeat([]byte("x"), 8192)
	// Both kinds of idle file: kept open, and kept by name only (opened
	// again when taken).
	var olds []string
	for range idleFds + 1 {
		id := newFile(t, s, 0644, data)
		if f, err := s.Open(id, unix.O_RDONLY); err != nil {
			t.Fatal(err)
		} else {
			err := unix.Fsync(int(f.Fd()))
			f.Close()
			if err != nil {
				t.Fatalf("fsync object %s: %v", id, err)
			}
		}
		olds = append(olds, id)
	}
	for _, id := range olds {
		if err := s.Recycle(id); err != nil || !s.IsIdle(id) {
			t.Fatalf("Recycle(%s): %v, kept %v; want it kept", id, err, s.IsIdle(id))
		}
	}
	for i := range 2 {
		id, f, err := s.CreateFile(0644, -1, -1)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(olds, id) {
			t.Fatalf("new file %s is no recycled object", id)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		obj, err := s.Open(id, unix.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		ext := fiemapFlags(t, obj, 0)
		obj.Close()
		if len(ext) == 0 || ext[0].flags&fiemapExtentDelalloc == 0 {
			t.Errorf("new file #%d (a recycled object): extents %+v after its close; want its data not written yet (delalloc)", i, ext)
		}
	}
}

// TestDirPool: directory objects are made ahead once one was made;
// Mkdir takes one, with the mode, owner and times of a new directory;
// idle directories are not listed, and Close removes them.
func TestDirPool(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Kind: "hostfs", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := testOwner()
	first, err := s.Mkdir(0755, uid, gid) // starts the pool
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s, func(pl *pool) int { return len(pl.idleDirs) }, dirPoolSize, "directories")
	time.Sleep(1100 * time.Millisecond)
	start := time.Now().Add(-50 * time.Millisecond)
	used := s.pool.dirsUsed.Load()
	id, err := s.Mkdir(02750, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	if s.pool.dirsUsed.Load() != used+1 {
		t.Fatalf("Mkdir with a full pool made its own directory")
	}
	st := lstatObj(t, s, id)
	wantModeOwner(t, "directory from the pool", st, unix.S_IFDIR|02750, uid, gid)
	if got := time.Unix(st.Mtim.Unix()); got.Before(start) {
		t.Errorf("directory from the pool: mtime %v, before its creation at %v", got, start)
	}
	want := []string{first, id}
	slices.Sort(want)
	if got := listObjects(t, s); !slices.Equal(got, want) {
		t.Errorf("Objects lists %v, want the two directories made %v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, Options{Kind: "hostfs", Dir: dir})
	if got := listObjects(t, s); !slices.Equal(got, want) {
		t.Errorf("after Close and Open, the store lists %v, want %v (idle directories removed)", got, want)
	}
}

// TestIdleLeftByCrash: the idle objects of a daemon that died are, to
// the next Open, empty objects that nothing refers to; Open says the
// store crashed, and a collection removes them.
func TestIdleLeftByCrash(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Kind: "hostfs", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if s.Crashed() {
		t.Errorf("a new store: Crashed() = true")
	}
	keep := newFile(t, s, 0600, []byte("kept"))
	gone := newFile(t, s, 0600, []byte("recycled"))
	if err := s.Recycle(gone); err != nil || !s.IsIdle(gone) {
		t.Fatalf("Recycle: %v, kept %v", err, s.IsIdle(gone))
	}
	if _, err := s.Mkdir(0755, -1, -1); err != nil { // starts making directories ahead
		t.Fatal(err)
	}
	waitPoolFull(t, s)
	// The daemon dies: its goroutine stops, nothing is cleaned up.
	s.pool.close()
	s.main.close()
	s = openStore(t, Options{Kind: "hostfs", Dir: dir})
	if !s.Crashed() {
		t.Errorf("after a crash: Crashed() = false")
	}
	objs := listObjects(t, s)
	if len(objs) < poolSize+2 || !slices.Contains(objs, gone) {
		t.Fatalf("after the crash Objects lists %d objects (the recycled one: %v), want the idle ones too", len(objs), slices.Contains(objs, gone))
	}
	// Closed before its collection (which failed, say): still crashed.
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = openStore(t, Options{Kind: "hostfs", Dir: dir})
	if !s.Crashed() {
		t.Errorf("closed without Recovered, then opened: Crashed() = false, want true (the collection is still to do)")
	}
	r, err := s.Collect(GCOptions{Referenced: func(yield func(string) error) error { return yield(keep) }, Grace: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := listObjects(t, s); r.Removed != len(objs)-1 || !slices.Equal(got, []string{keep}) {
		t.Errorf("Collect removed %d of %d, left %v; want all but %s", r.Removed, len(objs), got, keep)
	}
	s.Recovered()
	if err := s.Close(); err != nil {
		t.Fatalf("Close after Recovered: %v", err)
	}
	s = openStore(t, Options{Kind: "hostfs", Dir: dir})
	if s.Crashed() {
		t.Errorf("after Recovered, Close and Open: Crashed() = true")
	}
}

// TestCollectRacesRecycle: an object a running collection found to be
// garbage, recycled before the collection removes it, is never handed
// to a new object (whose data would then go to an unnamed inode).
func TestCollectRacesRecycle(t *testing.T) {
	for _, kind := range []string{"file", "dir"} {
		t.Run(kind, func(t *testing.T) {
			s := hostfsStore(t)
			var old string
			var err error
			if kind == "file" {
				old = newFile(t, s, 0644, []byte("old"))
			} else if old, err = s.Mkdir(0755, -1, -1); err != nil {
				t.Fatal(err)
			}
			var made string
			_, err = s.Collect(GCOptions{
				Referenced: func(yield func(string) error) error { return nil },
				Grace:      -1,
				InUse: func(id string) bool {
					if id == old { // the overlay drops it meanwhile, and a create follows
						if err := s.Recycle(old); err != nil {
							t.Error(err)
						}
						if kind == "file" {
							id, f, err := s.CreateFile(0644, -1, -1)
							if err != nil {
								t.Fatal(err)
							}
							f.Close()
							made = id
						} else if made, err = s.Mkdir(0755, -1, -1); err != nil {
							t.Fatal(err)
						}
					}
					return false
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Lstat(made); err != nil && made == old {
				t.Errorf("the object made during the collection took the recycled %s, which the collection removed: %v", old, err)
			}
			// After the collection, recycling works again.
			id := newFile(t, s, 0644, nil)
			if err := s.Recycle(id); err != nil || !s.IsIdle(id) {
				t.Errorf("Recycle after the collection: %v, idle %v", err, s.IsIdle(id))
			}
		})
	}
}

// TestRecycleTwice: recycling an idle object again does nothing; two
// new objects never share one.
func TestRecycleTwice(t *testing.T) {
	s := hostfsStore(t)
	old := newFile(t, s, 0644, []byte("old"))
	for range 2 {
		if err := s.Recycle(old); err != nil {
			t.Fatal(err)
		}
	}
	a, fa, err := s.CreateFile(0644, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	fa.Close()
	b, fb, err := s.CreateFile(0644, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	fb.Close()
	if a == b {
		t.Errorf("two creates got the same object %s", a)
	}
}

// TestRecycledSetuidFile: a daemon without CAP_FSETID empties a setuid
// file by truncating it, which clears the bit; a new setuid file made
// from it has the bit all the same.
func TestRecycledSetuidFile(t *testing.T) {
	if os.Geteuid() == 0 {
		testenv.SkipByDesign(t, "root keeps the setuid bit across a truncate (CAP_FSETID); TestAsNonRoot runs this as nobody")
	}
	s := hostfsStore(t)
	old := newFile(t, s, 0755, []byte("x"))
	if err := unix.Chmod(objPath(s, old), 04755); err != nil { // after the write, which clears it
		t.Fatal(err)
	}
	if err := s.Recycle(old); err != nil {
		t.Fatal(err)
	}
	id, f, err := s.CreateFile(04755, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if id != old {
		t.Fatalf("CreateFile took %s, not the recycled %s", id, old)
	}
	if m := lstatObj(t, s, id).Mode & 07777; m != 04755 {
		t.Errorf("CreateFile(04755) from a recycled setuid file: mode %o", m)
	}
}

// TestLegacySpareDir: Open empties and removes the spare directory that
// stores made before idle objects held, and lists none of it.
func TestLegacySpareDir(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Options{Kind: "hostfs", Dir: dir})
	root := s.Info().Root
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	left := filepath.Join(root, legacySpareDir)
	if err := os.Mkdir(left, 0700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(left, newID()), 0700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, newID()), []byte("emptied late"), 0600); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, Options{Kind: "hostfs", Dir: dir})
	if _, err := os.Lstat(left); !os.IsNotExist(err) {
		t.Errorf("the spare directory after Open: %v, want it removed", err)
	}
	if got := listObjects(t, s); len(got) != 0 {
		t.Errorf("Objects lists %v, want nothing", got)
	}
}

// TestRecycleSpecialFiles: Recycle removes a symlink, a fifo, a socket
// or a device node object at once (without opening it: a device's open
// runs its driver) and keeps none of them idle.
func TestRecycleSpecialFiles(t *testing.T) {
	s := hostfsStore(t)
	newFile(t, s, 0600, nil) // starts the pool
	ids := map[string]string{}
	var err error
	if ids["symlink"], err = s.Symlink("target", -1, -1); err != nil {
		t.Fatal(err)
	}
	if ids["fifo"], err = s.Mknod(unix.S_IFIFO|0600, 0, -1, -1); err != nil {
		t.Fatal(err)
	}
	if ids["socket"], err = s.Mknod(unix.S_IFSOCK|0600, 0, -1, -1); err != nil {
		t.Fatal(err)
	}
	if isRoot {
		if ids["device"], err = s.Mknod(unix.S_IFCHR|0600, unix.Mkdev(1, 3), -1, -1); err != nil {
			t.Fatal(err)
		}
	}
	// inotify reports every open in the objects' directories.
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ifd)
	for _, id := range ids {
		if _, err := unix.InotifyAddWatch(ifd, fmt.Sprintf("/proc/self/fd/%d", s.Loc(id).Dirfd), unix.IN_OPEN); err != nil {
			t.Fatal(err)
		}
	}
	for kind, id := range ids {
		if err := s.Recycle(id); err != nil {
			t.Errorf("Recycle of a %s: %v", kind, err)
		}
		for _, name := range inotifyNames(t, ifd) {
			if name == id {
				t.Errorf("Recycle opened a %s", kind)
			}
		}
		if s.IsIdle(id) {
			t.Errorf("a %s was kept idle", kind)
		}
		if _, err := s.Lstat(id); err != unix.ENOENT {
			t.Errorf("a %s object after Recycle: lstat %v, want ENOENT", kind, err)
		}
	}
}

// inotifyNames returns the names of the events queued on inotify fd.
func inotifyNames(t *testing.T, fd int) []string {
	t.Helper()
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EAGAIN {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			names = append(names, strings.TrimRight(string(name), "\x00"))
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// TestPrepare: Prepare makes the files asked for ahead, and a burst of
// creates takes them instead of making inodes on the spot; Close, even
// while Prepare's goroutines run, leaves no idle file behind.
func TestPrepare(t *testing.T) {
	s := hostfsStore(t)
	const n = 300
	s.Prepare(n, 2)
	waitIdle(t, s, func(pl *pool) int { return len(pl.madeFiles) }, n, "files made ahead")
	used := s.pool.used.Load()
	for range n {
		_, f, err := s.CreateFile(0o644, -1, -1)
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	if got := s.pool.used.Load() - used; got != n {
		t.Errorf("%d creates took %d files made ahead, want all", n, got)
	}

	dir := t.TempDir()
	s2 := openStore(t, Options{Dir: dir})
	s2.Prepare(2000, 2)
	closeStore(t, s2)
	var left []string
	_ = filepath.Walk(filepath.Join(dir, "objects"), func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && filepath.Base(p) != openMarker {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("Close during Prepare left %d files, want none: %v", len(left), left[:min(3, len(left))])
	}
}

// waitIdle waits until count (under the pool's lock) reaches want,
// failing t after 20 s.
func waitIdle(t *testing.T, s *Store, count func(pl *pool) int, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.pool.mu.Lock()
		n := count(s.pool)
		s.pool.mu.Unlock()
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %d %s after 20 s, want %d", n, what, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
