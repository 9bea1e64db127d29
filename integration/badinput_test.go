package integration

// Bad input (issue 2): each case gives a non-zero exit, a message that
// names the problem, nothing mounted and the lower unchanged. Checklist
// item 20 (a mountpoint inside the lower, a lower inside the mountpoint)
// is among them.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/procfs"
	"golang.org/x/sys/unix"
)

// refusal is what a refused command must look like.
type refusal struct {
	code   int    // the exit code; 0 means any non-zero code
	phrase string // a key phrase of the message (case-insensitive)
}

// assertRefused checks that r was refused as want, and that nothing is
// mounted on mp and no daemon serves it.
func assertRefused(t *testing.T, r harness.Result, want refusal, mp string) {
	t.Helper()
	switch {
	case r.Code == 0:
		t.Errorf("exit 0, want a refusal:\n%s", r)
	case want.code != 0 && r.Code != want.code:
		t.Errorf("exit %d, want %d:\n%s", r.Code, want.code, r)
	}
	if !strings.Contains(strings.ToLower(r.Output()), strings.ToLower(want.phrase)) {
		t.Errorf("the message does not say %q:\n%s", want.phrase, r)
	}
	if strings.TrimSpace(r.Output()) == "" {
		t.Errorf("no message at all")
	}
	if mp != "" {
		if got := harness.MountsUnder(mp); len(got) > 0 {
			t.Errorf("mounted after a refusal: %v", got)
			for _, e := range got {
				if err := unix.Unmount(strings.Fields(e)[0], unix.MNT_DETACH); err != nil {
					t.Errorf("detaching %s: %v", e, err)
				}
			}
		}
		if pids := daemonsFor(mp); len(pids) > 0 {
			t.Errorf("processes left serving %s after a refusal: %v", mp, pids)
		}
	}
}

// daemonsFor lists the agentfs processes whose command line names dir.
func daemonsFor(dir string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == filepath.Base(harness.Bin()) && procfs.Alive(pid) {
			for _, a := range args[1:] {
				if a == dir {
					out = append(out, pid)
					break
				}
			}
		}
	}
	return out
}

