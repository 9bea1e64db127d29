package overlay

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
)

// TestAdoptDeferred: files whose objects are deferred (a mount started
// from a remote snapshot) show their attributes, no xattrs and their
// listing without an inode made in the backstore; fsck finds them
// whole, and a deferred object no entry names (a crash between Defer
// and the entries) is garbage; a chmod makes the object, an open
// fetches it; a name that cannot be made takes its object away.
func TestAdoptDeferred(t *testing.T) {
	e := newEnv(t, map[string]string{"taken": "lower"})
	v := e.view
	data := []byte("the bytes of a remote file\n")
	sum := sha256.Sum256(data)
	key := fmt.Sprintf("%x", sum)
	uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
	d := backstore.Deferred{Key: key, Size: int64(len(data)), Mode: 0o640, Uid: uid, Gid: gid,
		Atime: 1_600_000_000_000_000_001, Mtime: 1_600_000_000_000_000_002}
	ids, err := e.bs.Defer([]backstore.Deferred{d, d, d, d})
	if err != nil {
		t.Fatal(err)
	}
	nd, _, err := v.Mkdir(v.Root(), "nd", 0o755, Caller{Uid: uid, Gid: gid})
	if err != nil {
		t.Fatal(err)
	}
	v.Forget(nd, 1)
	for i, p := range []string{"a", "nd/b"} {
		dir, name := v.Root(), p
		if p == "nd/b" {
			dir, name = e.must("nd"), "b"
		}
		n, st, err := v.Adopt(dir, name, ids[i])
		if err != nil {
			t.Fatalf("Adopt %s: %v", p, err)
		}
		v.Forget(n, 1)
		if st.Mode != unix.S_IFREG|0o640 || st.Size != int64(len(data)) || st.Mtim.Nano() != d.Mtime || st.Atim.Nano() != d.Atime {
			t.Errorf("%s: mode %o size %d mtime %d atime %d, want %o %d %d %d", p, st.Mode, st.Size, st.Mtim.Nano(), st.Atim.Nano(),
				unix.S_IFREG|0o640, len(data), d.Mtime, d.Atime)
		}
	}
	// A name that exists: the object goes.
	if _, _, err := v.Adopt(v.Root(), "taken", ids[2]); err != unix.EEXIST {
		t.Errorf("Adopt over an existing name = %v, want EEXIST", err)
	}
	if _, err := e.bs.Lstat(ids[2]); err != unix.ENOENT {
		t.Errorf("the object of a failed Adopt: Lstat = %v, want ENOENT", err)
	}
	if got := e.names(""); !slices.Equal(got, []string{"a", "nd", "taken"}) {
		t.Errorf("root lists %v", got)
	}
	a := e.must("a")
	if _, err := v.Getxattr(a, "user.x", nil); err != unix.ENODATA {
		t.Errorf("getxattr of a deferred file = %v, want ENODATA", err)
	}
	if sz, err := v.Listxattr(a, make([]byte, 100)); sz != 0 || err != nil {
		t.Errorf("listxattr of a deferred file = %d, %v; want 0, nil", sz, err)
	}
	if !e.bs.Deferred(ids[0]) || !e.bs.Deferred(ids[1]) {
		t.Fatal("reading attributes, xattrs or listings made a deferred object")
	}

	// fsck: the adopted ones are whole; ids[3], which no entry names,
	// is garbage, which a repair removes.
	r := e.fsck(false)
	if len(r.Problems) != 0 || len(r.Garbage) != 1 || r.Garbage[0].ID != ids[3] {
		t.Errorf("fsck: %s\nwant no problem and %s as garbage", r, ids[3])
	}
	if !e.bs.Deferred(ids[3]) {
		t.Error("fsck without --repair removed the garbage")
	}
	e.fsck(true)
	if e.bs.Deferred(ids[3]) || !e.bs.Deferred(ids[0]) || !e.bs.Deferred(ids[1]) {
		t.Errorf("after fsck --repair: deferred %v %v %v, want true true false", e.bs.Deferred(ids[0]), e.bs.Deferred(ids[1]), e.bs.Deferred(ids[3]))
	}
	if r := e.fsck(false); !r.Clean() {
		t.Errorf("second fsck: %s", r)
	}

	// A chmod makes the object (its bytes still pending); an open
	// fetches them.
	mode := uint32(0o600)
	if _, err := v.Setattr(a, SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	if e.bs.Deferred(ids[0]) || !e.bs.Pending(ids[0]) {
		t.Errorf("after chmod: deferred %v, pending %v; want false, true", e.bs.Deferred(ids[0]), e.bs.Pending(ids[0]))
	}
	st, err := v.Getattr(a)
	if err != nil || st.Mode != unix.S_IFREG|0o600 || st.Mtim.Nano() != d.Mtime {
		t.Errorf("after chmod: %v mode %o mtime %d, want %o %d", err, st.Mode, st.Mtim.Nano(), unix.S_IFREG|0o600, d.Mtime)
	}
	e.bs.SetSource(backstore.Source{
		Fetch: func(_ context.Context, k string, off int64, w io.Writer) error {
			_, err := w.Write(data[off:])
			return err
		},
		Check: func(k string, got []byte) error {
			if string(got) != string(sum[:]) {
				return fmt.Errorf("%s: damaged", k)
			}
			return nil
		},
	})
	for _, p := range []string{"a", "nd/b"} {
		if got := e.read(p); got != string(data) {
			t.Errorf("%s reads %q, want %q", p, got, data)
		}
	}
	if e.bs.Deferred(ids[1]) || e.bs.Pending(ids[1]) {
		t.Error("nd/b still deferred or pending after a read")
	}
}

// TestAdoptFiles: many deferred files named in one directory at once;
// a name that exists (or comes twice) makes none of them and takes all
// their objects away.
func TestAdoptFiles(t *testing.T) {
	e := newEnv(t, map[string]string{"d/taken": "lower"})
	v := e.view
	d := backstore.Deferred{Key: "k", Size: 5, Mode: 0o644, Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid()), Mtime: 7, Atime: 7}
	ids, err := e.bs.Defer([]backstore.Deferred{d, d, d, d, d})
	if err != nil {
		t.Fatal(err)
	}
	dir := e.must("d")
	for _, bad := range [][]string{{"x", "taken"}, {"y", "y"}} {
		if err := v.AdoptFiles(dir, bad, ids[:2]); err != unix.EEXIST {
			t.Errorf("AdoptFiles %q = %v, want EEXIST", bad, err)
		}
	}
	for _, id := range ids[:2] {
		if _, err := e.bs.Lstat(id); err != unix.ENOENT {
			t.Errorf("an object of a failed AdoptFiles: Lstat = %v, want ENOENT", err)
		}
	}
	if got := e.names("d"); !slices.Equal(got, []string{"taken"}) {
		t.Errorf("d lists %v after the failed AdoptFiles, want [taken]", got)
	}
	if err := v.AdoptFiles(dir, []string{"a", "b", "c"}, ids[2:]); err != nil {
		t.Fatal(err)
	}
	if got := e.names("d"); !slices.Equal(got, []string{"a", "b", "c", "taken"}) {
		t.Errorf("d lists %v, want [a b c taken]", got)
	}
	for i, p := range []string{"d/a", "d/b", "d/c"} {
		st, err := v.Getattr(e.must(p))
		if err != nil || st.Size != 5 || st.Mtim.Nano() != 7 || v.ObjectID(e.must(p)) != ids[2+i] {
			t.Errorf("%s: %v size %d mtime %d object %s, want 5 7 %s", p, err, st.Size, st.Mtim.Nano(), v.ObjectID(e.must(p)), ids[2+i])
		}
	}
	if r := e.fsck(false); !r.Clean() {
		t.Errorf("fsck: %s", r)
	}
	e.reopen()
	if got := e.names("d"); !slices.Equal(got, []string{"a", "b", "c", "taken"}) {
		t.Errorf("d lists %v after a reopen, want [a b c taken]", got)
	}
}
