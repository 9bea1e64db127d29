package backstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// CopyUp creates a regular file object from src (an open lower file
// whose lstat is st): its data when withData (holes stay holes; FICLONE
// when the filesystems allow it), then owner, mode, xattrs and, last,
// atime and mtime. On failure nothing is left behind and the errno is
// kept (ENOSPC from a full backstore).
func (s *Store) CopyUp(src *os.File, st *unix.Stat_t, withData bool) (string, error) {
	size := int64(0)
	if withData {
		size = st.Size
	}
	id, f, err := s.createFile(s.partFor(size), 0600, -1, -1)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if withData {
		if err := copyData(f, src, st.Size); err != nil {
			s.Remove(id)
			return "", fmt.Errorf("copying data: %w", err)
		}
	}
	if err := s.CopyAttrs(id, st, src); err != nil {
		s.Remove(id)
		return "", err
	}
	return id, nil
}

// Clone creates a new object with the content and attributes of id.
func (s *Store) Clone(id string) (string, error) {
	st, err := s.Lstat(id)
	if err != nil {
		return "", err
	}
	loc := s.Loc(id)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		src, err := s.Open(id, unix.O_RDONLY)
		if err != nil {
			return "", err
		}
		defer src.Close()
		return s.CopyUp(src, &st, true)
	case unix.S_IFDIR:
		nid, err := s.Mkdir(st.Mode, int(st.Uid), int(st.Gid))
		if err != nil {
			return "", err
		}
		src, err := s.Open(id, unix.O_RDONLY|unix.O_DIRECTORY)
		if err == nil {
			err = s.CopyAttrs(nid, &st, src)
			src.Close()
		}
		if err != nil {
			s.Remove(nid)
			return "", err
		}
		return nid, nil
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(loc.Dirfd, loc.Name, buf)
		if err != nil {
			return "", err
		}
		nid, err := s.Symlink(string(buf[:n]), int(st.Uid), int(st.Gid))
		if err != nil {
			return "", err
		}
		return nid, s.copyAttrsByLoc(nid, &st, loc)
	default:
		nid, err := s.Mknod(st.Mode, st.Rdev, int(st.Uid), int(st.Gid))
		if err != nil {
			return "", err
		}
		return nid, s.copyAttrsByLoc(nid, &st, loc)
	}
}

func (s *Store) copyAttrsByLoc(id string, st *unix.Stat_t, from Loc) error {
	fd, err := unix.Openat(from.Dirfd, from.Name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), from.Name)
	defer f.Close()
	return s.CopyAttrs(id, st, f)
}

// CopyAttrs applies owner, mode, the xattrs of xattrSrc (any open fd of
// the source inode, O_PATH included; nil for none) and then the times
// of st to object id.
func (s *Store) CopyAttrs(id string, st *unix.Stat_t, xattrSrc *os.File) error {
	loc := s.Loc(id)
	if err := chown(loc, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("object %s: chown: %w", id, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Fchmodat(loc.Dirfd, loc.Name, st.Mode&07777, 0); err != nil {
			return fmt.Errorf("object %s: chmod: %w", id, err)
		}
	}
	if xattrSrc != nil {
		if err := copyXattrs(fdPath(int(xattrSrc.Fd())), fmt.Sprintf("/proc/self/fd/%d/%s", loc.Dirfd, loc.Name)); err != nil {
			return fmt.Errorf("object %s: xattrs: %w", id, err)
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(loc.Dirfd, loc.Name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("object %s: times: %w", id, err)
	}
	return nil
}

func fdPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

// copyXattrs copies every xattr it can read from src to dst (both
// paths not followed at the end: l* calls). Names the target refuses
// (EPERM, ENOTSUP) are skipped: a non-root daemon copies user.* only.
func copyXattrs(src, dst string) error {
	// /proc/self/fd/N is a magic link: the l* calls would act on the
	// link, so the source is read with the following variants, which
	// land on the inode the fd names (a symlink's own inode for O_PATH).
	names, err := listXattrs(src)
	if err != nil {
		if ignorableXattrErr(err) {
			return nil
		}
		return err
	}
	for _, name := range names {
		val, err := getXattr(src, name)
		if err != nil {
			if ignorableXattrErr(err) || err == unix.ENODATA {
				continue
			}
			return err
		}
		if err := unix.Lsetxattr(dst, name, val, 0); err != nil {
			if ignorableXattrErr(err) {
				continue
			}
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func ignorableXattrErr(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOTSUP) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EACCES)
}

func listXattrs(p string) ([]string, error) {
	for size := 1024; ; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Listxattr(p, buf)
		if err == unix.ERANGE {
			continue
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, b := range bytes.Split(buf[:n], []byte{0}) {
			if len(b) > 0 && !strings.HasPrefix(string(b), "security.selinux") {
				names = append(names, string(b))
			}
		}
		return names, nil
	}
}

func getXattr(p, name string) ([]byte, error) {
	for size := 256; size <= 1<<20; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Getxattr(p, name, buf)
		if err == unix.ERANGE {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	return nil, unix.E2BIG
}

// copyData copies size bytes from src to dst: FICLONE if possible,
// otherwise the data extents only (SEEK_DATA/SEEK_HOLE) with
// copy_file_range, falling back to read/write.
func copyData(dst, src *os.File, size int64) error {
	if size == 0 {
		return nil
	}
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err == nil {
		return nil
	}
	sfd, dfd := int(src.Fd()), int(dst.Fd())
	off := int64(0)
	for off < size {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // only a hole remains
		}
		if err != nil {
			data = off // no SEEK_DATA support: copy everything
		}
		hole, err := unix.Seek(sfd, data, unix.SEEK_HOLE)
		if err != nil || hole > size {
			hole = size
		}
		if err := copyRange(dfd, sfd, data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return unix.Ftruncate(dfd, size)
}

func copyRange(dfd, sfd int, off, n int64) error {
	in, out := off, off
	for n > 0 {
		chunk := n
		if chunk > 1<<30 {
			chunk = 1 << 30
		}
		c, err := unix.CopyFileRange(sfd, &in, dfd, &out, int(chunk), 0)
		if err == unix.EXDEV || err == unix.ENOSYS || err == unix.EINVAL || err == unix.EOPNOTSUPP {
			return copyRangeRW(dfd, sfd, in, n)
		}
		if err != nil {
			return err
		}
		if c == 0 {
			return nil // source shrank
		}
		n -= int64(c)
	}
	return nil
}

func copyRangeRW(dfd, sfd int, off, n int64) error {
	buf := make([]byte, 1<<20)
	for n > 0 {
		chunk := int64(len(buf))
		if chunk > n {
			chunk = n
		}
		r, err := unix.Pread(sfd, buf[:chunk], off)
		if err != nil {
			return err
		}
		if r == 0 {
			return nil
		}
		if _, err := unix.Pwrite(dfd, buf[:r], off); err != nil {
			return err
		}
		off += int64(r)
		n -= int64(r)
	}
	return nil
}

// probeReflink reports whether FICLONE works between two objects.
func (s *Store) probeReflink() bool {
	a, fa, err := s.createFile(s.main, 0600, -1, -1)
	if err != nil {
		return false
	}
	defer s.Remove(a)
	defer fa.Close()
	fa.Write([]byte("agentfs reflink probe"))
	b, fb, err := s.createFile(s.main, 0600, -1, -1)
	if err != nil {
		return false
	}
	defer s.Remove(b)
	defer fb.Close()
	return unix.IoctlFileClone(int(fb.Fd()), int(fa.Fd())) == nil
}
