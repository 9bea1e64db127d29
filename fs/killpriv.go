package fs

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/overlay"
)

// A write or truncate by a process without CAP_FSETID clears the
// file's setuid bit, and its setgid bit when group execute is set or
// the process is not in the file's group (setattr_should_drop_sgid).
// The kernel's FUSE code applies the older rule (setgid only with group
// execute), and an open with O_TRUNC (atomic in FUSE) clears nothing:
// agentfs completes both here. Root callers stand for CAP_FSETID.

// killedMode returns mode with the bits such a caller's write clears.
func killedMode(mode, fileGid uint32, h *fuse.InHeader) uint32 {
	if mode&unix.S_IFMT != unix.S_IFREG || h.Uid == 0 {
		return mode
	}
	mode &^= unix.S_ISUID
	if mode&unix.S_ISGID != 0 && (mode&unix.S_IXGRP != 0 || !inGroup(h, fileGid)) {
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
	groups, err := procGroups(h.Pid)
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
	ids, err := procStatus(h.Pid, "Uid:", "Gid:")
	if err != nil || len(ids[0]) < 4 || len(ids[1]) < 4 {
		return h
	}
	c := *h
	c.Uid, c.Gid = ids[0][3], ids[1][3] // real, effective, saved, fs
	return &c
}

// procGroups reads the supplementary groups of process (or thread) pid.
func procGroups(pid uint32) ([]uint32, error) {
	ids, err := procStatus(pid, "Groups:")
	if err != nil {
		return nil, err
	}
	return ids[0], nil
}

// procStatus reads lines of numbers from /proc/PID/status, one per key.
func procStatus(pid uint32, keys ...string) ([][]uint32, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make([][]uint32, len(keys))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for i, k := range keys {
			rest, ok := strings.CutPrefix(sc.Text(), k)
			if !ok {
				continue
			}
			for _, w := range strings.Fields(rest) {
				v, err := strconv.ParseUint(w, 10, 32)
				if err != nil {
					return nil, fmt.Errorf("/proc/%d/status: %s %q", pid, k, rest)
				}
				out[i] = append(out[i], uint32(v))
			}
		}
	}
	return out, sc.Err()
}

// killPrivsAfterTrunc clears what an O_TRUNC open by the caller clears.
func (s *Server) killPrivsAfterTrunc(n *overlay.Node, h *fuse.InHeader) error {
	st, err := n.FS().Getattr(n)
	if err != nil {
		return err
	}
	if m := killedMode(st.Mode, st.Gid, h); m != st.Mode {
		perm := m & 07777
		_, err = n.FS().Setattr(n, overlay.SetAttr{Mode: &perm}, nil)
	}
	return err
}
