package fs

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
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

// TestProcCallerAndGroups: a request that names root as its caller is
// the calling process's filesystem ids, and group membership counts its
// supplementary groups (both read from /proc/PID/status).
func TestProcCallerAndGroups(t *testing.T) {
	testenv.RequireRoot(t, "starting a process as another user")
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4321, Gid: 4322, Groups: []uint32{4323, 4324}}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cmd.Process.Kill(); err != nil {
			t.Errorf("killing sleep: %v", err)
		}
		_ = cmd.Wait() // reports the kill
	})
	h := &fuse.InHeader{}
	h.Pid = uint32(cmd.Process.Pid)
	c := procCaller(h)
	if c.Uid != 4321 || c.Gid != 4322 {
		t.Errorf("procCaller(root, pid %d) = %d:%d, want 4321:4322", h.Pid, c.Uid, c.Gid)
	}
	if h.Uid != 0 || h.Gid != 0 {
		t.Errorf("procCaller changed the request's header to %d:%d", h.Uid, h.Gid)
	}
	for gid, want := range map[uint32]bool{4322: true, 4323: true, 4324: true, 4325: false} {
		if got := inGroup(c, gid); got != want {
			t.Errorf("inGroup(pid %d, %d) = %v, want %v", h.Pid, gid, got, want)
		}
	}
	// A caller other than root, or a request without a pid, is left as
	// it is.
	other := testCaller(1000, 1000)
	if c := procCaller(other); c != other {
		t.Errorf("procCaller(1000:1000) = %d:%d, want the header itself", c.Uid, c.Gid)
	}
	if c := procCaller(&fuse.InHeader{}); c.Uid != 0 || c.Gid != 0 {
		t.Errorf("procCaller(pid 0) = %d:%d, want 0:0", c.Uid, c.Gid)
	}
	gone := &fuse.InHeader{}
	gone.Pid, gone.Gid = 999999999, 1
	if c := procCaller(gone); c != gone {
		t.Errorf("procCaller of a process that does not exist = %d:%d, want the header itself", c.Uid, c.Gid)
	}
	if inGroup(gone, 4323) {
		t.Errorf("inGroup of a process that does not exist found a supplementary group")
	}
}
