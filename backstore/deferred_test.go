package backstore

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// deferOne defers one object of data's size under key, with mode 0640
// and times of its own, and returns its id and record.
func deferOne(t *testing.T, s *Store, key string, size int) (string, Deferred) {
	t.Helper()
	uid, gid := testOwner()
	d := Deferred{Key: key, Size: int64(size), Mode: 0o640, Uid: uint32(uid), Gid: uint32(gid),
		Atime: 1_500_000_000_111_222_333, Mtime: 1_600_000_000_123_456_789}
	ids, err := s.Defer([]Deferred{d})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || shardOf(ids[0]) < 0 {
		t.Fatalf("Defer gave %q, want one object id", ids)
	}
	return ids[0], d
}

// hasName reports whether id has a name in s's main part.
func hasName(s *Store, id string) bool {
	fd := s.main.shards[shardOf(id)].Load()
	if fd < 0 {
		return false
	}
	var st unix.Stat_t
	return unix.Fstatat(int(fd), id, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// wantDeferredAttrs checks that st is what d says, as a sparse file.
func wantDeferredAttrs(t *testing.T, what string, st unix.Stat_t, d Deferred) {
	t.Helper()
	if st.Mode != unix.S_IFREG|d.Mode || st.Size != d.Size || st.Atim.Nano() != d.Atime || st.Mtim.Nano() != d.Mtime ||
		st.Uid != d.Uid || st.Gid != d.Gid || st.Nlink != 1 {
		t.Errorf("%s: mode %o size %d atime %d mtime %d owner %d:%d nlink %d, want %o %d %d %d %d:%d 1", what,
			st.Mode, st.Size, st.Atim.Nano(), st.Mtim.Nano(), st.Uid, st.Gid, st.Nlink,
			unix.S_IFREG|d.Mode, d.Size, d.Atime, d.Mtime, d.Uid, d.Gid)
	}
}

// TestDeferredMadeAtFirstUse: a deferred object has no inode until
// something needs one; Lstat, Deferred and Objects answer from its
// record; the first open makes it with the record's attributes and
// fills it (once, however many open it at once); Loc makes it too.
func TestDeferredMadeAtFirstUse(t *testing.T) {
	s := hostfsStore(t)
	data := bytes.Repeat([]byte("deferred bytes\n"), 5000)
	id, d := deferOne(t, s, "k1", len(data))
	if hasName(s, id) {
		t.Fatal("Defer made the object's inode")
	}
	if !s.Deferred(id) || !s.Pending(id) || s.DeferredCount() != 1 {
		t.Errorf("Deferred %v, Pending %v, DeferredCount %d: want true, true, 1", s.Deferred(id), s.Pending(id), s.DeferredCount())
	}
	st, err := s.Lstat(id)
	if err != nil {
		t.Fatalf("Lstat of a deferred object: %v", err)
	}
	wantDeferredAttrs(t, "Lstat before the first use", st, d)
	if st.Blocks != 0 {
		t.Errorf("a deferred object allocates %d blocks, want 0", st.Blocks)
	}
	if got := listObjects(t, s); !slices.Equal(got, []string{id}) {
		t.Errorf("Objects lists %v, want the deferred %s", got, id)
	}
	if hasName(s, id) {
		t.Fatal("Lstat or Objects made the object")
	}

	var fetches atomic.Int64
	s.SetSource(countingSource("k1", data, nil, &fetches))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			got := readObject(t, s, func() (io.ReadCloser, error) { return s.Open(id, unix.O_RDONLY) })
			if !bytes.Equal(got, data) {
				t.Errorf("read %d bytes, want the %d fetched", len(got), len(data))
			}
		})
	}
	wg.Wait()
	if n := fetches.Load(); n != 1 {
		t.Errorf("fetched %d times, want 1", n)
	}
	if !hasName(s, id) || s.Deferred(id) || s.Pending(id) {
		t.Errorf("after the first open: named %v, deferred %v, pending %v; want true, false, false", hasName(s, id), s.Deferred(id), s.Pending(id))
	}
	st = lstatObj(t, s, id)
	d.Atime = st.Atim.Nano() // the reads' (relatime)
	wantDeferredAttrs(t, "the made object", st, d)
	if got := listObjects(t, s); !slices.Equal(got, []string{id}) {
		t.Errorf("Objects lists %v once made, want %s once", got, id)
	}

	// Loc (the overlay's chmod, chown, utimens and xattrs) makes one.
	id2, d2 := deferOne(t, s, "k1", len(data))
	l := s.Loc(id2)
	if err := unix.Fchmodat(l.Dirfd, l.Name, 0o600, 0); err != nil {
		t.Fatalf("chmod at the Loc of a deferred object: %v", err)
	}
	d2.Mode = 0o600
	wantDeferredAttrs(t, "made by Loc, then chmod", lstatObj(t, s, id2), d2)
	if !s.Pending(id2) || fetches.Load() != 1 {
		t.Errorf("Loc fetched (pending %v, %d fetches): it makes the inode only", s.Pending(id2), fetches.Load())
	}
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.OpenRead(id2) }); !bytes.Equal(got, data) {
		t.Errorf("OpenRead after Loc read %d bytes, want %d", len(got), len(data))
	}

	// Clone and OpenStream make it too.
	id3, _ := deferOne(t, s, "k1", len(data))
	clone, err := s.Clone(id3)
	if err != nil {
		t.Fatal(err)
	}
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.OpenRead(clone) }); !bytes.Equal(got, data) {
		t.Errorf("the clone of a deferred object holds %d bytes, want %d", len(got), len(data))
	}
	id4, _ := deferOne(t, s, "k1", len(data))
	f, stream, err := s.OpenStream(id4)
	if err != nil {
		t.Fatal(err)
	}
	if stream != nil {
		if err := stream.Wait(int64(len(data))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("OpenStream of a deferred object read %d bytes (%v), want %d", len(got), err, len(data))
	}
}

