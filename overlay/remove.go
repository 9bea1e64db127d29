package overlay

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

var whiteout = &branch.Entry{Type: branch.TypeWhiteout}

// hideLocked removes the name at r.path: a whiteout when the lower
// layer has an inode there, no entry otherwise.
func (v *FS) hideLocked(t *tx, dir *Node, name string, r *resolved) {
	var st unix.Stat_t
	lp := joinPath(dir.lower, name)
	if !dir.hasLower || v.lowerChildStat(dir.lower, lp, &st) != nil || v.hidesLower(lp, &st) {
		if v.indexGet(r.path) != nil {
			t.del(r.path)
		}
		return
	}
	w := whiteout
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 && v.indexGet(r.path) == nil {
		// Remember which hard-linked lower inode lost a name (st_nlink).
		w = &branch.Entry{Type: branch.TypeWhiteout, Ino: v.mapIno(&st)}
	}
	t.put(r.path, w)
}

// detachLocked handles the inode that lost the name r: its node becomes
// unlinked and its object is removed once nothing references it.
// Directories lose their upper subtree (whiteouts) with it.
func (v *FS) detachLocked(t *tx, r *resolved, n *Node) error {
	if r.entry != nil && r.entry.Type == branch.TypeDir {
		for _, p := range v.subtree(r.path) {
			if e := v.indexGet(p); e != nil && e.IsWhiteout() && e.Ino != 0 {
				// A hidden name of a hard-linked lower file stays
				// hidden (and counted in st_nlink) under the removed
				// directory's whiteout.
				id, err := v.cfg.AllocIno()
				if err != nil {
					return err
				}
				t.put(hiddenPath(id), e)
			}
			t.del(p)
		}
	}
	if r.entry == nil {
		if n != nil {
			t.unlink = append(t.unlink, n)
		}
		return nil
	}
	obj := r.entry.Object
	if r.entry.Type == branch.TypeFile && r.entry.Origin != "" && v.links[obj] == 0 {
		// The last upper name of a hard-linked lower file: its other
		// lower names still show this file, so an internal anchor keeps
		// it (and the lower names joined to it).
		var lst unix.Stat_t
		if unix.Fstatat(v.lowerFd, lowerRel(r.entry.Origin), &lst, unix.AT_SYMLINK_NOFOLLOW) == nil &&
			int64(lst.Nlink)-1-int64(v.hiddenLinks[r.entry.Ino]) > 0 {
			t.put(anchorPath(r.entry.Ino), r.entry)
		}
	}
	if r.entry.Type != branch.TypeDir && v.links[obj] > 0 {
		// Other names still link the file: only its ctime changes.
		if n != nil {
			t.bump(n)
		} else if !v.frozenLocked(r.entry) {
			t.bumped = append(t.bumped, obj)
		}
		return nil
	}
	if n != nil {
		t.unlink = append(t.unlink, n)
		return nil
	}
	if !v.frozenLocked(r.entry) {
		t.doomed = append(t.doomed, obj)
	}
	return nil
}

// sharedNameGoesLocked prepares the removal of name r of a lower-only
// hard-linked file. While other lower names stay, the file lives on
// with a new ctime, so it gets an upper copy (a metacopy) made from
// this name, which is replaced by a whiteout at once: detaching it
// then leaves the anchor that keeps the copy for the other names, and
// n (the node the kernel holds for the file, or nil) stands for the
// copy. It returns the node to detach.
func (v *FS) sharedNameGoesLocked(t *tx, r *resolved, n *Node) (*Node, error) {
	if r.entry != nil || !r.isLower || !sharedLower(&r.lowerSt) {
		return n, nil
	}
	ino := v.mapIno(&r.lowerSt)
	if int64(r.lowerSt.Nlink)-1-int64(v.hiddenLinks[ino]) <= 0 {
		return n, nil
	}
	e, err := v.metaCopyLocked(t, r.lower, ino)
	if err != nil {
		return nil, err
	}
	t.put(r.path, whiteout)
	if n != nil {
		t.promote(n, e)
	}
	r.entry, r.isLower = e, false
	return n, nil
}

// Unlink removes a non-directory name.
func (v *FS) Unlink(dir *Node, name string) error {
	defer v.enterChange(dir, name, nil, "")()
	return v.unlink(dir, name)
}

// unlink is Unlink inside the change gate (gate.go).
func (v *FS) unlink(dir *Node, name string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, err := v.resolveLocked(dir, name)
	if err != nil {
		return err
	}
	if !r.exists() {
		return unix.ENOENT
	}
	if r.mode() == unix.S_IFDIR {
		return unix.EISDIR
	}
	return v.removeLocked(dir, name, &r)
}

// Rmdir removes an empty directory (empty in the merged view).
func (v *FS) Rmdir(dir *Node, name string) error {
	defer v.enterChange(dir, name, nil, "")()
	return v.rmdir(dir, name)
}

// rmdir is Rmdir inside the change gate (gate.go).
func (v *FS) rmdir(dir *Node, name string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, err := v.resolveLocked(dir, name)
	if err != nil {
		return err
	}
	if !r.exists() {
		return unix.ENOENT
	}
	if r.mode() != unix.S_IFDIR {
		return unix.ENOTDIR
	}
	if empty, err := v.emptyDirLocked(&r); err != nil {
		return err
	} else if !empty {
		return unix.ENOTEMPTY
	}
	return v.removeLocked(dir, name, &r)
}

// removeLocked removes the name r (checked by Unlink or Rmdir) from
// dir. v.mu is held exclusively.
func (v *FS) removeLocked(dir *Node, name string, r *resolved) error {
	n := v.existingNodeLocked(r)
	t := v.newTx()
	t.deleting = true
	if err := v.copyUpDirLocked(t, dir); err != nil {
		return t.fail(err)
	}
	n, err := v.sharedNameGoesLocked(t, r, n)
	if err != nil {
		return t.fail(err)
	}
	v.hideLocked(t, dir, name, r)
	if err := v.detachLocked(t, r, n); err != nil {
		return t.fail(err)
	}
	t.touch(dir)
	return t.commit()
}

// emptyDirLocked reports whether the directory r has no visible names.
func (v *FS) emptyDirLocked(r *resolved) (bool, error) {
	upper := v.dirs[r.path]
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
	names, err := v.lowerNames(lp)
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

// Internal entries live below the control file's name, which no user
// path can reach (the mount root reserves it).
const internalDir = ".agentfs.ctl"

// anchorPath names the internal entry that keeps the upper copy of a
// hard-linked lower inode after its last upper name is gone.
func anchorPath(ino uint64) string {
	return fmt.Sprintf("%s/links/%x", internalDir, ino)
}

// hiddenPath names an internal whiteout that records a lower name of a
// hard-linked inode replaced by a rename (for st_nlink).
func hiddenPath(id uint64) string {
	return fmt.Sprintf("%s/hidden/%x", internalDir, id)
}
