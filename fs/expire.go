package fs

import (
	"encoding/binary"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/overlay"
)

// After a Restore the kernel is told only that names expired, not to
// drop them (FUSE_NOTIFY_INVAL_ENTRY with FUSE_EXPIRE_ONLY, Linux 6.2):
// one cheap notification per changed name, and none below a directory
// whose name changed. The kernel checks an expired name again at its
// next use (a LOOKUP): a name whose node was cut loose answers with a
// new node, or ENOENT, and only then does the kernel drop the old
// dentry and what it cached below it. So the restore's cost in the
// kernel grows with the names that changed, not with what the kernel
// cached of them, and what was cached of a tree nobody looks at again
// goes with the kernel's own reclaim. (Dropping a directory's name at
// once, as Invalidate does otherwise, makes the kernel evict its whole
// cached subtree within the notification: about 3 µs a cached name
// here, 0.5 s for 150,000.)
//
// A process whose working directory (or an open directory) is one the
// restore cut loose lists it empty, as before; the names it had looked
// up there before the restore, and that the kernel still caches, lead
// it to the old files (read-only where the safety snapshot shares
// them), as a file it had open does, until it leaves the directory.

// notifyInvalEntry is FUSE_NOTIFY_INVAL_ENTRY's code in the out
// header's error field; notifyExpireOnly its flag.
const (
	notifyInvalEntry = 3
	notifyExpireOnly = 1
)

// canExpire reports whether the kernel takes FUSE_EXPIRE_ONLY.
func canExpire(ks *fuse.InitIn) bool {
	return ks.Flags64()&fuse.CAP_HAS_EXPIRE_ONLY != 0
}

// expirer writes FUSE_EXPIRE_ONLY entry notifications to /dev/fuse,
// each one write of one message (as the kernel reads them).
type expirer struct {
	fd  int
	buf []byte
}

// newExpirer opens a descriptor of the connection for s's notifications
// (go-fuse writes no flags in its own).
func (s *Server) newExpirer() (*expirer, error) {
	fd, err := fuseDevFd(s.srv)
	if err != nil {
		return nil, err
	}
	return &expirer{fd: fd}, nil
}

func (e *expirer) close() { unix.Close(e.fd) }

// expire has the kernel expire name in directory parent (a kernel
// node id). ENOENT says the kernel caches nothing there: nothing to
// expire.
func (e *expirer) expire(parent uint64, name string) error {
	const hdr = int(unsafe.Sizeof(fuse.OutHeader{})) + int(unsafe.Sizeof(fuse.NotifyInvalEntryOut{}))
	n := hdr + len(name) + 1
	if cap(e.buf) < n {
		e.buf = make([]byte, n, n+256)
	}
	b := e.buf[:n]
	// fuse_out_header: len, error (the notification's code), unique 0.
	binary.NativeEndian.PutUint32(b[0:], uint32(n))
	binary.NativeEndian.PutUint32(b[4:], notifyInvalEntry)
	binary.NativeEndian.PutUint64(b[8:], 0)
	// fuse_notify_inval_entry_out: parent, namelen, flags; the name and
	// its NUL.
	binary.NativeEndian.PutUint64(b[16:], parent)
	binary.NativeEndian.PutUint32(b[24:], uint32(len(name)))
	binary.NativeEndian.PutUint32(b[28:], notifyExpireOnly)
	copy(b[hdr:], name)
	b[n-1] = 0
	for {
		_, err := unix.Write(e.fd, b)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ENOENT {
			return nil
		}
		return err
	}
}

// invalidateExpiring is Invalidate after a Restore on a kernel that
// takes FUSE_EXPIRE_ONLY: the changed names of the kept directories and
// the names of the nodes cut loose (but those below another one) are
// expired; the kept directories' attributes and listings dropped, and
// the attributes of cut nodes that are open or directories (with their
// listings). It reports false, having
// told the kernel nothing, when it cannot write the notifications.
func (s *Server) invalidateExpiring(stale []overlay.Stale, kernelID func(*overlay.Node) uint64) bool {
	e, err := s.newExpirer()
	if err != nil {
		s.log.Debug("expiring names: no descriptor of the connection", "err", err)
		return false
	}
	defer e.close()
	expire := func(parent uint64, name string) {
		if err := e.expire(parent, name); err != nil {
			// As notifyEntry: the connection is going away.
			s.log.Debug("the kernel could not expire a name", "dir", parent, "name", name, "err", err)
		}
	}
	gone := map[uint64]bool{} // nodes cut loose: their negative entries go with them
	kept := map[uint64]map[string]bool{}
	for _, st := range stale {
		switch {
		case st.Kept:
			id := kernelID(st.Node)
			kept[id] = st.Names
			for name := range st.Names {
				expire(id, name)
			}
		case st.Parent != nil && !st.BelowCut:
			expire(kernelID(st.Parent), st.Name)
			gone[st.Node.ID] = true
		default:
			gone[st.Node.ID] = true
		}
	}
	// The negative entries of changed names were expired with them.
	changed := func(dir uint64, name string) bool { return kept[dir][name] }
	s.sweepNegatives(gone, changed, func(dir uint64, name string) {
		if !changed(dir, name) {
			expire(dir, name)
		}
	})
	for _, st := range stale {
		switch {
		case st.Kept:
			s.notifyInode(kernelID(st.Node), 0, 0)
		case st.Open || st.Node.IsDir() && !st.BelowCut:
			// The attributes of a file held open (nlink goes to 0), and
			// of a directory someone may be in, with its listing.
			s.dropInode(st.Node.ID)
		}
	}
	s.notifyInode(fuse.FUSE_ROOT_ID, 0, 0)
	return true
}