// TestDeferredJournal: deferred objects stay deferred, with their
// attributes, across a reopen; one made before the reopen keeps its
// inode and what was done to it (the name wins over the record, as
// after a crash between the making and the fill); a removed one stays
// removed (Remove and Drop journal it).
func TestDeferredJournal(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir})
	keep, d := deferOne(t, s, "k", 100)
	made, _ := deferOne(t, s, "k", 100)
	gone, _ := deferOne(t, s, "k", 100)
	dropped, _ := deferOne(t, s, "k", 100)
	l := s.Loc(made)
	if err := unix.Fchmodat(l.Dirfd, l.Name, 0o444, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if err := s.Drop([]string{dropped}); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)

	s = openStore(t, Options{Dir: dir})
	if !s.Deferred(keep) || hasName(s, keep) {
		t.Errorf("after a reopen: deferred %v, named %v; want true, false", s.Deferred(keep), hasName(s, keep))
	}
	st, err := s.Lstat(keep)
	if err != nil {
		t.Fatal(err)
	}
	wantDeferredAttrs(t, "reopened", st, d)
	if st := lstatObj(t, s, made); st.Mode != unix.S_IFREG|0o444 {
		t.Errorf("the object made before the reopen has mode %o, want the 0444 it was given", st.Mode)
	}
	if !s.Pending(made) {
		t.Error("the object made but not filled is not pending after a reopen")
	}
	// Making it again (its record is still in the journal) keeps it.
	if _, err := s.Open(made, unix.O_RDONLY); !errors.Is(err, ErrPending) {
		t.Errorf("open with no source = %v, want ErrPending", err)
	}
	if st := lstatObj(t, s, made); st.Mode != unix.S_IFREG|0o444 {
		t.Errorf("an open remade the object: mode %o, want 0444", st.Mode)
	}
	for _, id := range []string{gone, dropped} {
		if _, err := s.Lstat(id); err != unix.ENOENT {
			t.Errorf("Lstat of the removed %s after a reopen = %v, want ENOENT", id, err)
		}
	}
	got := listObjects(t, s)
	want := []string{keep, made}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Objects lists %v, want %v", got, want)
	}
}

// TestDeferredCrashMidMaking: a making cut short by a crash leaves no
// name (O_TMPFILE), or, where the inode is made under ID.new, that name
// only: Objects does not list it, and the next making replaces it.
func TestDeferredCrashMidMaking(t *testing.T) {
	s := hostfsStore(t)
	data := []byte("the whole object\n")
	id, d := deferOne(t, s, "k", len(data))
	fd, err := s.main.shard(shardOf(id))
	if err != nil {
		t.Fatal(err)
	}
	// What the fallback's crash leaves: a half-made inode beside.
	half := filepath.Join(s.main.root, id[:2], id+".new")
	if err := os.WriteFile(half, []byte("half made"), 0o777); err != nil {
		t.Fatal(err)
	}
	if got := listObjects(t, s); !slices.Equal(got, []string{id}) {
		t.Errorf("Objects lists %v, want only %s", got, id)
	}
	rec, _ := s.record(id)
	if err := s.makeDeferredAt(id, &rec, fd, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(half); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the making left %s: %v", half, err)
	}
	wantDeferredAttrs(t, "made under ID.new", lstatObj(t, s, id), d)
	var fetches atomic.Int64
	s.SetSource(countingSource("k", data, nil, &fetches))
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.Open(id, unix.O_RDONLY) }); !bytes.Equal(got, data) {
		t.Errorf("read %q, want %q", got, data)
	}
}

