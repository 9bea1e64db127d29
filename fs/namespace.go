package fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

func (s *Server) dirOf(h *fuse.InHeader) (*inode, fuse.Status) {
	dir := s.inode(h, h.NodeId)
	if dir == nil {
		return nil, fuse.ENOENT
	}
	return dir, fuse.OK
}

// Mknod implements fuse.RawFileSystem.
func (s *Server) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if isControl(in.NodeId, name) {
		return fuse.Status(unix.EEXIST)
	}
	dir, st := s.dirOf(&in.InHeader)
	if st != fuse.OK {
		return st
	}
	n, attr, err := dir.n.FS().Mknod(dir.n, name, in.Mode, uint64(in.Rdev), caller(&in.InHeader))
	if err != nil {
		return errno(s.quotaErr(err, &in.InHeader, dir.n, name))
	}
	s.record(&in.InHeader, OpMknod, dir.n, name)
	s.named(in.NodeId, name)
	s.fillEntry(out, in.NodeId, n, &attr)
	return fuse.OK
}

// Mkdir implements fuse.RawFileSystem.
func (s *Server) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if isControl(in.NodeId, name) {
		return fuse.Status(unix.EEXIST)
	}
	dir, st := s.dirOf(&in.InHeader)
	if st != fuse.OK {
		return st
	}
	n, attr, err := dir.n.FS().Mkdir(dir.n, name, in.Mode, caller(&in.InHeader))
	if err != nil {
		return errno(s.quotaErr(err, &in.InHeader, dir.n, name))
	}
	s.record(&in.InHeader, OpMkdir, dir.n, name)
	s.named(in.NodeId, name)
	s.fillEntry(out, in.NodeId, n, &attr)
	return fuse.OK
}

// Symlink implements fuse.RawFileSystem.
func (s *Server) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	if isControl(h.NodeId, name) {
		return fuse.Status(unix.EEXIST)
	}
	dir, st := s.dirOf(h)
	if st != fuse.OK {
		return st
	}
	n, attr, err := dir.n.FS().Symlink(dir.n, name, target, caller(h))
	if err != nil {
		return errno(s.quotaErr(err, h, dir.n, name))
	}
	s.record(h, OpSymlink, dir.n, name)
	s.named(h.NodeId, name)
	s.fillEntry(out, h.NodeId, n, &attr)
	return fuse.OK
}

// Link implements fuse.RawFileSystem.
func (s *Server) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if isControl(in.NodeId, name) {
		return fuse.Status(unix.EEXIST)
	}
	if in.Oldnodeid == controlID {
		return fuse.EPERM
	}
	dir, st := s.dirOf(&in.InHeader)
	if st != fuse.OK {
		return st
	}
	src := s.inode(&in.InHeader, in.Oldnodeid)
	if src == nil {
		return fuse.ENOENT
	}
	if src.vs != dir.vs {
		return fuse.Status(unix.EXDEV) // a file of another branch
	}
	attr, err := src.n.FS().Link(src.n, dir.n, name)
	if s.recordRename(err, &in.InHeader, OpLink, src.n, "", dir.n, name, "") != nil {
		return errno(s.quotaErr(err, &in.InHeader, dir.n, name))
	}
	s.named(in.NodeId, name)
	s.fillEntry(out, in.NodeId, src.n, &attr)
	return fuse.OK
}

// Unlink implements fuse.RawFileSystem.
func (s *Server) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if isControl(h.NodeId, name) {
		return fuse.EPERM
	}
	dir, st := s.dirOf(h)
	if st != fuse.OK {
		return st
	}
	return errno(s.recordErr(dir.n.FS().Unlink(dir.n, name), h, OpUnlink, dir.n, name))
}

// Rmdir implements fuse.RawFileSystem.
func (s *Server) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if isControl(h.NodeId, name) {
		return fuse.ENOTDIR
	}
	dir, st := s.dirOf(h)
	if st != fuse.OK {
		return st
	}
	return errno(s.recordErr(dir.n.FS().Rmdir(dir.n, name), h, OpRmdir, dir.n, name))
}

// Rename implements fuse.RawFileSystem.
func (s *Server) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if isControl(in.NodeId, oldName) || isControl(in.Newdir, newName) {
		return fuse.EPERM
	}
	odir, st := s.dirOf(&in.InHeader)
	if st != fuse.OK {
		return st
	}
	ndir := s.inode(&in.InHeader, in.Newdir)
	if ndir == nil {
		return fuse.ENOENT
	}
	if odir.vs != ndir.vs {
		return fuse.Status(unix.EXDEV) // a directory of another branch
	}
	attrs := ""
	if in.Flags&unix.RENAME_EXCHANGE != 0 {
		attrs = RenameExchanged
	}
	err := s.recordRename(odir.n.FS().Rename(odir.n, oldName, ndir.n, newName, in.Flags), &in.InHeader, OpRename, odir.n, oldName, ndir.n, newName, attrs)
	if err == nil {
		s.named(in.Newdir, newName)
	}
	return errno(s.quotaErr(err, &in.InHeader, odir.n, oldName))
}

// Readlink implements fuse.RawFileSystem.
func (s *Server) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	ino := s.inode(h, h.NodeId)
	if ino == nil {
		return nil, fuse.ENOENT
	}
	t, err := ino.n.FS().Readlink(ino.n)
	if err != nil {
		return nil, errno(err)
	}
	return []byte(t), fuse.OK
}
