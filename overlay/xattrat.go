package overlay

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Extended attributes of a name in a directory fd, not following a
// final symlink. Linux 6.13 has system calls for exactly this
// (getxattrat and its siblings); before, the l*xattr calls are given a
// /proc/self/fd/N/name path, whose walk through procfs costs more than
// the call itself (1.7 µs against 0.7 µs for a getxattr that finds
// nothing, here). The first ENOSYS switches to the paths for good.

// noXattrAt is set once the kernel refused the *xattrat calls.
var noXattrAt atomic.Bool

// xattrArgs is the kernel's struct xattr_args (XATTR_ARGS_SIZE_VER0).
type xattrArgs struct {
	value uint64
	size  uint32
	flags uint32
}

// procPath names name in dirfd for the l*xattr calls.
func procPath(dirfd int, name string) string {
	return fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, name)
}

// atResult interprets the return of an *xattrat call; it reports false
// where the kernel has none. The calls themselves are made in their
// functions, with nothing between taking an address and the call that
// could move a stack.
func atResult(r uintptr, e unix.Errno) (int, error, bool) {
	switch e {
	case 0:
		return int(r), nil, true
	case unix.ENOSYS:
		noXattrAt.Store(true)
		return 0, nil, false
	}
	return 0, e, true
}

// getxattrAt reads attribute attr of name in dirfd into dest (its size
// only, when dest is empty).
func getxattrAt(dirfd int, name, attr string, dest []byte) (int, error) {
	if !noXattrAt.Load() {
		np, ap, err := twoPtrs(name, attr)
		if err != nil {
			return 0, err
		}
		args := xattrArgs{size: uint32(len(dest))}
		if len(dest) > 0 {
			args.value = uint64(uintptr(unsafe.Pointer(&dest[0])))
		}
		r, _, e := unix.Syscall6(unix.SYS_GETXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(np)), unix.AT_SYMLINK_NOFOLLOW,
			uintptr(unsafe.Pointer(ap)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
		if n, err, ok := atResult(r, e); ok {
			return n, err
		}
	}
	return unix.Lgetxattr(procPath(dirfd, name), attr, dest)
}

// listxattrAt lists the attribute names of name in dirfd into dest (the
// list's size only, when dest is empty).
func listxattrAt(dirfd int, name string, dest []byte) (int, error) {
	if !noXattrAt.Load() {
		np, err := unix.BytePtrFromString(name)
		if err != nil {
			return 0, err
		}
		var p unsafe.Pointer
		if len(dest) > 0 {
			p = unsafe.Pointer(&dest[0])
		}
		r, _, e := unix.Syscall6(unix.SYS_LISTXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(np)), unix.AT_SYMLINK_NOFOLLOW,
			uintptr(p), uintptr(len(dest)), 0)
		if n, err, ok := atResult(r, e); ok {
			return n, err
		}
	}
	return unix.Llistxattr(procPath(dirfd, name), dest)
}

// setxattrAt sets attribute attr of name in dirfd (flags: XATTR_CREATE,
// XATTR_REPLACE).
func setxattrAt(dirfd int, name, attr string, val []byte, flags int) error {
	if !noXattrAt.Load() {
		np, ap, err := twoPtrs(name, attr)
		if err != nil {
			return err
		}
		args := xattrArgs{size: uint32(len(val)), flags: uint32(flags)}
		if len(val) > 0 {
			args.value = uint64(uintptr(unsafe.Pointer(&val[0])))
		}
		r, _, e := unix.Syscall6(unix.SYS_SETXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(np)), unix.AT_SYMLINK_NOFOLLOW,
			uintptr(unsafe.Pointer(ap)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
		if _, err, ok := atResult(r, e); ok {
			return err
		}
	}
	return unix.Lsetxattr(procPath(dirfd, name), attr, val, flags)
}

// removexattrAt removes attribute attr of name in dirfd.
func removexattrAt(dirfd int, name, attr string) error {
	if !noXattrAt.Load() {
		np, ap, err := twoPtrs(name, attr)
		if err != nil {
			return err
		}
		r, _, e := unix.Syscall6(unix.SYS_REMOVEXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(np)), unix.AT_SYMLINK_NOFOLLOW,
			uintptr(unsafe.Pointer(ap)), 0, 0)
		if _, err, ok := atResult(r, e); ok {
			return err
		}
	}
	return unix.Lremovexattr(procPath(dirfd, name), attr)
}

// twoPtrs returns NUL-terminated copies of a and b.
func twoPtrs(a, b string) (*byte, *byte, error) {
	ap, err := unix.BytePtrFromString(a)
	if err != nil {
		return nil, nil, err
	}
	bp, err := unix.BytePtrFromString(b)
	return ap, bp, err
}