// TestBadInput covers the refusals that need no running mount.
func TestBadInput(t *testing.T) {
	harness.RequireFUSE(t)
	cases := []struct {
		name string
		make func(t *testing.T) (args []string, mp string)
		want refusal
	}{
		{"missing lower", func(t *testing.T) ([]string, string) {
			mp := t.TempDir()
			return []string{"mount", "--lower", filepath.Join(t.TempDir(), "missing"), mp}, mp
		}, refusal{phrase: "does not exist"}},
		{"lower is a file", func(t *testing.T) ([]string, string) {
			lower := harness.NewLowerDir(t, harness.LowerFile("f", "f"))
			mp := t.TempDir()
			return []string{"mount", "--lower", filepath.Join(lower, "f"), mp}, mp
		}, refusal{phrase: "not a directory"}},
		{"missing mountpoint", func(t *testing.T) ([]string, string) {
			lower := harness.NewLowerDir(t, harness.LowerFile("f", "f"))
			mp := filepath.Join(t.TempDir(), "missing")
			return []string{"mount", "--lower", lower, mp}, mp
		}, refusal{phrase: "does not exist"}},
		{"mountpoint is a file", func(t *testing.T) ([]string, string) {
			lower := harness.NewLowerDir(t, harness.LowerFile("f", "f"))
			mp := filepath.Join(t.TempDir(), "file")
			must(t, os.WriteFile(mp, nil, 0o644))
			return []string{"mount", "--lower", lower, mp}, mp
		}, refusal{phrase: "not a directory"}},
		// Checklist 20.
		{"mountpoint inside the lower", func(t *testing.T) ([]string, string) {
			lower := harness.NewLowerDir(t, harness.LowerFile("f", "f"), harness.LowerDir("sub/mnt"))
			return []string{"mount", "--lower", lower, filepath.Join(lower, "sub/mnt")}, filepath.Join(lower, "sub/mnt")
		}, refusal{phrase: "inside"}},
		{"mountpoint inside the lower through a symlink", func(t *testing.T) ([]string, string) {
			lower := harness.NewLowerDir(t, harness.LowerFile("f", "f"), harness.LowerDir("sub/mnt"))
			link := filepath.Join(t.TempDir(), "link")
			must(t, os.Symlink(filepath.Join(lower, "sub/mnt"), link))
			return []string{"mount", "--lower", lower, link}, filepath.Join(lower, "sub/mnt")
		}, refusal{phrase: "inside"}},
		{"lower inside the mountpoint", func(t *testing.T) ([]string, string) {
			mp := t.TempDir()
			harness.BuildLower(t, mp, []harness.Entry{harness.LowerFile("proj/f", "f")})
			return []string{"mount", "--lower", filepath.Join(mp, "proj"), mp}, mp
		}, refusal{phrase: "inside"}},
		{"mountpoint is the lower", func(t *testing.T) ([]string, string) {
			lower := harness.NewLowerDir(t, harness.LowerFile("f", "f"))
			return []string{"mount", "--lower", lower, lower}, lower
		}, refusal{phrase: "lower"}},
		{"store inside the lower", func(t *testing.T) ([]string, string) {
			lower := harness.NewLowerDir(t, harness.LowerFile("f", "f"))
			mp := t.TempDir()
			return []string{"mount", "--lower", lower, "--store", filepath.Join(lower, "store"), mp}, mp
		}, refusal{phrase: "inside"}},
		{"store is a file", func(t *testing.T) ([]string, string) {
			lower := harness.NewLowerDir(t, harness.LowerFile("f", "f"))
			store := filepath.Join(t.TempDir(), "store")
			must(t, os.WriteFile(store, nil, 0o644))
			mp := t.TempDir()
			return []string{"mount", "--lower", lower, "--store", store, mp}, mp
		}, refusal{phrase: "not a directory"}},
		{"unknown flag", func(t *testing.T) ([]string, string) {
			lower := harness.NewLowerDir(t, harness.LowerFile("f", "f"))
			mp := t.TempDir()
			return []string{"mount", "--lower", lower, "--no-such-flag", mp}, mp
		}, refusal{code: 2, phrase: "unknown flag"}},
		{"unknown flag before the command", func(t *testing.T) ([]string, string) {
			return []string{"--no-such-flag"}, ""
		}, refusal{code: 2, phrase: "unknown flag"}},
		{"unknown command", func(t *testing.T) ([]string, string) {
			return []string{"mounty"}, ""
		}, refusal{code: 2, phrase: "unknown command"}},
		{"missing --lower", func(t *testing.T) ([]string, string) {
			mp := t.TempDir()
			return []string{"mount", mp}, mp
		}, refusal{code: 2, phrase: "--lower"}},
		{"missing mountpoint argument", func(t *testing.T) ([]string, string) {
			return []string{"mount", "--lower", harness.NewLowerDir(t)}, ""
		}, refusal{code: 2, phrase: "mountpoint"}},
		{"bad --backstore", func(t *testing.T) ([]string, string) {
			mp := t.TempDir()
			return []string{"mount", "--lower", harness.NewLowerDir(t), "--backstore", "floppy", mp}, mp
		}, refusal{code: 2, phrase: "backstore"}},
		{"bad --ramdisk-size", func(t *testing.T) ([]string, string) {
			mp := t.TempDir()
			return []string{"mount", "--lower", harness.NewLowerDir(t), "--backstore", "ramdisk", "--ramdisk-size", "lots", mp}, mp
		}, refusal{code: 2, phrase: "ramdisk-size"}},
		{"unmount of a directory that is not mounted", func(t *testing.T) ([]string, string) {
			return []string{"unmount", t.TempDir()}, ""
		}, refusal{phrase: "not mounted"}},
		{"status outside a mount", func(t *testing.T) ([]string, string) {
			return []string{"status", "-C", t.TempDir()}, ""
		}, refusal{phrase: "mount"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args, mp := c.make(t)
			var lower string
			for i, a := range args {
				if a == "--lower" && i+1 < len(args) {
					lower = args[i+1]
				}
			}
			var before harness.Tree
			if lower != "" {
				before = harness.SnapshotTree(lower)
			}
			r := harness.Run(t, args...)
			assertRefused(t, r, c.want, mp)
			if lower != "" && before.Err == nil {
				harness.AssertUnchanged(t, before, harness.SnapshotTree(lower))
			}
		})
	}
}

