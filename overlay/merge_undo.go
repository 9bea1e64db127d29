package overlay

import (
	"errors"

	"golang.org/x/sys/unix"
)

// UndoPath is a path a merge changes, as UndoMerge takes it back.
type UndoPath struct {
	Path string `json:"path"`
	// Deep: the merge removes what ours has there, a directory with
	// everything in it (a delete, or a directory replaced by another
	// type), so the undo makes the whole subtree again.
	Deep bool `json:"deep,omitempty"`
}

// UndoPaths lists, in the order ApplyMerge makes them, the paths plan
// p changes: what UndoMerge needs to take a half-made merge back.
func (p *MergePlan) UndoPaths() ([]UndoPath, error) {
	out := make([]UndoPath, len(p.ops))
	for i, op := range p.ops {
		out[i].Path = op.path
		st := p.stamps[op.path]
		if !st.exists || st.mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		switch op.action {
		case MergeDelete:
			out[i].Deep = true
		case MergeTake:
			tn, _, err := p.theirs.lookupPath(op.path)
			if err != nil && !errors.Is(err, unix.ENOTDIR) {
				return nil, err
			}
			out[i].Deep = tn == nil || tn.mode != unix.S_IFDIR
			if tn != nil {
				p.theirs.release(tn)
			}
		}
	}
	return out, nil
}

// UndoMerge makes every path of paths (a plan's UndoPaths) in v what
// it is in before (the snapshot of v taken before the merge): a merge
// stopped half way, by an error or a crash, is taken back path by
// path, and what programs wrote to other paths of the branch meanwhile
// is kept. A deep path comes back with everything below it. A path
// already as it was is made anew all the same (the undo does not know
// how far the merge got), and a file that had other names comes back
// as a file of its own, as the merge had made it. It may run again
// after it was interrupted: each step makes a path what before says.
func (v *FS) UndoMerge(before *FS, paths []UndoPath) error {
	if v.ReadOnly() {
		return unix.EROFS
	}
	// Its paths held, as ApplyMerge holds them (gate.go).
	var held, deep []string
	for _, p := range paths {
		if p.Deep {
			deep = append(deep, p.Path)
		} else {
			held = append(held, p.Path)
		}
	}
	defer v.holdPaths(held, deep)()
	for _, p := range paths {
		if err := v.ensureParents(before, p.Path); err != nil {
			return err
		}
		if err := v.restoreTree(before, p.Path, p.Deep); err != nil {
			return err
		}
	}
	return nil
}

// ensureParents makes the directories above p that v lacks as before
// has them (a merge that replaced a directory by a file, stopped
// before the path below it was made again).
func (v *FS) ensureParents(before *FS, p string) error {
	dir, _ := splitPath(p)
	if dir == "" {
		return nil
	}
	n, _, err := v.lookupPath(dir)
	if err == nil && n != nil && n.mode == unix.S_IFDIR {
		v.release(n)
		return nil
	}
	if n != nil {
		v.release(n)
	}
	if err != nil && !errors.Is(err, unix.ENOTDIR) {
		return err
	}
	if err := v.ensureParents(before, dir); err != nil {
		return err
	}
	return v.takePath(before, dir)
}

// restoreTree makes p in v what it is in before; a directory that v
// lacks or has as another type, or with deep everything below it too.
func (v *FS) restoreTree(before *FS, p string, deep bool) error {
	bn, _, err := before.lookupPath(p)
	if err != nil && !errors.Is(err, unix.ENOTDIR) {
		return err
	}
	if bn == nil {
		return v.removeAllPath(p)
	}
	isDir := bn.mode == unix.S_IFDIR
	var names []string
	if isDir {
		names, err = before.childNames(bn)
	}
	before.release(bn)
	if err != nil {
		return err
	}
	if isDir && !deep {
		n, _, err := v.lookupPath(p)
		if err != nil && !errors.Is(err, unix.ENOTDIR) {
			return err
		}
		// The merge made no more than its attributes: what is below
		// is other paths' business.
		deep = n == nil || n.mode != unix.S_IFDIR
		if n != nil {
			v.release(n)
		}
	}
	if err := v.takePath(before, p); err != nil {
		return err
	}
	if !isDir || !deep {
		return nil
	}
	n, _, err := v.lookupPath(p)
	if err != nil || n == nil {
		return err
	}
	have, err := v.childNames(n)
	v.release(n)
	if err != nil {
		return err
	}
	keep := make(map[string]bool, len(names))
	for _, name := range names {
		keep[name] = true
	}
	for _, name := range have {
		if !keep[name] {
			if err := v.removeAllPath(joinPath(p, name)); err != nil {
				return err
			}
		}
	}
	for _, name := range names {
		if err := v.restoreTree(before, joinPath(p, name), true); err != nil {
			return err
		}
	}
	return nil
}
