package backstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CopyAttrs gives object id the attributes in st: owner (when running
// as root), the xattrs of xattrSrc (nil for none), mode (not for a
// symlink) and, last, atime and mtime. xattrSrc is any open fd of the
// source inode: a regular or directory fd, or an O_PATH fd (of a
// symlink, fifo, device...), whose xattrs are read through
// /proc/self/fd/N. The overlay uses it after Mkdir, Symlink or Mknod to
// copy up a directory or special file; a failure leaves the object for
// the caller to remove.
func (s *Store) CopyAttrs(id string, st *unix.Stat_t, xattrSrc *os.File) error {
	return s.setAttrs(id, st, xattrSrc, false)
}

// ReplaceAttrs is CopyAttrs for an object that already has xattrs of
// its own (a data copy that takes over from a metacopy object): the
// xattrs xattrSrc lacks are removed, so the object ends with exactly
// the source's.
func (s *Store) ReplaceAttrs(id string, st *unix.Stat_t, xattrSrc *os.File) error {
	return s.setAttrs(id, st, xattrSrc, true)
}

func (s *Store) setAttrs(id string, st *unix.Stat_t, xattrSrc *os.File, exact bool) error {
	l, err := s.loc(id)
	if err != nil {
		return err
	}
	// The object's own type decides about chmod and xattr access, so
	// a wrong st can never make us follow a symlink object.
	var obj unix.Stat_t
	if err := unix.Fstatat(l.Dirfd, l.Name, &obj, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("object %s: %w", id, err)
	}
	return s.copyAttrs(id, l, obj.Mode&unix.S_IFMT, st, xattrSrc, exact)
}

// copyAttrs applies owner, xattrs, mode and times (in that order, see
// the package doc) to the object at l, whose type is typ.
func (s *Store) copyAttrs(id string, l Loc, typ uint32, st *unix.Stat_t, xattrSrc *os.File, exact bool) error {
	if s.root {
		err := unmappedOwner(unix.Fchownat(l.Dirfd, l.Name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW))
		if err != nil {
			return fmt.Errorf("object %s: chown: %w", id, err)
		}
	}
	if xattrSrc != nil {
		if err := s.copyXattrs(xattrSrc, l, typ, exact); err != nil {
			return fmt.Errorf("object %s: xattrs: %w", id, err)
		}
	}
	if typ != unix.S_IFLNK {
		// Not a symlink (checked on the object): following is safe.
		if err := unix.Fchmodat(l.Dirfd, l.Name, st.Mode&07777, 0); err != nil {
			return fmt.Errorf("object %s: chmod: %w", id, err)
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(l.Dirfd, l.Name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("object %s: times: %w", id, err)
	}
	return nil
}

// copyXattrs copies every xattr of src that the target accepts to the
// object at l (type typ). Without root only user.* xattrs are copied;
// security.selinux never is. With exact, the target's xattrs of those
// namespaces that src lacks are removed.
func (s *Store) copyXattrs(src *os.File, l Loc, typ uint32, exact bool) error {
	from, err := xattrFile(src)
	if err != nil {
		return err
	}
	names, err := from.list()
	if err != nil {
		if skippableXattrErr(err) {
			return nil
		}
		return fmt.Errorf("list: %w", err)
	}
	var to *xattrFd
	for _, name := range names {
		if name == "security.selinux" || (!s.root && !strings.HasPrefix(name, "user.")) {
			continue
		}
		val, err := from.get(name)
		if err != nil {
			if err == unix.ENODATA || skippableXattrErr(err) {
				continue // removed meanwhile, or not ours to read
			}
			return fmt.Errorf("get %s: %w", name, err)
		}
		if to == nil {
			if to, err = openXattrTarget(l, typ); err != nil {
				return err
			}
			defer to.close()
		}
		if err := to.set(name, val); err != nil {
			if skippableXattrErr(err) {
				continue
			}
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	if !exact {
		return nil
	}
	if to == nil {
		if to, err = openXattrTarget(l, typ); err != nil {
			return err
		}
		defer to.close()
	}
	have, err := to.list()
	if err != nil {
		if skippableXattrErr(err) {
			return nil
		}
		return fmt.Errorf("list target: %w", err)
	}
	keep := make(map[string]bool, len(names))
	for _, name := range names {
		keep[name] = true
	}
	for _, name := range have {
		if keep[name] || name == "security.selinux" || (!s.root && !strings.HasPrefix(name, "user.")) {
			continue
		}
		if err := to.remove(name); err != nil && err != unix.ENODATA && !skippableXattrErr(err) {
			return fmt.Errorf("remove %s: %w", name, err)
		}
	}
	return nil
}

// skippableXattrErr reports errors that mean "this xattr cannot be
// copied here" rather than "the copy failed": the filesystem has no
// xattrs or not this namespace, or we may not set it.
func skippableXattrErr(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

// xattrFd reads and writes the xattrs of one inode: with the f* calls
// on a normal fd, through /proc/self/fd/N on an O_PATH fd (f* calls
// give EBADF there). The /proc path is a magic link to the inode the
// fd holds, a symlink's own inode included, so the following variants
// (getxattr, not lgetxattr) are the right ones.
type xattrFd struct {
	fd    int
	path  string // "/proc/self/fd/N" for O_PATH fds, else ""
	owned bool   // close fd when done
}

// xattrFile wraps an open file whose xattrs are to be read.
func xattrFile(f *os.File) (*xattrFd, error) {
	fd := int(f.Fd())
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, fmt.Errorf("fcntl: %w", err)
	}
	x := &xattrFd{fd: fd}
	if fl&unix.O_PATH != 0 {
		x.path = "/proc/self/fd/" + strconv.Itoa(fd)
	}
	return x, nil
}

// openXattrTarget opens the object at l for setting xattrs: regular
// files and directories read-only, everything else (symlinks, fifos,
// sockets, devices: opening those would follow, block or have effects)
// with O_PATH.
func openXattrTarget(l Loc, typ uint32) (*xattrFd, error) {
	flags := unix.O_PATH
	if typ == unix.S_IFREG || typ == unix.S_IFDIR {
		flags = unix.O_RDONLY
	}
	fd, err := unix.Openat(l.Dirfd, l.Name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil && flags != unix.O_PATH && (err == unix.EACCES || err == unix.EPERM) {
		// Not readable by a non-root daemon (mode 0000...): by path.
		flags = unix.O_PATH
		fd, err = unix.Openat(l.Dirfd, l.Name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	x := &xattrFd{fd: fd, owned: true}
	if flags == unix.O_PATH {
		x.path = "/proc/self/fd/" + strconv.Itoa(fd)
	}
	return x, nil
}

func (x *xattrFd) close() {
	if x.owned {
		unix.Close(x.fd)
	}
}

func (x *xattrFd) list() ([]string, error) {
	listx := func(buf []byte) (int, error) {
		if x.path != "" {
			return unix.Listxattr(x.path, buf)
		}
		return unix.Flistxattr(x.fd, buf)
	}
	buf, err := sizedRead(listx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, b := range bytes.Split(buf, []byte{0}) {
		if len(b) > 0 {
			names = append(names, string(b))
		}
	}
	return names, nil
}

func (x *xattrFd) get(name string) ([]byte, error) {
	return sizedRead(func(buf []byte) (int, error) {
		if x.path != "" {
			return unix.Getxattr(x.path, name, buf)
		}
		return unix.Fgetxattr(x.fd, name, buf)
	})
}

func (x *xattrFd) set(name string, val []byte) error {
	if x.path != "" {
		return unix.Setxattr(x.path, name, val, 0)
	}
	return unix.Fsetxattr(x.fd, name, val, 0)
}

func (x *xattrFd) remove(name string) error {
	if x.path != "" {
		return unix.Removexattr(x.path, name)
	}
	return unix.Fremovexattr(x.fd, name)
}

// sizedRead calls read first with no buffer to learn the size, then
// with a buffer of that size, again when the value grew meanwhile
// (ERANGE).
func sizedRead(read func(buf []byte) (int, error)) ([]byte, error) {
	for tries := 0; ; tries++ {
		n, err := read(nil)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, nil
		}
		buf := make([]byte, n)
		n, err = read(buf)
		if err == unix.ERANGE && tries < 8 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// unmappedOwner is the error of a chown of an object to the owner of
// another file: nil for EINVAL, which only the root of a user namespace
// (agentfs run as a normal user) gets, for an owner its namespace does
// not map (the overflow id, 65534, that such a file shows there, as
// root's files do under agentfs run --system): the object then keeps
// the daemon's own owner, the user's.
func unmappedOwner(err error) error {
	if errors.Is(err, unix.EINVAL) {
		return nil
	}
	return err
}
