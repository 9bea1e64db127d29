package overlay

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # What a change not applied holds back
//
// An Apply of some paths must leave the view as it was at the others.
// The view reads lower paths other than its own in three ways, and a
// change that would alter such a lower path waits while the view path
// reading it is not applied along with it:
//
//   - a renamed directory merges the lower directory it came from
//     (Redirect): nothing inside that lower directory changes, and it
//     is not removed, until the renamed directory is applied whole;
//   - a renamed lower file keeps its data in the lower file at its old
//     name (a metacopy's Origin): that file is neither written nor
//     removed until the new name is applied;
//   - the names of a hard-linked lower file show one upper copy: they
//     are written or removed together or not at all.
//
// Besides: a change needs the directory the apply makes for it (see
// blockedDir), and a lower directory is removed only with everything
// below it.

// lowerDep is a view path that reads a lower path other than its own.
type lowerDep struct {
	lower string
	tree  bool // the whole lower subtree (a renamed directory)
	view  string
	// linked: lower is a hard-linked file whose other names the view
	// joins to this entry's copy (inode: its device and number).
	linked bool
	inode  [2]uint64
}

// lowerDeps lists the view's entries that read other lower paths.
func (a *applier) lowerDeps() []lowerDep {
	var deps []lowerDep
	a.v.mu.RLock()
	defer a.v.mu.RUnlock()
	a.v.eachEntryLocked(func(p string, e *branch.Entry) {
		if isInternal(p) {
			return
		}
		switch {
		case e.Type == branch.TypeDir:
			if lp, ok := redirectOf(e); ok && lp != p {
				deps = append(deps, lowerDep{lower: lp, tree: true, view: p})
			}
		case e.Type == branch.TypeFile && e.Metacopy && e.Origin != "" && e.Origin != p:
			d := lowerDep{lower: e.Origin, view: p}
			if st, err := a.v.lowerStat(e.Origin); err == nil && sharedLower(&st) && a.v.mapIno(&st) == e.Ino {
				d.linked, d.inode = true, [2]uint64{st.Dev, st.Ino}
			}
			deps = append(deps, d)
		}
	})
	return deps
}

// holds is one round of deciding what is held back.
type holds struct {
	a *applier
	// pending marks the paths with a change not applied at or below
	// them; pendingBelow those with one strictly below.
	pending, pendingBelow, applied map[string]bool
	pinned                         []lowerDep // deps whose view path is not applied
	linkHeld                       map[[2]uint64]string
}

func (a *applier) newHolds(deps []lowerDep) *holds {
	h := &holds{a: a, pending: map[string]bool{}, pendingBelow: map[string]bool{}, applied: map[string]bool{}, linkHeld: map[[2]uint64]string{}}
	for _, it := range a.items {
		held := it.state != stateApply
		m := h.applied
		if held {
			m = h.pending
			if it.lexists && sharedLower(&it.lower) {
				h.linkHeld[[2]uint64{it.lower.Dev, it.lower.Ino}] = it.Path
			}
		}
		m[it.Path] = true
		for _, d := range ancestors(it.Path) {
			m[d] = true
			if held {
				h.pendingBelow[d] = true
			}
		}
	}
	for _, d := range deps {
		// A view path with a change reads the lower path until that
		// change is applied. One without (its own lower file has its
		// data and attributes already) stops reading it at this apply's
		// commit (commit.go), unless the copy still joins other names
		// of a hard-linked file that stay. A renamed directory with no
		// change at or below it has its lower directory's contents at
		// its own path already: selected, it merges that one from this
		// apply's commit on (a partial apply that wrote it kept it
		// renamed while the old one showed upper copies of hard links).
		_, joined := h.linkHeld[d.inode]
		if h.pending[d.view] || !h.applied[d.view] && (d.tree && !a.selected(d.view) || d.linked && joined) {
			h.pinned = append(h.pinned, d)
		}
	}
	return h
}

// holdBack says why change it must wait, or "".
func (h *holds) holdBack(it *planned) string {
	a := h.a
	if it.New != nil {
		if d, ok := a.blockedDir(it.Path); ok {
			return fmt.Sprintf("its directory %s is not applied", displayPath(d))
		}
	}
	if removesDir(it) && h.pendingBelow[it.Path] {
		return "a change below it is not applied"
	}
	if it.Kind == ModeChanged {
		return "" // in place: what the view reads stays
	}
	if it.lexists && sharedLower(&it.lower) {
		if other, ok := h.linkHeld[[2]uint64{it.lower.Dev, it.lower.Ino}]; ok {
			return fmt.Sprintf("%s, another name of this hard-linked file, is not applied", displayPath(other))
		}
	}
	removes := it.Kind == Deleted || it.Kind == TypeChanged
	for _, d := range h.pinned {
		if it.Path == d.lower || d.tree && isBelow(it.Path, d.lower) || removes && isBelow(d.lower, it.Path) {
			return fmt.Sprintf("the view shows it at %s, which is not applied", displayPath(d.view))
		}
	}
	return ""
}

// # Hidden project paths
//
// Apply never writes over, changes or removes a hidden project file
// (hide.go): a change whose lower path is hidden is a conflict that
// Force does not override, and so is the removal (or the replacement)
// of a lower directory that holds hidden names, which would have to
// remove them. A file of the view's own at a hidden path (Change.Hidden,
// with nothing in the project there) is a conflict unless Force. What
// the changes refused hold back follows as for any conflict.

// hiddenConflict says why change it may not be applied because of the
// hide rules ("" when it may), and whether Force would apply it.
func (a *applier) hiddenConflict(it *planned) (why string, forced bool) {
	v := a.v
	if v.cfg.Hide.Empty() {
		return "", false
	}
	if it.lexists && v.hidesLower(it.Path, &it.lower) {
		return "the project's file there is hidden by a hide pattern: apply never changes it", false
	}
	if it.Old != nil && it.Old.Type == "dir" && (it.New == nil || it.Kind == TypeChanged) {
		if name := a.hiddenIn(it.Path); name != "" {
			return fmt.Sprintf("the project's directory holds %s, hidden by a hide pattern: apply never removes it", displayPath(name)), false
		}
	}
	if it.Hidden && !a.o.Force {
		return "a path a hide pattern hides: agentfs apply --force writes it", true
	}
	return "", false
}

// hiddenIn returns a hidden name in lower directory p ("" for none):
// read from the directory itself, as the view's listing leaves them out.
func (a *applier) hiddenIn(p string) string {
	v := a.v
	f, err := v.openLower(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return ""
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	for _, name := range names {
		cp := joinPath(p, name)
		var st unix.Stat_t
		if unix.Fstatat(v.lowerFd, lowerRel(cp), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && v.hidesLower(cp, &st) {
			return cp
		}
	}
	return ""
}
