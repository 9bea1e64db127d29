package backstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestListObjects(t *testing.T) {
	s := hostfsStore(t)
	big := newFile(t, s, 0600, pattern(1<<20, 1))
	dir, err := s.Mkdir(0700, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	link, err := s.Symlink("target", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	if err := s.ListObjects(func(id string, bytes int64) error { got[id] = bytes; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Errorf("ListObjects listed %d objects, want 3: %v", len(got), got)
	}
	for _, id := range []string{big, dir, link} {
		st := lstatObj(t, s, id)
		if b, ok := got[id]; !ok || b != st.Blocks*512 {
			t.Errorf("object %s: listed %v with %d bytes, want %d", id, ok, b, st.Blocks*512)
		}
	}
	if got[big] < 1<<20 {
		t.Errorf("1 MiB object allocates %d bytes", got[big])
	}
	stop := errors.New("stop")
	if err := s.ListObjects(func(string, int64) error { return stop }); err != stop {
		t.Errorf("ListObjects with a failing fn: %v, want stop", err)
	}
}

func TestListObjectsSpilled(t *testing.T) {
	needRoot(t, "a ramdisk store")
	dir := t.TempDir()
	s := openStore(t, Options{Kind: "ramdisk", Dir: dir, RamdiskSize: 16 << 20, SpillThreshold: 1 << 20})
	src := filepath.Join(t.TempDir(), "big")
	writeFile(t, src, pattern(2<<20, 3), 0644)
	in, st := openSrc(t, src)
	spilled, err := s.CopyUp(in, &st, true)
	if err != nil {
		t.Fatal(err)
	}
	small := newFile(t, s, 0600, []byte("small"))
	var ids []string
	if err := s.ListObjects(func(id string, _ int64) error { ids = append(ids, id); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	want := []string{spilled, small}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("ListObjects = %v, want %v (one spilled)", ids, want)
	}
}

// gcStore makes objects: two referenced, one in use, three garbage.
func gcStore(t *testing.T) (s *Store, refs, live, garbage []string) {
	s = hostfsStore(t)
	for i := 0; i < 6; i++ {
		id := newFile(t, s, 0600, pattern(8192*(i+1), byte(i)))
		switch {
		case i < 2:
			refs = append(refs, id)
		case i == 2:
			live = append(live, id)
		default:
			garbage = append(garbage, id)
		}
	}
	return s, refs, live, garbage
}

func yieldAll(ids []string) func(func(string) error) error {
	return func(yield func(string) error) error {
		for _, id := range ids {
			if err := yield(id); err != nil {
				return err
			}
			if err := yield(id); err != nil { // repeats are allowed
				return err
			}
		}
		return nil
	}
}

func TestCollectRemovesOnlyGarbage(t *testing.T) {
	s, refs, live, garbage := gcStore(t)
	var wantFreed int64
	for _, id := range garbage {
		wantFreed += lstatObj(t, s, id).Blocks * 512
	}
	inUse := func(id string) bool { return slices.Contains(live, id) }
	var found []string
	r, err := s.Collect(GCOptions{Referenced: yieldAll(refs), InUse: inUse, Grace: -1,
		Found: func(g Garbage) error {
			if !g.Removed || g.Young {
				t.Errorf("garbage %+v: want removed, not young", g)
			}
			found = append(found, g.ID)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := GCResult{Objects: 6, Removed: 3, Freed: wantFreed, InUse: 1}
	if r != want {
		t.Errorf("Collect = %+v, want %+v", r, want)
	}
	slices.Sort(found)
	slices.Sort(garbage)
	if !slices.Equal(found, garbage) {
		t.Errorf("found %v, want %v", found, garbage)
	}
	left := listObjects(t, s)
	keep := append(append([]string{}, refs...), live...)
	slices.Sort(keep)
	if !slices.Equal(left, keep) {
		t.Errorf("objects left = %v, want %v", left, keep)
	}
}

func TestCollectSparesYoungAndDryRun(t *testing.T) {
	s, refs, live, _ := gcStore(t)
	all := listObjects(t, s)
	removed, freed, err := s.GC(yieldAll(refs), func(id string) bool { return slices.Contains(live, id) })
	if err != nil || removed != 0 || freed != 0 {
		t.Errorf("GC of objects made just now = %d, %d, %v; want 0, 0, nil (young)", removed, freed, err)
	}
	r, err := s.Collect(GCOptions{Referenced: yieldAll(refs), Grace: -1, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Removed != 0 || r.Young != 0 {
		t.Errorf("dry run = %+v, want nothing removed", r)
	}
	if got := listObjects(t, s); !slices.Equal(got, all) {
		t.Errorf("objects after GC of young objects and a dry run = %v, want %v", got, all)
	}
	fail := errors.New("badger is down")
	if _, err := s.Collect(GCOptions{Referenced: func(func(string) error) error { return fail }, Grace: -1}); !errors.Is(err, fail) {
		t.Errorf("Collect with failing references: %v, want %v", err, fail)
	}
	if got := listObjects(t, s); !slices.Equal(got, all) {
		t.Errorf("objects after a failed listing of references = %v, want %v", got, all)
	}
}

func TestOpenReadKeepsAtime(t *testing.T) {
	s := hostfsStore(t)
	id := newFile(t, s, 0000, []byte("secret"))
	old := unix.Timespec{Sec: 1000}
	setTimes(t, objPath(s, id), old, old)
	f, err := s.OpenRead(id)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, _ := f.ReadAt(buf, 0)
	f.Close()
	if string(buf[:n]) != "secret" {
		t.Errorf("read %q, want secret", buf[:n])
	}
	if st := lstatObj(t, s, id); st.Atim != old || st.Mode&07777 != 0 {
		t.Errorf("after OpenRead: atime %v mode %o, want %v and 0", st.Atim, st.Mode&07777, old)
	}
}

func TestCopyFileDataKeepsHoles(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "sparse")
	const size = 64 << 20
	chunks := map[int64][]byte{0: pattern(4096, 1), 32 << 20: pattern(8192, 2)}
	sparseFile(t, src, size, chunks)
	in, _ := openSrc(t, src)
	out, err := os.Create(filepath.Join(dir, "copy"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := CopyFileData(out, in, size); err != nil {
		t.Fatal(err)
	}
	if got, want := dataRanges(t, out), dataRanges(t, in); !slices.Equal(got, want) {
		t.Errorf("data ranges = %v, want %v", got, want)
	}
	for off, b := range chunks {
		buf := make([]byte, len(b))
		if _, err := out.ReadAt(buf, off); err != nil || !bytes.Equal(buf, b) {
			t.Errorf("data at %d differs (%v)", off, err)
		}
	}
}
