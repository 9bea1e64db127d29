package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// MountXFS mounts a fresh 300 MiB reflink-capable XFS image in a temp
// dir and returns its mountpoint; it is unmounted in t.Cleanup. Root
// only: it skips (or fails on CI) through RequireRoot and Skip.
func MountXFS(t testing.TB) string {
	t.Helper()
	return MountImage(t, "xfs", "xfsprogs", "-q", "-m", "reflink=1")
}

// MountImage mounts a fresh 300 MiB image made by mkfs.TYPE (from the
// Debian package pkg) with args, in a temp dir, and returns its
// mountpoint; it is unmounted in t.Cleanup.
func MountImage(t testing.TB, typ, pkg string, args ...string) string {
	t.Helper()
	RequireRoot(t, "mounting a loop device")
	mkfs, err := exec.LookPath("mkfs." + typ)
	if err != nil {
		Skip(t, Program("mkfs."+typ), "mkfs.%s is missing (apt-get install %s)", typ, pkg)
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		Skip(t, LoopDevices, "no loop devices: %v", err)
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, typ+".img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(300 << 20)
	f.Close()
	if err != nil {
		t.Fatalf("sizing the image %s: %v", img, err)
	}
	if out, err := exec.Command(mkfs, append(args, img)...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.%s: %v\n%s", typ, err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		Skip(t, LoopDevices, "mount -o loop of a %s image: %v\n%s", typ, err, out)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Logf("unmount %s: %v; detaching", mnt, err)
			if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
				t.Errorf("detaching %s: %v", mnt, err)
			}
		}
	})
	return mnt
}
