package overlay

import (
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

var whiteout = &branch.Entry{Type: branch.TypeWhiteout}

// hideLocked removes the name at r.path: a whiteout when the lower
// layer has an inode there, no entry otherwise.
func (fs *FS) hideLocked(t *tx, dir *Node, name string, r *resolved) {
	if fs.lowerExistsLocked(dir, name) {
		t.put(r.path, whiteout)
	} else if fs.indexGet(r.path) != nil {
		t.del(r.path)
	}
}

// detachLocked handles the inode that lost the name r: its node becomes
// unlinked and its object is removed once nothing references it.
// Directories lose their upper subtree (whiteouts) with it.
func (fs *FS) detachLocked(t *tx, r *resolved, n *Node) {
	if r.entry != nil && r.entry.Type == branch.TypeDir {
		for _, p := range fs.subtree(r.path) {
			t.del(p)
		}
	}
	if r.entry == nil {
		if n != nil {
			t.unlink = append(t.unlink, n)
		}
		return
	}
	obj := r.entry.Object
	if r.entry.Type == branch.TypeFile && fs.links[obj] > 0 {
		// Other names still link the file: only its ctime changes.
		if n != nil {
			t.bump(n)
		} else {
			t.bumped = append(t.bumped, obj)
		}
		return
	}
	if n != nil {
		t.unlink = append(t.unlink, n)
		return
	}
	t.doomed = append(t.doomed, obj)
}

// Unlink removes a non-directory name.
func (fs *FS) Unlink(dir *Node, name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	r, err := fs.resolveLocked(dir, name)
	if err != nil {
		return err
	}
	if !r.exists() {
		return unix.ENOENT
	}
	if r.mode() == unix.S_IFDIR {
		return unix.EISDIR
	}
	n := fs.existingNodeLocked(&r)
	t := fs.newTx()
	if err := fs.copyUpDirLocked(t, dir); err != nil {
		return t.fail(err)
	}
	fs.hideLocked(t, dir, name, &r)
	fs.detachLocked(t, &r, n)
	t.touch(dir)
	return t.commit()
}

// Rmdir removes an empty directory (empty in the merged view).
func (fs *FS) Rmdir(dir *Node, name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	r, err := fs.resolveLocked(dir, name)
	if err != nil {
		return err
	}
	if !r.exists() {
		return unix.ENOENT
	}
	if r.mode() != unix.S_IFDIR {
		return unix.ENOTDIR
	}
	if empty, err := fs.emptyDirLocked(&r); err != nil {
		return err
	} else if !empty {
		return unix.ENOTEMPTY
	}
	n := fs.existingNodeLocked(&r)
	t := fs.newTx()
	if err := fs.copyUpDirLocked(t, dir); err != nil {
		return t.fail(err)
	}
	fs.hideLocked(t, dir, name, &r)
	fs.detachLocked(t, &r, n)
	t.touch(dir)
	return t.commit()
}

// emptyDirLocked reports whether the directory r has no visible names.
func (fs *FS) emptyDirLocked(r *resolved) (bool, error) {
	upper := fs.dirs[r.path]
	for _, e := range upper {
		if !e.IsWhiteout() {
			return false, nil
		}
	}
	lp, has := r.lower, r.isLower
	if r.entry != nil {
		lp, has = redirectOf(r.entry)
	}
	if !has {
		return true, nil
	}
	names, err := fs.lowerNames(lp)
	if err != nil {
		return false, err
	}
	for _, de := range names {
		if _, hidden := upper[de.Name]; !hidden {
			return false, nil
		}
	}
	return true, nil
}
