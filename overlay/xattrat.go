package overlay

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Extended attributes of a name in a directory fd, not following a
// final symlink. Linux 6.13 has system calls for exactly this
// (getxattrat and its siblings); before, the l*xattr calls are given a
// /proc/self/fd/N/name path, whose walk through procfs costs more than
// the call itself (1.7 µs against 0.7 µs for a getxattr that finds
// nothing, here).
//
// Whether to use the new calls is decided once, by a probe that must
// find nothing on "/": a kernel without them answers ENOSYS, and a
// seccomp filter that denies them by name may answer anything else
// (EPERM, EACCES); with any answer but ENODATA, ENOTSUP or success the
// paths are used for good.

var (
	xattrAtOnce sync.Once
	xattrAtOK   bool
)

// useXattrAt reports whether the *xattrat calls work here.
func useXattrAt() bool {
	xattrAtOnce.Do(func() {
		_, e := xattrArgsCall(unix.SYS_GETXATTRAT, unix.AT_FDCWD, "/", "user.agentfs.probe", 0, 0, 0)
		xattrAtOK = e == 0 || e == unix.ENODATA || e == unix.ENOTSUP
	})
	return xattrAtOK
}

// xattrArgs is the kernel's struct xattr_args (XATTR_ARGS_SIZE_VER0).
type xattrArgs struct {
	value uint64
	size  uint32
	flags uint32
}

// xattrArgsCall makes getxattrat or setxattrat on name in dirfd (not
// followed), with the buffer at buf of size bytes. The buffer's address
// travels inside struct xattr_args, where the stack-moving garbage
// collector cannot see it: uintptrescapes makes the compiler put every
// buffer passed as buf on the heap, and the struct lives in this frame,
// which does not move before the (nosplit) system call.
//
//go:uintptrescapes
func xattrArgsCall(trap uintptr, dirfd int, name, attr string, buf uintptr, size, flags int) (uintptr, unix.Errno) {
	np, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, unix.EINVAL
	}
	ap, err := unix.BytePtrFromString(attr)
	if err != nil {
		return 0, unix.EINVAL
	}
	args := xattrArgs{value: uint64(buf), size: uint32(size), flags: uint32(flags)}
	r, _, e := unix.Syscall6(trap, uintptr(dirfd), uintptr(unsafe.Pointer(np)), unix.AT_SYMLINK_NOFOLLOW,
		uintptr(unsafe.Pointer(ap)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	return r, e
}

// bufAddr is the address of b's first byte, or 0 for an empty b.
func bufAddr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// result turns a system call's return into Go's.
func result(r uintptr, e unix.Errno) (int, error) {
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// procPath names name in dirfd for the l*xattr calls.
func procPath(dirfd int, name string) string {
	return fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, name)
}

// getxattrAt reads attribute attr of name in dirfd into dest (its size
// only, when dest is empty).
func getxattrAt(dirfd int, name, attr string, dest []byte) (int, error) {
	if !useXattrAt() {
		return unix.Lgetxattr(procPath(dirfd, name), attr, dest)
	}
	return result(xattrArgsCall(unix.SYS_GETXATTRAT, dirfd, name, attr, uintptr(bufAddr(dest)), len(dest), 0))
}

// setxattrAt sets attribute attr of name in dirfd (flags: XATTR_CREATE,
// XATTR_REPLACE).
func setxattrAt(dirfd int, name, attr string, val []byte, flags int) error {
	if !useXattrAt() {
		return unix.Lsetxattr(procPath(dirfd, name), attr, val, flags)
	}
	_, err := result(xattrArgsCall(unix.SYS_SETXATTRAT, dirfd, name, attr, uintptr(bufAddr(val)), len(val), flags))
	return err
}

// listxattrAt lists the attribute names of name in dirfd into dest (the
// list's size only, when dest is empty).
func listxattrAt(dirfd int, name string, dest []byte) (int, error) {
	if !useXattrAt() {
		return unix.Llistxattr(procPath(dirfd, name), dest)
	}
	np, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	p := bufAddr(dest)
	r, _, e := unix.Syscall6(unix.SYS_LISTXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(np)), unix.AT_SYMLINK_NOFOLLOW,
		uintptr(p), uintptr(len(dest)), 0)
	return result(r, e)
}

// removexattrAt removes attribute attr of name in dirfd.
func removexattrAt(dirfd int, name, attr string) error {
	if !useXattrAt() {
		return unix.Lremovexattr(procPath(dirfd, name), attr)
	}
	np, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	ap, err := unix.BytePtrFromString(attr)
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall6(unix.SYS_REMOVEXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(np)), unix.AT_SYMLINK_NOFOLLOW,
		uintptr(unsafe.Pointer(ap)), 0, 0)
	_, err = result(0, e)
	return err
}
