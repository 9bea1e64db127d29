package integration

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/procfs"
)

// mount -t fuse.agentfs and /etc/fstab: mount(8) runs the helper
// /sbin/mount.fuse.agentfs (what make install puts there: a link to
// agentfs), as for any FUSE filesystem. The fstab test uses a
// temporary fstab (mount -T FILE), never /etc/fstab.

const mountHelperPath = "/sbin/mount.fuse.agentfs"

// installMountHelper links /sbin/mount.fuse.agentfs to the agentfs
// under test for the test, and puts back what was there after it.
func installMountHelper(t *testing.T) {
	t.Helper()
	harness.RequireFUSE(t)
	if _, err := exec.LookPath("mount"); err != nil {
		t.Fatalf("mount(8) is missing: %v", err)
	}
	backup := ""
	if _, err := os.Lstat(mountHelperPath); err == nil {
		backup = mountHelperPath + ".agentfs-test-backup"
		must(t, os.Rename(mountHelperPath, backup))
	}
	must(t, os.Symlink(harness.Bin(), mountHelperPath))
	t.Cleanup(func() {
		if err := os.Remove(mountHelperPath); err != nil {
			t.Errorf("removing the test's mount helper: %v", err)
		}
		if backup != "" {
			if err := os.Rename(backup, mountHelperPath); err != nil {
				t.Errorf("putting back %s: %v", mountHelperPath, err)
			}
		}
	})
}

// system runs a system command (mount, umount) and returns its output
// and exit code.
func system(t *testing.T, name string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(out), 0
}

// mountStatus is what the test reads of agentfs status --json.
type mountStatus struct {
	Pid       int    `json:"pid"`
	Lower     string `json:"lower"`
	Store     string `json:"store"`
	Ephemeral bool   `json:"ephemeral"`
	Backstore string `json:"backstore"`
	// OpenForWriting counts the files whose RELEASE the daemon has not
	// had yet: the kernel holds the mount for each until it answers.
	OpenForWriting int `json:"open_for_writing"`
}

func statusOf(t *testing.T, mp string) mountStatus {
	t.Helper()
	var st mountStatus
	r := mustC(t, mp, "status", "--json")
	must(t, json.Unmarshal([]byte(r.Stdout), &st))
	return st
}

// umountAndWait runs umount(8) on mp and waits for the daemon (pid) to
// exit, as it does when the kernel ends its connection.
//
// It first waits for the daemon to have every close: the kernel sends
// RELEASE after close(2) returns and may hold the mount until the daemon
// answers it, so a umount right after a write could fail with "target
// is busy" (1 run in 15 of TestMountFstab, the previous build too).
func umountAndWait(t *testing.T, mp string, pid int) {
	t.Helper()
	if !harness.WaitFor(func() bool { return statusOf(t, mp).OpenForWriting == 0 }) {
		t.Fatalf("%s: files still open for writing before umount", mp)
	}
	if out, code := system(t, "umount", mp); code != 0 {
		t.Fatalf("umount %s: exit %d: %s", mp, code, out)
	}
	if harness.IsMounted(mp) {
		t.Errorf("%s is still mounted after umount", mp)
	}
	if !harness.WaitFor(func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH }) {
		t.Errorf("the daemon (pid %d) did not exit after umount %s", pid, mp)
	}
}

// mountsAt counts the mounts at mp.
func mountsAt(t *testing.T, mp string) int {
	t.Helper()
	ms, err := procfs.Mounts(procfs.MountinfoPath)
	must(t, err)
	n := 0
	for _, m := range ms {
		if m.Mountpoint == mp {
			n++
		}
	}
	return n
}

