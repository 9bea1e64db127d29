package overlay

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// newExcludedEnv is newEnv whose view leaves out hide and seals seal.
func newExcludedEnv(t *testing.T, files map[string]string, hide, seal []string) *env {
	t.Helper()
	e := newEnv(t, files)
	layer, err := e.meta.Layer("main")
	if err != nil {
		t.Fatal(err)
	}
	v, err := New(Config{Lower: e.lower, Objects: e.bs, Layer: layer, AllocIno: e.meta.AllocIno, Exclude: hide, Seal: seal})
	if err != nil {
		t.Fatal(err)
	}
	e.view = v
	return e
}

func TestHiddenAndSealedLowerPaths(t *testing.T) {
	e := newExcludedEnv(t, map[string]string{
		"a/secret/x": "s", "a/sub/": "", "a/keep": "k", "top/": "",
		"dev/null": "n", "dev/pts/0": "p", "proc/1": "1",
	}, []string{"a/secret", "/top"}, []string{"/dev", "proc"})

	eq(t, "names of the root", e.names(""), []string{"a", "dev", "proc"})
	eq(t, "names of a", e.names("a"), []string{"keep", "sub"})
	eq(t, "names of dev", e.names("dev"), []string(nil))
	eq(t, "names of proc", e.names("proc"), []string(nil))
	for _, p := range []string{"a/secret", "a/secret/x", "top", "dev/null", "dev/pts", "proc/1"} {
		if _, err := e.walk(p); err != unix.ENOENT {
			t.Errorf("lookup %s: err = %v, want ENOENT", p, err)
		}
	}
	// The sealed directory itself is there, with the lower attributes.
	st, err := e.view.Getattr(e.must("dev"))
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("getattr dev: %v, mode %o", err, st.Mode)
	}
	var lst unix.Stat_t
	if err := unix.Stat(filepath.Join(e.lower, "dev"), &lst); err != nil {
		t.Fatal(err)
	}
	eq(t, "st_ino of dev", st.Ino, lst.Ino)
	// st_nlink of a counts the subdirectories it shows: a/sub only.
	ast, err := e.view.Getattr(e.must("a"))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "st_nlink of a", ast.Nlink, uint64(3))
	// A renamed sealed directory shows nothing of its lower either.
	if err := e.view.Rename(e.view.Root(), "dev", e.view.Root(), "dev2", 0); err != nil {
		t.Fatal(err)
	}
	eq(t, "names of dev2", e.names("dev2"), []string(nil))
	// A name made in the view where a hidden one is shows what was made.
	if _, _, err := e.view.Mkdir(e.must("a"), "secret", 0o755, Caller{}); err != nil {
		t.Fatalf("mkdir a/secret: %v", err)
	}
	eq(t, "names of a/secret", e.names("a/secret"), []string(nil))
	// Removing it leaves no whiteout for the hidden lower name.
	if err := e.view.Rmdir(e.must("a"), "secret"); err != nil {
		t.Fatalf("rmdir a/secret: %v", err)
	}
	eq(t, "names of a", e.names("a"), []string{"keep", "sub"})
	if e.view.indexGet("a/secret") != nil {
		t.Errorf("a/secret has an entry after rmdir: %+v", e.view.indexGet("a/secret"))
	}
	eq(t, "lower a/secret/x", e.lowerContent("a/secret/x"), "s")
}

func TestExportLeavesOutHiddenAndSealed(t *testing.T) {
	e := newExcludedEnv(t, map[string]string{"a/secret/x": "s", "a/keep": "k", "dev/null": "n"},
		[]string{"a/secret"}, []string{"dev"})
	to := filepath.Join(t.TempDir(), "out")
	if err := Export(e.view, to); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]error{"a/keep": nil, "dev": nil, "a/secret": unix.ENOENT, "dev/null": unix.ENOENT} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(to, p), &st); err != want {
			t.Errorf("export %s: err = %v, want %v", p, err, want)
		}
	}
}

