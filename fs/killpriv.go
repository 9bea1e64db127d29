package fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/procfs"
)

// A write or truncate by a process without CAP_FSETID clears the
// file's setuid bit, and its setgid bit when group execute is set or
// the process is not in the file's group (setattr_should_drop_sgid).
// A chown (of anything but a directory, even chown(-1, -1)) clears
// setuid whoever makes it, and setgid as a write does, except that the
// caller's CAP_FSETID keeps a setgid bit without group execute. Where
// the kernel does not say whether the caller has CAP_FSETID, root
// callers stand for it.
//
// agentfs negotiates FUSE_HANDLE_KILLPRIV_V2. The kernel then marks an
// inode S_NOSEC once it has seen it without setid bits and without
// security.capability, and stops asking for security.capability before
// each write(2): without it, every write costs a GETXATTR round trip.
// In exchange it no longer computes the cleared mode itself: before a
// write (passed through or not), a fallocate or a copy_file_range that
// must clear bits, and at a chown, it sends a SETATTR without any
// attribute (the same request as chown(-1, -1)), and agentfs clears
// what a chown by the caller clears; a truncate by a caller without
// CAP_FSETID carries FATTR_KILL_SUIDGID, and an O_TRUNC open
// OPEN_KILL_SUIDGID. Without v2 (older kernels), the kernel sends the
// new mode, computed by the older rule, and agentfs completes it.
//
// Not as on a native filesystem: a write by root (CAP_FSETID) to a file
// that has both a setid bit and security.capability clears the setid
// bit too (the kernel's request to remove the capability is the same
// attribute-less SETATTR).

// setidBits are the bits a write clears.
const setidBits = unix.S_ISUID | unix.S_ISGID

// killedMode returns mode with the bits a write by the caller clears
// (root stands for CAP_FSETID).
func killedMode(mode, fileGid uint32, h *fuse.InHeader) uint32 {
	if h.Uid == 0 {
		return mode
	}
	return droppedMode(mode, fileGid, h)
}

// droppedMode returns mode with the bits a write by a caller without
// CAP_FSETID clears.
func droppedMode(mode, fileGid uint32, h *fuse.InHeader) uint32 {
	if mode&unix.S_IFMT != unix.S_IFREG {
		return mode
	}
	mode &^= unix.S_ISUID
	if mode&unix.S_ISGID != 0 && (mode&unix.S_IXGRP != 0 || !inGroup(h, fileGid)) {
		mode &^= unix.S_ISGID
	}
	return mode
}

// chownedMode returns mode with the bits a chown by the caller clears
// (of anything but a directory).
func chownedMode(mode, fileGid uint32, h *fuse.InHeader) uint32 {
	if mode&unix.S_IFMT == unix.S_IFDIR {
		return mode
	}
	mode &^= unix.S_ISUID
	if mode&unix.S_ISGID != 0 && (mode&unix.S_IXGRP != 0 || h.Uid != 0 && !inGroup(h, fileGid)) {
		mode &^= unix.S_ISGID
	}
	return mode
}

// dropsOnlySetid reports whether changing mode old to new only clears
// setuid or setgid bits: the shape of the kernel's request.
func dropsOnlySetid(old, new uint32) bool {
	old, new = old&07777, new&07777
	return old != new && new&^old == 0 && (old^new)&^(unix.S_ISUID|unix.S_ISGID) == 0
}

// inGroup reports whether the calling process is in group gid: its
// fsgid, or one of its supplementary groups.
func inGroup(h *fuse.InHeader, gid uint32) bool {
	if h.Gid == gid {
		return true
	}
	groups, err := procfs.Groups(int(h.Pid))
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g == gid {
			return true
		}
	}
	return false
}

// procCaller returns h, or for a request that names root as its caller,
// the filesystem uid and gid of the calling process: the kernel sends
// the SETATTR that clears setuid after a passthrough write with root's
// credentials.
func procCaller(h *fuse.InHeader) *fuse.InHeader {
	if h.Uid != 0 || h.Pid == 0 {
		return h
	}
	v, err := procfs.Status(int(h.Pid), "Uid", "Gid")
	if err != nil {
		return h
	}
	uids, err1 := procfs.ParseIDs(v[0])
	gids, err2 := procfs.ParseIDs(v[1])
	if err1 != nil || err2 != nil || len(uids) < 4 || len(gids) < 4 {
		return h
	}
	c := *h
	c.Uid, c.Gid = uids[3], gids[3] // real, effective, saved, fs
	return &c
}

// killPrivs clears the bits rule(mode, gid, h) clears from n (kernel
// node id) and, when it changed them, drops the kernel's cached mode.
func (s *Server) killPrivs(n *overlay.Node, h *fuse.InHeader, rule func(mode, gid uint32, h *fuse.InHeader) uint32) error {
	st, err := n.FS().Getattr(n)
	if err != nil {
		return err
	}
	m := rule(st.Mode, st.Gid, h)
	if m == st.Mode {
		return nil
	}
	perm := m & 07777
	if _, err = n.FS().Setattr(n, overlay.SetAttr{Mode: &perm}, nil); err != nil {
		return err
	}
	s.notifyInode(n.ID, -1, 0) // attributes only
	return nil
}
