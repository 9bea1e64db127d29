package fs

import (
	"slices"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/agentfs/agentfs/overlay"
)

// maxNegatives bounds the negative entries the server remembers (to
// drop them from the kernel after a restore). Past it, negative lookups
// are not cached by the kernel at all, until the next restore.
const maxNegatives = 1 << 20

// noteNegative records that the kernel may cache "name is absent from
// directory dir" and reports whether it may: see Invalidate.
func (s *Server) noteNegative(dir uint64, name string) bool {
	s.negMu.Lock()
	defer s.negMu.Unlock()
	if s.negCount >= maxNegatives {
		return false
	}
	names := s.negatives[dir]
	if names == nil {
		names = map[string]struct{}{}
		s.negatives[dir] = names
	}
	if _, ok := names[name]; !ok {
		names[name] = struct{}{}
		s.negCount++
	}
	return true
}

// named drops the negative entry recorded for name in directory dir,
// if any, once a request made the name (a create, mkdir, mknod,
// symlink, link or rename to it): the kernel turned its dentry into a
// positive one, whose node the restore finds. So the record holds the
// names the kernel may cache as absent, not every name once looked up
// absent (a file made through the mount was looked up first), and a
// restore drops only those.
func (s *Server) named(dir uint64, name string) {
	s.negMu.Lock()
	if names := s.negatives[dir]; names != nil {
		if _, ok := names[name]; ok {
			delete(names, name)
			s.negCount--
			if len(names) == 0 {
				delete(s.negatives, dir)
			}
		}
	}
	s.negMu.Unlock()
}

// forgetNegatives drops what is recorded for a directory the kernel
// forgot.
func (s *Server) forgetNegatives(dir uint64) {
	s.negMu.Lock()
	s.negCount -= len(s.negatives[dir])
	delete(s.negatives, dir)
	s.negMu.Unlock()
}

// Invalidate drops everything the kernel cached about the view after
// overlay.FS.Reload or Restore: the names and attributes of the stale
// nodes, the attributes and listings of the directories kept (Kept),
// the names of those kept with one (a directory with many changes goes
// whole),
// the negative entries (after a Restore, only those of the names that
// changed in kept directories: the others stay recorded), and the
// root's attributes and listing. A node
// whose ancestor goes with its name (Below) needs nothing of its own:
// dropping a directory's name drops the names below it, and so do the
// negative entries of a directory whose name goes. So the
// notifications grow with what changed, batched by directory. It must
// be called with no lock of the view held (the kernel may wait for
// requests that need them).
func (s *Server) Invalidate(stale []overlay.Stale) {
	kernelID := func(n *overlay.Node) uint64 {
		if n == n.FS().Root() {
			return fuse.FUSE_ROOT_ID
		}
		return n.ID
	}
	if s.expireOnly && slices.ContainsFunc(stale, func(st overlay.Stale) bool { return st.Kept }) && s.invalidateExpiring(stale, kernelID) {
		return
	}
	gone := map[uint64]bool{} // directories whose names go, with what is below
	// After a Restore (Kept nodes), only the negative entries of the
	// names that changed in kept directories can be wrong.
	var kept map[uint64]map[string]bool
	for _, st := range stale {
		if st.Kept {
			if kept == nil {
				kept = map[uint64]map[string]bool{}
			}
			kept[kernelID(st.Node)] = st.Names
		}
		if st.Below {
			gone[st.Node.ID] = true
			continue
		}
		if st.Parent != nil {
			s.notifyEntry(kernelID(st.Parent), st.Name)
			gone[st.Node.ID] = true
		}
	}
	s.sweepNegatives(gone, func(dir uint64, name string) bool { return kept == nil || kept[dir][name] }, s.notifyEntry)
	for _, st := range stale {
		switch {
		case st.Kept:
			s.notifyInode(kernelID(st.Node), 0, 0)
		case !st.Below:
			s.dropInode(st.Node.ID)
		}
	}
	s.notifyInode(fuse.FUSE_ROOT_ID, 0, 0)
}

