package fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// GetXAttr implements fuse.RawFileSystem.
func (s *Server) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if h.NodeId == controlID {
		return 0, fuse.ENODATA
	}
	ino := s.inode(h, h.NodeId)
	if ino == nil {
		return 0, fuse.ENOENT
	}
	n, err := ino.n.FS().Getxattr(ino.n, attr, dest)
	if err == unix.ERANGE {
		n, err = ino.n.FS().Getxattr(ino.n, attr, nil)
		if err == nil {
			return uint32(n), fuse.ERANGE
		}
	}
	return uint32(n), errno(err)
}

// ListXAttr implements fuse.RawFileSystem.
func (s *Server) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	if h.NodeId == controlID {
		return 0, fuse.OK
	}
	ino := s.inode(h, h.NodeId)
	if ino == nil {
		return 0, fuse.ENOENT
	}
	n, err := ino.n.FS().Listxattr(ino.n, dest)
	if err == unix.ERANGE {
		n, err = ino.n.FS().Listxattr(ino.n, nil)
		if err == nil {
			return uint32(n), fuse.ERANGE
		}
	}
	return uint32(n), errno(err)
}

// SetXAttr implements fuse.RawFileSystem.
func (s *Server) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if in.NodeId == controlID {
		return fuse.EPERM
	}
	ino := s.inode(&in.InHeader, in.NodeId)
	if ino == nil {
		return fuse.ENOENT
	}
	err := s.recordErr(ino.n.FS().Setxattr(ino.n, attr, data, int(in.Flags)), &in.InHeader, OpSetxattr, ino.n, "")
	return errno(s.quotaErr(err, &in.InHeader, ino.n, ""))
}

// RemoveXAttr implements fuse.RawFileSystem.
func (s *Server) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	if h.NodeId == controlID {
		return fuse.EPERM
	}
	ino := s.inode(h, h.NodeId)
	if ino == nil {
		return fuse.ENOENT
	}
	return errno(s.recordErr(ino.n.FS().Removexattr(ino.n, attr), h, OpRemovexattr, ino.n, ""))
}
