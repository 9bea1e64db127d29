package integration

// Checklist items 5–9 (docs/semantics.md): when copy-up happens, how
// much it copies, what it preserves, and what open files see across it.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// fourMiB is a lower file large enough that copying its data shows in
// the backstore's usage.
var fourMiB = strings.Repeat("0123456789abcdef", 1<<18)

// copyLimit is how much a copy-up that must copy no data may still add
// to the backstore (metadata, an empty object).
const copyLimit = 256 << 10

// Checklist 5: read-only opens never copy up.
func TestReadOnlyAccessDoesNotCopyUp(t *testing.T) {
	m := harness.NewMount(t, harness.WithStore(filepath.Join(t.TempDir(), "store")), harness.WithLower(
		harness.LowerFile("big", fourMiB, harness.WithXattr("user.a", "b")),
		harness.LowerSymlink("link", "big"),
		harness.LowerFile("d/x", "x"),
		harness.LowerSparse("sparse", 64<<20, map[int64]string{0: "a", 32 << 20: "b"}),
	))
	objects0, bytes0 := m.BackstoreUsage()
	st0, err := m.FetchStatus()
	if err != nil {
		t.Fatalf("agentfs status: %v", err)
	}

	if got := harness.ReadFile(t, m.Path("big")); got != fourMiB {
		t.Errorf("big read back differs from the lower file")
	}
	if got := harness.ReadFile(t, m.Path("link")); got != fourMiB {
		t.Errorf("read through a symlink differs")
	}
	f, err := os.Open(m.Path("big"))
	if err != nil {
		t.Fatal(err)
	}
	mm, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Errorf("mmap read-only: %v", err)
	} else {
		if string(mm[:16]) != fourMiB[:16] {
			t.Errorf("mapped %q, want %q", mm[:16], fourMiB[:16])
		}
		if err := unix.Munmap(mm); err != nil {
			t.Errorf("munmap of big: %v", err)
		}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		t.Errorf("flock on a read-only fd: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Errorf("fstat of big: %v", err)
	}
	f.Close()
	if _, err := os.Readlink(m.Path("link")); err != nil {
		t.Errorf("readlink: %v", err)
	}
	if _, err := harness.GetXattr(m.Path("big"), "user.a"); err != nil {
		t.Errorf("getxattr big user.a: %v", err)
	}
	if _, err := harness.ListXattrs(m.Path("big")); err != nil {
		t.Errorf("listxattr big: %v", err)
	}
	harness.ListDir(t, m.Path("d"))
	if err := unix.Access(m.Path("big"), unix.R_OK|unix.W_OK); err != nil {
		t.Errorf("access(big, R_OK|W_OK): %v", err)
	}
	if fd, err := unix.Open(m.Path("sparse"), unix.O_RDONLY, 0); err != nil {
		t.Errorf("open sparse: %v", err)
	} else {
		if off, err := unix.Seek(fd, 0, unix.SEEK_HOLE); err != nil || off >= 32<<20 {
			t.Errorf("SEEK_HOLE on a lower sparse file = %d, %s; want a hole before 32 MiB", off, harness.ErrName(err))
		}
		unix.Close(fd)
	}
	if fd, err := unix.Open(m.Path("d/x"), unix.O_PATH, 0); err != nil {
		t.Errorf("open d/x O_PATH: %v", err)
	} else {
		unix.Close(fd)
	}

	objects, bytes := m.BackstoreUsage()
	if objects != objects0 || bytes != bytes0 {
		t.Errorf("read-only access changed the backstore: %d objects, %d bytes -> %d objects, %d bytes; want no copy-up",
			objects0, bytes0, objects, bytes)
	}
	if st, err := m.FetchStatus(); err != nil {
		t.Errorf("agentfs status: %v", err)
	} else if st.Objects != st0.Objects {
		t.Errorf("status: objects %d -> %d after read-only access, want unchanged", st0.Objects, st.Objects)
	}
}

