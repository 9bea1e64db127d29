package fs

import (
	"os"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// Kernel cache lifetimes. Everything below the root is branch-qualified,
// and agentfs tells the kernel when it changes something the kernel
// cached, so the timeouts can be long.
const (
	entryTimeout = time.Hour
	attrTimeout  = time.Hour
	negTimeout   = time.Hour
)

// linkedTimeout is how long the kernel keeps a name of a file with more
// than one link on a mount with a writeback cache. There the kernel
// takes no size from agentfs for a file it knows, so a project file
// edited from outside gets a new inode (the watcher cuts its node
// loose) and only the edited name is dropped from the kernel's cache:
// inotify names one link, and the kernel's other names of the file
// would show the old inode (its old size, link count 0) for as long as
// they are cached. A second bounds that, as for every lower edit.
const linkedTimeout = time.Second

// fillEntry answers a lookup-like request for node n.
// A name in the root (kernel node id parent) lives only as long as the
// root's lookups do not depend on the caller (see views.go).
func (s *Server) fillEntry(out *fuse.EntryOut, parent uint64, n *overlay.Node, st *unix.Stat_t) {
	ino := s.register(n)
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR && !ino.linked.Load() {
		ino.linked.Store(true)
	}
	out.NodeId = n.ID
	out.Generation = generation
	fillAttr(&out.Attr, st)
	timeout := entryTimeout
	if parent == fuse.FUSE_ROOT_ID {
		timeout = s.views.rootTimeout()
	}
	if s.writeback && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
		timeout = min(timeout, linkedTimeout)
	}
	out.SetEntryTimeout(timeout)
	out.SetAttrTimeout(attrTimeout)
}

func (s *Server) controlAttr(a *fuse.Attr) {
	now := uint64(time.Now().Unix())
	a.Ino = controlID
	a.Mode = unix.S_IFREG | 0600
	a.Nlink = 1
	a.Uid, a.Gid = s.uid, uint32(os.Getegid())
	a.Atime, a.Mtime, a.Ctime = now, now, now
}

func isControl(parent uint64, name string) bool {
	return parent == fuse.FUSE_ROOT_ID && name == ctl.ControlName
}

// Lookup implements fuse.RawFileSystem.
func (s *Server) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if isControl(h.NodeId, name) {
		if s.opts.Control == nil {
			return fuse.ENOENT
		}
		out.NodeId = controlID
		out.Generation = generation
		s.controlAttr(&out.Attr)
		return fuse.OK
	}
	if h.NodeId == fuse.FUSE_ROOT_ID {
		// The reply's lifetime must not outlive a change of mode (see
		// binder.rootChanged).
		s.views.rootMu.RLock()
		defer s.views.rootMu.RUnlock()
	}
	dir := s.inode(h, h.NodeId)
	if dir == nil {
		return fuse.ENOENT
	}
	n, st, err := dir.n.FS().Lookup(dir.n, name)
	if err == unix.ENOENT {
		// A negative entry: node id 0 with a lifetime (an ENOENT
		// error would not be cached).
		*out = fuse.EntryOut{}
		if (h.NodeId != fuse.FUSE_ROOT_ID || !s.views.active.Load()) && s.noteNegative(h.NodeId, name) {
			out.SetEntryTimeout(negTimeout)
		}
		// A check that found nothing is a read too (a record's
		// existence check of a missing path).
		s.record(h, OpLookup, dir.n, name)
		return fuse.OK
	}
	if err != nil {
		return errno(err)
	}
	s.fillEntry(out, h.NodeId, n, &st)
	s.record(h, OpLookup, dir.n, name)
	return fuse.OK
}

// Forget implements fuse.RawFileSystem.
func (s *Server) Forget(nodeid, nlookup uint64) {
	if nodeid == controlID || nodeid == fuse.FUSE_ROOT_ID {
		return
	}
	s.mu.Lock()
	ino := s.nodes[nodeid]
	s.mu.Unlock()
	if ino == nil {
		return
	}
	if ino.n.FS().Forget(ino.n, nlookup) {
		s.mu.Lock()
		if s.nodes[nodeid] == ino {
			delete(s.nodes, nodeid)
		}
		s.mu.Unlock()
		s.watch.remove(nodeid)
		s.forgetNegatives(nodeid)
	}
}
