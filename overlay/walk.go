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
func (v *FS) release(n *Node) {
	if n != nil && n != v.root {
		v.Forget(n, 1)
	}
}

// lookupChild looks name up in dir for a walk: a nil node (and no
// error) when the name does not exist.
func (v *FS) lookupChild(dir *Node, name string) (*Node, unix.Stat_t, error) {
	n, st, err := v.Lookup(dir, name)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, st, nil
	}
	return n, st, err
}

// lookupPath resolves path p ("" is the root) for a walk: a nil node
// (and no error) when it does not exist.
func (v *FS) lookupPath(p string) (*Node, unix.Stat_t, error) {
	n := v.root
	st, err := v.Getattr(n)
	if err != nil || p == "" {
		return n, st, err
	}
	for _, name := range pathNames(p) {
		c, cst, err := v.lookupChild(n, name)
		v.release(n)
		if c == nil || err != nil {
			return nil, cst, err
		}
		n, st = c, cst
	}
	return n, st, nil
}

// pathCursor looks up paths that mostly share their directories, as a
// walk in path order does: it keeps the directories of the last path
// looked up (each with a lookup reference) and starts the next lookup
// from the deepest one they share.
type pathCursor struct {
	view  *FS
	names []string // the directories held, from the root down
	dirs  []*Node  // dirs[i] is names[:i]; dirs[0] is the root
}

func (v *FS) newCursor() *pathCursor { return &pathCursor{view: v, dirs: []*Node{v.root}} }

// lookup is lookupPath(p) through the directories held.
func (c *pathCursor) lookup(p string) (*Node, unix.Stat_t, error) {
	if p == "" {
		st, err := c.view.Getattr(c.view.root)
		return c.view.root, st, err
	}
	names := pathNames(p)
	parent := names[:len(names)-1]
	keep := 0
	for keep < len(c.names) && keep < len(parent) && c.names[keep] == parent[keep] {
		keep++
	}
	c.drop(keep)
	for _, name := range parent[keep:] {
		n, _, err := c.view.lookupChild(c.dirs[len(c.dirs)-1], name)
		if n == nil || err != nil {
			return nil, unix.Stat_t{}, err
		}
		c.names, c.dirs = append(c.names, name), append(c.dirs, n)
	}
	return c.view.lookupChild(c.dirs[len(c.dirs)-1], names[len(names)-1])
}

// drop releases the directories held below the first keep names.
func (c *pathCursor) drop(keep int) {
	for _, n := range c.dirs[keep+1:] {
		c.view.release(n)
	}
	c.names, c.dirs = c.names[:keep], c.dirs[:keep+1]
}

// close releases every directory held.
func (c *pathCursor) close() { c.drop(0) }

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
func (v *FS) childNames(n *Node) ([]string, error) {
	ents, err := v.ReadDir(n)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, de := range ents {
		if de.Name == "." || de.Name == ".." || n == v.root && de.Name == internalDir {
			continue
		}
		names = append(names, de.Name)
	}
	slices.Sort(names)
	return names, nil
}

// dataOf says where regular file n's data lives: an object, or a lower
// file (lower-only and metacopy files).
func (v *FS) dataOf(n *Node) (object, lower string) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if n.object != "" && (n.entry == nil || !n.entry.Metacopy) {
		return n.object, ""
	}
	return "", n.lower
}

// attrsOf says where n's mode, owner, times and xattrs live: its
// object, or the lower inode.
func (v *FS) attrsOf(n *Node) (object, lower string) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if n.object != "" {
		return n.object, ""
	}
	return "", n.lower
}

// openData opens regular file n's data read-only, without changing
// atimes.
func (v *FS) openData(n *Node) (*os.File, error) {
	obj, lower := v.dataOf(n)
	if obj != "" {
		return v.objs.OpenRead(obj)
	}
	return v.openLower(lower, unix.O_RDONLY)
}

// xattrs returns n's extended attributes, security.selinux left out
// (a label of the backstore's, not of the file).
func (v *FS) xattrs(n *Node) (map[string]string, error) {
	names, err := readSized(func(b []byte) (int, error) { return v.Listxattr(n, b) })
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
		v, err := readSized(func(b []byte) (int, error) { return v.Getxattr(n, name, b) })
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
