package harness

// Recording and comparing trees: the lower tree before and after a
// mount, a mount before and after a remount, ...

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Node is what the unchanged-check compares for one path.
type Node struct {
	Mode     uint32
	Uid, Gid uint32
	Size     int64
	Nlink    uint64
	Ino      uint64
	Rdev     uint64
	Mtime    unix.Timespec
	Ctime    unix.Timespec
	Hash     string // regular files: sha256 of the content
	Target   string // symlinks
	Xattrs   string // every name=value, sorted
}

// Tree is a recording of a directory tree.
type Tree struct {
	Root  string
	Nodes map[string]Node
	Atime map[string]unix.Timespec // compared apart: see AssertUnchanged
	Err   error
}

// SnapshotTree records every name under dir: content hash, mode, owner,
// size, mtime and ctime (ns), nlink, inode number, rdev, symlink target
// and xattrs of every namespace root can read. It opens files and
// directories with O_NOATIME so that recording changes nothing.
func SnapshotTree(dir string) Tree {
	tr := Tree{Root: dir, Nodes: map[string]Node{}, Atime: map[string]unix.Timespec{}}
	tr.Err = tr.walk(dir, ".")
	return tr
}

func (tr *Tree) walk(p, rel string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	n := Node{Mode: st.Mode, Uid: st.Uid, Gid: st.Gid, Size: st.Size, Nlink: st.Nlink, Ino: st.Ino,
		Rdev: st.Rdev, Mtime: st.Mtim, Ctime: st.Ctim}
	var names []string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		h, err := hashFile(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		n.Hash = h
	case unix.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		n.Target = target
	case unix.S_IFDIR:
		var err error
		if names, err = ReadDirNoatime(p); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	x, err := xattrString(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	n.Xattrs = x
	tr.Nodes[rel] = n
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		tr.Atime[rel] = st.Atim
	}
	for _, name := range names {
		if err := tr.walk(filepath.Join(p, name), filepath.Join(rel, name)); err != nil {
			return err
		}
	}
	return nil
}

func openNoatime(p string, flags int) (*os.File, error) {
	fd, err := unix.Open(p, flags|unix.O_RDONLY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

// hashFile hashes a file's data segments with their offsets (holes are
// skipped, so that a sparse gigabyte costs nothing), without updating
// its atime.
func hashFile(p string) (string, error) {
	f, err := openNoatime(p, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	fd := int(f.Fd())
	var off int64
	for {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data after off
		}
		if err != nil {
			return "", fmt.Errorf("SEEK_DATA: %w", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return "", fmt.Errorf("SEEK_HOLE: %w", err)
		}
		fmt.Fprintf(h, "@%d:", data)
		if _, err := io.Copy(h, io.NewSectionReader(f, data, hole-data)); err != nil {
			return "", err
		}
		off = hole
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

// ReadNoatime reads a file without updating its atime.
func ReadNoatime(p string) ([]byte, error) {
	f, err := openNoatime(p, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// ReadDirNoatime lists a directory, sorted, without updating its atime.
func ReadDirNoatime(p string) ([]string, error) {
	f, err := openNoatime(p, unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// xattrString lists every xattr of p (without following a symlink) as
// sorted name=hex(value) pairs.
func xattrString(p string) (string, error) {
	names, err := ListXattrs(p)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, name := range names {
		v, err := GetXattr(p, name)
		if err != nil {
			return "", fmt.Errorf("getxattr %s: %w", name, err)
		}
		fmt.Fprintf(&b, "%s=%x;", name, v)
	}
	return b.String(), nil
}

// ListXattrs returns the sorted xattr names of p (lstat semantics).
func ListXattrs(p string) ([]string, error) {
	n, err := unix.Llistxattr(p, nil)
	if err != nil || n == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, n)
	n, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// GetXattr returns the value of one xattr of p (lstat semantics).
func GetXattr(p, name string) (string, error) {
	n, err := unix.Lgetxattr(p, name, nil)
	if err != nil {
		return "", err
	}
	buf := make([]byte, n)
	n, err = unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func (n Node) String() string {
	return fmt.Sprintf("mode=%o uid=%d gid=%d size=%d nlink=%d ino=%d rdev=%d mtime=%d.%09d ctime=%d.%09d sha256=%.12s target=%q xattrs=%q",
		n.Mode, n.Uid, n.Gid, n.Size, n.Nlink, n.Ino, n.Rdev, n.Mtime.Sec, n.Mtime.Nsec, n.Ctime.Sec, n.Ctime.Nsec, n.Hash, n.Target, n.Xattrs)
}

// AssertUnchanged fails the test for every difference between two
// recordings of the lower tree, access times included: agentfs reads
// the lower tree with O_NOATIME.
func AssertUnchanged(t testing.TB, before, after Tree) {
	t.Helper()
	for _, d := range DiffTrees(before, after) {
		t.Errorf("LOWER TREE CHANGED: %s", d)
	}
	for p, ta := range after.Atime {
		if tb, ok := before.Atime[p]; ok && ta != tb {
			t.Errorf("LOWER ATIME CHANGED: %s (agentfs read it without O_NOATIME)", p)
		}
	}
}

// DiffTrees describes every difference between two recordings (except
// access times).
func DiffTrees(before, after Tree) []string {
	if before.Err != nil || after.Err != nil {
		return []string{fmt.Sprintf("%s: recording failed: before: %v, after: %v", before.Root, before.Err, after.Err)}
	}
	var out []string
	for _, p := range slices.Sorted(maps.Keys(before.Nodes)) {
		b := before.Nodes[p]
		a, ok := after.Nodes[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s disappeared from %s", p, before.Root))
		case a != b:
			out = append(out, fmt.Sprintf("%s in %s:\n before %v\n after  %v", p, before.Root, b, a))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(after.Nodes)) {
		if _, ok := before.Nodes[p]; !ok {
			out = append(out, fmt.Sprintf("%s appeared in %s: %v", p, after.Root, after.Nodes[p]))
		}
	}
	return out
}

// DiffMountTrees is DiffTrees for recordings of a mount: a directory's
// st_nlink may be 2 + its subdirectories or 1 (unknown, as overlayfs
// says for merged directories); a valid value is not compared, a wrong
// one is.
func DiffMountTrees(before, after Tree) []string {
	return DiffTrees(normalizeDirNlink(before), normalizeDirNlink(after))
}

// normalizeDirNlink returns tr with the valid st_nlink of directories
// set to 0.
func normalizeDirNlink(tr Tree) Tree {
	subdirs := map[string]uint64{}
	for p, n := range tr.Nodes {
		if p != "." && n.Mode&unix.S_IFMT == unix.S_IFDIR {
			subdirs[filepath.Dir(p)]++
		}
	}
	out := tr
	out.Nodes = map[string]Node{}
	for p, n := range tr.Nodes {
		if n.Mode&unix.S_IFMT == unix.S_IFDIR && (n.Nlink == 1 || n.Nlink == 2+subdirs[p]) {
			n.Nlink = 0
		}
		out.Nodes[p] = n
	}
	return out
}
