package backstore

import (
	"bytes"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// CopyUp creates a regular file object from src, an open lower regular
// file whose lstat is st. With withData it gets src's first st.Size
// bytes — by FICLONE when src and the object share a filesystem that
// can reflink, otherwise data extent by data extent (SEEK_DATA,
// SEEK_HOLE) with copy_file_range or read/write, so holes stay holes;
// without, it is empty (the O_TRUNC copy-up). Then it gets st's owner
// (as root), src's xattrs, st's mode and, last, st's atime and mtime.
// On ramdisk stores a file larger than the spill threshold goes to
// disk. On failure the partial object is removed and the error keeps
// its errno (ENOSPC from a full backstore).
func (s *Store) CopyUp(src *os.File, st *unix.Stat_t, withData bool) (string, error) {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", fmt.Errorf("backstore: copy-up of mode %o: not a regular file: %w", st.Mode, unix.EINVAL)
	}
	size := int64(0)
	if withData {
		size = st.Size
	}
	return s.copyRegular(src, st, size, withData)
}

// copyRegular makes a regular file object with size bytes of src's data
// (when withData) and st's attributes, removing it on failure.
func (s *Store) copyRegular(src *os.File, st *unix.Stat_t, size int64, withData bool) (string, error) {
	id, f, err := s.createFile(s.partFor(size), 0600, -1, -1)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if withData {
		if err := copyData(f, src, size); err != nil {
			s.undo(id)
			return "", fmt.Errorf("object %s: copying data: %w", id, err)
		}
	}
	if err := s.copyAttrs(id, s.Loc(id), unix.S_IFREG, st, src, false); err != nil {
		s.undo(id)
		return "", err
	}
	return id, nil
}

// Clone creates a new object with the content of object id (FICLONE
// when the store can reflink, else a copy that keeps holes) and the
// same owner, mode, xattrs, atime and mtime. A directory, symlink or
// special file gets a new inode of the same kind (a directory object
// has no entries to copy). On failure nothing is left behind.
func (s *Store) Clone(id string) (string, error) {
	l, err := s.loc(id)
	if err != nil {
		return "", err
	}
	if err := s.ready(id); err != nil {
		return "", err
	}
	st, err := s.Lstat(id)
	if err != nil {
		return "", fmt.Errorf("object %s: clone: %w", id, err)
	}
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFREG {
		src, err := s.openToClone(l, &st)
		if err != nil {
			return "", fmt.Errorf("object %s: clone: %w", id, err)
		}
		defer src.Close()
		nid, err := s.copyRegular(src, &st, st.Size, true)
		if err != nil {
			return "", fmt.Errorf("object %s: clone: %w", id, err)
		}
		return nid, nil
	}

	var nid string
	switch typ {
	case unix.S_IFDIR:
		nid, err = s.Mkdir(0700, -1, -1)
	case unix.S_IFLNK:
		var target string
		if target, err = readlinkat(l.Dirfd, l.Name); err == nil {
			nid, err = s.Symlink(target, -1, -1)
		}
	default:
		nid, err = s.Mknod(typ|0600, st.Rdev, -1, -1)
	}
	if err != nil {
		return "", fmt.Errorf("object %s: clone: %w", id, err)
	}
	fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		src := os.NewFile(uintptr(fd), id)
		err = s.copyAttrs(nid, s.Loc(nid), typ, &st, src, false)
		src.Close()
	}
	if err != nil {
		s.undo(nid)
		return "", fmt.Errorf("object %s: clone: %w", id, err)
	}
	return nid, nil
}