// Checklist 5 and 6: write-open, truncate, chmod, chown, utimens, xattr
// set/remove, link and rename copy up; the metadata changes and O_TRUNC
// copy no data; every change survives a remount.
func TestWhatCopiesUp(t *testing.T) {
	names := []string{"wronly", "rdwr", "truncate", "otrunc", "truncate0", "chmod", "chown", "utimens", "setxattr", "removexattr", "link", "rename"}
	var entries []harness.Entry
	for _, n := range names {
		entries = append(entries, harness.LowerFile(n, fourMiB, harness.WithXattr("user.keep", "k"), harness.WithXattr("user.gone", "g")))
	}
	m := harness.NewMount(t, harness.WithStore(filepath.Join(t.TempDir(), "store")), harness.WithLower(entries...))

	type change struct {
		name   string
		noData bool // must copy no data
		do     func(p string) error
		check  func(t *testing.T, p string)
	}
	when := harness.Timespec(1400000000, 123456789)
	changes := []change{
		{"wronly", false, func(p string) error { return openClose(p, unix.O_WRONLY) }, nil},
		{"rdwr", false, func(p string) error { return openClose(p, unix.O_RDWR) }, nil},
		{"truncate", false, func(p string) error { return unix.Truncate(p, 100) }, func(t *testing.T, p string) {
			if got := harness.ReadFile(t, p); got != fourMiB[:100] {
				t.Errorf("after truncate to 100: %d bytes, want the first 100 of the lower file", len(got))
			}
		}},
		{"otrunc", true, func(p string) error { return openClose(p, unix.O_WRONLY|unix.O_TRUNC) }, func(t *testing.T, p string) {
			if st := harness.Lstat(t, p); st.Size != 0 {
				t.Errorf("after O_TRUNC: size %d, want 0", st.Size)
			}
		}},
		{"truncate0", true, func(p string) error { return unix.Truncate(p, 0) }, func(t *testing.T, p string) {
			if st := harness.Lstat(t, p); st.Size != 0 {
				t.Errorf("after truncate(0): size %d, want 0", st.Size)
			}
		}},
		{"chmod", true, func(p string) error { return unix.Chmod(p, 0o604) }, func(t *testing.T, p string) {
			if st := harness.Lstat(t, p); st.Mode&0o7777 != 0o604 {
				t.Errorf("after chmod 604: mode %o", st.Mode&0o7777)
			}
		}},
		{"chown", true, func(p string) error { return unix.Chown(p, 4321, 8765) }, func(t *testing.T, p string) {
			if st := harness.Lstat(t, p); st.Uid != 4321 || st.Gid != 8765 {
				t.Errorf("after chown 4321:8765: %d:%d", st.Uid, st.Gid)
			}
		}},
		{"utimens", true, func(p string) error {
			return unix.UtimesNano(p, []unix.Timespec{when, when})
		}, func(t *testing.T, p string) {
			if st := harness.Lstat(t, p); st.Mtim != when || st.Atim != when {
				t.Errorf("after utimens: atime %v mtime %v, want %v", st.Atim, st.Mtim, when)
			}
		}},
		{"setxattr", true, func(p string) error { return unix.Setxattr(p, "user.new", []byte("v"), 0) }, func(t *testing.T, p string) {
			if v, err := harness.GetXattr(p, "user.new"); v != "v" {
				t.Errorf("user.new = %q (%s), want %q", v, harness.ErrName(err), "v")
			}
		}},
		{"removexattr", true, func(p string) error { return unix.Removexattr(p, "user.gone") }, func(t *testing.T, p string) {
			if _, err := harness.GetXattr(p, "user.gone"); err != unix.ENODATA {
				t.Errorf("user.gone after removexattr: %s, want ENODATA", harness.ErrName(err))
			}
		}},
		{"link", false, func(p string) error { return unix.Link(p, p+".2") }, func(t *testing.T, p string) {
			if a, b := harness.Lstat(t, p), harness.Lstat(t, p+".2"); a.Ino != b.Ino || a.Nlink != 2 {
				t.Errorf("after link: inos %d, %d nlink %d; want one inode with nlink 2", a.Ino, b.Ino, a.Nlink)
			}
		}},
		{"rename", false, func(p string) error { return unix.Rename(p, p+".moved") }, func(t *testing.T, p string) {
			if got := harness.ReadFile(t, p+".moved"); got != fourMiB {
				t.Errorf("renamed file's content differs")
			}
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != unix.ENOENT {
				t.Errorf("rename source: lstat = %s, want ENOENT", harness.ErrName(err))
			}
		}},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			p := m.Path(c.name)
			_, before := m.BackstoreUsage()
			if err := c.do(p); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			_, after := m.BackstoreUsage()
			if c.noData && after-before > copyLimit {
				t.Errorf("%s grew the backstore by %d bytes: it copied the data (want no data copied)", c.name, after-before)
			}
			if c.check != nil {
				c.check(t, p)
			}
			if c.name != "removexattr" && c.name != "rename" && c.name != "truncate0" && c.name != "otrunc" {
				if v, err := harness.GetXattr(pathAfter(c.name, p), "user.keep"); v != "k" {
					t.Errorf("user.keep after %s = %q (%s), want %q", c.name, v, harness.ErrName(err), "k")
				}
			}
		})
	}
	t.Run("after remount", func(t *testing.T) {
		m.Remount()
		for _, c := range changes {
			if c.check != nil {
				c.check(t, m.Path(c.name))
			}
		}
	})
}

