package overlay

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// TestXattrs runs the extended attribute operations on lower files, the
// lower root, a lower symlink and upper files, through the *xattrat
// system calls and through /proc/self/fd paths (the kernels before 6.13).
func TestXattrs(t *testing.T) {
	for _, way := range []string{"at", "paths"} {
		t.Run(way, func(t *testing.T) {
			if way == "paths" {
				ok := useXattrAt() // the probe runs once, before
				xattrAtOK = false
				t.Cleanup(func() { xattrAtOK = ok })
			}
			testXattrs(t)
			if way == "at" && !useXattrAt() && kernelAtLeast(6, 13) {
				t.Error("the probe refused the *xattrat calls, which Linux 6.13 has")
			}
		})
	}
}

func testXattrs(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "data", "d/g": "data"})
	for _, p := range []string{"", "f", "d/g"} {
		if err := unix.Lsetxattr(filepath.Join(e.lower, p), "user.a", []byte("v-"+p), 0); err != nil {
			testenv.Skip(t, testenv.UserXattrs, "no user xattrs on the test filesystem: %v", err)
		}
	}
	if err := os.Symlink("f", filepath.Join(e.lower, "l")); err != nil {
		t.Fatal(err)
	}
	get := func(p, name string) (string, error) {
		t.Helper()
		n := e.must(p)
		size, err := e.view.Getxattr(n, name, nil)
		if err != nil {
			return "", err
		}
		buf := make([]byte, size)
		got, err := e.view.Getxattr(n, name, buf)
		if err != nil {
			return "", err
		}
		return string(buf[:got]), nil
	}
	for _, p := range []string{"", "f", "d/g"} {
		if v, err := get(p, "user.a"); err != nil || v != "v-"+p {
			t.Errorf("getxattr %q user.a = %q, %v; want %q", p, v, err, "v-"+p)
		}
	}
	if _, err := e.view.Getxattr(e.must("f"), "user.a", make([]byte, 1)); err != unix.ERANGE {
		t.Errorf("getxattr into a buffer too small: %v, want ERANGE", err)
	}
	if _, err := get("l", "user.a"); err != unix.ENODATA {
		t.Errorf("getxattr of a symlink followed it: %v, want ENODATA", err)
	}

	size, err := e.view.Listxattr(e.must("f"), nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	if size, err = e.view.Listxattr(e.must("f"), buf); err != nil {
		t.Fatal(err)
	}
	if names := strings.Split(string(buf[:size]), "\x00"); !slices.Contains(names, "user.a") {
		t.Errorf("listxattr f = %q, want user.a in it", names)
	}

	// Changes copy the file up and leave the lower one alone.
	if err := e.view.Setxattr(e.must("f"), "user.b", []byte("B"), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Setxattr(e.must("f"), "user.b", []byte("C"), unix.XATTR_CREATE); err != unix.EEXIST {
		t.Errorf("setxattr XATTR_CREATE of an existing name: %v, want EEXIST", err)
	}
	if v, err := get("f", "user.b"); err != nil || v != "B" {
		t.Errorf("getxattr f user.b = %q, %v; want B", v, err)
	}
	if v, err := get("f", "user.a"); err != nil || v != "v-f" {
		t.Errorf("getxattr f user.a after copy-up = %q, %v", v, err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(e.lower, "f"), "user.b", nil); err != unix.ENODATA {
		t.Errorf("the lower file got user.b: %v", err)
	}
	if err := e.view.Removexattr(e.must("f"), "user.a"); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Removexattr(e.must("f"), "user.a"); err != unix.ENODATA {
		t.Errorf("removing a removed xattr: %v, want ENODATA", err)
	}
	if err := e.view.Removexattr(e.must("d/g"), "user.none"); err != unix.ENODATA {
		t.Errorf("removing a missing xattr of a lower file: %v, want ENODATA", err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(e.lower, "f"), "user.a", nil); err != nil {
		t.Errorf("the lower file lost user.a: %v", err)
	}

	// A new file has no security.capability, and says so without asking
	// the backstore; setting an xattr makes it ask again.
	_, file, _, err := e.view.Create(e.must("d"), "new", unix.O_RDWR, 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	release(t, file)
	n := e.must("d/new")
	if !n.noCaps() {
		t.Error("a new file is not known to have no security.capability")
	}
	if _, err := e.view.Getxattr(n, capsXattr, nil); err != unix.ENODATA {
		t.Errorf("getxattr %s of a new file: %v, want ENODATA", capsXattr, err)
	}
	if err := e.view.Setxattr(n, "user.c", []byte("c"), 0); err != nil {
		t.Fatal(err)
	}
	if n.noCaps() {
		t.Error("setxattr left the node marked as without security.capability")
	}
	if v, err := get("d/new", "user.c"); err != nil || v != "c" {
		t.Errorf("getxattr d/new user.c = %q, %v", v, err)
	}
}

// kernelAtLeast reports whether the running kernel is major.minor or
// later.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// TestCapsRace: a getxattr that found no security.capability records it
// only if the node's xattrs did not change since it began.
func TestCapsRace(t *testing.T) {
	var n Node
	seen := n.caps.Load()
	n.capsUnknown() // a setxattr begins after the getxattr did
	n.knowNoCaps(seen)
	if n.noCaps() {
		t.Error("an answer from before a setxattr was recorded after it")
	}
	n.knowNoCaps(n.caps.Load())
	if !n.noCaps() {
		t.Error("an answer with nothing changed since was not recorded")
	}
	n.capsUnknown()
	if n.noCaps() {
		t.Error("a change of the xattrs left the answer recorded")
	}
}