// openToClone opens a regular file object for reading, with O_NOATIME
// (which the owner and root may use): reading it must not change the
// atime of an object that a snapshot may share. A non-root daemon
// cannot read its own object of mode 0000 or 0200; it lends itself
// read permission for the open and gives the mode back.
func (s *Store) openToClone(l Loc, st *unix.Stat_t) (*os.File, error) {
	open := func() (int, error) {
		fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOATIME, 0)
		if err == unix.EPERM { // not the owner: an object from another daemon user
			fd, err = unix.Openat(l.Dirfd, l.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		return fd, err
	}
	fd, err := open()
	if err == unix.EACCES && !s.root && st.Mode&unix.S_IRUSR == 0 {
		if err = unix.Fchmodat(l.Dirfd, l.Name, st.Mode&07777|unix.S_IRUSR, 0); err == nil {
			fd, err = open()
			if e := unix.Fchmodat(l.Dirfd, l.Name, st.Mode&07777, 0); e != nil && err == nil {
				unix.Close(fd)
				err = e
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), l.Name), nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// copyData gives dst, a new empty file, the first size bytes of src.
// It tries FICLONE, then copies the data extents only, so holes stay
// holes. src's file offset is left where it was.
func copyData(dst, src *os.File, size int64) error {
	if size <= 0 {
		return nil
	}
	dfd, sfd := int(dst.Fd()), int(src.Fd())
	err := unix.IoctlFileClone(dfd, sfd)
	switch err {
	case nil:
		// The clone has src's current size; the object gets st's.
		var st unix.Stat_t
		if err := unix.Fstat(dfd, &st); err != nil {
			return fmt.Errorf("fstat: %w", err)
		}
		if st.Size != size {
			if err := unix.Ftruncate(dfd, size); err != nil {
				return fmt.Errorf("truncate: %w", err)
			}
		}
		return nil
	case unix.EXDEV, unix.EOPNOTSUPP, unix.EINVAL, unix.ENOTTY, unix.ENOSYS:
		// Not the same filesystem, or it cannot reflink: copy.
	default:
		return fmt.Errorf("FICLONE: %w", err)
	}
	if cur, err := unix.Seek(sfd, 0, unix.SEEK_CUR); err == nil {
		// Back to an offset sfd had: it cannot fail where the seek
		// that read it worked, and the copy is complete either way.
		defer func() { _, _ = unix.Seek(sfd, cur, unix.SEEK_SET) }()
	}
	c := &extentCopier{dfd: dfd, sfd: sfd}
	for off := int64(0); off < size; {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // nothing but a hole up to EOF
		}
		if err != nil {
			data = off // SEEK_DATA unsupported: all data
		}
		if data >= size {
			break
		}
		end, err := unix.Seek(sfd, data, unix.SEEK_HOLE)
		if err != nil || end > size {
			end = size
		}
		if end <= data { // src shrank meanwhile
			break
		}
		n, err := c.copy(data, end-data)
		if err != nil {
			return err
		}
		if n < end-data { // EOF: src shrank meanwhile
			break
		}
		off = end
	}
	// The trailing hole, and st's size if src shrank.
	if err := unix.Ftruncate(dfd, size); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	return nil
}

// extentCopier copies byte ranges at the same offset from sfd to dfd
// with copy_file_range, switching for good to read/write when the
// kernel cannot copy between the two files.
type extentCopier struct {
	dfd, sfd int
	rw       bool
	buf      []byte
}

// copy copies n bytes at off and returns how many it copied (fewer at
// EOF).
func (c *extentCopier) copy(off, n int64) (int64, error) {
	done := int64(0)
	for !c.rw && done < n {
		chunk := min(n-done, copyChunk)
		in, out := off+done, off+done
		k, err := unix.CopyFileRange(c.sfd, &in, c.dfd, &out, int(chunk), 0)
		switch err {
		case nil:
			// Start writing the chunk back now, so that the caller's
			// fdatasync waits for the last chunk only. Only a hint:
			// without SYNC_FILE_RANGE_WAIT_AFTER it consumes no
			// write-back error, which that fdatasync reports.
			_ = unix.SyncFileRange(c.dfd, off+done, int64(k), unix.SYNC_FILE_RANGE_WRITE)
		case unix.EINTR:
			continue
		case unix.EXDEV, unix.ENOSYS, unix.EINVAL, unix.EOPNOTSUPP:
			c.rw = true
			continue
		default:
			return done, fmt.Errorf("copy_file_range: %w", err)
		}
		if k == 0 {
			return done, nil
		}
		done += int64(k)
	}
	if done == n {
		return done, nil
	}
	k, err := c.readWrite(off+done, n-done)
	return done + k, err
}

// copyChunk is the size of one copy_file_range call: small enough that
// writeback of the copy overlaps the copying.
const copyChunk = 64 << 20

// blockSize is the unit in which readWrite looks for zeros to leave as
// holes.
const blockSize = 4096

// readWrite copies n bytes at off with pread and pwrite, skipping
// all-zero blocks: dst is new, so they read as zeros and stay holes.
func (c *extentCopier) readWrite(off, n int64) (int64, error) {
	if c.buf == nil {
		c.buf = make([]byte, 1<<20)
	}
	done := int64(0)
	for done < n {
		chunk := min(n-done, int64(len(c.buf)))
		r, err := unix.Pread(c.sfd, c.buf[:chunk], off+done)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, fmt.Errorf("read: %w", err)
		}
		if r == 0 {
			return done, nil
		}
		if err := c.writeNonZero(c.buf[:r], off+done); err != nil {
			return done, err
		}
		done += int64(r)
	}
	return done, nil
}

var zeroBlock [blockSize]byte

// writeNonZero writes the runs of b that are not all-zero blocks at off.
func (c *extentCopier) writeNonZero(b []byte, off int64) error {
	for len(b) > 0 {
		// Skip zero blocks.
		for len(b) >= blockSize && bytes.Equal(b[:blockSize], zeroBlock[:]) {
			b, off = b[blockSize:], off+blockSize
		}
		// Take the run up to the next zero block.
		run := 0
		for run < len(b) && (len(b)-run < blockSize || !bytes.Equal(b[run:run+blockSize], zeroBlock[:])) {
			run += min(blockSize, len(b)-run)
		}
		if err := pwriteAll(c.dfd, b[:run], off); err != nil {
			return err
		}
		b, off = b[run:], off+int64(run)
	}
	return nil
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		w, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		b, off = b[w:], off+int64(w)
	}
	return nil
}

// probeReflink reports whether FICLONE works between two files of the
// main part, using unnamed files so that nothing is left on a crash.
func (s *Store) probeReflink() bool {
	a, err := s.main.tmpfile()
	if err != nil {
		return false
	}
	defer unix.Close(a)
	if err := pwriteAll(a, []byte("agentfs reflink probe\n"), 0); err != nil {
		return false
	}
	b, err := s.main.tmpfile()
	if err != nil {
		return false
	}
	defer unix.Close(b)
	return unix.IoctlFileClone(b, a) == nil
}

// tmpfile opens an unnamed read-write file in p: O_TMPFILE, or a named
// file unlinked at once where O_TMPFILE is not supported.
func (p *part) tmpfile() (int, error) {
	fd, err := unix.Openat(p.rootfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0600)
	if err == nil {
		return fd, nil
	}
	name := "probe-" + newID() // not an object id: Objects skips it
	fd, err = unix.Openat(p.rootfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0600)
	if err != nil {
		return -1, err
	}
	// The name was just made, so removing it fails at most on an I/O
	// error; the fd works either way, and a name left is a stray empty
	// file beside the shards, which nothing lists as an object.
	_ = unix.Unlinkat(p.rootfd, name, 0)
	return fd, nil
}