// TestDeferredGarbage: a deferred object nothing refers to (a crash
// between Defer and the entries naming it) is garbage: a collection
// spares it while young, removes it (its record, journaled) when not,
// and keeps a referenced one.
func TestDeferredGarbage(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir})
	used, _ := deferOne(t, s, "k", 10)
	lost, _ := deferOne(t, s, "k", 10)
	refs := func(yield func(string) error) error { return yield(used) }
	r, err := s.Collect(GCOptions{Referenced: refs})
	if err != nil {
		t.Fatal(err)
	}
	if r.Objects != 2 || r.Young != 1 || r.Removed != 0 {
		t.Errorf("collection with the default grace: %+v, want 2 objects, 1 young, none removed", r)
	}
	var found []Garbage
	r, err = s.Collect(GCOptions{Referenced: refs, Grace: -1, Found: func(g Garbage) error { found = append(found, g); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if r.Removed != 1 || len(found) != 1 || found[0].ID != lost || found[0].Bytes != 0 {
		t.Errorf("collection: %+v, found %+v; want %s removed, 0 bytes", r, found, lost)
	}
	if s.Deferred(lost) || !s.Deferred(used) {
		t.Errorf("after the collection: lost deferred %v, used deferred %v; want false, true", s.Deferred(lost), s.Deferred(used))
	}
	closeStore(t, s)
	s = openStore(t, Options{Dir: dir})
	if s.Deferred(lost) || !s.Deferred(used) {
		t.Errorf("after a reopen: lost deferred %v, used deferred %v; want false, true", s.Deferred(lost), s.Deferred(used))
	}
}

// TestDeferredJournalLines: the journal's line of a deferred object,
// and lines a crash cut short, which are skipped.
func TestDeferredJournalLines(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir})
	id, d := deferOne(t, s, "k", 12345)
	closeStore(t, s)
	b, err := os.ReadFile(filepath.Join(dir, pendingName))
	if err != nil {
		t.Fatal(err)
	}
	want := id + " k 12345 640 " + itoa(d.Uid) + " " + itoa(d.Gid) + " 1500000000111222333 1600000000123456789\n"
	if string(b) != want {
		t.Errorf("journal %q, want %q", b, want)
	}
	cut := "0123456789abcdef k 12 644 0 0 15000\n" + "fedcba9876543210 k 12 999 0 0 1 1\n"
	if err := os.WriteFile(filepath.Join(dir, pendingName), append(b, cut...), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, Options{Dir: dir})
	if s.DeferredCount() != 1 || !s.Deferred(id) {
		t.Errorf("after lines cut short: %d deferred (%s: %v), want only %s", s.DeferredCount(), id, s.Deferred(id), id)
	}
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// TestDeferredSpills: in a ramdisk store, a deferred object too big for
// the tmpfs is made in the spill part.
func TestDeferredSpills(t *testing.T) {
	s := openStore(t, Options{Kind: "ramdisk", Dir: t.TempDir(), RamdiskSize: 16 << 20, SpillThreshold: 1 << 20})
	id, d := deferOne(t, s, "k", 2<<20)
	if _, err := s.Open(id, unix.O_RDONLY); !errors.Is(err, ErrPending) {
		t.Errorf("open with no source = %v, want ErrPending", err)
	}
	if !s.isSpilled(id) {
		t.Error("a deferred object of 2 MiB was not made in the spill part")
	}
	wantDeferredAttrs(t, "spilled", lstatObj(t, s, id), d)
}

// BenchmarkDefer: giving out 10,000 deferred objects (a mount --from of
// 10,000 files), against making them (CreateFile, ftruncate, utimens).
func BenchmarkDefer(b *testing.B) {
	files := make([]Deferred, 10000)
	for i := range files {
		files[i] = Deferred{Key: "k", Size: int64(i), Mode: 0o644, Mtime: 1, Atime: 1}
	}
	// each times fn on a new store, each time.
	each := func(b *testing.B, fn func(s *Store) error) {
		for b.Loop() {
			b.StopTimer()
			s, err := Open(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			err = fn(s)
			b.StopTimer()
			_ = s.Close()
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.Run("defer", func(b *testing.B) {
		each(b, func(s *Store) error {
			_, err := s.Defer(files)
			return err
		})
	})
	b.Run("make", func(b *testing.B) {
		ts := []unix.Timespec{{Sec: 1}, {Sec: 1}}
		each(b, func(s *Store) error {
			for i := range files {
				_, f, err := s.CreateFile(0o644, -1, -1)
				if err != nil {
					return err
				}
				err = f.Truncate(int64(i))
				if err == nil {
					err = unix.UtimesNanoAt(int(f.Fd()), "", ts, unix.AT_EMPTY_PATH)
				}
				f.Close()
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// TestTouchDeferred: a deferred object's ctime moves to now with
// nothing made; an object that is not deferred is left to the caller.
func TestTouchDeferred(t *testing.T) {
	s := hostfsStore(t)
	id, _ := deferOne(t, s, "k1", 10)
	before, err := s.Lstat(id)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // a later ctime, whatever the clock's grain
	if !s.TouchDeferred(id) {
		t.Fatal("TouchDeferred of a deferred object = false")
	}
	after, err := s.Lstat(id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Ctim.Nano() <= before.Ctim.Nano() || after.Mtim != before.Mtim || after.Size != before.Size {
		t.Errorf("after TouchDeferred: ctime %d (was %d), mtime %v (was %v), size %d (was %d): want a later ctime, the rest unchanged",
			after.Ctim.Nano(), before.Ctim.Nano(), after.Mtim, before.Mtim, after.Size, before.Size)
	}
	if hasName(s, id) || !s.Deferred(id) {
		t.Errorf("TouchDeferred made the object")
	}
	if s.TouchDeferred("0123456789abcdef") {
		t.Errorf("TouchDeferred of an object that is not deferred = true")
	}
}