// sweepNegatives goes through the negative entries recorded, after a
// Reload or a Restore, and empties the record: those of the directories
// in gone are forgotten (they went with their directory); those changed
// reports as wrong now are dropped (drop); the others are still right
// and recorded again, to drop should the name appear later, or dropped
// now when the record is full.
func (s *Server) sweepNegatives(gone map[uint64]bool, changed func(dir uint64, name string) bool, drop func(dir uint64, name string)) {
	s.negMu.Lock()
	negs := s.negatives
	s.negatives, s.negCount = map[uint64]map[string]struct{}{}, 0
	s.negMu.Unlock()
	for dir, names := range negs {
		if gone[dir] {
			continue
		}
		for name := range names {
			if changed(dir, name) || !s.noteNegative(dir, name) {
				drop(dir, name)
			}
		}
	}
}

// dropInode drops what the kernel cached of a node cut loose from the
// view (a restore, a retired branch): its attributes and, without a
// writeback cache, its pages. With one, the pages stay: the kernel
// would first write the dirty ones back and wait for agentfs, on the
// thread that tells it, which may be the one that would serve the
// WRITEs. Nothing needs them gone: the name leads to a new node
// (a new kernel inode), and an open file keeps the file it opened.
func (s *Server) dropInode(id uint64) {
	if s.writeback {
		s.notifyInode(id, -1, 0)
		return
	}
	s.notifyInode(id, 0, 0)
}

// dropRoot drops what the kernel cached at the root: the names in the
// roots of the views, the negative entries there, and the root's
// attributes.
func (s *Server) dropRoot() {
	s.views.mu.Lock()
	views := make([]*overlay.FS, 0, len(s.views.views))
	for v, vs := range s.views.views {
		if !vs.retired.Load() {
			views = append(views, v)
		}
	}
	s.views.mu.Unlock()
	names := map[string]bool{}
	for _, v := range views {
		if ents, err := v.ReadDir(v.Root()); err == nil {
			for _, e := range ents {
				if e.Name != "." && e.Name != ".." {
					names[e.Name] = true
				}
			}
		}
	}
	s.negMu.Lock()
	for name := range s.negatives[fuse.FUSE_ROOT_ID] {
		names[name] = true
	}
	s.negMu.Unlock()
	for name := range names {
		if keepsMount(views, name) {
			// Something may be mounted over it (agentfs run --system):
			// invalidating its name would detach that mount.
			continue
		}
		s.notifyEntry(fuse.FUSE_ROOT_ID, name)
	}
	s.notifyInode(fuse.FUSE_ROOT_ID, 0, 0)
}

// keepsMount reports whether name in the root is, in every view, a
// sealed directory that shows its lower one (overlay.FS.KeepsMount).
func keepsMount(views []*overlay.FS, name string) bool {
	for _, v := range views {
		if !v.KeepsMountName(name) {
			return false
		}
	}
	return len(views) > 0
}

// notifyInode has the kernel drop what it cached of kernel node id: its
// attributes and, unless off is -1, its pages from off (length bytes, 0
// to the end), as fuse.Server.InodeNotify. notifyEntry has it drop name
// in directory parent. ENOENT says the kernel holds nothing of them:
// nothing to drop. Another failure (the connection is going away) is
// only logged: the kernel keeps what it cached for its lifetime, and
// nothing better can be done here.
func (s *Server) notifyInode(id uint64, off, length int64) {
	if st := s.srv.InodeNotify(id, off, length); st != fuse.OK && st != fuse.ENOENT {
		s.log.Debug("the kernel could not drop a node's cache", "node", id, "status", st)
	}
}

func (s *Server) notifyEntry(parent uint64, name string) {
	if st := s.srv.EntryNotify(parent, name); st != fuse.OK && st != fuse.ENOENT {
		s.log.Debug("the kernel could not drop a name", "dir", parent, "name", name, "status", st)
	}
}
