package backstore

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Dedupe asks the file system to make regular file object dst share
// the blocks of object src over their first n bytes, where the bytes
// are the same (FIDEDUPERANGE: the kernel compares them itself, under
// its locks, and shares nothing that differs; neither file's contents
// or times change). It returns the bytes now shared; 0 and no error
// when the backstore cannot clone, or the contents differ. Both
// objects are only opened for reading.
func (s *Store) Dedupe(src, dst string, n int64) (int64, error) {
	if !s.info.Reflink || n <= 0 {
		return 0, nil
	}
	open := func(id string) (int, error) {
		l, err := s.loc(id)
		if err != nil {
			return -1, err
		}
		fd, err := unix.Openat(l.Dirfd, l.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOATIME|unix.O_CLOEXEC, 0)
		if err == unix.EPERM {
			fd, err = unix.Openat(l.Dirfd, l.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		return fd, err
	}
	sfd, err := open(src)
	if err != nil {
		return 0, fmt.Errorf("object %s: dedupe: %w", src, err)
	}
	defer unix.Close(sfd)
	dfd, err := open(dst)
	if err != nil {
		return 0, fmt.Errorf("object %s: dedupe: %w", dst, err)
	}
	defer unix.Close(dfd)
	var shared int64
	// The kernel dedupes at most 16 MiB a call on some file systems.
	const step = 16 << 20
	for off := int64(0); off < n; {
		length := min(step, n-off)
		r := unix.FileDedupeRange{Src_offset: uint64(off), Src_length: uint64(length),
			Info: []unix.FileDedupeRangeInfo{{Dest_fd: int64(dfd), Dest_offset: uint64(off)}}}
		if err := unix.IoctlFileDedupeRange(sfd, &r); err != nil {
			return shared, fmt.Errorf("objects %s and %s: dedupe: %w", src, dst, err)
		}
		info := r.Info[0]
		if info.Status < 0 {
			return shared, fmt.Errorf("objects %s and %s: dedupe: %w", src, dst, unix.Errno(-info.Status))
		}
		if info.Status == unix.FILE_DEDUPE_RANGE_DIFFERS || info.Bytes_deduped == 0 {
			return shared, nil
		}
		shared += int64(info.Bytes_deduped)
		off += int64(info.Bytes_deduped)
	}
	return shared, nil
}
