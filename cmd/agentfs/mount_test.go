package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// requireRoot skips a test that needs root, unless AGENTFS_REQUIRE_FUSE=1
// (CI, which runs as root), where it fails.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("AGENTFS_REQUIRE_FUSE") == "1" {
		t.Fatalf("this test needs root, and AGENTFS_REQUIRE_FUSE=1 forbids skipping it")
	}
	t.Skip("needs root")
}

// fakeFuse points checkFuseDevice at an openable file for the test.
func fakeFuse(t *testing.T) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fuse")
	if err := os.WriteFile(p, nil, 0600); err != nil {
		t.Fatal(err)
	}
	old := devFuse
	devFuse = p
	t.Cleanup(func() { devFuse = old })
}

// layout makes a temp dir with lower/ (with src/), mnt/, a file and a
// symlink to lower.
func layout(t *testing.T) (root, lower, mnt string) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lower, mnt = filepath.Join(root, "lower"), filepath.Join(root, "mnt")
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(root, "config")) // no user configuration
	for _, d := range []string{filepath.Join(lower, "src"), mnt, filepath.Join(root, "foreign")} {
		if err := os.MkdirAll(d, 0755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(root, "file"), filepath.Join(root, "foreign", "notes.txt")} {
		if err := os.WriteFile(f, []byte("x"), 0644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(lower, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	return root, lower, mnt
}

func TestValidateMountErrors(t *testing.T) {
	fakeFuse(t)
	root, lower, mnt := layout(t)
	in := func(p string) string { return filepath.Join(root, p) }
	for _, tc := range []struct {
		name  string
		o     mountOptions
		mp    string
		usage bool
		want  string
	}{
		{"no lower", mountOptions{backstore: "hostfs"}, mnt, true, "--lower DIR is required"},
		{"lower missing", mountOptions{lower: in("nope"), backstore: "hostfs"}, mnt, false, "lower directory " + in("nope") + " does not exist"},
		{"lower is a file", mountOptions{lower: in("file"), backstore: "hostfs"}, mnt, false, "lower directory " + in("file") + " is not a directory"},
		{"mountpoint missing", mountOptions{lower: lower, backstore: "hostfs"}, in("nope"), false, "mountpoint " + in("nope") + " does not exist: create it first"},
		{"mountpoint is a file", mountOptions{lower: lower, backstore: "hostfs"}, in("file"), false, "mountpoint " + in("file") + " is not a directory"},
		{"mountpoint is lower", mountOptions{lower: lower, backstore: "hostfs"}, lower, false, "is the lower directory itself"},
		{"mountpoint in lower", mountOptions{lower: lower, backstore: "hostfs"}, filepath.Join(lower, "src"), false, "is inside the lower directory " + lower},
		{"mountpoint in lower via symlink", mountOptions{lower: lower, backstore: "hostfs"}, in("link/src"), false, "is inside the lower directory " + lower},
		{"lower in mountpoint", mountOptions{lower: filepath.Join(lower, "src"), backstore: "hostfs"}, lower, false, "is inside the mountpoint " + lower},
		{"bad backstore", mountOptions{lower: lower, backstore: "nfs"}, mnt, true, `--backstore "nfs": must be hostfs or ramdisk`},
		{"ramdisk with store", mountOptions{lower: lower, backstore: "ramdisk", store: in("store")}, mnt, false, "the ramdisk is volatile"},
		{"bad size", mountOptions{lower: lower, backstore: "ramdisk", ramdiskSize: "lots"}, mnt, true, `--ramdisk-size "lots"`},
		{"tiny size", mountOptions{lower: lower, backstore: "ramdisk", ramdiskSize: "12K"}, mnt, true, "too small"},
		{"size without ramdisk", mountOptions{lower: lower, backstore: "hostfs", ramdiskSize: "1G"}, mnt, true, "--ramdisk-size applies to --backstore ramdisk only"},
		{"store in lower", mountOptions{lower: lower, backstore: "hostfs", store: filepath.Join(lower, "store")}, mnt, false, "agentfs never writes to the lower directory"},
		{"store in lower via symlink", mountOptions{lower: lower, backstore: "hostfs", store: in("link/new")}, mnt, false, "agentfs never writes to the lower directory"},
		{"store in mountpoint", mountOptions{lower: lower, backstore: "hostfs", store: filepath.Join(mnt, "store")}, mnt, false, "is inside the mountpoint"},
		{"store is a file", mountOptions{lower: lower, backstore: "hostfs", store: in("file")}, mnt, false, "the store " + in("file") + " is not a directory"},
		{"store is a foreign dir", mountOptions{lower: lower, backstore: "hostfs", store: in("foreign")}, mnt, false, "it is not an agentfs store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := validateMount(&tc.o, tc.mp)
			if err == nil {
				t.Fatalf("validateMount = %+v, want an error containing %q", p, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to contain %q", err, tc.want)
			}
			var ue usageError
			if got := errors.As(err, &ue); got != tc.usage {
				t.Errorf("usage error = %v, want %v (%v)", got, tc.usage, err)
			}
		})
	}
}

func TestValidateMountDevFuse(t *testing.T) {
	_, lower, mnt := layout(t)
	old := devFuse
	t.Cleanup(func() { devFuse = old })
	devFuse = filepath.Join(t.TempDir(), "fuse")
	_, err := validateMount(&mountOptions{lower: lower, backstore: "hostfs"}, mnt)
	for _, want := range []string{devFuse + " is missing", "modprobe fuse", "--device /dev/fuse"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to contain %q", err, want)
		}
	}
}

func TestValidateMountOK(t *testing.T) {
	fakeFuse(t)
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skip("fusermount3 is not installed")
		}
	}
	root, lower, mnt := layout(t)
	store := filepath.Join(root, "store")
	// Relative and symlinked paths come back absolute and resolved.
	t.Chdir(root)
	p, err := validateMount(&mountOptions{lower: "link", backstore: "hostfs", store: "store"}, "mnt")
	if err != nil {
		t.Fatalf("validateMount: %v", err)
	}
	want := mountPlan{lower: lower, mountpoint: mnt, store: store, backstore: "hostfs", activity: defaultActivitySettings()}
	if !reflect.DeepEqual(*p, want) {
		t.Errorf("plan = %+v, want %+v", *p, want)
	}
	// An existing agentfs store is accepted.
	if err := os.MkdirAll(filepath.Join(store, "meta"), 0700); err != nil {
		t.Fatal(err)
	}
	if _, err := validateMount(&mountOptions{lower: lower, backstore: "hostfs", store: store}, mnt); err != nil {
		t.Errorf("validateMount with an existing store: %v", err)
	}
	for size, want := range map[string]int64{"": 1 << 30, "512M": 512 << 20, "2G": 2 << 30} {
		p, err := validateMount(&mountOptions{lower: lower, backstore: "ramdisk", ramdiskSize: size}, mnt)
		if err != nil {
			t.Errorf("ramdisk size %q: %v", size, err)
		} else if p.ramdiskSize != want {
			t.Errorf("ramdisk size %q = %d, want %d", size, p.ramdiskSize, want)
		}
	}
}

