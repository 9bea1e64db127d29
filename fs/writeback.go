package fs

import (
	"encoding/binary"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/overlay"
)

// WritebackCache reports whether the kernel holds writes in its page
// cache before it sends them (Options.WritebackCache, granted).
func (s *Server) WritebackCache() bool { return s.writeback }

// WriteBack has the kernel send what it holds of writes to the mount
// and returns when agentfs has them: before a control request or an
// automatic snapshot reads the view's files. Without a writeback cache
// it does nothing.
//
// syncfs(2) is no barrier on a FUSE mount (the kernel neither waits for
// the WRITEs it starts nor asks the server), but fsync(2) of a file is:
// it waits for every WRITE of the inode. Every inode with cached writes
// has a handle open for writing (the kernel writes a file back before
// its RELEASE), so WriteBack opens each such inode by its handle
// (open_by_handle_at: node id and generation, as the kernel encodes a
// FUSE file handle) and fsyncs it. The FSYNCs this thread causes are
// answered at once: they are barriers, not requests for durability.
// It must run on no thread that serves requests, with no lock held
// that serving a WRITE takes.
func (s *Server) WriteBack() error {
	if !s.writeback {
		return nil
	}
	var nodes []*overlay.Node
	seen := map[uint64]bool{}
	s.mu.Lock()
	for _, h := range s.files {
		if n := h.ino.n; !h.pt && h.f.Writable() && !seen[n.ID] {
			seen[n.ID] = true
			nodes = append(nodes, n)
		}
	}
	s.mu.Unlock()
	if len(nodes) == 0 {
		return nil
	}
	mfd, err := unix.Open(s.opts.Mountpoint, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := uint32(unix.Gettid())
	s.barriers.Store(tid, true)
	defer s.barriers.Delete(tid)
	var first error
	for _, n := range nodes {
		id := n.ID
		fh := make([]byte, 12)
		binary.NativeEndian.PutUint32(fh[0:], uint32(id>>32))
		binary.NativeEndian.PutUint32(fh[4:], uint32(id))
		binary.NativeEndian.PutUint32(fh[8:], generation)
		fd, err := openByHandle(mfd, unix.NewFileHandle(fuseFileHandle, fh), unix.O_RDONLY|unix.O_CLOEXEC)
		if err == unix.EPERM {
			// open_by_handle_at needs CAP_DAC_READ_SEARCH: a daemon
			// that is not root opens the file by its name, where the
			// mount's root shows its branch.
			fd, err = s.openByPath(mfd, n)
		}
		if err == unix.ESTALE || err == unix.ENOENT {
			continue // the kernel forgot the inode, or the name is gone with nothing cached under it
		}
		if err == nil {
			err = unix.Fsync(fd)
			unix.Close(fd)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("writing back node %d: %w", id, err)
		}
	}
	return first
}

// openByPath opens node n through the mount by its path, for WriteBack
// without the privilege to open it by handle: only a node of the view
// unbound processes see (the one the daemon sees at the root); ENOENT
// for others.
func (s *Server) openByPath(mfd int, n *overlay.Node) (int, error) {
	v := n.FS()
	if s.views.def.Load().view != v {
		return -1, unix.ENOENT
	}
	p, ok := v.Path(n)
	if !ok || p == "" {
		return -1, unix.ENOENT
	}
	fd, err := unix.Openat(mfd, p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.EACCES {
		fd, err = unix.Openat(mfd, p, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	return fd, err
}

// barrier reports whether thread tid is a WriteBack's.
func (s *Server) barrier(tid uint32) bool {
	_, ok := s.barriers.Load(tid)
	return ok
}

// openByHandle is open_by_handle_at(2); tests make it refuse.
var openByHandle = unix.OpenByHandleAt

// fuseFileHandle is the type of the file handles the kernel makes for
// FUSE inodes (fuse_encode_fh in fs/fuse/inode.c).
const fuseFileHandle = 0x81