func pathAfter(name, p string) string {
	if name == "rename" {
		return p + ".moved"
	}
	return p
}

func openClose(p string, flags int) error {
	fd, err := unix.Open(p, flags, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// Checklist 6: copy-up is atomic and happens once under concurrency.
func TestConcurrentCopyUp(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("append", fourMiB), harness.LowerFile("pwrite", fourMiB),
		harness.LowerFile("atomic", strings.Repeat(fourMiB, 8))))
	objects0, _ := m.BackstoreUsage()
	const n = 32
	t.Run("appends", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f, err := os.OpenFile(m.Path("append"), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Errorf("open %d: %v", i, err)
					return
				}
				defer f.Close()
				if _, err := fmt.Fprintf(f, "line %02d\n", i); err != nil {
					t.Errorf("append %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		got := harness.ReadFile(t, m.Path("append"))
		if !strings.HasPrefix(got, fourMiB) {
			t.Fatalf("after %d concurrent appends: the lower content is not intact at the start (%d bytes)", n, len(got))
		}
		lines := strings.Split(strings.TrimSuffix(got[len(fourMiB):], "\n"), "\n")
		sort.Strings(lines)
		var want []string
		for i := range n {
			want = append(want, fmt.Sprintf("line %02d", i))
		}
		if !equalStrings(lines, want) {
			t.Errorf("after %d concurrent appends: lines %q, want each of %q once", n, lines, want)
		}
	})
	t.Run("pwrites", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f, err := os.OpenFile(m.Path("pwrite"), os.O_RDWR, 0)
				if err != nil {
					t.Errorf("open %d: %v", i, err)
					return
				}
				defer f.Close()
				if _, err := f.WriteAt(bytes.Repeat([]byte{byte('A' + i)}, 100), int64(i)*100000); err != nil {
					t.Errorf("pwrite %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		got := harness.ReadFile(t, m.Path("pwrite"))
		want := []byte(fourMiB)
		for i := range n {
			copy(want[i*100000:], bytes.Repeat([]byte{byte('A' + i)}, 100))
		}
		if got != string(want) {
			t.Errorf("after %d concurrent pwrites into one copy-up: content differs at byte %d", n, firstDiff(got, string(want)))
		}
	})
	// Two file objects, and one for the mount's root directory, which
	// the first copy-up brings up as the files' parent.
	if objects, _ := m.BackstoreUsage(); objects != objects0+3 {
		t.Errorf("backstore objects %d -> %d, want +3 (each file copied up once, and the root directory)", objects0, objects)
	}
	t.Run("readers during copy-up see the whole file", func(t *testing.T) {
		const size = 32 << 20
		tail := fourMiB[len(fourMiB)-16:]
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var bad []string
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 16)
				for i := 0; ; i++ {
					select {
					case <-stop:
						if i > 0 {
							return
						}
					default:
					}
					f, err := os.Open(m.Path("atomic"))
					if err != nil {
						mu.Lock()
						bad = append(bad, err.Error())
						mu.Unlock()
						return
					}
					var st unix.Stat_t
					if err := unix.Fstat(int(f.Fd()), &st); err != nil {
						f.Close()
						mu.Lock()
						bad = append(bad, "fstat: "+err.Error())
						mu.Unlock()
						return
					}
					n, _ := f.ReadAt(buf, size-16)
					f.Close()
					if st.Size != size || string(buf[:n]) != tail {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("size %d, last bytes %q", st.Size, buf[:n]))
						mu.Unlock()
						return
					}
				}
			}()
		}
		w, err := os.OpenFile(m.Path("atomic"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt([]byte("X"), 0); err != nil {
			t.Errorf("the write that copies atomic up: %v", err)
		}
		w.Close()
		close(stop)
		wg.Wait()
		if len(bad) > 0 {
			t.Errorf("a reader saw a partial copy-up of a %d-byte file: %v", size, bad)
		}
	})
}

