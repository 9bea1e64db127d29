package difftest

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// An Executor runs ops against one root directory and keeps that
// root's file-descriptor slots.
type Executor interface {
	Exec(op *Op) Result
	// Close closes the open slots.
	Close()
}

// DirExecutor runs ops with plain syscalls on paths below Root.
type DirExecutor struct {
	Root  string
	slots [NumSlots]int
	open  [NumSlots]bool
}

// NewDirExecutor returns an executor for the tree at root.
func NewDirExecutor(root string) *DirExecutor {
	return &DirExecutor{Root: root}
}

// Path returns the absolute path of rel below the root. It does not
// clean the result: ".." in rel stays what the kernel makes of it.
func (e *DirExecutor) Path(rel string) string {
	if rel == "" {
		return e.Root
	}
	return e.Root + "/" + rel
}

// Close implements Executor.
func (e *DirExecutor) Close() {
	for i := range e.slots {
		e.closeSlot(i)
	}
}

func (e *DirExecutor) closeSlot(i int) {
	if e.open[i] {
		unix.Close(e.slots[i])
		e.open[i] = false
	}
}

func (e *DirExecutor) slot(i int) (int, bool) {
	if i < 0 || i >= NumSlots || !e.open[i] {
		return -1, false
	}
	return e.slots[i], true
}

// Exec implements Executor.
func (e *DirExecutor) Exec(op *Op) Result {
	if op.AsUser {
		return runAsUser(func() Result { return e.exec(op) })
	}
	return e.exec(op)
}

// runAsUser runs f on a locked OS thread whose fsuid and fsgid are
// UserID. Changing the fsuid away from 0 also drops the file
// capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER, ...) of that thread, so f
// meets the permission checks an ordinary user meets.
//
// A failed switch panics: an op run with the wrong ids would compare the
// wrong thing, and a thread left with the user's ids would run whatever
// Go schedules on it next unprivileged.
func runAsUser(f func() Result) Result {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must := func(err error) {
		if err != nil {
			panic("difftest: " + err.Error())
		}
	}
	must(setfsgid(UserID))
	must(setfsuid(UserID))
	// The thread keeps CAP_SETUID, so the way back to root always works.
	defer func() { must(setfsgid(0)) }()
	defer func() { must(setfsuid(0)) }()
	return f()
}

// setfsgid and setfsuid set the thread's fsgid or fsuid. setfsgid(2) and
// setfsuid(2) report no error (a call that fails returns the previous id
// and leaves it), so each reads the id back: a call with -1, an invalid
// id, changes nothing and returns the current one.
func setfsgid(gid int) error {
	if _, err := unix.SetfsgidRetGid(gid); err != nil {
		return fmt.Errorf("setfsgid %d: %v", gid, err)
	}
	if got, err := unix.SetfsgidRetGid(-1); err != nil || got != gid {
		return fmt.Errorf("setfsgid %d: the fsgid is %d (%v)", gid, got, err)
	}
	return nil
}

func setfsuid(uid int) error {
	if _, err := unix.SetfsuidRetUid(uid); err != nil {
		return fmt.Errorf("setfsuid %d: %v", uid, err)
	}
	if got, err := unix.SetfsuidRetUid(-1); err != nil || got != uid {
		return fmt.Errorf("setfsuid %d: the fsuid is %d (%v)", uid, got, err)
	}
	return nil
}

func errResult(err error) Result {
	if err == nil {
		return Result{}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return Result{Errno: errno}
	}
	return Result{Errno: unix.EIO, Data: err.Error()}
}

const openExtra = unix.O_NONBLOCK | unix.O_CLOEXEC // O_NONBLOCK: a fifo must never block