// TestMappedInodesNeverCollide: files of other filesystems than the
// lower root's show st_ino numbers that no two inodes share, however
// many filesystems (a hash of the device into 12 bits shared numbers
// past 4,096 of them), and whatever bits their own numbers use.
func TestMappedInodesNeverCollide(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "x"})
	v := e.view
	seen := map[uint64][2]uint64{}
	check := func(dev, ino uint64) {
		got := v.mapIno(&unix.Stat_t{Dev: dev, Ino: ino})
		if prev, ok := seen[got]; ok && prev != [2]uint64{dev, ino} {
			t.Fatalf("(dev %d, ino %d) and (dev %d, ino %d) both show st_ino %#x", dev, ino, prev[0], prev[1], got)
		}
		seen[got] = [2]uint64{dev, ino}
		if got>>63 != 0 {
			t.Fatalf("(dev %d, ino %d) shows st_ino %#x, in the range of inodes made in the overlay", dev, ino, got)
		}
		if again := v.mapIno(&unix.Stat_t{Dev: dev, Ino: ino}); again != got {
			t.Fatalf("(dev %d, ino %d) shows %#x, then %#x", dev, ino, got, again)
		}
	}
	for dev := uint64(1); dev <= 5000; dev++ {
		if dev == v.lowerDev {
			continue
		}
		check(dev, 7)
		check(dev, 1<<50|7)
	}
	// The lower root's own numbers stay as they are, but for those in
	// the mapped range (an overlayfs with xino on).
	eq(t, "a small st_ino of the lower root's filesystem", v.mapIno(&unix.Stat_t{Dev: v.lowerDev, Ino: 7}), uint64(7))
	check(v.lowerDev, 1<<62|7)
}

// TestDeviceSlotsKeptByTheStore: the store numbers a filesystem once,
// for good: a view opened again maps its files to the same st_ino
// whatever order it meets the filesystems in.
func TestDeviceSlotsKeptByTheStore(t *testing.T) {
	dir := t.TempDir()
	meta, err := branch.Open(branch.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, map[string]string{"f": "x"})
	cfg := Config{Lower: e.lower, Objects: e.bs, DeviceSlot: meta.DeviceSlot}
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := v.mapIno(&unix.Stat_t{Dev: 1001, Ino: 9})
	b := v.mapIno(&unix.Stat_t{Dev: 1002, Ino: 9})
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := meta.Close(); err != nil {
		t.Fatal(err)
	}
	meta, err = branch.Open(branch.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := meta.Close(); err != nil {
			t.Error(err)
		}
	})
	cfg.DeviceSlot = meta.DeviceSlot
	v, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	eq(t, "dev 1002 met first after a reopen", v.mapIno(&unix.Stat_t{Dev: 1002, Ino: 9}), b)
	eq(t, "dev 1001 after a reopen", v.mapIno(&unix.Stat_t{Dev: 1001, Ino: 9}), a)
}

// TestReloadKeepsSealedDirectories: a restore (Reload) cuts loose every
// node but a sealed directory that still shows its lower one: agentfs
// run --system mounts the kernel's filesystems over those, and the
// kernel detaches a mount whose name is invalidated.
func TestReloadKeepsSealedDirectories(t *testing.T) {
	e := newExcludedEnv(t, map[string]string{"dev/null": "n", "etc/hosts": "h"}, nil, []string{"dev"})
	dev, etc := e.must("dev"), e.must("etc")
	if !e.view.KeepsMount(dev) || e.view.KeepsMount(etc) {
		t.Fatalf("KeepsMount: dev %v, etc %v; want true, false", e.view.KeepsMount(dev), e.view.KeepsMount(etc))
	}
	stale, err := e.view.Reload()
	if err != nil {
		t.Fatal(err)
	}
	var cut []string
	for _, s := range stale {
		if s.Node == dev {
			t.Errorf("Reload cut loose the sealed directory dev")
		}
		cut = append(cut, s.Name)
	}
	eq(t, "nodes cut loose", cut, []string{"etc"})
	if again := e.must("dev"); again != dev {
		t.Errorf("dev after Reload is another node")
	}
}
