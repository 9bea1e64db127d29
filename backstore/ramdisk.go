package backstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// openRamdisk sets up the two parts of a ramdisk store: a tmpfs at
// Dir/ramdisk (or a /dev/shm directory) and Dir/spill on disk.
func (s *Store) openRamdisk() error {
	root := filepath.Join(s.opts.Dir, "ramdisk")
	if err := os.MkdirAll(root, 0700); err != nil {
		return fmt.Errorf("backstore %s: %w", root, err)
	}
	mode, limit, err := s.mountRamdisk(root)
	if err != nil {
		return err
	}
	if mode == "shm" {
		root = s.shmDir
	}
	s.info = Info{Kind: "ramdisk", Mode: mode, Root: root, SizeLimit: limit}
	if s.main, err = openPart(root); err != nil {
		return err
	}
	if s.spill, err = openPart(filepath.Join(s.opts.Dir, "spill")); err != nil {
		return err
	}
	return s.spill.ids(func(id string) error {
		s.spilled[id] = struct{}{}
		return nil
	})
}

// mountRamdisk mounts a tmpfs at root, adopts one already mounted
// there, or, when mounting is not permitted, makes a /dev/shm
// directory (s.shmDir). It returns the Info.Mode and the size limit.
func (s *Store) mountRamdisk(root string) (mode string, limit int64, err error) {
	if size, ok := tmpfsMountedAt(root); ok {
		// A tmpfs a daemon mounted and did not unmount (it died):
		// its objects may still be referenced, so keep them.
		s.mounted = true
		return "tmpfs", size, nil
	}
	data := fmt.Sprintf("size=%d,mode=0700", s.opts.RamdiskSize)
	err = unix.Mount("agentfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data)
	if err == nil {
		s.mounted = true
		size, _ := tmpfsMountedAt(root)
		return "tmpfs", size, nil
	}
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		return "", 0, fmt.Errorf("backstore: mounting a tmpfs at %s: %w", root, err)
	}
	// Not allowed to mount (not root, or no CAP_SYS_ADMIN here): a
	// private directory on the system's shared tmpfs.
	mountErr := err
	shm, err := os.MkdirTemp("/dev/shm", "agentfs-")
	if err != nil {
		return "", 0, fmt.Errorf("backstore: no ramdisk: mounting a tmpfs at %s: %v; /dev/shm: %w", root, mountErr, err)
	}
	s.shmDir = shm
	var statfs unix.Statfs_t
	if err := unix.Statfs(shm, &statfs); err == nil {
		limit = int64(statfs.Blocks) * statfs.Bsize
	}
	return "shm", limit, nil
}

// tmpfsMountedAt reports whether a tmpfs is mounted at dir (dir is on
// a tmpfs and on another device than its parent), and its size.
func tmpfsMountedAt(dir string) (int64, bool) {
	var statfs unix.Statfs_t
	if err := unix.Statfs(dir, &statfs); err != nil || statfs.Type != unix.TMPFS_MAGIC {
		return 0, false
	}
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil || st.Dev == parent.Dev {
		return 0, false
	}
	return int64(statfs.Blocks) * statfs.Bsize, true
}

// closeRamdisk unmounts the tmpfs (detaching it when busy: objects may
// still be open) or removes the /dev/shm directory.
func (s *Store) closeRamdisk() error {
	var errs []error
	if s.mounted {
		s.mounted = false
		if err := unix.Unmount(s.info.Root, 0); err != nil {
			if err := unix.Unmount(s.info.Root, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("backstore: unmounting the ramdisk %s: %w", s.info.Root, err))
			}
		}
	}
	if s.shmDir != "" {
		if err := os.RemoveAll(s.shmDir); err != nil {
			errs = append(errs, fmt.Errorf("backstore: removing the ramdisk %s: %w", s.shmDir, err))
		}
		s.shmDir = ""
	}
	return errors.Join(errs...)
}