func (e *DirExecutor) exec(op *Op) Result {
	p := e.Path(op.Path)
	switch op.Kind {
	case OpOpen:
		fd, err := unix.Open(p, op.Flags|openExtra, op.Mode)
		if err != nil {
			return errResult(err)
		}
		if op.Slot < 0 || op.Slot >= NumSlots {
			unix.Close(fd)
			return Result{}
		}
		e.closeSlot(op.Slot)
		e.slots[op.Slot], e.open[op.Slot] = fd, true
		return Result{}
	case OpClose:
		fd, ok := e.slot(op.Slot)
		if !ok {
			return Result{Errno: unix.EBADF}
		}
		e.open[op.Slot] = false
		return errResult(unix.Close(fd))
	case OpPwrite, OpWrite, OpPread, OpLseek, OpFtruncate, OpFstat, OpFsync:
		fd, ok := e.slot(op.Slot)
		if !ok {
			return Result{Errno: unix.EBADF}
		}
		return execFd(fd, op)
	case OpWriteFile:
		fd, err := unix.Open(p, unix.O_WRONLY|openExtra, 0)
		if err != nil {
			return errResult(err)
		}
		defer unix.Close(fd)
		n, err := unix.Pwrite(fd, op.Data(), op.Off)
		if err != nil {
			return errResult(err)
		}
		return Result{N: int64(n)}
	case OpReadFile:
		fd, err := unix.Open(p, unix.O_RDONLY|openExtra, 0)
		if err != nil {
			return errResult(err)
		}
		defer unix.Close(fd)
		data, err := readAll(fd)
		if err != nil {
			return errResult(err)
		}
		return Result{Data: string(data)}
	case OpTruncate:
		return errResult(unix.Truncate(p, op.Off))
	case OpUnlink:
		return errResult(unix.Unlink(p))
	case OpMkdir:
		return errResult(unix.Mkdir(p, op.Mode))
	case OpRmdir:
		return errResult(unix.Rmdir(p))
	case OpRename:
		return errResult(unix.Renameat2(unix.AT_FDCWD, p, unix.AT_FDCWD, e.Path(op.Path2), uint(op.Flags)))
	case OpSymlink:
		return errResult(unix.Symlink(op.Target, p))
	case OpReadlink:
		t, err := readlink(p)
		if err != nil {
			return errResult(err)
		}
		return Result{Data: t}
	case OpLink:
		return errResult(unix.Linkat(unix.AT_FDCWD, p, unix.AT_FDCWD, e.Path(op.Path2), 0))
	case OpChmod:
		return errResult(unix.Chmod(p, op.Mode))
	case OpChown:
		return errResult(unix.Lchown(p, op.Uid, op.Gid))
	case OpUtimens:
		ts := []unix.Timespec{timespec(op.Atime), timespec(op.Mtime)}
		return errResult(unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, op.Flags))
	case OpSetxattr:
		return errResult(unix.Lsetxattr(p, op.Name, []byte(op.Value), op.Flags))
	case OpGetxattr:
		v, err := getxattr(p, op.Name)
		if err != nil {
			return errResult(err)
		}
		return Result{N: int64(len(v)), Data: v}
	case OpListxattr:
		names, err := listxattr(p)
		if err != nil {
			return errResult(err)
		}
		return Result{Data: strings.Join(names, ",")}
	case OpRemovexattr:
		return errResult(unix.Lremovexattr(p, op.Name))
	case OpMknod:
		return errResult(unix.Mknod(p, op.Mode, 0))
	case OpStat:
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return errResult(err)
		}
		return Result{Stat: statInfo(&st)}
	case OpReaddir:
		ents, err := readDir(p)
		if err != nil {
			return errResult(err)
		}
		var names []string
		for _, d := range ents {
			names = append(names, d.Name+":"+dtypeString(d.Type))
		}
		sort.Strings(names)
		return Result{Data: strings.Join(names, ",")}
	}
	return Result{Errno: unix.ENOSYS}
}