func TestValidateMountBindMounts(t *testing.T) {
	requireRoot(t)
	fakeFuse(t)
	root, lower, mnt := layout(t)
	bind := func(src, dst string) {
		t.Helper()
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount %s on %s: %v", src, dst, err)
		}
		t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
	}
	// The lower tree seen through a bind mount elsewhere: paths differ,
	// (dev, ino) do not.
	alias := filepath.Join(root, "alias")
	if err := os.Mkdir(alias, 0755); err != nil {
		t.Fatal(err)
	}
	bind(lower, alias)
	_, err := validateMount(&mountOptions{lower: lower, backstore: "hostfs"}, filepath.Join(alias, "src"))
	if err == nil || !strings.Contains(err.Error(), "is inside the lower directory") {
		t.Errorf("mountpoint inside a bind mount of the lower: error = %v, want 'is inside the lower directory'", err)
	}
	_, err = validateMount(&mountOptions{lower: lower, backstore: "hostfs"}, alias)
	if err == nil || !strings.Contains(err.Error(), "is already a mount point") && !strings.Contains(err.Error(), "lower directory itself") {
		t.Errorf("mountpoint is a bind mount of the lower: error = %v, want a refusal", err)
	}
	// A mountpoint that is already mounted (same filesystem: only
	// mountinfo tells).
	bind(mnt, mnt)
	_, err = validateMount(&mountOptions{lower: lower, backstore: "hostfs"}, mnt)
	if err == nil || !strings.Contains(err.Error(), "is already a mount point") {
		t.Errorf("mounted mountpoint: error = %v, want 'is already a mount point'", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1M": 1 << 20, "512M": 512 << 20, "512m": 512 << 20, "2G": 2 << 30, "1.5G": 3 << 29,
		"64MiB": 64 << 20, "1T": 1 << 40, "1048576": 1 << 20, " 4G ": 4 << 30, "2048K": 2 << 20,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "abc", "-1G", "0", "1e9", "NaN", "Inf", "12Q", "1K", "1..5G"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestMountinfo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mountinfo")
	lines := []string{
		`22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw`,
		`40 22 0:40 / /mnt/my\040ws rw,nosuid shared:2 - fuse.agentfs /home/me/proj rw,user_id=0`,
		`41 22 0:41 / /mnt/two rw - tmpfs tmpfs rw`,
		`42 41 0:42 / /mnt/two rw - fuse.agentfs /p rw`,
		`garbage`,
	}
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0644); err != nil {
		t.Fatal(err)
	}
	old := mountinfoPath
	mountinfoPath = p
	t.Cleanup(func() { mountinfoPath = old })
	for _, tc := range []struct {
		dir  string
		ok   bool
		want mountEntry
	}{
		{"/mnt/my ws", true, mountEntry{"/mnt/my ws", "fuse.agentfs", "/home/me/proj", "0:40"}},
		{"/mnt/two", true, mountEntry{"/mnt/two", "fuse.agentfs", "/p", "0:42"}}, // the topmost
		{"/mnt", false, mountEntry{}},
	} {
		got, ok, err := mountAt(tc.dir)
		if err != nil || ok != tc.ok || got != tc.want {
			t.Errorf("mountAt(%q) = %+v, %v, %v; want %+v, %v", tc.dir, got, ok, err, tc.want, tc.ok)
		}
	}
}

