package overlay

import "sync"

// # The change gate
//
// A merge is one change of its target branch (ApplyMerge): it checks
// that what it replaces is still what its plan saw, then makes the
// plan's changes through the view's own operations. A program bound
// to the branch must not change one of those paths in between: the
// merge would write over what it wrote (lost, though its call had
// succeeded), or fail halfway on it (a directory it empties gains a
// file). So while a merge applies, it holds its paths (hold): an
// operation that changes a name or its attributes (create, mkdir,
// mknod, symlink, link, unlink, rmdir, rename, setattr, setxattr,
// removexattr, and an open for writing or with O_TRUNC, which copies
// up or truncates) and touches a held path waits for the merge to end.
// An operation touches path q when q is a path the merge changes, or
// is below one it removes or replaces whole (deep), or is above one (a
// rename of a directory would move the merge's path away). Operations
// on every other path go on while the merge applies: what a program
// writes there is its own business, and a merge undone path by path
// (UndoMerge) keeps it.
//
// The hold is installed with the gate's RWMutex taken exclusively,
// which waits for the operations in flight (each holds it shared for
// its whole run); an operation that starts later sees the hold. So
// the merge's check, made after, sees every change made before, and
// none to its paths lands between the check and its last change.
// Writes through a file already open are not held: they change that
// inode's data, and a merge replaces a file whose data it changes by a
// new one (a program holding the old one keeps it, as with an editor's
// save); with passthrough the kernel writes to the backing file without
// asking us anyway. Reads are not held either.
//
// Lock order: the gate, then Node.copyMu, FS.mu and the rest (doc.go).
// The operations' bodies (lower-case: unlink for Unlink) do not take
// it: ApplyMerge and UndoMerge call them, and an operation calls
// another's body, never the gated one (an RWMutex taken shared twice by
// one goroutine deadlocks when a writer waits between the two).
type changeGate struct {
	mu sync.RWMutex
	// hold is the paths of the merge applying (nil: none); written
	// with mu held exclusively, read with it shared.
	hold *pathHold
}

// pathHold is what a merge holds: its paths, those it holds whole
// (deep), the paths above them, and done, closed when it ends.
type pathHold struct {
	paths, deep, above map[string]bool
	done               chan struct{}
}

// holdPaths holds paths (deep: with everything below) until the
// returned function is called: an operation touching one of them
// waits until then (see the gate's doc).
func (v *FS) holdPaths(paths, deep []string) func() {
	h := &pathHold{paths: map[string]bool{}, deep: map[string]bool{}, above: map[string]bool{}, done: make(chan struct{})}
	add := func(p string) {
		h.paths[p] = true
		for q := p; q != ""; {
			q, _ = splitPath(q)
			h.above[q] = true
		}
	}
	for _, p := range paths {
		add(p)
	}
	for _, p := range deep {
		add(p)
		h.deep[p] = true
	}
	v.gate.mu.Lock()
	v.gate.hold = h
	v.gate.mu.Unlock()
	return func() {
		v.gate.mu.Lock()
		v.gate.hold = nil
		v.gate.mu.Unlock()
		close(h.done)
	}
}

// touches reports whether a change of path q touches h's paths: q is
// one, or above one, or below one held whole.
func (h *pathHold) touches(q string) bool {
	if h.paths[q] || h.above[q] {
		return true
	}
	for p := q; p != ""; {
		if p, _ = splitPath(p); h.deep[p] {
			return true
		}
	}
	return false
}

// enterChange lets one operation that changes a name or its
// attributes through the gate; the caller calls the returned function
// when it is done. The operation changes name in dir a (aName "": node
// a itself) and, for a rename, bName in dir b too.
func (v *FS) enterChange(a *Node, aName string, b *Node, bName string) func() {
	for {
		v.gate.mu.RLock()
		h := v.gate.hold
		if h == nil || !v.touchesHold(h, a, aName, b, bName) {
			return v.gate.mu.RUnlock
		}
		v.gate.mu.RUnlock()
		if hook := changeWaitHook; hook != nil {
			hook()
		}
		<-h.done
	}
}

// enterChanges is enterChange for a change of each of names in dir.
func (v *FS) enterChanges(dir *Node, names []string) func() {
	for {
		v.gate.mu.RLock()
		h := v.gate.hold
		touched := false
		for _, name := range names {
			if h != nil && v.touchesHold(h, dir, name, nil, "") {
				touched = true
				break
			}
		}
		if !touched {
			return v.gate.mu.RUnlock
		}
		v.gate.mu.RUnlock()
		if hook := changeWaitHook; hook != nil {
			hook()
		}
		<-h.done
	}
}

// touchesHold reports whether the change of name in a (and in b)
// touches h: the paths are those of now.
func (v *FS) touchesHold(h *pathHold, a *Node, aName string, b *Node, bName string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, c := range []struct {
		n    *Node
		name string
	}{{a, aName}, {b, bName}} {
		if c.n == nil {
			continue
		}
		p, ok := c.n.pathLocked()
		if !ok {
			continue // out of the tree: no path of the merge's
		}
		if c.name != "" {
			p = joinPath(p, c.name)
		}
		if h.touches(p) {
			return true
		}
	}
	return false
}

// changeWaitHook, when set (tests), is called by an operation that is
// about to wait for a merge holding its path.
var changeWaitHook func()

// mergeCheckedHook, when set (tests), is called by ApplyMerge after its
// check, before its first change, with its paths held.
var mergeCheckedHook func()
