package daemon

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/config"
	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/kernelinfo"
)

// fakeFuse points CheckFuseDevice at an openable file for the test.
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
		r     Request
		usage bool
		want  string
	}{
		{"no lower", Request{Backstore: "hostfs", Mountpoint: mnt}, true, "--lower DIR is required"},
		{"lower missing", Request{Lower: in("nope"), Backstore: "hostfs", Mountpoint: mnt}, false, "lower directory " + in("nope") + " does not exist"},
		{"lower is a file", Request{Lower: in("file"), Backstore: "hostfs", Mountpoint: mnt}, false, "lower directory " + in("file") + " is not a directory"},
		{"mountpoint missing", Request{Lower: lower, Backstore: "hostfs", Mountpoint: in("nope")}, false, "mountpoint " + in("nope") + " does not exist: create it first"},
		{"mountpoint is a file", Request{Lower: lower, Backstore: "hostfs", Mountpoint: in("file")}, false, "mountpoint " + in("file") + " is not a directory"},
		{"mountpoint is lower", Request{Lower: lower, Backstore: "hostfs", Mountpoint: lower}, false, "is the lower directory itself"},
		{"mountpoint in lower", Request{Lower: lower, Backstore: "hostfs", Mountpoint: filepath.Join(lower, "src")}, false, "is inside the lower directory " + lower},
		{"mountpoint in lower via symlink", Request{Lower: lower, Backstore: "hostfs", Mountpoint: in("link/src")}, false, "is inside the lower directory " + lower},
		{"lower in mountpoint", Request{Lower: filepath.Join(lower, "src"), Backstore: "hostfs", Mountpoint: lower}, false, "is inside the mountpoint " + lower},
		{"bad backstore", Request{Lower: lower, Backstore: "nfs", Mountpoint: mnt}, true, `--backstore "nfs": must be hostfs or ramdisk`},
		{"ramdisk with store", Request{Lower: lower, Backstore: "ramdisk", Store: in("store"), Mountpoint: mnt}, false, "the ramdisk is volatile"},
		{"bad size", Request{Lower: lower, Backstore: "ramdisk", RamdiskSize: "lots", Mountpoint: mnt}, true, `--ramdisk-size "lots"`},
		{"tiny size", Request{Lower: lower, Backstore: "ramdisk", RamdiskSize: "12K", Mountpoint: mnt}, true, "too small"},
		{"size without ramdisk", Request{Lower: lower, Backstore: "hostfs", RamdiskSize: "1G", Mountpoint: mnt}, true, "--ramdisk-size applies to --backstore ramdisk only"},
		{"store in lower", Request{Lower: lower, Backstore: "hostfs", Store: filepath.Join(lower, "store"), Mountpoint: mnt}, false, "agentfs never writes to the lower directory"},
		{"store in lower via symlink", Request{Lower: lower, Backstore: "hostfs", Store: in("link/new"), Mountpoint: mnt}, false, "agentfs never writes to the lower directory"},
		{"store in mountpoint", Request{Lower: lower, Backstore: "hostfs", Store: filepath.Join(mnt, "store"), Mountpoint: mnt}, false, "is inside the mountpoint"},
		{"store is a file", Request{Lower: lower, Backstore: "hostfs", Store: in("file"), Mountpoint: mnt}, false, "the store " + in("file") + " is not a directory"},
		{"store is a foreign dir", Request{Lower: lower, Backstore: "hostfs", Store: in("foreign"), Mountpoint: mnt}, false, "it is not an agentfs store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Validate(tc.r)
			if err == nil {
				t.Fatalf("Validate = %+v, want an error containing %q", p, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to contain %q", err, tc.want)
			}
			var ue *UsageError
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
	_, err := Validate(Request{Lower: lower, Backstore: "hostfs", Mountpoint: mnt})
	for _, want := range []string{devFuse + " is missing", "modprobe fuse", "--device /dev/fuse"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to contain %q", err, want)
		}
	}
}

func TestValidateMountOK(t *testing.T) {
	fakeFuse(t)
	if os.Geteuid() != 0 {
		testenv.RequireProgram(t, "fusermount3")
	}
	root, lower, mnt := layout(t)
	store := filepath.Join(root, "store")
	// Relative and symlinked paths come back absolute and resolved.
	t.Chdir(root)
	p, err := Validate(Request{Lower: "link", Backstore: "hostfs", Store: "store", Mountpoint: "mnt"})
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := Plan{Lower: lower, Mountpoint: mnt, Store: store, Backstore: "hostfs", Activity: config.DefaultSettings()}
	if !reflect.DeepEqual(*p, want) {
		t.Errorf("plan = %+v, want %+v", *p, want)
	}
	// An existing agentfs store is accepted, also with the directory
	// of branch mounts that a daemon leaves in it after agentfs exec -b.
	for _, d := range []string{"meta", "branches"} {
		if err := os.MkdirAll(filepath.Join(store, d), 0700); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Validate(Request{Lower: lower, Backstore: "hostfs", Store: store, Mountpoint: mnt}); err != nil {
		t.Errorf("Validate with an existing store: %v", err)
	}
	for size, want := range map[string]int64{"": 1 << 30, "512M": 512 << 20, "2G": 2 << 30} {
		p, err := Validate(Request{Lower: lower, Backstore: "ramdisk", RamdiskSize: size, Mountpoint: mnt})
		if err != nil {
			t.Errorf("ramdisk size %q: %v", size, err)
		} else if p.RamdiskSize != want {
			t.Errorf("ramdisk size %q = %d, want %d", size, p.RamdiskSize, want)
		}
	}
}

func TestValidateMountBindMounts(t *testing.T) {
	testenv.RequireRoot(t, "bind-mounting")
	fakeFuse(t)
	root, lower, mnt := layout(t)
	bind := func(src, dst string) {
		t.Helper()
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount %s on %s: %v", src, dst, err)
		}
		t.Cleanup(func() {
			if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
				t.Errorf("unmounting the bind mount %s: %v", dst, err)
			}
		})
	}
	// The lower tree seen through a bind mount elsewhere: paths differ,
	// (dev, ino) do not.
	alias := filepath.Join(root, "alias")
	if err := os.Mkdir(alias, 0755); err != nil {
		t.Fatal(err)
	}
	bind(lower, alias)
	_, err := Validate(Request{Lower: lower, Backstore: "hostfs", Mountpoint: filepath.Join(alias, "src")})
	if err == nil || !strings.Contains(err.Error(), "is inside the lower directory") {
		t.Errorf("mountpoint inside a bind mount of the lower: error = %v, want 'is inside the lower directory'", err)
	}
	_, err = Validate(Request{Lower: lower, Backstore: "hostfs", Mountpoint: alias})
	if err == nil || !strings.Contains(err.Error(), "is already a mount point") && !strings.Contains(err.Error(), "lower directory itself") {
		t.Errorf("mountpoint is a bind mount of the lower: error = %v, want a refusal", err)
	}
	// A mountpoint that is already mounted (same filesystem: only
	// mountinfo tells).
	bind(mnt, mnt)
	_, err = Validate(Request{Lower: lower, Backstore: "hostfs", Mountpoint: mnt})
	if err == nil || !strings.Contains(err.Error(), "is already a mount point") {
		t.Errorf("mounted mountpoint: error = %v, want 'is already a mount point'", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1M": 1 << 20, "512M": 512 << 20, "512m": 512 << 20, "2G": 2 << 30, "1.5G": 3 << 29,
		"64MiB": 64 << 20, "1T": 1 << 40, "1048576": 1 << 20, " 4G ": 4 << 30, "2048K": 2 << 20,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "abc", "-1G", "0", "1e9", "NaN", "Inf", "12Q", "1K", "1..5G"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
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
		if got := IOMode(tc.pt, tc.wb, tc.root, tc.refused); got != tc.want {
			t.Errorf("IOMode(%v, %v, %v, %v) = %q, want %q", tc.pt, tc.wb, tc.root, tc.refused, got, tc.want)
		}
	}
}

func TestRegistry(t *testing.T) {
	t.Setenv("AGENTFS_RUNTIME_DIR", filepath.Join(t.TempDir(), "run"))
	e := RegistryEntry{Mountpoint: "/mnt/my ws", Pid: 4242, Store: "/s", Ephemeral: true, Lower: "/p", Backstore: "hostfs"}
	if err := writeRegistry(e); err != nil {
		t.Fatal(err)
	}
	got, ok := ReadRegistry(e.Mountpoint)
	if !ok || got != e {
		t.Errorf("ReadRegistry = %+v, %v; want %+v", got, ok, e)
	}
	if _, ok := ReadRegistry("/mnt/my"); ok {
		t.Errorf("ReadRegistry(/mnt/my) found an entry")
	}
	RemoveRegistry(e.Mountpoint, 1) // not its pid: kept
	if _, ok := ReadRegistry(e.Mountpoint); !ok {
		t.Errorf("entry removed by another pid")
	}
	RemoveRegistry(e.Mountpoint, e.Pid)
	if _, ok := ReadRegistry(e.Mountpoint); ok {
		t.Errorf("entry still there after RemoveRegistry")
	}
}

func TestCleanupAfterDeadDaemon(t *testing.T) {
	t.Setenv("AGENTFS_RUNTIME_DIR", filepath.Join(t.TempDir(), "run"))
	t.Setenv("AGENTFS_PRIVATE_DIR", filepath.Join(t.TempDir(), "stores"))
	store, err := MakePrivateStore()
	if err != nil {
		t.Fatal(err)
	}
	foreign := t.TempDir()
	var stderr bytes.Buffer
	for _, tc := range []struct {
		store    string
		pid      int
		wantGone bool
	}{
		{foreign, 0, false},         // not a private store: never deleted
		{store, os.Getpid(), false}, // daemon alive: left alone
		{store, 0, true},            // dead: deleted
	} {
		e := RegistryEntry{Mountpoint: "/mnt/x", Pid: tc.pid, Store: tc.store, Ephemeral: true}
		cleanupAfter(&stderr, e)
		_, err := os.Stat(tc.store)
		if gone := os.IsNotExist(err); gone != tc.wantGone {
			t.Errorf("cleanupAfter(store %s, pid %d): gone = %v, want %v", tc.store, tc.pid, gone, tc.wantGone)
		}
	}
	if !strings.Contains(stderr.String(), "not removing "+foreign) {
		t.Errorf("stderr %q does not explain why %s was kept", stderr.String(), foreign)
	}
}

func TestPrivateStoreAvoidsLower(t *testing.T) {
	root := t.TempDir()
	lower := filepath.Join(root, "home")
	t.Setenv("AGENTFS_PRIVATE_DIR", filepath.Join(lower, ".cache", "agentfs"))
	_, err := MakePrivateStore(lower, filepath.Join(root, "mnt"))
	if err == nil || !strings.Contains(err.Error(), "pass --store DIR outside them") {
		t.Errorf("MakePrivateStore with the only base inside the lower: error = %v, want a refusal", err)
	}
	if _, err := os.Stat(lower); !os.IsNotExist(err) {
		t.Errorf("MakePrivateStore created something inside the lower: %v", err)
	}
	t.Setenv("AGENTFS_PRIVATE_DIR", filepath.Join(root, "stores"))
	store, err := MakePrivateStore(lower, filepath.Join(root, "mnt"))
	if err != nil {
		t.Fatalf("MakePrivateStore: %v", err)
	}
	if !IsPrivateStore(store) {
		t.Errorf("IsPrivateStore(%s) = false, want true", store)
	}
	if st, err := os.Stat(store); err != nil {
		t.Error(err)
	} else if got := st.Mode().Perm(); got != 0700 {
		t.Errorf("private store mode = %o, want 700", got)
	}
	// On ext4 the stores' directory spreads them over block groups
	// (backstore.SpreadChildren): it carries FS_TOPDIR_FL (lsattr's T).
	var sfs unix.Statfs_t
	if err := unix.Statfs(root, &sfs); err == nil && sfs.Type == unix.EXT4_SUPER_MAGIC {
		fd, err := unix.Open(filepath.Join(root, "stores"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		const topdir = 0x00020000
		if flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS); err != nil || flags&topdir == 0 {
			t.Errorf("flags of the private stores' directory on ext4: %#x (%v), want FS_TOPDIR_FL", flags, err)
		}
	}
}

// TestUsernsError: a failed user namespace names the sysctls that
// forbid them on this system, and the fixes.
func TestUsernsError(t *testing.T) {
	dir := t.TempDir()
	saved := kernelinfo.UsernsSysctls
	t.Cleanup(func() { kernelinfo.UsernsSysctls = saved })
	kernelinfo.UsernsSysctls = nil
	for i, s := range saved {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(p, []byte(s.Forbids+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s.Path = p
		kernelinfo.UsernsSysctls = append(kernelinfo.UsernsSysctls, s)
	}
	err := UsernsError(syscall.EPERM)
	for _, want := range []string{"needs a user namespace", "operation not permitted", "kernel.unprivileged_userns_clone=0",
		"user.max_user_namespaces=0", "kernel.apparmor_restrict_unprivileged_userns=1", "run agentfs run as root"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("UsernsError does not say %q: %v", want, err)
		}
	}
	if hint := UsernsMountHint(); !strings.Contains(hint, "kernel.apparmor_restrict_unprivileged_userns=1") {
		t.Errorf("UsernsMountHint does not name the restriction: %s", hint)
	}
}