// openTestStore opens a store as the daemon does, without mounting.
func openTestStore(t *testing.T, lower, store string) (*daemon, error) {
	t.Helper()
	d := &daemon{plan: &mountPlan{lower: lower, store: store, backstore: "hostfs"}, log: slog.New(slog.DiscardHandler)}
	err := d.openStore()
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func TestStoreErrors(t *testing.T) {
	root, lower, _ := layout(t)
	store := filepath.Join(root, "store")
	d, err := openTestStore(t, lower, store)
	if err != nil {
		t.Fatalf("opening a new store: %v", err)
	}

	// A second mount of the same store is refused, naming the holder.
	_, err = openTestStore(t, lower, store)
	if !errors.Is(err, branch.ErrLocked) {
		t.Errorf("second open: error = %v, want ErrLocked", err)
	} else if want := fmt.Sprintf("pid %d", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("second open: error = %q, want it to name %q", err, want)
	}
	d.close()

	// The store remembers its lower directory.
	other := filepath.Join(root, "foreign")
	_, err = openTestStore(t, other, store)
	if err == nil || !strings.Contains(err.Error(), "was made for the lower directory "+lower) {
		t.Errorf("other lower: error = %v, want 'was made for the lower directory %s'", err, lower)
	}
	d, err = openTestStore(t, lower, store)
	if err != nil {
		t.Fatalf("reopening with the right lower: %v", err)
	}
	d.close()
	// (A store of another format version is refused by branch.Open,
	// tested there: only branch may write the format key.)
}

func TestIOMode(t *testing.T) {
	for _, tc := range []struct {
		pt, wb, root, refused bool
		want                  string
	}{
		{true, false, true, false, "passthrough"},
		{false, false, false, false, "page cache (no passthrough: not root)"},
		{false, true, false, true, "page cache with writeback cache (--writeback-cache; no passthrough)"},
		{false, true, true, true, "page cache with writeback cache (--writeback-cache; no passthrough)"},
		{false, false, true, true, "page cache (no passthrough: --no-passthrough)"},
		{false, false, true, false, "page cache (no passthrough: the kernel did not grant it; it needs Linux 6.9 or later)"},
	} {
		if got := ioMode(tc.pt, tc.wb, tc.root, tc.refused); got != tc.want {
			t.Errorf("ioMode(%v, %v, %v, %v) = %q, want %q", tc.pt, tc.wb, tc.root, tc.refused, got, tc.want)
		}
	}
}
