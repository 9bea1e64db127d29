package difftest

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Fingerprint records a tree exactly, by path: type, mode, owner, size,
// nlink, inode, mtime and ctime, content hash, symlink target and
// xattrs; reading does not change atimes (O_NOATIME). A filesystem that
// must never write to its lower tree is checked by comparing the lower
// tree's fingerprints before and after.
type Fingerprint map[string]string

// TakeFingerprint walks the tree at root.
func TakeFingerprint(root string) (Fingerprint, error) {
	fp := Fingerprint{}
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		s := fmt.Sprintf("mode=%s owner=%d:%d size=%d nlink=%d ino=%d mtime=%d ctime=%d",
			modeString(st.Mode), st.Uid, st.Gid, st.Size, st.Nlink, st.Ino, st.Mtim.Nano(), st.Ctim.Nano())
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			data, err := readAll(fd)
			unix.Close(fd)
			if err != nil {
				return err
			}
			s += fmt.Sprintf(" sha256=%x", sha256.Sum256(data))
		case unix.S_IFLNK:
			t, err := readlink(p)
			if err != nil {
				return err
			}
			s += fmt.Sprintf(" target=%q", t)
		}
		names, err := listxattr(p)
		if err != nil {
			return err
		}
		for _, name := range names {
			v, err := getxattr(p, name)
			if err != nil {
				return err
			}
			s += fmt.Sprintf(" %s=%q", name, abbrev(v))
		}
		rel, _ := filepath.Rel(root, p)
		fp[rel] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fingerprint %s: %w", root, err)
	}
	return fp, nil
}

// Changes lists what differs from before to after.
func (before Fingerprint) Changes(after Fingerprint) []string {
	var out []string
	for _, p := range sortedKeys(before) {
		if a, ok := after[p]; !ok {
			out = append(out, fmt.Sprintf("%s disappeared", p))
		} else if a != before[p] {
			out = append(out, fmt.Sprintf("%s changed: before %s, after %s", p, before[p], a))
		}
	}
	for _, p := range sortedKeys(after) {
		if _, ok := before[p]; !ok {
			out = append(out, fmt.Sprintf("%s appeared", p))
		}
	}
	return out
}
