package backstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// wantRamdiskMode is the Info.Mode a ramdisk gets here: a tmpfs as
// root, the /dev/shm fallback otherwise.
func wantRamdiskMode() string {
	if isRoot {
		return "tmpfs"
	}
	return "shm"
}

func TestRamdiskOpenClose(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Kind: "ramdisk", Dir: dir, RamdiskSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	info := s.Info()
	if info.Kind != "ramdisk" || info.Mode != wantRamdiskMode() || info.Reflink {
		t.Errorf("Info = %+v, want kind ramdisk, mode %s, no reflink", info, wantRamdiskMode())
	}
	var statfs unix.Statfs_t
	if err := unix.Statfs(info.Root, &statfs); err != nil || statfs.Type != unix.TMPFS_MAGIC {
		t.Errorf("%s: fs type %x (%v), want tmpfs", info.Root, statfs.Type, err)
	}
	if isRoot {
		if want := filepath.Join(dir, "ramdisk"); info.Root != want || info.SizeLimit != 8<<20 {
			t.Errorf("Root, SizeLimit = %s, %d, want %s, %d", info.Root, info.SizeLimit, want, 8<<20)
		}
		if _, mounted := tmpfsMountedAt(info.Root); !mounted {
			t.Errorf("no tmpfs mounted at %s", info.Root)
		}
	} else if !strings.HasPrefix(info.Root, "/dev/shm/agentfs-") || info.SizeLimit <= 0 {
		t.Errorf("Root, SizeLimit = %s, %d, want /dev/shm/agentfs-*, > 0", info.Root, info.SizeLimit)
	}
	id := newFile(t, s, 0600, nil)
	if _, err := os.Lstat(filepath.Join(info.Root, id[:2], id)); err != nil {
		t.Errorf("small object not in the ramdisk: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if isRoot {
		if _, mounted := tmpfsMountedAt(info.Root); mounted {
			t.Errorf("tmpfs still mounted at %s after Close", info.Root)
			if err := unix.Unmount(info.Root, unix.MNT_DETACH); err != nil {
				t.Errorf("detaching it: %v", err)
			}
		}
	} else if _, err := os.Stat(info.Root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after Close: %v, want it removed", info.Root, err)
	}
}

func TestRamdiskFullGivesENOSPC(t *testing.T) {
	needRoot(t, "a size-limited tmpfs")
	s := openStore(t, Options{Kind: "ramdisk", Dir: t.TempDir(), RamdiskSize: 1 << 20})
	src := filepath.Join(t.TempDir(), "big")
	writeFile(t, src, pattern(4<<20, 7), 0644) // not zeros: they would stay holes
	in, st := openSrc(t, src)
	_, err := s.CopyUp(in, &st, true)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("CopyUp of 4 MiB into a 1 MiB ramdisk: %v, want ENOSPC", err)
	}
	if got := listObjects(t, s); len(got) != 0 {
		t.Errorf("partial objects left behind: %v", got)
	}

	// Writers get ENOSPC; nothing else breaks.
	id, f, err := s.CreateFile(0600, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(pattern(2<<20, 8))
	f.Close()
	wantErrno(t, "writing 2 MiB into a 1 MiB ramdisk", err, unix.ENOSPC)
	if err := s.Remove(id); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(t.TempDir(), "small")
	writeFile(t, small, []byte("fits"), 0644)
	in, st = openSrc(t, small)
	id, err = s.CopyUp(in, &st, true)
	if err != nil {
		t.Fatalf("CopyUp after freeing space: %v", err)
	}
	if got := readObj(t, s, id); string(got) != "fits" {
		t.Errorf("content = %q, want fits", got)
	}
}

func TestRamdiskSpill(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Options{Kind: "ramdisk", Dir: dir, RamdiskSize: 16 << 20, SpillThreshold: 1 << 20})
	tmp := t.TempDir()
	big, small := filepath.Join(tmp, "big"), filepath.Join(tmp, "small")
	bigData := pattern(2<<20, 9)
	writeFile(t, big, bigData, 0640)
	writeFile(t, small, []byte("small"), 0640)

	in, st := openSrc(t, big)
	bid, err := s.CopyUp(in, &st, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(spillPath(dir, bid)); err != nil {
		t.Errorf("2 MiB object (threshold 1 MiB) not spilled: %v", err)
	}
	emptyID, err := s.CopyUp(in, &st, false) // size known: 0
	if err != nil {
		t.Fatal(err)
	}
	in, st = openSrc(t, small)
	sid, err := s.CopyUp(in, &st, true)
	if err != nil {
		t.Fatal(err)
	}
	cid, err := s.Clone(bid)
	if err != nil {
		t.Fatal(err)
	}
	for id, spilled := range map[string]bool{bid: true, cid: true, sid: false, emptyID: false} {
		_, err := os.Lstat(spillPath(dir, id))
		if got := err == nil; got != spilled {
			t.Errorf("object %s spilled = %v, want %v", id, got, spilled)
		}
		if _, err := os.Lstat(filepath.Join(s.Info().Root, id[:2], id)); (err == nil) == spilled {
			t.Errorf("object %s in the ramdisk = %v, want %v", id, err == nil, !spilled)
		}
	}
	if got := readObj(t, s, cid); !bytes.Equal(got, bigData) {
		t.Errorf("spilled clone's content differs")
	}
	want := []string{bid, cid, sid, emptyID}
	slices.Sort(want)
	if got := listObjects(t, s); !slices.Equal(got, want) {
		t.Errorf("Objects = %v, want %v", got, want)
	}
	if err := s.Remove(cid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(spillPath(dir, cid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed spilled object still on disk: %v", err)
	}
	if _, err := s.Lstat(cid); err != unix.ENOENT {
		t.Errorf("Lstat(removed) = %v, want ENOENT", err)
	}
}

// The spilled objects are on disk and survive a reopen; the set of
// spilled ids is rebuilt from Dir/spill.
func TestRamdiskReopenFindsSpilled(t *testing.T) {
	dir := t.TempDir()
	o := Options{Kind: "ramdisk", Dir: dir, RamdiskSize: 16 << 20, SpillThreshold: 1 << 20}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "big")
	data := pattern(3<<20, 10)
	writeFile(t, src, data, 0600)
	in, st := openSrc(t, src)
	id, err := s.CopyUp(in, &st, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, o)
	if got := listObjects(t, s); !slices.Equal(got, []string{id}) {
		t.Errorf("Objects after reopen = %v, want [%s]", got, id)
	}
	if got := readObj(t, s, id); !bytes.Equal(got, data) {
		t.Errorf("spilled object's content differs after reopen")
	}
	if err := s.Remove(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(spillPath(dir, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Remove after reopen left %s: %v", spillPath(dir, id), err)
	}
}

// A tmpfs left mounted by a daemon that died is adopted with its objects.
func TestRamdiskAdoptsMountedTmpfs(t *testing.T) {
	needRoot(t, "mounting a tmpfs")
	dir := t.TempDir()
	o := Options{Kind: "ramdisk", Dir: dir, RamdiskSize: 4 << 20}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	root := s.Info().Root
	t.Cleanup(func() {
		// Normally the adopting store's Close unmounted it already:
		// EINVAL, not a mount point.
		if err := unix.Unmount(root, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			t.Errorf("detaching the tmpfs at %s: %v", root, err)
		}
	})
	id := newFile(t, s, 0600, []byte("survivor"))
	// Die: the goroutines stop and the fds go (spare directories stay),
	// the mount stays.
	s.pool.close()
	s.main.close()
	s.spill.close()

	s = openStore(t, o)
	if got := s.Info(); got.Mode != "tmpfs" || got.Root != root || got.SizeLimit != 4<<20 {
		t.Errorf("Info = %+v, want mode tmpfs at %s of 4 MiB", got, root)
	}
	if got := readObj(t, s, id); string(got) != "survivor" {
		t.Errorf("object in the adopted tmpfs = %q, want survivor", got)
	}
}

// Close with objects still open detaches the tmpfs: the open files keep
// working, the mountpoint is free.
func TestRamdiskCloseWhileBusy(t *testing.T) {
	needRoot(t, "mounting a tmpfs")
	s, err := Open(Options{Kind: "ramdisk", Dir: t.TempDir(), RamdiskSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	root := s.Info().Root
	id, f, err := s.CreateFile(0600, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("busy")); err != nil {
		t.Fatalf("writing object %s: %v", id, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close with an open object: %v", err)
	}
	if _, mounted := tmpfsMountedAt(root); mounted {
		t.Errorf("tmpfs still mounted at %s", root)
		if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
			t.Errorf("detaching it: %v", err)
		}
	}
	buf := make([]byte, 4)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "busy" {
		t.Errorf("open object %s after Close: %q, %v", id, buf, err)
	}
}

// A sparse copy-up into the ramdisk (read/write: another filesystem)
// keeps its holes.
func TestRamdiskSparseCopyUp(t *testing.T) {
	s := openStore(t, Options{Kind: "ramdisk", Dir: t.TempDir(), RamdiskSize: 8 << 20})
	src := filepath.Join(t.TempDir(), "sparse")
	sparseFile(t, src, 64<<20, map[int64][]byte{0: pattern(4096, 11), 60 << 20: pattern(4096, 12)})
	id, in, st := copyUp(t, s, src, true)
	got := lstatObj(t, s, id)
	if got.Size != st.Size || got.Blocks > 64 {
		t.Errorf("size %d blocks %d, want %d and few blocks", got.Size, got.Blocks, st.Size)
	}
	if want, got := dataRanges(t, in), objRanges(t, s, id); !slices.Equal(got, want) {
		t.Errorf("data ranges = %v, want %v", got, want)
	}
}
