package backstore

import (
	"bytes"
	"path/filepath"
	"testing"
)

// newObjectWith makes a regular file object holding data, written (not
// cloned), and returns its id.
func newObjectWith(t *testing.T, s *Store, data []byte) string {
	t.Helper()
	id, f, err := s.CreateFile(0o644, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDedupeOnXFS: two objects of the same contents, written apart,
// share their blocks after Dedupe, which frees the space of one; of
// other contents nothing is shared; and neither object's contents or
// mtime change.
func TestDedupeOnXFS(t *testing.T) {
	mnt := mountXFS(t)
	s := openStore(t, Options{Dir: filepath.Join(mnt, "store")})
	const size = 8 << 20
	data := pattern(size, 21)
	a, b := newObjectWith(t, s, data), newObjectWith(t, s, data)
	other := append([]byte{}, data...)
	other[size-1] ^= 1
	c := newObjectWith(t, s, other)
	before := lstatObj(t, s, b)
	free := freeBytes(t, mnt)

	n, err := s.Dedupe(a, b, size)
	if err != nil || n != size {
		t.Fatalf("Dedupe of identical objects: %d bytes, %v; want %d", n, err, size)
	}
	freed := freeBytes(t, mnt) - free
	t.Logf("dedupe of two %d MiB objects freed %d KiB", size>>20, freed>>10)
	if freed < size*9/10 {
		t.Errorf("dedupe freed %d bytes, want about %d", freed, size)
	}
	for _, id := range []string{a, b} {
		if shared, total := sharedBytes(t, s, id); shared != total || total != size {
			t.Errorf("object %s: %d of %d bytes shared, want all %d", id, shared, total, size)
		}
	}
	if !bytes.Equal(readObj(t, s, b), data) {
		t.Errorf("dedupe changed object %s's contents", b)
	}
	if after := lstatObj(t, s, b); after.Mtim != before.Mtim || after.Size != before.Size {
		t.Errorf("dedupe changed the object: mtime %v size %d, was %v %d", after.Mtim, after.Size, before.Mtim, before.Size)
	}

	if n, err := s.Dedupe(a, c, size); err != nil || n >= size {
		t.Errorf("Dedupe of objects that differ in the last byte: %d bytes, %v; want less than all", n, err)
	}
	if !bytes.Equal(readObj(t, s, c), other) {
		t.Errorf("dedupe changed object %s's contents", c)
	}
}

// TestDedupeWithoutReflink: a backstore that cannot clone shares
// nothing, and says no error.
func TestDedupeWithoutReflink(t *testing.T) {
	s := openStore(t, Options{Dir: t.TempDir()})
	s.info.Reflink = false // as on ext4 or a tmpfs
	data := pattern(1<<20, 22)
	a, b := newObjectWith(t, s, data), newObjectWith(t, s, data)
	if n, err := s.Dedupe(a, b, 1<<20); n != 0 || err != nil {
		t.Errorf("Dedupe without reflink: %d, %v; want 0, nil", n, err)
	}
}
