package overlay

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// objState is what a snapshot relies on in an object: its data and its
// attributes.
type objState struct {
	data  string
	mode  uint32
	mtime unix.Timespec
	ctime unix.Timespec
	xattr string
}

func (e *env) objState(id string) objState {
	e.t.Helper()
	st, err := e.bs.Lstat(id)
	if err != nil {
		e.t.Fatalf("object %s: %v", id, err)
	}
	s := objState{mode: st.Mode, mtime: st.Mtim, ctime: st.Ctim}
	loc := e.bs.Loc(id)
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		f, err := e.bs.Open(id, unix.O_RDONLY)
		if err != nil {
			e.t.Fatal(err)
		}
		buf := make([]byte, 1<<16)
		n, _ := f.ReadAt(buf, 0)
		f.Close()
		s.data = string(buf[:n])
	}
	buf := make([]byte, 256)
	if n, err := unix.Getxattr(procPath(loc.Dirfd, loc.Name), "user.a", buf); err == nil {
		s.xattr = string(buf[:n])
	}
	return s
}

// TestFrozenObjectsThaw marks every object of the branch as shared with
// a snapshot, then changes the branch in every way: the shared objects
// keep their data and attributes and are never removed, while the view
// shows the changes.
func TestFrozenObjectsThaw(t *testing.T) {
	e := newEnv(t, map[string]string{"d/": "", "lowerfile": "lower"})
	r := e.view.Root()
	for _, name := range []string{"f", "g", "h"} {
		_, f, _, err := e.view.Create(e.must("d"), name, unix.O_RDWR, 0644, Caller{})
		if err != nil {
			t.Fatal(err)
		}
		writeAt(t, f, []byte("v1 "+name), 0)
		release(t, f)
	}
	if _, err := e.view.Link(e.must("d/g"), r, "g2"); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Setxattr(e.must("d/h"), "user.a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	mode := uint32(0600)
	if _, err := e.view.Setattr(e.must("lowerfile"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err) // a metacopy
	}

	// Every object is now shared with the snapshot.
	if _, err := e.view.Snapshot("", branch.KindManual); err != nil {
		t.Fatal(err)
	}
	before := map[string]objState{}
	for _, p := range []string{"", "d", "d/f", "d/g", "d/h", "lowerfile"} {
		id := e.must(p).object
		if id == "" {
			t.Fatalf("%q has no object", p)
		}
		before[id] = e.objState(id)
	}

	e.write("d/f", "v2 f")                                                           // data
	e.write("g2", "v2 g")                                                            // data through a second link
	if err := e.view.Setxattr(e.must("d/h"), "user.a", []byte("2"), 0); err != nil { // xattr
		t.Fatal(err)
	}
	mode = 0640
	if _, err := e.view.Setattr(e.must("d/h"), SetAttr{Mode: &mode}, nil); err != nil { // attrs
		t.Fatal(err)
	}
	e.write("lowerfile", "new data")                                                                // metacopy -> data
	if _, _, _, err := e.view.Create(e.must("d"), "new", unix.O_RDWR, 0644, Caller{}); err != nil { // dir times
		t.Fatal(err)
	}
	if err := e.view.Rename(e.must("d"), "h", r, "h", 0); err != nil { // ctime of a shared file
		t.Fatal(err)
	}
	if err := e.view.Unlink(r, "h"); err != nil { // last link of a shared file
		t.Fatal(err)
	}

	eq(t, "d/f", e.read("d/f"), "v2 f")
	eq(t, "d/g through its other link", e.read("d/g"), "v2 g")
	eq(t, "lowerfile", e.read("lowerfile"), "new data")
	for id, want := range before {
		if got := e.objState(id); got != want {
			t.Errorf("shared object %s changed:\n got  %+v\n want %+v", id, got, want)
		}
	}
	if _, err := os.Stat(e.lower + "/lowerfile"); err != nil {
		t.Fatal(err)
	}
}
