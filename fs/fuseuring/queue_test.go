package fuseuring

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// TestOpInSize: the size of each operation's in struct agrees with
// go-fuse's, which mirrors the kernel's (less the in header).
func TestOpInSize(t *testing.T) {
	hdr := unsafe.Sizeof(fuse.InHeader{})
	for _, c := range []struct {
		name string
		op   uint32
		size uintptr
	}{
		{"GETATTR", 3, unsafe.Sizeof(fuse.GetAttrIn{})},
		{"SETATTR", 4, unsafe.Sizeof(fuse.SetAttrIn{})},
		{"MKNOD", 8, unsafe.Sizeof(fuse.MknodIn{})},
		{"MKDIR", 9, unsafe.Sizeof(fuse.MkdirIn{})},
		{"LINK", 13, unsafe.Sizeof(fuse.LinkIn{})},
		{"OPEN", 14, unsafe.Sizeof(fuse.OpenIn{})},
		{"READ", 15, unsafe.Sizeof(fuse.ReadIn{})},
		{"WRITE", 16, unsafe.Sizeof(fuse.WriteIn{})},
		{"RELEASE", 18, unsafe.Sizeof(fuse.ReleaseIn{})},
		{"FSYNC", 20, unsafe.Sizeof(fuse.FsyncIn{})},
		{"GETXATTR", 22, unsafe.Sizeof(fuse.GetXAttrIn{})},
		{"FLUSH", 25, unsafe.Sizeof(fuse.FlushIn{})},
		{"ACCESS", 34, unsafe.Sizeof(fuse.AccessIn{})},
		{"CREATE", 35, unsafe.Sizeof(fuse.CreateIn{})},
		{"IOCTL", 39, unsafe.Sizeof(fuse.IoctlIn{})},
		{"FALLOCATE", 43, unsafe.Sizeof(fuse.FallocateIn{})},
		{"RENAME2", 45, unsafe.Sizeof(fuse.RenameIn{})},
		{"LSEEK", 46, unsafe.Sizeof(fuse.LseekIn{})},
		{"COPY_FILE_RANGE", 47, unsafe.Sizeof(fuse.CopyFileRangeIn{})},
		{"STATX", 52, unsafe.Sizeof(fuse.StatxIn{})},
		// fuse_rename_in and fuse_setxattr_in (without
		// FUSE_SETXATTR_EXT) are shorter than go-fuse's structs, which
		// carry the fields of the newer forms.
		{"RENAME", 12, hdr + 8},
		{"SETXATTR", 21, hdr + 8},
	} {
		if got, want := opInSize(c.op), int(c.size-hdr); got != want {
			t.Errorf("%s: opInSize %d, want %d", c.name, got, want)
		}
		if opInSize(c.op) > opInMax {
			t.Errorf("%s: %d bytes do not fit the header area's %d", c.name, opInSize(c.op), opInMax)
		}
	}
	for _, op := range []uint32{1, 5, 6, 10, 11, 17, 24} { // LOOKUP READLINK SYMLINK UNLINK RMDIR STATFS REMOVEXATTR
		if n := opInSize(op); n != 0 {
			t.Errorf("opcode %d has no in struct, opInSize says %d", op, n)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{{"0\n", 1}, {"0-1\n", 2}, {"0-3,8-11\n", 12}, {"0,2,4", 5}} {
		if got, err := parseCPUList(c.in); err != nil || got != c.want {
			t.Errorf("parseCPUList(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	if _, err := parseCPUList("x-1"); err == nil {
		t.Errorf("parseCPUList(%q): no error", "x-1")
	}
}

// TestMovesBulk: a READ reply or WRITE data of 64 KiB or more is bulk; a
// failed request's reply is not.
func TestMovesBulk(t *testing.T) {
	for _, c := range []struct {
		errno int32
		n, in int
		want  bool
	}{
		{0, 512 << 10, 80, true},   // a READ reply
		{0, 32, 128 << 10, true},   // a WRITE's data
		{0, 4 << 10, 80, false},    // a small READ
		{0, 144, 16, false},        // a LOOKUP
		{-5, 512 << 10, 80, false}, // a failed READ replies nothing
		{0, 64 << 10, 0, true},
		{0, 64<<10 - 1, 0, false},
	} {
		if got := movesBulk(c.errno, c.n, c.in); got != c.want {
			t.Errorf("movesBulk(%d, %d, %d) = %v, want %v", c.errno, c.n, c.in, got, c.want)
		}
	}
}

// TestPlace: after a turn that moved bulk data the thread may run on the
// other CPUs, and after one that moved none it is back on its own.
func TestPlace(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.SchedSetaffinity(0, &all); err != nil {
			t.Errorf("restoring the thread's CPUs: %v", err)
		}
	}()
	if all.Count() < 2 {
		testenv.Skip(t, testenv.TwoCPUs, "one CPU allowed: nowhere else to go")
	}
	home := -1
	for i := 0; home < 0; i++ {
		if all.IsSet(i) {
			home = i
		}
	}
	q := &queue{s: &Server{}, id: home}
	q.home.Set(home)
	q.wide = all
	q.wide.Clear(home)
	if err := unix.SchedSetaffinity(0, &q.home); err != nil {
		t.Fatal(err)
	}
	affinity := func() unix.CPUSet {
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(0, &got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for i, c := range []struct {
		bulk   bool
		want   unix.CPUSet
		spread bool
	}{
		{false, q.home, false},
		{true, q.wide, true},
		{true, q.wide, true},
		{false, q.home, false},
		{true, q.wide, true},
	} {
		q.bulk = c.bulk
		q.place()
		if got := affinity(); got != c.want || q.spread != c.spread {
			t.Errorf("turn %d (bulk %v): affinity %v spread %v, want %v %v", i, c.bulk, got, q.spread, c.want, c.spread)
		}
	}
	if got := q.s.Spreads(); got != 2 {
		t.Errorf("Spreads() = %d, want 2", got)
	}
}