func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Checklist 7: copy-up preserves mode (incl. setuid and setgid), owner,
// nanosecond times, xattrs (user.* and trusted.*) and holes; the
// parent's mtime does not change.
func TestCopyUpPreserves(t *testing.T) {
	atime, mtime := harness.Timespec(1500000000, 123456789), harness.Timespec(1600000000, 987654321)
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerDir("d", harness.WithTimes(harness.Timespec(1400000000, 111), harness.Timespec(1400000001, 222))),
		harness.LowerSparse("d/sparse", 1<<30, map[int64]string{0: "head", 512 << 20: "middle"},
			harness.WithOwner(1234, 5678), harness.WithMode(0o6755), harness.WithTimes(atime, mtime),
			harness.WithXattr("user.color", "blue"), harness.WithXattr("trusted.t", "tv")),
		harness.LowerFile("d/meta", "meta", harness.WithOwner(1234, 5678), harness.WithMode(0o2750), harness.WithTimes(atime, mtime),
			harness.WithXattr("user.color", "red"), harness.WithXattr("trusted.t", "tm")),
	))
	dir0 := harness.Lstat(t, m.Path("d"))
	wantAttrs := func(t *testing.T, p string, mode uint32, checkMtime bool) {
		t.Helper()
		st := harness.Lstat(t, p)
		if st.Mode&0o7777 != mode || st.Uid != 1234 || st.Gid != 5678 {
			t.Errorf("%s: mode %o owner %d:%d, want %o 1234:5678", filepath.Base(p), st.Mode&0o7777, st.Uid, st.Gid, mode)
		}
		if st.Atim != atime {
			t.Errorf("%s: atime %d.%09d, want %d.%09d", filepath.Base(p), st.Atim.Sec, st.Atim.Nsec, atime.Sec, atime.Nsec)
		}
		if checkMtime && st.Mtim != mtime {
			t.Errorf("%s: mtime %d.%09d, want %d.%09d", filepath.Base(p), st.Mtim.Sec, st.Mtim.Nsec, mtime.Sec, mtime.Nsec)
		}
	}
	t.Run("metadata copy-up", func(t *testing.T) {
		if err := unix.Setxattr(m.Path("d/meta"), "user.added", []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		wantAttrs(t, m.Path("d/meta"), 0o2750, true)
		for name, want := range map[string]string{"user.color": "red", "trusted.t": "tm", "user.added": "x"} {
			if v, err := harness.GetXattr(m.Path("d/meta"), name); v != want {
				t.Errorf("%s = %q (%s), want %q", name, v, harness.ErrName(err), want)
			}
		}
	})
	t.Run("data copy-up", func(t *testing.T) {
		if err := openClose(m.Path("d/sparse"), unix.O_RDWR); err != nil {
			t.Fatal(err)
		}
		wantAttrs(t, m.Path("d/sparse"), 0o6755, true) // opening for writing changes no time
		f, err := os.OpenFile(m.Path("d/sparse"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("X"), 100); err != nil {
			t.Fatal(err)
		}
		f.Close()
		wantAttrs(t, m.Path("d/sparse"), 0o6755, false) // root (CAP_FSETID) keeps setuid/setgid on write
		for name, want := range map[string]string{"user.color": "blue", "trusted.t": "tv"} {
			if v, err := harness.GetXattr(m.Path("d/sparse"), name); v != want {
				t.Errorf("%s = %q (%s), want %q", name, v, harness.ErrName(err), want)
			}
		}
		st := harness.Lstat(t, m.Path("d/sparse"))
		if st.Size != 1<<30 {
			t.Errorf("size %d, want %d", st.Size, 1<<30)
		}
		if st.Blocks > 2048 {
			t.Errorf("st_blocks %d after copy-up of a 1 GiB file with two data blocks: the holes were filled (want <= 2048)", st.Blocks)
		}
		if _, bytes := m.BackstoreUsage(); bytes > 1<<20 {
			t.Errorf("backstore holds %d bytes after copy-up of a sparse file with two data blocks: the holes were filled", bytes)
		}
		fd, err := unix.Open(m.Path("d/sparse"), unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		hole, err := unix.Seek(fd, 0, unix.SEEK_HOLE)
		if err != nil || hole == 0 || hole >= 512<<20 {
			t.Errorf("SEEK_HOLE from 0 = %d, %s; want a hole after the first block", hole, harness.ErrName(err))
		}
		if data, err := unix.Seek(fd, hole, unix.SEEK_DATA); err != nil || data != 512<<20 {
			t.Errorf("SEEK_DATA from %d = %d, %s; want %d", hole, data, harness.ErrName(err), 512<<20)
		}
		buf := make([]byte, 6)
		if _, err := unix.Pread(fd, buf, 512<<20); err != nil {
			t.Errorf("pread after the hole: %v", err)
		} else if string(buf) != "middle" {
			t.Errorf("data after the hole = %q, want %q", buf, "middle")
		}
		if _, err := unix.Pread(fd, buf, 0); err != nil {
			t.Errorf("pread at 0: %v", err)
		} else if string(buf[:4]) != "head" {
			t.Errorf("first bytes = %q, want %q", buf[:4], "head")
		}
		if _, err := unix.Pread(fd, buf[:1], 100); err != nil {
			t.Errorf("pread at 100: %v", err)
		} else if buf[0] != 'X' {
			t.Errorf("byte 100 = %q, want %q", buf[0], 'X')
		}
	})
	t.Run("parent mtime unchanged", func(t *testing.T) {
		if dir := harness.Lstat(t, m.Path("d")); dir.Mtim != dir0.Mtim {
			t.Errorf("d's mtime %d.%09d -> %d.%09d after copy-ups inside it, want unchanged", dir0.Mtim.Sec, dir0.Mtim.Nsec, dir.Mtim.Sec, dir.Mtim.Nsec)
		}
	})
}

// Checklist 9 (★ with passthrough): a descriptor opened before copy-up
// sees the data written after it; the write never reaches the lower file
// (docs/semantics.md: with passthrough an inode has one backing file).
func TestOpenBeforeCopyUpSeesLaterWrites(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("read-then-write", "lower data, lower data"),
		harness.LowerFile("mapped", strings.Repeat("m", 8192)),
		harness.LowerFile("truncated", "lower"),
	))
	t.Run("read fd", func(t *testing.T) {
		r, err := os.Open(m.Path("read-then-write"))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		buf := make([]byte, 22)
		if _, err := r.ReadAt(buf, 0); err != nil || string(buf) != "lower data, lower data" {
			t.Fatalf("first read %q, %v", buf, err)
		}
		w, err := os.OpenFile(m.Path("read-then-write"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt([]byte("UPPER"), 0); err != nil {
			t.Fatal(err)
		}
		w.Close()
		if _, err := r.ReadAt(buf, 0); err != nil || string(buf) != "UPPER data, lower data" {
			t.Errorf("fd opened before copy-up reads %q (%v), want %q", buf, err, "UPPER data, lower data")
		}
		if got := harness.ReadFile(t, m.Path("read-then-write")); got != "UPPER data, lower data" {
			t.Errorf("a new open reads %q, want %q", got, "UPPER data, lower data")
		}
	})
	t.Run("read-only shared mapping", func(t *testing.T) {
		r, err := os.Open(m.Path("mapped"))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		mm, err := unix.Mmap(int(r.Fd()), 0, 8192, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := unix.Munmap(mm); err != nil {
				t.Errorf("munmap of mapped: %v", err)
			}
		}()
		_ = mm[0]
		w, err := os.OpenFile(m.Path("mapped"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt([]byte("WRITTEN"), 4096); err != nil {
			t.Fatal(err)
		}
		w.Close()
		if got := string(mm[4096:4103]); got != "WRITTEN" {
			t.Errorf("a shared mapping made before copy-up shows %q, want %q (as on a native filesystem)", got, "WRITTEN")
		}
	})
	t.Run("truncate by path", func(t *testing.T) {
		r, err := os.Open(m.Path("truncated"))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if err := os.Truncate(m.Path("truncated"), 2); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(r.Fd()), &st); err != nil {
			t.Fatalf("fstat of the fd opened before truncate: %v", err)
		}
		buf := make([]byte, 10)
		n, _ := r.ReadAt(buf, 0) // io.EOF: the file is shorter than buf
		if st.Size != 2 || string(buf[:n]) != "lo" {
			t.Errorf("fd opened before truncate: fstat size %d, reads %q; want 2 and %q", st.Size, buf[:n], "lo")
		}
	})
}
