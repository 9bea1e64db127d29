package fuseuring

import (
	"testing"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
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
