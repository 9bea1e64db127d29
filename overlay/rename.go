package overlay

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// Rename flags, as renameat2 takes them.
const (
	RenameNoReplace = unix.RENAME_NOREPLACE
	RenameExchange  = unix.RENAME_EXCHANGE
	RenameWhiteout  = unix.RENAME_WHITEOUT
)

// Rename moves oname in odir to nname in ndir. Unlike overlayfs, lower
// and merged directories can be renamed: the moved directory keeps its
// lower contents through its Redirect, and its upper entries move with
// it in the same batch.
func (v *FS) Rename(odir *Node, oname string, ndir *Node, nname string, flags uint32) error {
	defer v.enterChange(odir, oname, ndir, nname)()
	return v.rename(odir, oname, ndir, nname, flags)
}

// rename is Rename inside the change gate (gate.go).
func (v *FS) rename(odir *Node, oname string, ndir *Node, nname string, flags uint32) error {
	if flags&^(RenameNoReplace|RenameExchange) != 0 {
		return unix.EINVAL
	}
	if flags&RenameNoReplace != 0 && flags&RenameExchange != 0 {
		return unix.EINVAL
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	src, err := v.resolveLocked(odir, oname)
	if err != nil {
		return err
	}
	dst, err := v.resolveLocked(ndir, nname)
	if err != nil {
		return err
	}
	if !src.exists() {
		return unix.ENOENT
	}
	exchange := flags&RenameExchange != 0
	if exchange && !dst.exists() {
		return unix.ENOENT
	}
	if flags&RenameNoReplace != 0 && dst.exists() {
		return unix.EEXIST
	}
	if dst.exists() && sameInode(&src, &dst) {
		return nil // POSIX: two links to one file, nothing to do
	}
	srcDir := src.mode() == unix.S_IFDIR
	// Moving a directory below itself.
	if srcDir && isBelow(dst.path, src.path) {
		return unix.EINVAL
	}
	if exchange && dst.mode() == unix.S_IFDIR && isBelow(src.path, dst.path) {
		return unix.EINVAL
	}
	sn := v.existingNodeLocked(&src)
	if sn == nil {
		sn = v.nodeForLocked(odir, oname, &src, false)
	}
	var dn *Node
	if dst.exists() {
		if !exchange {
			dstDir := dst.mode() == unix.S_IFDIR
			switch {
			case srcDir && !dstDir:
				return unix.ENOTDIR
			case !srcDir && dstDir:
				return unix.EISDIR
			case dstDir:
				if empty, err := v.emptyDirLocked(&dst); err != nil {
					return err
				} else if !empty {
					return unix.ENOTEMPTY
				}
			}
		}
		dn = v.existingNodeLocked(&dst)
		if exchange && dn == nil {
			dn = v.nodeForLocked(ndir, nname, &dst, false)
		}
	}

	t := v.newTx()
	if err := v.copyUpDirLocked(t, odir); err != nil {
		return t.fail(err)
	}
	if err := v.copyUpDirLocked(t, ndir); err != nil {
		return t.fail(err)
	}
	se, err := v.copyUpMetaLocked(t, sn)
	if err != nil {
		return t.fail(err)
	}
	if exchange {
		de, err := v.copyUpMetaLocked(t, dn)
		if err != nil {
			return t.fail(err)
		}
		for _, r := range []*resolved{&src, &dst} {
			if err := v.recordHiddenLocked(t, r); err != nil {
				return t.fail(err)
			}
		}
		v.swapLocked(t, src.path, dst.path)
		t.put(src.path, de)
		t.put(dst.path, se)
		t.bump(dn)
	} else {
		if dst.exists() {
			if dn, err = v.sharedNameGoesLocked(t, &dst, dn); err != nil {
				return t.fail(err)
			}
			if err := v.recordHiddenLocked(t, &dst); err != nil {
				return t.fail(err)
			}
			if v.indexGet(dst.path) != nil {
				// The replaced file loses this name before it is
				// detached (its last name, maybe).
				t.del(dst.path)
			}
			if err := v.detachLocked(t, &dst, dn); err != nil {
				return t.fail(err)
			}
		}
		v.moveLocked(t, src.path, dst.path)
		t.put(dst.path, se)
		v.hideLocked(t, odir, oname, &src)
	}
	t.bump(sn)
	t.touch(odir)
	if ndir != odir {
		t.touch(ndir)
	}
	if err := t.commit(); err != nil {
		return err
	}
	if exchange {
		dn.parent, dn.name = odir, oname
	}
	sn.parent, sn.name = ndir, nname
	return nil
}

// recordHiddenLocked records, for st_nlink, that the lower name r of a
// hard-linked file disappears under another file (rename over it, or
// exchange) without a whiteout of its own.
func (v *FS) recordHiddenLocked(t *tx, r *resolved) error {
	if !sharedLower(&r.lowerSt) || v.indexGet(r.path) != nil {
		return nil
	}
	id, err := v.cfg.AllocIno()
	if err != nil {
		return err
	}
	t.put(hiddenPath(id), &branch.Entry{Type: branch.TypeWhiteout, Ino: v.mapIno(&r.lowerSt)})
	return nil
}

// moveLocked moves the upper entries strictly below from to below to.
func (v *FS) moveLocked(t *tx, from, to string) {
	sub := v.subtree(from)
	type moved struct {
		p string
		e *branch.Entry
	}
	ms := make([]moved, 0, len(sub))
	for _, p := range sub {
		ms = append(ms, moved{p, v.indexGet(p)})
	}
	for i := len(ms) - 1; i >= 0; i-- {
		t.del(ms[i].p)
	}
	for _, m := range ms {
		t.put(to+m.p[len(from):], m.e)
	}
}

// swapLocked exchanges the upper entries strictly below a and b.
func (v *FS) swapLocked(t *tx, a, b string) {
	type moved struct {
		p string
		e *branch.Entry
	}
	collect := func(root string) []moved {
		var ms []moved
		for _, p := range v.subtree(root) {
			ms = append(ms, moved{p, v.indexGet(p)})
		}
		return ms
	}
	as, bs := collect(a), collect(b)
	for _, ms := range [][]moved{as, bs} {
		for i := len(ms) - 1; i >= 0; i-- {
			t.del(ms[i].p)
		}
	}
	for _, m := range as {
		t.put(b+m.p[len(a):], m.e)
	}
	for _, m := range bs {
		t.put(a+m.p[len(b):], m.e)
	}
}

// isBelow reports whether p is q or inside q.
func isBelow(p, q string) bool {
	return p == q || strings.HasPrefix(p, q+"/") || q == ""
}

// sameInode reports whether two resolved names are links to one inode.
func sameInode(a, b *resolved) bool {
	if a.entry != nil && b.entry != nil {
		return a.entry.Object == b.entry.Object
	}
	if !a.isLower || !b.isLower {
		return false
	}
	return a.lower == b.lower || sharedLower(&a.lowerSt) && sharedLower(&b.lowerSt) &&
		a.lowerSt.Dev == b.lowerSt.Dev && a.lowerSt.Ino == b.lowerSt.Ino
}