func execFd(fd int, op *Op) Result {
	switch op.Kind {
	case OpPwrite:
		n, err := unix.Pwrite(fd, op.Data(), op.Off)
		if err != nil {
			return errResult(err)
		}
		return Result{N: int64(n)}
	case OpWrite:
		n, err := unix.Write(fd, op.Data())
		if err != nil {
			return errResult(err)
		}
		return Result{N: int64(n)}
	case OpPread:
		buf := make([]byte, op.Len)
		n, err := unix.Pread(fd, buf, op.Off)
		if err != nil {
			return errResult(err)
		}
		return Result{N: int64(n), Data: string(buf[:n])}
	case OpLseek:
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			// Directory offsets are opaque cookies whose range each
			// filesystem chooses (ext4 answers SEEK_END with
			// LLONG_MAX, overlayfs with EINVAL): not compared.
			return Result{Data: "directory: not compared"}
		}
		off, err := unix.Seek(fd, op.Off, op.Flags)
		if err != nil {
			return errResult(err)
		}
		return Result{N: off}
	case OpFtruncate:
		return errResult(unix.Ftruncate(fd, op.Off))
	case OpFstat:
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return errResult(err)
		}
		return Result{Stat: statInfo(&st)}
	case OpFsync:
		return errResult(unix.Fsync(fd))
	}
	return Result{Errno: unix.ENOSYS}
}

func timespec(ns int64) unix.Timespec {
	if ns == TimeNow || ns == TimeOmit {
		return unix.Timespec{Nsec: ns}
	}
	return unix.NsecToTimespec(ns)
}

// readAll reads fd to its end (at most 16 MiB).
func readAll(fd int) ([]byte, error) {
	var out []byte
	buf := make([]byte, 64<<10)
	for len(out) < 16<<20 {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
	return out, io.ErrShortBuffer
}

func readlink(p string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink(p, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func getxattr(p, name string) (string, error) {
	buf := make([]byte, xattrSizeMax)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// listxattr returns the sorted xattr names of p (not following symlinks).
func listxattr(p string) ([]string, error) {
	buf := make([]byte, xattrListMax)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	sort.Strings(names)
	return names, nil
}

// Dirent is one entry of getdents64.
type Dirent struct {
	Name string
	Ino  uint64
	Type uint8
}

// readDir lists a directory with getdents64, keeping d_ino and d_type,
// without "." and "..".
func readDir(p string) ([]Dirent, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var out []Dirent
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		for b := buf[:n]; len(b) >= 19; {
			ino := nativeUint64(b[0:8])
			reclen := int(b[16]) | int(b[17])<<8
			typ := b[18]
			if reclen < 19 || reclen > len(b) {
				return nil, unix.EIO
			}
			name := b[19:reclen]
			if i := strings.IndexByte(string(name), 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				out = append(out, Dirent{Name: s, Ino: ino, Type: typ})
			}
			b = b[reclen:]
		}
	}
}

func nativeUint64(b []byte) uint64 {
	// getdents64 fields are in the host's byte order; agentfs runs on
	// little-endian hosts (amd64, arm64).
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func dtypeString(t uint8) string {
	switch t {
	case unix.DT_REG:
		return "file"
	case unix.DT_DIR:
		return "dir"
	case unix.DT_LNK:
		return "symlink"
	case unix.DT_FIFO:
		return "fifo"
	case unix.DT_SOCK:
		return "sock"
	case unix.DT_CHR:
		return "chr"
	case unix.DT_BLK:
		return "blk"
	case unix.DT_UNKNOWN:
		return "unknown"
	}
	return "?"
}

// dtypeOf is the d_type that matches a stat mode.
func dtypeOf(mode uint32) uint8 {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFLNK:
		return unix.DT_LNK
	case unix.S_IFIFO:
		return unix.DT_FIFO
	case unix.S_IFSOCK:
		return unix.DT_SOCK
	case unix.S_IFCHR:
		return unix.DT_CHR
	case unix.S_IFBLK:
		return unix.DT_BLK
	}
	return unix.DT_UNKNOWN
}

// The kernel's limits on one xattr value and on a name list
// (XATTR_SIZE_MAX, XATTR_LIST_MAX in linux/limits.h).
const (
	xattrSizeMax = 65536
	xattrListMax = 65536
)
