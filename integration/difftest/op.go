package difftest

import (
	"fmt"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Kind names an operation.
type Kind string

// The operations. Path operations resolve Path (and Path2) relative to
// the root; fd operations work on one of NumSlots file-descriptor slots,
// which an OpOpen fills (closing what the slot held) so that a sequence
// stays meaningful when the shrinker removes ops: an fd op on an empty
// slot fails with EBADF on every root alike.
const (
	OpOpen        Kind = "open"        // Path, Flags, Mode, Slot (-1: close at once)
	OpClose       Kind = "close"       // Slot
	OpPwrite      Kind = "pwrite"      // Slot, Off, Len, Fill
	OpWrite       Kind = "write"       // Slot, Len, Fill (at the file offset)
	OpPread       Kind = "pread"       // Slot, Off, Len
	OpLseek       Kind = "lseek"       // Slot, Off, Whence (in Flags)
	OpFtruncate   Kind = "ftruncate"   // Slot, Off
	OpFstat       Kind = "fstat"       // Slot
	OpFsync       Kind = "fsync"       // Slot
	OpWriteFile   Kind = "writefile"   // Path, Off, Len, Fill: open O_WRONLY, pwrite, close
	OpReadFile    Kind = "readfile"    // Path: open O_RDONLY, read all, close
	OpTruncate    Kind = "truncate"    // Path, Off
	OpUnlink      Kind = "unlink"      // Path
	OpMkdir       Kind = "mkdir"       // Path, Mode
	OpRmdir       Kind = "rmdir"       // Path
	OpRename      Kind = "rename"      // Path -> Path2, Flags (renameat2)
	OpSymlink     Kind = "symlink"     // Target, Path
	OpReadlink    Kind = "readlink"    // Path
	OpLink        Kind = "link"        // Path -> Path2
	OpChmod       Kind = "chmod"       // Path, Mode (follows symlinks)
	OpChown       Kind = "lchown"      // Path, Uid, Gid
	OpUtimens     Kind = "utimens"     // Path, Atime, Mtime, Flags (AT_SYMLINK_NOFOLLOW)
	OpSetxattr    Kind = "setxattr"    // Path, Name, Value, Flags (lsetxattr)
	OpGetxattr    Kind = "getxattr"    // Path, Name (lgetxattr)
	OpListxattr   Kind = "listxattr"   // Path (llistxattr)
	OpRemovexattr Kind = "removexattr" // Path, Name (lremovexattr)
	OpMknod       Kind = "mknod"       // Path, Mode (S_IFIFO or S_IFSOCK with permissions)
	OpStat        Kind = "lstat"       // Path
	OpReaddir     Kind = "readdir"     // Path
	// OpCheck compares the whole trees. Runs insert one every
	// Config.CheckEvery ops; being an op, it is replayed (and shrunk)
	// where it happened, as it walks the trees and fills the caches.
	OpCheck Kind = "check"
)

// NumSlots is the number of file-descriptor slots.
const NumSlots = 4

// Time values for OpUtimens besides explicit ones.
const (
	TimeNow  = unix.UTIME_NOW
	TimeOmit = unix.UTIME_OMIT
)

// Op is one operation with all its arguments, independent of any root.
type Op struct {
	Kind   Kind
	Path   string
	Path2  string // rename/link destination
	Target string // symlink target
	Flags  int    // open flags, rename flags, xattr flags, lseek whence, utimens flags
	Mode   uint32
	Slot   int
	Off    int64 // offset or size
	Len    int
	Fill   byte // data byte pattern seed
	Uid    int
	Gid    int
	Atime  int64 // nanoseconds since the epoch, or TimeNow/TimeOmit
	Mtime  int64
	Name   string // xattr name
	Value  string // xattr value
	// AsUser runs the op with fsuid/fsgid UserID instead of root, so
	// that permission checks apply.
	AsUser bool
}

// UserID is the uid and gid of ops with AsUser set.
const UserID = 1000

// Data returns the bytes a write op writes: Len bytes from the pattern Fill.
func (o *Op) Data() []byte {
	b := make([]byte, o.Len)
	for i := range b {
		b[i] = o.Fill + byte(i*7) + byte(i>>9)
	}
	return b
}

func (o Op) String() string {
	o.Path, o.Path2, o.Target = shortName(o.Path), shortName(o.Path2), shortName(o.Target)
	var b strings.Builder
	b.WriteString(string(o.Kind))
	switch o.Kind {
	case OpOpen:
		fmt.Fprintf(&b, " %q %s mode=%#o slot=%d", o.Path, openFlagsString(o.Flags), o.Mode, o.Slot)
	case OpCheck:
		return "check: compare the whole trees"
	case OpClose, OpFstat, OpFsync:
		fmt.Fprintf(&b, " slot=%d", o.Slot)
	case OpPwrite:
		fmt.Fprintf(&b, " slot=%d off=%d len=%d fill=%#x", o.Slot, o.Off, o.Len, o.Fill)
	case OpWrite:
		fmt.Fprintf(&b, " slot=%d len=%d fill=%#x", o.Slot, o.Len, o.Fill)
	case OpPread:
		fmt.Fprintf(&b, " slot=%d off=%d len=%d", o.Slot, o.Off, o.Len)
	case OpLseek:
		fmt.Fprintf(&b, " slot=%d off=%d whence=%s", o.Slot, o.Off, whenceString(o.Flags))
	case OpFtruncate:
		fmt.Fprintf(&b, " slot=%d size=%d", o.Slot, o.Off)
	case OpWriteFile:
		fmt.Fprintf(&b, " %q off=%d len=%d fill=%#x", o.Path, o.Off, o.Len, o.Fill)
	case OpTruncate:
		fmt.Fprintf(&b, " %q size=%d", o.Path, o.Off)
	case OpMkdir, OpChmod, OpMknod:
		fmt.Fprintf(&b, " %q mode=%s", o.Path, modeString(o.Mode))
	case OpRename:
		fmt.Fprintf(&b, " %q -> %q%s", o.Path, o.Path2, renameFlagsString(o.Flags))
	case OpLink:
		fmt.Fprintf(&b, " %q -> %q", o.Path, o.Path2)
	case OpSymlink:
		fmt.Fprintf(&b, " %q -> target %q", o.Path, o.Target)
	case OpChown:
		fmt.Fprintf(&b, " %q %d:%d", o.Path, o.Uid, o.Gid)
	case OpUtimens:
		fmt.Fprintf(&b, " %q atime=%s mtime=%s", o.Path, timeString(o.Atime), timeString(o.Mtime))
		if o.Flags&unix.AT_SYMLINK_NOFOLLOW != 0 {
			b.WriteString(" nofollow")
		}
	case OpSetxattr:
		fmt.Fprintf(&b, " %q %s=%q%s", o.Path, o.Name, abbrev(o.Value), xattrFlagsString(o.Flags))
	case OpGetxattr, OpRemovexattr:
		fmt.Fprintf(&b, " %q %s", o.Path, o.Name)
	default:
		fmt.Fprintf(&b, " %q", o.Path)
	}
	if o.AsUser {
		fmt.Fprintf(&b, " as uid %d", UserID)
	}
	return b.String()
}

// Result is what an op returned on one root.
type Result struct {
	Errno syscall.Errno
	N     int64     // bytes written, file offset, xattr size
	Data  string    // bytes read, link target, xattr value or list, listing
	Stat  *StatInfo // lstat and fstat
}

func (r Result) String() string {
	if r.Errno != 0 {
		return errnoName(r.Errno)
	}
	s := "ok"
	if r.N != 0 {
		s += fmt.Sprintf(" n=%d", r.N)
	}
	if r.Data != "" {
		s += fmt.Sprintf(" %q", shortName(abbrev(r.Data)))
	}
	if r.Stat != nil {
		s += " " + r.Stat.String()
	}
	return s
}

// StatInfo holds the stat fields that are compared across roots.
type StatInfo struct {
	Mode  uint32
	Size  int64
	Nlink uint64
	Uid   uint32
	Gid   uint32
	Rdev  uint64
	Mtime int64 // nanoseconds since the epoch
}

func statInfo(st *unix.Stat_t) *StatInfo {
	return &StatInfo{
		Mode:  st.Mode,
		Size:  st.Size,
		Nlink: st.Nlink,
		Uid:   st.Uid,
		Gid:   st.Gid,
		Rdev:  st.Rdev,
		Mtime: st.Mtim.Nano(),
	}
}

func (s *StatInfo) String() string {
	return fmt.Sprintf("mode=%s size=%d nlink=%d uid=%d gid=%d mtime=%s",
		modeString(s.Mode), s.Size, s.Nlink, s.Uid, s.Gid, timeString(s.Mtime))
}

// ExplicitTimeLimit separates times set explicitly (by the lower tree or
// utimensat, all before it) from times the filesystem set ("now").
const ExplicitTimeLimit = 1_300_000_000 * 1e9

func isExplicit(ns int64) bool { return ns < ExplicitTimeLimit }

func timeString(ns int64) string {
	switch ns {
	case TimeNow:
		return "NOW"
	case TimeOmit:
		return "OMIT"
	}
	if !isExplicit(ns) {
		return "now"
	}
	return fmt.Sprintf("%d.%09d", ns/1e9, ns%1e9)
}

func modeString(m uint32) string {
	t := ""
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		t = "file:"
	case unix.S_IFDIR:
		t = "dir:"
	case unix.S_IFLNK:
		t = "symlink:"
	case unix.S_IFIFO:
		t = "fifo:"
	case unix.S_IFSOCK:
		t = "sock:"
	case unix.S_IFCHR:
		t = "chr:"
	case unix.S_IFBLK:
		t = "blk:"
	}
	return fmt.Sprintf("%s%04o", t, m&07777)
}