func TestMountTypeFuseAgentfs(t *testing.T) {
	installMountHelper(t)
	lower := harness.NewLowerDir(t, harness.LowerFile("a.txt", "from the project\n"))
	before := harness.SnapshotTree(lower)
	mp := harness.NewMountpoint(t)
	store := filepath.Join(t.TempDir(), "store")
	t.Cleanup(func() {
		if harness.IsMounted(mp) {
			system(t, "umount", "-l", mp)
		}
	})

	// Options agentfs does not know, and ro, are refused and mount nothing.
	for opts, want := range map[string]string{
		"store=" + store + ",bogus=1": `unknown mount option "bogus"`,
		"ro":                          `mount option "ro"`,
		"log-size":                    "mount option log-size needs a value: write log-size=SIZE",
	} {
		out, code := system(t, "mount", "-t", "fuse.agentfs", lower, mp, "-o", opts)
		if code == 0 || !strings.Contains(out, want) || harness.IsMounted(mp) {
			t.Errorf("mount -o %s: exit %d, mounted %v, output %q; want a refusal saying %q", opts, code, harness.IsMounted(mp), out, want)
		}
	}

	opts := "store=" + store + ",backstore=hostfs,auto-snapshot,quiet_period=5s,noexec,nofail"
	if out, code := system(t, "mount", "-t", "fuse.agentfs", lower, mp, "-o", opts); code != 0 {
		t.Fatalf("mount -t fuse.agentfs %s %s -o %s: exit %d: %s", lower, mp, opts, code, out)
	}
	m, ok, err := procfs.MountAt(procfs.MountinfoPath, mp)
	if err != nil || !ok || m.FsType != "fuse.agentfs" || m.Source != lower {
		t.Fatalf("mount table at %s: %+v (found %v, %v); want fuse.agentfs of %s", mp, m, ok, err, lower)
	}
	if !strings.Contains(m.Options, "noexec") {
		t.Errorf("mount options %q lack noexec, which -o asked for", m.Options)
	}
	st := statusOf(t, mp)
	if st.Store != store || st.Ephemeral || st.Backstore != "hostfs" {
		t.Errorf("status = %+v, want store %s, kept, hostfs", st, store)
	}
	b, err := os.ReadFile(filepath.Join(mp, "a.txt"))
	if err != nil || string(b) != "from the project\n" {
		t.Errorf("a.txt in the mount = %q, %v", b, err)
	}
	must(t, os.WriteFile(filepath.Join(mp, "b.txt"), []byte("kept\n"), 0o644))

	// mount again: already mounted, left as it is.
	if out, code := system(t, "mount", "-t", "fuse.agentfs", lower, mp, "-o", opts); code != 0 || mountsAt(t, mp) != 1 {
		t.Errorf("mount again: exit %d, %d mounts at %s: %s; want 0 and one mount", code, mountsAt(t, mp), mp, out)
	}
	umountAndWait(t, mp, st.Pid)

	// The store kept the change: the daemon closed it cleanly.
	if out, code := system(t, "mount", "-t", "fuse.agentfs", lower, mp, "-o", "store="+store); code != 0 {
		t.Fatalf("mount the store again: exit %d: %s", code, out)
	}
	b, err = os.ReadFile(filepath.Join(mp, "b.txt"))
	if err != nil || string(b) != "kept\n" {
		t.Errorf("b.txt after umount and mount = %q, %v; want what was written", b, err)
	}
	umountAndWait(t, mp, statusOf(t, mp).Pid)
	harness.AssertUnchanged(t, before, harness.SnapshotTree(lower))
}

func TestMountFstab(t *testing.T) {
	installMountHelper(t)
	lower := harness.NewLowerDir(t, harness.LowerFile("a.txt", "a\n"))
	before := harness.SnapshotTree(lower)
	auto, manual := harness.NewMountpoint(t), harness.NewMountpoint(t)
	store := filepath.Join(t.TempDir(), "store")
	fstab := filepath.Join(t.TempDir(), "fstab")
	must(t, os.WriteFile(fstab, []byte("# a temporary fstab\n"+
		lower+" "+auto+" fuse.agentfs store="+store+",nofail 0 0\n"+
		lower+" "+manual+" fuse.agentfs backstore=ramdisk,ramdisk-size=64M,noauto,user 0 0\n"), 0o644))
	t.Cleanup(func() {
		for _, mp := range []string{auto, manual} {
			if harness.IsMounted(mp) {
				system(t, "umount", "-l", mp)
			}
		}
	})

	// mount -a mounts the line without noauto, and only it; again, it
	// changes nothing.
	for range 2 {
		if out, code := system(t, "mount", "-T", fstab, "-a"); code != 0 {
			t.Fatalf("mount -T %s -a: exit %d: %s", fstab, code, out)
		}
		if n := mountsAt(t, auto); n != 1 {
			t.Fatalf("%d mounts at %s after mount -a, want 1", n, auto)
		}
		if harness.IsMounted(manual) {
			t.Fatalf("mount -a mounted the noauto line at %s", manual)
		}
	}
	if st := statusOf(t, auto); st.Store != store || st.Lower != lower {
		t.Errorf("status of %s = %+v, want lower %s, store %s", auto, st, lower, store)
	}

	// The noauto line, by its mountpoint.
	if out, code := system(t, "mount", "-T", fstab, manual); code != 0 {
		t.Fatalf("mount -T %s %s: exit %d: %s", fstab, manual, code, out)
	}
	st := statusOf(t, manual)
	if st.Backstore != "ramdisk" || !st.Ephemeral {
		t.Errorf("status of %s = %+v, want a ramdisk backstore and a private store", manual, st)
	}
	must(t, os.WriteFile(filepath.Join(manual, "scratch"), []byte("x"), 0o644))
	umountAndWait(t, manual, st.Pid)
	if _, err := os.Stat(st.Store); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the private store %s is still there after umount (%v): the daemon did not end cleanly", st.Store, err)
	}
	umountAndWait(t, auto, statusOf(t, auto).Pid)
	harness.AssertUnchanged(t, before, harness.SnapshotTree(lower))
}
