package integration

// Checklist items 14 and 15 (docs/semantics.md): open files after
// unlink, mmap, locks, fallocate, SEEK_HOLE/SEEK_DATA, copy_file_range
// and syncs.

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// Checklist 14: unlinked-but-open files keep working.
func TestUnlinkedButOpen(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("lower-ro", "lower read-only"),
		harness.LowerFile("lower-rw", "lower read-write"),
		harness.LowerFile("d/f", "f"),
	))
	t.Run("upper file", func(t *testing.T) {
		f, err := os.OpenFile(m.Path("tmp"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString("before"); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(m.Path("tmp")); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(" and after unlink"), 6); err != nil {
			t.Errorf("write after unlink: %v", err)
		}
		buf := make([]byte, 64)
		n, _ := f.ReadAt(buf, 0)
		if got := string(buf[:n]); got != "before and after unlink" {
			t.Errorf("read after unlink = %q, want %q", got, "before and after unlink")
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Errorf("fstat after unlink: %v", err)
		} else if st.Nlink != 0 || st.Size != 23 {
			t.Errorf("fstat after unlink: nlink %d size %d, want 0 and 23", st.Nlink, st.Size)
		}
		if err := f.Truncate(3); err != nil {
			t.Errorf("ftruncate after unlink: %v", err)
		}
		if err := f.Chmod(0o644); err != nil {
			t.Errorf("fchmod after unlink: %v", err)
		}
		if err := f.Sync(); err != nil {
			t.Errorf("fsync after unlink: %v", err)
		}
		if countName(harness.ListDir(t, m.Dir), "tmp") != 0 {
			t.Errorf("the unlinked file is still listed")
		}
	})
	t.Run("lower file opened read-only", func(t *testing.T) {
		f, err := os.Open(m.Path("lower-ro"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := os.Remove(m.Path("lower-ro")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, err := f.ReadAt(buf, 0)
		if got := string(buf[:n]); got != "lower read-only" {
			t.Errorf("read of an unlinked lower file = %q (%v), want %q", got, err, "lower read-only")
		}
		// A native filesystem says 0 (overlayfs says 1 here: agentfs may
		// do better, not worse).
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Errorf("fstat of an unlinked lower file: %v", err)
		} else if st.Nlink != 0 {
			t.Errorf("fstat of an unlinked lower file: nlink %d, want 0", st.Nlink)
		}
	})
	t.Run("lower file opened read-write", func(t *testing.T) {
		f, err := os.OpenFile(m.Path("lower-rw"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := os.Remove(m.Path("lower-rw")); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("LOWER"), 0); err != nil {
			t.Errorf("write after unlink: %v", err)
		}
		buf := make([]byte, 64)
		n, _ := f.ReadAt(buf, 0)
		if got := string(buf[:n]); got != "LOWER read-write" {
			t.Errorf("read = %q, want %q", got, "LOWER read-write")
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Errorf("fstat of an unlinked copied-up file: %v", err)
		} else if st.Nlink != 0 {
			t.Errorf("fstat of an unlinked copied-up file: nlink %d, want 0", st.Nlink)
		}
	})
	t.Run("directory removed while open", func(t *testing.T) {
		fd, err := unix.Open(m.Path("d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		must(t, os.Remove(m.Path("d/f")))
		if err := unix.Rmdir(m.Path("d")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		if n, err := unix.Getdents(fd, buf); err != nil && err != unix.ENOENT || n > 0 && hasNamesBesidesDots(buf[:n]) {
			t.Errorf("getdents on a removed directory: %d bytes, %s; want nothing", n, harness.ErrName(err))
		}
	})
}

func hasNamesBesidesDots(b []byte) bool {
	for len(b) > 0 {
		reclen := int(b[16]) | int(b[17])<<8
		name := string(bytes.TrimRight(b[19:reclen], "\x00"))
		if name != "." && name != ".." {
			return true
		}
		b = b[reclen:]
	}
	return false
}

// Checklist 14: mmap, shared and private, also across copy-up.
func TestMmap(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("shared", strings.Repeat("s", 8192)),
		harness.LowerFile("private", strings.Repeat("p", 8192)),
		harness.LowerFile("ro", strings.Repeat("r", 8192)),
	))
	t.Run("shared writable mapping of a lower file", func(t *testing.T) {
		f, err := os.OpenFile(m.Path("shared"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		mm, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		copy(mm[100:], "MAPPED")
		if err := unix.Msync(mm, unix.MS_SYNC); err != nil {
			t.Errorf("msync: %v", err)
		}
		buf := make([]byte, 6)
		if r, err := os.Open(m.Path("shared")); err != nil {
			t.Errorf("another fd while mapped: %v", err)
		} else {
			_, err := r.ReadAt(buf, 100)
			r.Close()
			if err != nil || string(buf) != "MAPPED" {
				t.Errorf("read through another fd while mapped = %q (%v), want %q", buf, err, "MAPPED")
			}
		}
		if err := unix.Munmap(mm); err != nil {
			t.Errorf("munmap: %v", err)
		}
		if got := harness.ReadFile(t, m.Path("shared"))[100:106]; got != "MAPPED" {
			t.Errorf("after munmap = %q, want %q", got, "MAPPED")
		}
	})
	t.Run("private mapping does not write through", func(t *testing.T) {
		f, err := os.OpenFile(m.Path("private"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		mm, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		copy(mm, "PRIVATE")
		if _, err := f.WriteAt([]byte("written"), 4096); err != nil {
			t.Errorf("write while privately mapped: %v", err)
		}
		if err := unix.Munmap(mm); err != nil {
			t.Errorf("munmap: %v", err)
		}
		got := harness.ReadFile(t, m.Path("private"))
		if got[:7] != "ppppppp" || got[4096:4103] != "written" {
			t.Errorf("after a private mapping: %q...%q, want %q...%q", got[:7], got[4096:4103], "ppppppp", "written")
		}
	})
	t.Run("writable shared mapping of a read-only fd", func(t *testing.T) {
		f, err := os.Open(m.Path("ro"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if mm, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != unix.EACCES {
			t.Errorf("PROT_WRITE|MAP_SHARED on an O_RDONLY fd = %s, want EACCES", harness.ErrName(err))
			if err == nil {
				if err := unix.Munmap(mm); err != nil {
					t.Errorf("munmap: %v", err)
				}
			}
		}
	})
	t.Run("new file grown with ftruncate", func(t *testing.T) {
		f, err := os.OpenFile(m.Path("new"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(1 << 20); err != nil {
			t.Fatal(err)
		}
		mm, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		copy(mm[1<<19:], "middle")
		if err := unix.Munmap(mm); err != nil {
			t.Errorf("munmap: %v", err)
		}
		f.Close()
		if got := harness.ReadFile(t, m.Path("new")); len(got) != 1<<20 || got[1<<19:1<<19+6] != "middle" {
			t.Errorf("mapped write into a new file: size %d", len(got))
		}
	})
}

// Checklist 15: flock, POSIX and OFD locks.
func TestLocks(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("lower", "l")))
	for _, name := range []string{"lower", "upper"} {
		t.Run(name, func(t *testing.T) {
			p := m.Path(name)
			if name == "upper" {
				harness.WriteFile(t, p, "u")
			}
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			g, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()

			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
				t.Errorf("flock LOCK_EX: %v", err)
			}
			if err := unix.Flock(int(g.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != unix.EWOULDBLOCK {
				t.Errorf("a second LOCK_EX = %s, want EWOULDBLOCK", harness.ErrName(err))
			}
			if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
				t.Errorf("flock LOCK_UN: %v", err)
			}
			if err := unix.Flock(int(g.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				t.Errorf("LOCK_EX after LOCK_UN = %s, want success", harness.ErrName(err))
			}
			if err := unix.Flock(int(g.Fd()), unix.LOCK_UN); err != nil {
				t.Errorf("flock LOCK_UN of the second fd: %v", err)
			}

			lk := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 10}
			if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
				t.Errorf("F_OFD_SETLK: %v", err)
			}
			other := unix.Flock_t{Type: unix.F_WRLCK, Start: 5, Len: 1}
			if err := unix.FcntlFlock(g.Fd(), unix.F_OFD_SETLK, &other); err != unix.EAGAIN {
				t.Errorf("a conflicting F_OFD_SETLK = %s, want EAGAIN", harness.ErrName(err))
			}
			q := unix.Flock_t{Type: unix.F_WRLCK, Start: 5, Len: 1}
			if err := unix.FcntlFlock(g.Fd(), unix.F_OFD_GETLK, &q); err != nil || q.Type != unix.F_WRLCK || q.Pid != -1 {
				t.Errorf("F_OFD_GETLK = type %d pid %d (%s), want F_WRLCK and pid -1", q.Type, q.Pid, harness.ErrName(err))
			}
			lk.Type = unix.F_UNLCK
			if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
				t.Errorf("F_OFD_SETLK F_UNLCK: %v", err)
			}

			h := harness.StartHelper(t, harness.Cred{Uid: 0, Gid: 0}, harness.OpPosixLock(p, 0, 100), harness.OpHold())
			if len(h.Results) < 1 || h.Results[0].Errno != "ok" {
				h.Release()
				t.Fatalf("the helper's POSIX lock: %v", h.Results)
			}
			pid := h.Results[0].Out
			q = unix.Flock_t{Type: unix.F_WRLCK, Start: 50, Len: 10}
			err = unix.FcntlFlock(f.Fd(), unix.F_GETLK, &q)
			if err != nil || q.Type != unix.F_WRLCK || q.Start != 0 || q.Len != 100 || strconv.Itoa(int(q.Pid)) != pid {
				t.Errorf("F_GETLK = type %d start %d len %d pid %d (%s), want F_WRLCK 0 100 pid %s", q.Type, q.Start, q.Len, q.Pid, harness.ErrName(err), pid)
			}
			set := unix.Flock_t{Type: unix.F_RDLCK, Start: 50, Len: 10}
			if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &set); err != unix.EAGAIN && err != unix.EACCES {
				t.Errorf("F_SETLK against another process's lock = %s, want EAGAIN", harness.ErrName(err))
			}
			h.Release()
			if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &set); err != nil {
				t.Errorf("F_SETLK after the other process exited = %s, want success", harness.ErrName(err))
			}
		})
	}
}

// Checklist 15: fallocate, SEEK_HOLE/SEEK_DATA, copy_file_range, fsync,
// fdatasync, syncfs.
func TestFileOperations(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("src", fourMiB),
		harness.LowerFile("falloc-lower", "lower content"),
		harness.LowerSparse("sparse", 8<<20, map[int64]string{4 << 20: "data"}),
	))
	t.Run("fallocate", func(t *testing.T) {
		f, err := os.OpenFile(m.Path("falloc"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fd := int(f.Fd())
		if err := unix.Fallocate(fd, 0, 0, 1<<20); err != nil {
			t.Fatalf("fallocate: %v", err)
		}
		if st := harness.Lstat(t, m.Path("falloc")); st.Size != 1<<20 || st.Blocks < 2048 {
			t.Errorf("after fallocate 1 MiB: size %d blocks %d, want %d and >= 2048", st.Size, st.Blocks, 1<<20)
		}
		if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 1<<20, 1<<20); err != nil {
			t.Errorf("fallocate KEEP_SIZE: %v", err)
		}
		if st := harness.Lstat(t, m.Path("falloc")); st.Size != 1<<20 || st.Blocks < 4096 {
			t.Errorf("after fallocate KEEP_SIZE: size %d blocks %d, want %d and >= 4096", st.Size, st.Blocks, 1<<20)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte("d"), 1<<20), 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4096, 8192); err != nil {
			t.Errorf("fallocate PUNCH_HOLE: %v", err)
		}
		buf := make([]byte, 3)
		if _, err := f.ReadAt(buf, 8190); err != nil {
			t.Errorf("read in a punched hole: %v", err)
		} else if string(buf) != "\x00\x00\x00" {
			t.Errorf("read in a punched hole = %q, want zeros", buf)
		}
		if off, err := unix.Seek(fd, 0, unix.SEEK_HOLE); err != nil || off != 4096 {
			t.Errorf("SEEK_HOLE after punching [4096, 12288) = %d, %s; want 4096", off, harness.ErrName(err))
		}
		if err := unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE, 0, 10); err != nil && err != unix.EOPNOTSUPP {
			t.Errorf("fallocate ZERO_RANGE: %v", err)
		}
	})
	t.Run("fallocate copies a lower file up", func(t *testing.T) {
		f, err := os.OpenFile(m.Path("falloc-lower"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := unix.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
			t.Fatalf("fallocate: %v", err)
		}
		got := harness.ReadFile(t, m.Path("falloc-lower"))
		if len(got) != 1<<20 || got[:13] != "lower content" || strings.Trim(got[13:], "\x00") != "" {
			t.Errorf("after fallocate of a lower file: size %d, starts %q; want 1 MiB starting %q then zeros", len(got), got[:min(13, len(got))], "lower content")
		}
	})
	t.Run("SEEK_HOLE and SEEK_DATA", func(t *testing.T) {
		for _, name := range []string{"sparse", "sparse-upper"} {
			if name == "sparse-upper" {
				f, err := os.Create(m.Path(name))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte("data"), 4<<20); err != nil {
					t.Fatal(err)
				}
				if err := f.Truncate(8 << 20); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			fd, err := unix.Open(m.Path(name), unix.O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if off, err := unix.Seek(fd, 0, unix.SEEK_DATA); err != nil || off != 4<<20 {
				t.Errorf("%s: SEEK_DATA from 0 = %d, %s; want %d", name, off, harness.ErrName(err), 4<<20)
			}
			if off, err := unix.Seek(fd, 0, unix.SEEK_HOLE); err != nil || off != 0 {
				t.Errorf("%s: SEEK_HOLE from 0 = %d, %s; want 0", name, off, harness.ErrName(err))
			}
			if off, err := unix.Seek(fd, 4<<20, unix.SEEK_HOLE); err != nil || off <= 4<<20 || off > 8<<20 {
				t.Errorf("%s: SEEK_HOLE from the data = %d, %s; want after %d", name, off, harness.ErrName(err), 4<<20)
			}
			if off, err := unix.Seek(fd, 5<<20, unix.SEEK_DATA); err != unix.ENXIO {
				t.Errorf("%s: SEEK_DATA after the last data = %d, %s; want ENXIO", name, off, harness.ErrName(err))
			}
			if off, err := unix.Seek(fd, 9<<20, unix.SEEK_HOLE); err != unix.ENXIO {
				t.Errorf("%s: SEEK_HOLE beyond EOF = %d, %s; want ENXIO", name, off, harness.ErrName(err))
			}
			unix.Close(fd)
		}
	})
	t.Run("copy_file_range", func(t *testing.T) {
		src, err := os.Open(m.Path("src"))
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		dst, err := os.Create(m.Path("dst"))
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		total := 0
		for total < len(fourMiB) {
			n, err := unix.CopyFileRange(int(src.Fd()), nil, int(dst.Fd()), nil, len(fourMiB)-total, 0)
			if err != nil || n == 0 {
				t.Fatalf("copy_file_range after %d bytes: %d, %v", total, n, err)
			}
			total += n
		}
		if harness.ReadFile(t, m.Path("dst")) != fourMiB {
			t.Errorf("copy_file_range from a lower file: the copy differs")
		}
		roff, woff := int64(100), int64(10)
		if n, err := unix.CopyFileRange(int(src.Fd()), &roff, int(dst.Fd()), &woff, 5, 0); err != nil || n != 5 {
			t.Errorf("copy_file_range with offsets = %d, %v", n, err)
		}
		if got := harness.ReadFile(t, m.Path("dst"))[10:15]; got != fourMiB[100:105] {
			t.Errorf("copy_file_range with offsets wrote %q, want %q", got, fourMiB[100:105])
		}
	})
	t.Run("fsync, fdatasync, syncfs", func(t *testing.T) {
		objects0, _ := m.BackstoreUsage()
		r, err := os.Open(m.Path("src"))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if err := unix.Fsync(int(r.Fd())); err != nil {
			t.Errorf("fsync of a read-only fd of a lower file: %v", err)
		}
		if err := unix.Syncfs(int(r.Fd())); err != nil {
			t.Errorf("syncfs: %v", err)
		}
		if objects, _ := m.BackstoreUsage(); objects != objects0 {
			t.Errorf("fsync of a read-only fd copied the file up: objects %d -> %d", objects0, objects)
		}
		w, err := os.OpenFile(m.Path("dst"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.WriteAt([]byte("synced"), 0); err != nil {
			t.Errorf("write before fsync: %v", err)
		}
		if err := unix.Fsync(int(w.Fd())); err != nil {
			t.Errorf("fsync: %v", err)
		}
		if err := unix.Fdatasync(int(w.Fd())); err != nil {
			t.Errorf("fdatasync: %v", err)
		}
		dfd, err := unix.Open(m.Dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(dfd)
		if err := unix.Fsync(dfd); err != nil {
			t.Errorf("fsync of a directory: %v", err)
		}
	})
}
