package overlay

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # Names for reports
//
// The activity log and automatic snapshots name what changed by path.
// Path, ChildPath and BranchName take the namespace lock shared, so
// they may be called while other operations run (never with FS.mu
// held); ReadFile reads a file of the view as a program would, without
// the kernel.

// Path returns n's path in its view ("" for the root). ok is false for
// a node that is no longer linked into the tree.
func (v *FS) Path(n *Node) (p string, ok bool) {
	v.rlockAside()
	defer v.mu.RUnlock()
	return n.pathLocked()
}

// ChildPath returns the path of name inside directory dir; ok is false
// when dir is no longer linked into the tree.
func (v *FS) ChildPath(dir *Node, name string) (p string, ok bool) {
	v.rlockAside()
	defer v.mu.RUnlock()
	dp, ok := dir.pathLocked()
	if !ok {
		return "", false
	}
	return joinPath(dp, name), true
}

// BranchName returns the name of the branch the view shows now, or ""
// for a read-only view (a snapshot or the plain lower tree).
func (v *FS) BranchName() string {
	v.rlockAside()
	defer v.mu.RUnlock()
	if v.layer == nil {
		return ""
	}
	return v.layer.Name()
}

// ReadFile returns up to max bytes of the regular file at path p in the
// view (as a walk reads it: the lookups it takes are dropped again, the
// data is read without changing atimes). An error wraps ENOENT when
// there is no such file, EISDIR or EINVAL when p is not a regular file.
func (v *FS) ReadFile(p string, max int) ([]byte, error) {
	f, err := v.OpenPath(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, int64(max)))
}

// OpenPath opens the regular file at path p in the view for reading,
// as ReadFile reads it, for a reader that streams it. An error wraps
// ENOENT when there is no such file, EISDIR or EINVAL when p is not a
// regular file.
func (v *FS) OpenPath(p string) (*os.File, error) {
	return atPath(v, p, func(n *Node, st *unix.Stat_t) (*os.File, error) {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
		case unix.S_IFDIR:
			return nil, unix.EISDIR
		default:
			return nil, unix.EINVAL
		}
		return v.openData(n)
	})
}

// atPath calls fn with the node at path p in view v and its attributes,
// and releases the node after: ENOENT when there is no such file.
func atPath[T any](v *FS, p string, fn func(n *Node, st *unix.Stat_t) (T, error)) (T, error) {
	var zero T
	n, st, err := v.lookupPath(p)
	if err != nil {
		return zero, err
	}
	if n == nil {
		return zero, unix.ENOENT
	}
	defer v.release(n)
	return fn(n, &st)
}

// OpenData opens the data of the regular file at path p in the view
// read-only, without changing atimes (a push reads it so), and returns
// its attributes as the view shows them. An error wraps ENOENT when
// there is no such file, EISDIR or EINVAL when p is not a regular file.
func (v *FS) OpenData(p string) (*os.File, unix.Stat_t, error) {
	n, st, err := v.lookupPath(p)
	if err != nil {
		return nil, st, err
	}
	if n == nil {
		return nil, st, unix.ENOENT
	}
	defer v.release(n)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return nil, st, unix.EISDIR
	default:
		return nil, st, unix.EINVAL
	}
	f, err := v.openData(n)
	return f, st, err
}

// DataOfPath says where the data of the regular file at path p in the
// view lives: its object (an id of the backstore), or the project's
// file (a path relative to the lower directory) when it has none or
// only a metacopy. An error wraps ENOENT when there is no such file.
func (v *FS) DataOfPath(p string) (object, lower string, err error) {
	type where struct{ object, lower string }
	w, err := atPath(v, p, func(n *Node, _ *unix.Stat_t) (where, error) {
		o, l := v.dataOf(n)
		return where{o, l}, nil
	})
	return w.object, w.lower, err
}

// InfoPath describes the file at path p in the view as Diff describes
// the sides of a change. An error wraps ENOENT when there is no such
// file.
func (v *FS) InfoPath(p string) (*FileInfo, error) {
	return atPath(v, p, func(n *Node, st *unix.Stat_t) (*FileInfo, error) { return fileInfo(n, st) })
}

// UpperPaths returns, for each object of objs, the paths of the view's
// own entries whose data it is (a hard-linked file's names), in no
// order. It reads the view's index: no system call.
func (v *FS) UpperPaths(objs map[string]bool) map[string][]string {
	out := map[string][]string{}
	v.mu.RLock()
	defer v.mu.RUnlock()
	for dir, ents := range v.dirs {
		for name, e := range ents {
			if e.Type == branch.TypeFile && e.Object != "" && !e.Metacopy && objs[e.Object] {
				out[e.Object] = append(out[e.Object], joinPath(dir, name))
			}
		}
	}
	return out
}

// StatPath returns the attributes of the file at path p in the view
// (the final name not followed, as lstat does). An error wraps ENOENT
// when there is no such file.
func (v *FS) StatPath(p string) (unix.Stat_t, error) {
	n, st, err := v.lookupPath(p)
	if err != nil {
		return st, err
	}
	if n == nil {
		return st, unix.ENOENT
	}
	v.release(n)
	return st, nil
}

// ReadlinkPath returns the target of the symlink at path p in the view.
// An error wraps ENOENT when there is no such file, EINVAL when it is
// no symlink.
func (v *FS) ReadlinkPath(p string) (string, error) {
	return atPath(v, p, func(n *Node, _ *unix.Stat_t) (string, error) { return v.Readlink(n) })
}

// ReadDirPath returns the names in the directory at path p in the view
// ("." and ".." left out). An error wraps ENOENT when there is no such
// file, ENOTDIR when it is no directory.
func (v *FS) ReadDirPath(p string) ([]string, error) {
	return atPath(v, p, func(n *Node, st *unix.Stat_t) ([]string, error) {
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil, unix.ENOTDIR
		}
		ents, err := v.ReadDir(n)
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(ents))
		for _, e := range ents {
			if e.Name != "." && e.Name != ".." {
				names = append(names, e.Name)
			}
		}
		return names, nil
	})
}

// Xattrs returns the extended attributes of the file at path p in the
// view that a copy of it keeps (as Export keeps them: user.*, POSIX
// ACLs, and as root trusted.* and security.capability), by name.
func (v *FS) Xattrs(p string) (map[string]string, error) {
	n, _, err := v.lookupPath(p)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, unix.ENOENT
	}
	defer v.release(n)
	all, err := v.xattrs(n)
	if err != nil {
		return nil, err
	}
	asRoot := os.Geteuid() == 0
	for name := range all {
		if !keptXattr(name, asRoot) {
			delete(all, name)
		}
	}
	return all, nil
}

// ObjectID returns the id of the backstore object that holds the data
// of regular file n, or "" when its data is still the lower file's.
func (v *FS) ObjectID(n *Node) string {
	obj, _ := v.dataOf(n)
	return obj
}
