package fs

import (
	"os"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// testCaller is a request header from this process as uid:gid (its
// supplementary groups are this test's).
func testCaller(uid, gid uint32) *fuse.InHeader {
	h := &fuse.InHeader{}
	h.Uid, h.Gid, h.Pid = uid, gid, uint32(os.Getpid())
	return h
}

func TestKilledMode(t *testing.T) {
	const reg = unix.S_IFREG
	for _, tc := range []struct {
		mode, fileGid uint32
		h             *fuse.InHeader
		want          uint32
	}{
		{reg | 06777, 0, testCaller(0, 0), reg | 06777},                      // root keeps both
		{reg | 06777, 5, testCaller(1000, 5), reg | 0777},                    // group execute: both go
		{reg | 06767, 5, testCaller(1000, 5), reg | 02767},                   // member, no group execute: setgid stays
		{reg | 06767, 1234567, testCaller(1000, 7), reg | 0767},              // not a member: setgid goes too
		{reg | 02767, 1234567, testCaller(1000, 7), reg | 0767},              // setgid alone
		{unix.S_IFDIR | 06777, 5, testCaller(1000, 7), unix.S_IFDIR | 06777}, // not a regular file
	} {
		if got := killedMode(tc.mode, tc.fileGid, tc.h); got != tc.want {
			t.Errorf("killedMode(%o, gid %d, caller %d:%d) = %o, want %o", tc.mode, tc.fileGid, tc.h.Uid, tc.h.Gid, got, tc.want)
		}
	}
}

// TestDroppedAndChownedMode: a write by a caller without CAP_FSETID
// (the kernel's KILL_SUIDGID flag: root too) and a chown (setuid always;
// setgid without group execute only for a non-member other than root).
func TestDroppedAndChownedMode(t *testing.T) {
	const reg = unix.S_IFREG
	for _, tc := range []struct {
		mode, fileGid    uint32
		h                *fuse.InHeader
		dropped, chowned uint32
	}{
		{reg | 06777, 0, testCaller(0, 0), reg | 0777, reg | 0777},                                 // root without CAP_FSETID; chown by root
		{reg | 06767, 1234567, testCaller(0, 0), reg | 0767, reg | 02767},                          // root keeps setgid without group execute at chown
		{reg | 06767, 5, testCaller(1000, 5), reg | 02767, reg | 02767},                            // member
		{reg | 06767, 1234567, testCaller(1000, 7), reg | 0767, reg | 0767},                        // not a member
		{reg | 0755, 5, testCaller(1000, 5), reg | 0755, reg | 0755},                               // nothing to clear
		{unix.S_IFDIR | 06777, 5, testCaller(1000, 7), unix.S_IFDIR | 06777, unix.S_IFDIR | 06777}, // a directory
		{unix.S_IFIFO | 06777, 5, testCaller(1000, 7), unix.S_IFIFO | 06777, unix.S_IFIFO | 0777},  // a write clears nothing but a chown does
	} {
		if got := droppedMode(tc.mode, tc.fileGid, tc.h); got != tc.dropped {
			t.Errorf("droppedMode(%o, gid %d, caller %d:%d) = %o, want %o", tc.mode, tc.fileGid, tc.h.Uid, tc.h.Gid, got, tc.dropped)
		}
		if got := chownedMode(tc.mode, tc.fileGid, tc.h); got != tc.chowned {
			t.Errorf("chownedMode(%o, gid %d, caller %d:%d) = %o, want %o", tc.mode, tc.fileGid, tc.h.Uid, tc.h.Gid, got, tc.chowned)
		}
	}
}

func TestDropsOnlySetid(t *testing.T) {
	for _, tc := range []struct {
		old, new uint32
		want     bool
	}{
		{06777, 02777, true},
		{06767, 02767, true},
		{06777, 0777, true},
		{06777, 06777, false}, // no change
		{0755, 0644, false},   // a chmod
		{04755, 0644, false},  // a chmod that also drops setuid
		{0755, 04755, false},  // adds a bit
	} {
		if got := dropsOnlySetid(unix.S_IFREG|tc.old, tc.new); got != tc.want {
			t.Errorf("dropsOnlySetid(%o, %o) = %v, want %v", tc.old, tc.new, got, tc.want)
		}
	}
}