// TestBadInputAlreadyMounted: mounting on a mountpoint in use is
// refused and the first mount keeps working.
func TestBadInputAlreadyMounted(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "first")))
	other := harness.NewLowerDir(t, harness.LowerFile("f", "second"))
	before := harness.SnapshotTree(other)
	r := harness.Run(t, "mount", "--lower", other, m.Dir)
	if r.Code == 0 {
		t.Errorf("a second mount on %s succeeded:\n%s", m.Dir, r)
	}
	if !strings.Contains(strings.ToLower(r.Output()), "already") {
		t.Errorf("the message does not say the mountpoint is already mounted:\n%s", r)
	}
	if n := countMounts(m.Dir); n != 1 {
		t.Errorf("%d mounts on %s, want 1", n, m.Dir)
		for ; n > 1; n-- {
			if err := unix.Unmount(m.Dir, 0); err != nil {
				t.Errorf("unmounting the extra mount on %s: %v", m.Dir, err)
			}
		}
	}
	if got := harness.ReadFile(t, m.Path("f")); got != "first" {
		t.Errorf("the first mount shows f = %q, want %q", got, "first")
	}
	harness.AssertUnchanged(t, before, harness.SnapshotTree(other))
}

func countMounts(dir string) int {
	mounts, _ := procfs.Mounts(procfs.MountinfoPath)
	n := 0
	for _, e := range mounts {
		if e.Mountpoint == dir {
			n++
		}
	}
	return n
}

// TestBadInputStoreInUse: a store is used by one mount at a time.
func TestBadInputStoreInUse(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := harness.NewMount(t, harness.WithStore(store), harness.WithLower(harness.LowerFile("f", "f")))
	harness.WriteFile(t, m.Path("g"), "in the store")
	other := harness.NewLowerDir(t, harness.LowerFile("f", "other"))
	before := harness.SnapshotTree(other)
	mp := harness.NewMountpoint(t)
	r := harness.Run(t, "mount", "--lower", other, "--store", store, mp)
	assertRefused(t, r, refusal{phrase: "in use"}, mp)
	if got := harness.ReadFile(t, m.Path("g")); got != "in the store" {
		t.Errorf("the first mount shows g = %q, want %q", got, "in the store")
	}
	harness.AssertUnchanged(t, before, harness.SnapshotTree(other))
}

// TestBadInputIncompatibleStore: a store written by another format
// version is refused and left as it is.
func TestBadInputIncompatibleStore(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := harness.NewMount(t, harness.WithStore(store), harness.WithLower(harness.LowerFile("f", "f")))
	harness.WriteFile(t, m.Path("g"), "kept")
	m.Unmount()
	setStoreFormatVersion(t, store, 99)
	before := harness.SnapshotTree(m.Lower)
	r := harness.Run(t, "mount", "--lower", m.Lower, "--store", store, m.Dir)
	assertRefused(t, r, refusal{phrase: "version"}, m.Dir)
	if v := storeFormatVersion(t, store); v != 99 {
		t.Errorf("the refused store's format version is now %d, want 99 (left alone)", v)
	}
	harness.AssertUnchanged(t, before, harness.SnapshotTree(m.Lower))
}

