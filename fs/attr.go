package fs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/overlay"
)

func fillAttr(a *fuse.Attr, st *unix.Stat_t) {
	a.Ino = st.Ino
	a.Size = uint64(st.Size)
	a.Blocks = uint64(st.Blocks)
	a.Atime, a.Atimensec = uint64(st.Atim.Sec), uint32(st.Atim.Nsec)
	a.Mtime, a.Mtimensec = uint64(st.Mtim.Sec), uint32(st.Mtim.Nsec)
	a.Ctime, a.Ctimensec = uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec)
	a.Mode = st.Mode
	a.Nlink = uint32(st.Nlink)
	a.Uid, a.Gid = st.Uid, st.Gid
	a.Rdev = uint32(st.Rdev)
	a.Blksize = uint32(st.Blksize)
}

// GetAttr implements fuse.RawFileSystem.
func (s *Server) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.NodeId == controlID {
		s.controlAttr(&out.Attr)
		return fuse.OK
	}
	ino := s.inode(&in.InHeader, in.NodeId)
	if ino == nil {
		return fuse.ENOENT
	}
	st, err := ino.n.FS().Getattr(ino.n)
	if err != nil {
		return errno(err)
	}
	fillAttr(&out.Attr, &st)
	out.SetTimeout(s.attrTimeout(in.NodeId))
	return fuse.OK
}

// attrTimeout is the lifetime of the attributes of kernel node id: the
// root's depend on the caller while processes are bound.
func (s *Server) attrTimeout(id uint64) time.Duration {
	if id == fuse.FUSE_ROOT_ID && s.views.active.Load() {
		return 0
	}
	return attrTimeout
}

// SetAttr implements fuse.RawFileSystem.
func (s *Server) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.NodeId == controlID {
		return fuse.EPERM
	}
	ino := s.inode(&in.InHeader, in.NodeId)
	if ino == nil {
		return fuse.ENOENT
	}
	// chown(-1, -1) comes without any attribute: it changes only ctime.
	const attrBits = fuse.FATTR_MODE | fuse.FATTR_UID | fuse.FATTR_GID | fuse.FATTR_SIZE |
		fuse.FATTR_ATIME | fuse.FATTR_MTIME | fuse.FATTR_ATIME_NOW | fuse.FATTR_MTIME_NOW
	var sa overlay.SetAttr
	if u, ok := in.GetUID(); ok {
		sa.Uid = &u
	}
	if g, ok := in.GetGID(); ok {
		sa.Gid = &g
	}
	// kill is the rule of the setid bits this request clears, which the
	// kernel leaves to agentfs with killpriv v2 (killpriv.go): those of a
	// chown (the attribute-less request is also the kernel's before a
	// write), or of a truncate by a caller without CAP_FSETID. They are
	// cleared after the request, from the attributes it leaves; a
	// non-root chown needs the group before it.
	var kill func(mode, gid uint32, h *fuse.InHeader) uint32
	var oldGid *uint32
	if m, ok := in.GetMode(); ok {
		if !s.killprivV2 {
			// Only the owner may chmod (the kernel checks): a mode
			// change by another user is the kernel clearing setuid
			// for a write or truncate; complete it (killpriv.go).
			if st, err := ino.n.FS().Getattr(ino.n); err == nil && dropsOnlySetid(st.Mode, m) {
				if h := procCaller(&in.InHeader); h.Uid != 0 && st.Uid != h.Uid {
					m = killedMode(st.Mode&unix.S_IFMT|m&07777, st.Gid, h) & 07777
				}
			}
		}
		sa.Mode = &m
	} else if s.killprivV2 {
		switch {
		case sa.Uid != nil || sa.Gid != nil || in.Valid&attrBits == 0:
			kill = chownedMode
			if in.Uid != 0 && sa.Gid != nil {
				if st, err := ino.n.FS().Getattr(ino.n); err == nil {
					oldGid = &st.Gid
				}
			}
		case in.Valid&fuse.FATTR_KILL_SUIDGID != 0:
			kill = droppedMode
		}
	}
	if sz, ok := in.GetSize(); ok {
		sa.Size = &sz
	}
	if in.Valid&fuse.FATTR_ATIME != 0 {
		ts := unix.Timespec{Sec: int64(in.Atime), Nsec: int64(in.Atimensec)}
		if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
			ts = unix.Timespec{Nsec: unix.UTIME_NOW}
		}
		sa.Atime = &ts
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		ts := unix.Timespec{Sec: int64(in.Mtime), Nsec: int64(in.Mtimensec)}
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			ts = unix.Timespec{Nsec: unix.UTIME_NOW}
		}
		sa.Mtime = &ts
	}
	sa.Ctime = in.Valid&fuse.FATTR_CTIME != 0 || in.Valid&attrBits == 0
	var f *overlay.File
	if fh, ok := in.GetFh(); ok {
		if h := s.handle(fh); h != nil {
			f = h.f
		}
	}
	st, err := ino.n.FS().Setattr(ino.n, sa, f)
	if err != nil {
		return errno(s.quotaErr(err, &in.InHeader, ino.n, ""))
	}
	if kill != nil && st.Mode&setidBits != 0 {
		gid := st.Gid
		if oldGid != nil {
			gid = *oldGid
		}
		if m := kill(st.Mode, gid, procCaller(&in.InHeader)); m != st.Mode {
			perm := m & 07777
			if st, err = ino.n.FS().Setattr(ino.n, overlay.SetAttr{Mode: &perm}, f); err != nil {
				return errno(err)
			}
		}
	}
	s.recordSetattr(in, ino.n)
	fillAttr(&out.Attr, &st)
	out.SetTimeout(s.attrTimeout(in.NodeId))
	return fuse.OK
}

// Access implements fuse.RawFileSystem. With default_permissions the
// kernel checks permissions itself and does not ask.
func (s *Server) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	return fuse.OK
}
