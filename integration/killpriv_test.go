package integration

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// TestWritesAskNoCapability: agentfs takes over the clearing of setid
// bits (FUSE_HANDLE_KILLPRIV_V2), so the kernel stops asking for
// security.capability before every write(2) once it has seen a file
// without it; what a write must clear is still cleared: a capability
// set after the kernel stopped asking, and setid bits set after it, on
// a native filesystem and on agentfs alike.
func TestWritesAskNoCapability(t *testing.T) {
	m := harness.NewMount(t, harness.WithArgs("--debug"), harness.WithLower(harness.LowerFile("lower", "lower file\n")))
	countAsks := func() int {
		b, err := os.ReadFile(m.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), `GETXATTR`)
	}
	chunk := bytes.Repeat([]byte("w"), 4096)
	const writes = 64
	for _, name := range []string{"new", "lower"} {
		before := countAsks()
		f, err := os.OpenFile(m.Path(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		for range writes {
			if _, err := f.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if asked := countAsks() - before; asked > 2 {
			t.Errorf("%s: %d writes made the kernel ask agentfs %d times for an extended attribute (security.capability), want at most 2", name, writes, asked)
		}
	}

	// The same sequence on a plain directory and on agentfs: write (the
	// kernel then stops asking), set a capability or setid bits, write
	// again as a user without CAP_FSETID.
	native := harness.NewMountpoint(t)
	for _, root := range []string{native, m.Dir} {
		for _, name := range []string{"cap", "setid"} {
			p := root + "/" + name
			if err := os.WriteFile(p, []byte("x"), 0o664); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, 0, userGID); err != nil {
				t.Fatal(err)
			}
			appendTo(t, p, "y")
		}
		if err := unix.Setxattr(root+"/cap", "security.capability", capNetBindService(), 0); err != nil {
			t.Fatalf("set security.capability on %s: %v", root, err)
		}
		if err := unix.Chmod(root+"/setid", 0o6775); err != nil {
			t.Fatal(err)
		}
	}
	c := harness.Cred{Uid: userUID, Gid: userGID}
	ops := func(root string) []harness.Op {
		return []harness.Op{
			harness.OpWrite(root+"/setid", unix.O_APPEND, "+"),
			harness.OpStat(root + "/setid"),
		}
	}
	want, got := harness.RunAs(t, c, ops(native)...), harness.RunAs(t, c, ops(m.Dir)...)
	for i, op := range ops("") {
		if got[i] != want[i] {
			t.Errorf("as uid %d: %s %s: agentfs %s, the kernel (plain dir) %s", userUID, op.Op, op.Path, got[i], want[i])
		}
	}
	for _, root := range []string{native, m.Dir} {
		appendTo(t, root+"/cap", "z") // root: CAP_FSETID does not keep a capability
		_, err := unix.Getxattr(root+"/cap", "security.capability", make([]byte, 64))
		if !errors.Is(err, unix.ENODATA) {
			t.Errorf("%s: security.capability after a write: %v, want ENODATA (a write removes it)", root, err)
		}
	}
}

func appendTo(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// capNetBindService is a security.capability value (VFS_CAP_REVISION_2)
// granting CAP_NET_BIND_SERVICE, permitted and effective.
func capNetBindService() []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000000|0x1) // revision 2, effective
	binary.LittleEndian.PutUint32(b[4:], 1<<unix.CAP_NET_BIND_SERVICE)
	return b
}
