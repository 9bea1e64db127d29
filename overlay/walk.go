package overlay

import (
	"errors"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// # Walking a view
//
// Diff, Patch and Export read a view as a program reads the mount:
// through Lookup, ReadDir and Getattr, so that they see exactly what
// the view shows (hard links joined, st_ino, merged listings). Every
// node a walk looks up carries one lookup reference, which release
// drops again; data is read with O_NOATIME, so that reading an object a
// snapshot shares does not change it.

// release drops the lookup reference a walk took on n.
func (fs *FS) release(n *Node) {
	if n != nil && n != fs.root {
		fs.Forget(n, 1)
	}
}

// lookupChild looks name up in dir for a walk: a nil node (and no
// error) when the name does not exist.
func (fs *FS) lookupChild(dir *Node, name string) (*Node, unix.Stat_t, error) {
	n, st, err := fs.Lookup(dir, name)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, st, nil
	}
	return n, st, err
}

// lookupPath resolves path p ("" is the root) for a walk: a nil node
// (and no error) when it does not exist.
func (fs *FS) lookupPath(p string) (*Node, unix.Stat_t, error) {
	n := fs.root
	st, err := fs.Getattr(n)
	if err != nil || p == "" {
		return n, st, err
	}
	for _, name := range pathNames(p) {
		c, cst, err := fs.lookupChild(n, name)
		fs.release(n)
		if c == nil || err != nil {
			return nil, cst, err
		}
		n, st = c, cst
	}
	return n, st, nil
}

// pathNames splits a path into its names.
func pathNames(p string) []string {
	var out []string
	for p != "" {
		dir, name := splitPath(p)
		out = append(out, name)
		p = dir
	}
	slices.Reverse(out)
	return out
}

// childNames lists directory n, sorted, without ".", ".." and the
// control file's name (which is also the internal directory's).
func (fs *FS) childNames(n *Node) ([]string, error) {
	ents, err := fs.ReadDir(n)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, de := range ents {
		if de.Name == "." || de.Name == ".." || n == fs.root && de.Name == internalDir {
			continue
		}
		names = append(names, de.Name)
	}
	slices.Sort(names)
	return names, nil
}

// dataOf says where regular file n's data lives: an object, or a lower
// file (lower-only and metacopy files).
func (fs *FS) dataOf(n *Node) (object, lower string) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	if n.object != "" && (n.entry == nil || !n.entry.Metacopy) {
		return n.object, ""
	}
	return "", n.lower
}

// attrsOf says where n's mode, owner, times and xattrs live: its
// object, or the lower inode.
func (fs *FS) attrsOf(n *Node) (object, lower string) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	if n.object != "" {
		return n.object, ""
	}
	return "", n.lower
}

// openData opens regular file n's data read-only, without changing
// atimes.
func (fs *FS) openData(n *Node) (*os.File, error) {
	obj, lower := fs.dataOf(n)
	if obj != "" {
		return fs.objs.OpenRead(obj)
	}
	return fs.openLower(lower, unix.O_RDONLY)
}

// xattrs returns n's extended attributes, security.selinux left out
// (a label of the backstore's, not of the file).
func (fs *FS) xattrs(n *Node) (map[string]string, error) {
	names, err := readSized(func(b []byte) (int, error) { return fs.Listxattr(n, b) })
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil, nil
		}
		return nil, err
	}
	out := map[string]string{}
	for len(names) > 0 {
		i := 0
		for i < len(names) && names[i] != 0 {
			i++
		}
		name := string(names[:i])
		names = names[min(i+1, len(names)):]
		if name == "" || name == "security.selinux" {
			continue
		}
		v, err := readSized(func(b []byte) (int, error) { return fs.Getxattr(n, name, b) })
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out[name] = string(v)
	}
	return out, nil
}

// readSized calls read with a buffer that grows until the list or
// value fits (ERANGE), up to the kernel's limit for xattrs.
func readSized(read func([]byte) (int, error)) ([]byte, error) {
	for size := 4 << 10; ; size *= 4 {
		buf := make([]byte, size)
		n, err := read(buf)
		if err == unix.ERANGE && size < 1<<20 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