// TestBadInputNoFuseDevice: /dev/fuse missing or not accessible (as in
// a container without --device /dev/fuse). agentfs runs in a private
// mount namespace with its own /dev.
func TestBadInputNoFuseDevice(t *testing.T) {
	harness.RequireFUSE(t)
	if _, err := os.Stat("/usr/bin/unshare"); err != nil {
		t.Fatalf("unshare(1) is needed: %v", err)
	}
	for _, c := range []struct {
		name, dev string
	}{
		{"missing", "mount -t tmpfs tmpfs /dev && mknod -m 666 /dev/null c 1 3"},
		{"not permitted", "mount -t tmpfs -o nodev tmpfs /dev && mknod -m 666 /dev/fuse c 10 229 && ln -s /proc/self/fd /dev/fd"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lower := harness.NewLowerDir(t, harness.LowerFile("f", "f"))
			before := harness.SnapshotTree(lower)
			mp := t.TempDir()
			script := c.dev + ` && exec "$0" "$@"`
			cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, harness.Bin(), "mount", "--lower", lower, mp)
			r := harness.RunCmd(t, cmd, cmd.Args[1:])
			assertRefused(t, r, refusal{phrase: "/dev/fuse"}, mp)
			if !strings.Contains(r.Output(), "--device") && !strings.Contains(r.Output(), "modprobe") {
				t.Errorf("the message does not say how to fix it (e.g. --device /dev/fuse or modprobe fuse):\n%s", r)
			}
			harness.AssertUnchanged(t, before, harness.SnapshotTree(lower))
		})
	}
}

// TestBadInputFullBackstore: a full ramdisk gives ENOSPC to the writer;
// what was written before stays intact, a copy-up that does not fit
// leaves the lower view, and the mount keeps working and unmounts.
func TestBadInputFullBackstore(t *testing.T) {
	m := harness.NewMount(t, harness.WithRamdisk("8M"), harness.WithLower(
		harness.LowerFile("big-lower", strings.Repeat("L", 16<<20)),
		harness.LowerFile("small", "small"),
	))
	if m.Status.Backstore != "ramdisk" {
		t.Errorf("status says backstore %q, want ramdisk", m.Status.Backstore)
	}
	before := strings.Repeat("b", 1<<20)
	harness.WriteFile(t, m.Path("before"), before)

	t.Run("writer gets ENOSPC", func(t *testing.T) {
		f, err := os.Create(m.Path("huge"))
		if err != nil {
			t.Fatal(err)
		}
		chunk := make([]byte, 1<<20)
		var werr error
		for i := 0; i < 32 && werr == nil; i++ {
			_, werr = f.Write(chunk)
		}
		if werr == nil {
			werr = f.Sync()
		}
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if !errors.Is(werr, syscall.ENOSPC) {
			t.Errorf("writing 32 MiB into an 8 MiB ramdisk: %v, want ENOSPC", werr)
		}
	})
	t.Run("earlier files intact", func(t *testing.T) {
		if got := harness.ReadFile(t, m.Path("before")); got != before {
			t.Errorf("a file written before the disk filled: %d bytes, want %d of 'b'", len(got), len(before))
		}
		if got := harness.ReadFile(t, m.Path("small")); got != "small" {
			t.Errorf("small = %q", got)
		}
	})
	t.Run("copy-up that does not fit", func(t *testing.T) {
		f, err := os.OpenFile(m.Path("big-lower"), os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteAt([]byte("X"), 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("copy-up of a 16 MiB file into a full 8 MiB ramdisk: %v, want ENOSPC", err)
		}
		got := harness.ReadFile(t, m.Path("big-lower"))
		if len(got) != 16<<20 || strings.Trim(got, "L") != "" {
			t.Errorf("after the failed copy-up big-lower has %d bytes (%q...), want the lower's 16 MiB of 'L'", len(got), got[:min(8, len(got))])
		}
	})
	t.Run("mount keeps working", func(t *testing.T) {
		if err := os.Remove(m.Path("huge")); err != nil {
			t.Errorf("remove huge: %v", err)
		}
		// FUSE delivers the release of a closed file asynchronously, so
		// the space of a just-closed, just-removed file is freed a moment
		// after unlink returns (docs/semantics.md says so): the write is
		// tried again until it succeeds (harness.WaitFor's bound is a
		// guard against a space never freed, not a timing check).
		var werr error
		if !harness.WaitFor(func() bool {
			werr = os.WriteFile(m.Path("after"), []byte("after"), 0644)
			return werr == nil
		}) {
			t.Fatalf("writing after the full backstore was freed: %v", werr)
		}
		if got := harness.ReadFile(t, m.Path("after")); got != "after" {
			t.Errorf("after = %q", got)
		}
		if got, want := harness.ListDir(t, m.Dir), []string{"after", "before", "big-lower", "small"}; !equalStrings(got, want) {
			t.Errorf("root lists %v, want %v", got, want)
		}
	})
}
