package fs

import (
	"encoding/binary"
	"errors"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/fs/fuseuring"
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
// Only names the kernel may hold are named (invalidateExpiring), and
// the notifications go to the kernel a batch to a system call, through
// a ring of their own (fuseuring.Writer: 1.0-1.5 µs of CPU each here,
// against 1.7-1.9 µs with one write(2) each). Two threads, each with
// the names of its own directories, were no faster on this 2-core
// machine.
//
// A process whose working directory (or an open directory) is one the
// restore cut loose lists it empty, as before; the names it had looked
// up there before the restore, and that the kernel still caches, lead
// it to the old files (read-only where the safety snapshot shares
// them), as a file it had open does, until it leaves the directory.
// Cutting loose a kept directory in which many names changed, to name
// it alone, would leave a process in it the same: its cached names
// would still lead to the old files, so each of them would need a
// notification all the same.

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

// expiry is a name to expire: name in the directory of kernel node id
// dir.
type expiry struct {
	dir  uint64
	name string
}

// expirer writes FUSE_EXPIRE_ONLY entry notifications to /dev/fuse,
// each one message as the kernel reads them: through a ring of its own
// (fuseuring.Writer), a batch to a system call, or where io_uring is
// not available one write(2) each. One goroutine uses it.
type expirer struct {
	s   *Server
	fd  int
	w   *fuseuring.Writer // nil: write(2)
	buf []byte
}

// newExpirer opens a descriptor of the connection for s's notifications
// (go-fuse writes no flags in its own).
func (s *Server) newExpirer() (*expirer, error) {
	fd, err := fuseDevFd(s.srv)
	if err != nil {
		return nil, err
	}
	return &expirer{s: s, fd: fd}, nil
}

// ringExpiry is the number of names from which an expirer writes them
// through a ring: below it, making the ring costs more than the system
// calls it saves.
const ringExpiry = 64

// useRing has e write what follows through a ring, where io_uring is
// available.
func (e *expirer) useRing() {
	if noExpireRing || e.w != nil {
		return
	}
	w, err := fuseuring.NewWriter(e.fd, e.failed)
	if err != nil {
		e.s.log.Debug("expiring names one write(2) each: no ring", "err", err)
		return
	}
	e.w = w
}

// noExpireRing has expirers write each notification with write(2)
// (tests).
var noExpireRing = false

// flush hands the kernel the notifications queued. A ring that fails
// is given up: the rest go by write(2).
func (e *expirer) flush() {
	if e.w == nil {
		return
	}
	if err := e.w.Flush(); err != nil {
		e.s.log.Debug("expiring names: the ring failed, writing them one by one", "err", err)
		e.w.Close()
		e.w = nil
	}
}

// close flushes what is queued and closes e.
func (e *expirer) close() {
	e.flush()
	if e.w != nil {
		e.w.Close()
	}
	unix.Close(e.fd)
}

// notifyEntryHeader is the size of a FUSE_NOTIFY_INVAL_ENTRY message
// before its name.
const notifyEntryHeader = int(unsafe.Sizeof(fuse.OutHeader{})) + int(unsafe.Sizeof(fuse.NotifyInvalEntryOut{}))

// failed is told of a notification the kernel refused. ENOENT says the
// kernel caches nothing there: nothing to expire. Another error says
// the connection is going away (as notifyEntry).
func (e *expirer) failed(msg []byte, err unix.Errno) {
	if err == unix.ENOENT || len(msg) <= notifyEntryHeader {
		return
	}
	parent := binary.NativeEndian.Uint64(msg[16:])
	e.s.log.Debug("the kernel could not expire a name", "dir", parent, "name", string(msg[notifyEntryHeader:len(msg)-1]), "err", err)
}

// expire has the kernel expire name in directory parent (a kernel
// node id), now or at the next flush.
func (e *expirer) expire(parent uint64, name string) {
	n := notifyEntryHeader + len(name) + 1
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
	copy(b[notifyEntryHeader:], name)
	b[n-1] = 0
	if e.w != nil {
		err := e.w.Write(b)
		if err != nil {
			e.flush() // gives the ring up
			if e.w != nil {
				err = e.w.Write(b)
			}
		}
		if err == nil && e.w != nil {
			return
		}
	}
	for {
		_, err := unix.Write(e.fd, b)
		if err == unix.EINTR {
			continue
		}
		var errno unix.Errno
		if errors.As(err, &errno) {
			e.failed(b, errno)
		}
		return
	}
}

// invalidateExpiring is Invalidate after a Restore on a kernel that
// takes FUSE_EXPIRE_ONLY. It expires only names the kernel may hold:
//
//   - the name of each node cut loose that the kernel knows (it holds
//     a lookup reference: a dentry holds one), but those below another
//     one;
//   - the negative entries recorded (noteNegative) of the names that
//     changed in kept directories: a name the restore brings back may
//     be cached as absent, with no node;
//   - every changed name of the kept directories when a node cut loose
//     may have names other than the one its overlay.Node tracks (the
//     kernel was given it with more than one link): which they are is
//     not known here.
//
// A changed name of a kept directory is otherwise the name of a node
// (cut loose, so expired above, or a directory kept with the same node,
// whose attributes are dropped) or one the kernel holds nothing of. The
// kept directories' attributes and listings are dropped, and the
// attributes of cut nodes that are open or directories (with their
// listings). It reports false, having told the kernel nothing, when it
// cannot write the notifications.
func (s *Server) invalidateExpiring(stale []overlay.Stale, kernelID func(*overlay.Node) uint64) bool {
	start := time.Now()
	e, err := s.newExpirer()
	if err != nil {
		s.log.Debug("expiring names: no descriptor of the connection", "err", err)
		return false
	}
	gone := map[uint64]bool{} // directories cut loose: their negative entries go with them
	kept := map[uint64]map[string]bool{}
	list := make([]expiry, 0, len(stale))
	linked := false
	s.mu.Lock()
	for _, st := range stale {
		if st.Kept {
			kept[kernelID(st.Node)] = st.Names
			continue
		}
		if st.Node.IsDir() {
			gone[st.Node.ID] = true
		}
		ino := s.nodes[st.Node.ID]
		if ino == nil {
			continue // the kernel holds no name of it
		}
		linked = linked || ino.linked.Load()
		if st.Parent != nil && !st.BelowCut {
			list = append(list, expiry{kernelID(st.Parent), st.Name})
		}
	}
	s.mu.Unlock()
	if linked {
		expired := make(map[expiry]bool, len(list))
		for _, x := range list {
			expired[x] = true
		}
		for dir, names := range kept {
			for name := range names {
				if x := (expiry{dir, name}); !expired[x] {
					list = append(list, x)
				}
			}
		}
	}
	// The negative entries of changed names; with linked, those are in
	// the list already.
	changed := func(dir uint64, name string) bool { return kept[dir][name] }
	s.sweepNegatives(gone, changed, func(dir uint64, name string) {
		if !linked || !changed(dir, name) {
			list = append(list, expiry{dir, name})
		}
	})
	if len(list) >= ringExpiry {
		e.useRing()
	}
	for _, x := range list {
		e.expire(x.dir, x.name)
	}
	e.close()
	expireTook := time.Since(start)
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
	s.log.Debug("the kernel told of a restore", "names expired", len(list), "every changed name", linked, "expiring took", expireTook, "took", time.Since(start))
	return true
}