func openFlagsString(f int) string {
	var parts []string
	switch f & unix.O_ACCMODE {
	case unix.O_RDONLY:
		parts = append(parts, "O_RDONLY")
	case unix.O_WRONLY:
		parts = append(parts, "O_WRONLY")
	case unix.O_RDWR:
		parts = append(parts, "O_RDWR")
	}
	for _, fl := range []struct {
		bit  int
		name string
	}{
		{unix.O_CREAT, "O_CREAT"}, {unix.O_EXCL, "O_EXCL"}, {unix.O_TRUNC, "O_TRUNC"},
		{unix.O_APPEND, "O_APPEND"}, {unix.O_DIRECTORY, "O_DIRECTORY"}, {unix.O_NOFOLLOW, "O_NOFOLLOW"},
	} {
		if f&fl.bit != 0 {
			parts = append(parts, fl.name)
		}
	}
	return strings.Join(parts, "|")
}

func renameFlagsString(f int) string {
	switch f {
	case 0:
		return ""
	case unix.RENAME_NOREPLACE:
		return " RENAME_NOREPLACE"
	case unix.RENAME_EXCHANGE:
		return " RENAME_EXCHANGE"
	}
	return fmt.Sprintf(" flags=%#x", f)
}

func xattrFlagsString(f int) string {
	switch f {
	case unix.XATTR_CREATE:
		return " XATTR_CREATE"
	case unix.XATTR_REPLACE:
		return " XATTR_REPLACE"
	}
	return ""
}

func whenceString(w int) string {
	switch w {
	case unix.SEEK_SET:
		return "SEEK_SET"
	case unix.SEEK_CUR:
		return "SEEK_CUR"
	case unix.SEEK_END:
		return "SEEK_END"
	case unix.SEEK_DATA:
		return "SEEK_DATA"
	case unix.SEEK_HOLE:
		return "SEEK_HOLE"
	}
	return fmt.Sprint(w)
}

func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}

// shortName writes runs of a repeated byte (the generator's 255-byte
// names, long targets) as "N{255}" in reports.
func shortName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] == s[i] {
			j++
		}
		if j-i >= 16 {
			fmt.Fprintf(&b, "%c{%d}", s[i], j-i)
		} else {
			b.WriteString(s[i:j])
		}
		i = j
	}
	return b.String()
}

// abbrev shortens long strings for reports.
func abbrev(s string) string {
	if len(s) <= 64 {
		return s
	}
	return fmt.Sprintf("%s...(%d bytes, sum %08x)", s[:32], len(s), checksum(s))
}

func checksum(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
