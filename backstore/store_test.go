package backstore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCopyUpPreservesAttrsAndHoles(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src := filepath.Join(t.TempDir(), "sparse")
	f, _ := os.Create(src)
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("tail"), 1<<30)
	f.Close()
	os.Chmod(src, 0755|os.ModeSetgid)
	unix.Setxattr(src, "user.k", []byte("v"), 0)
	ts := []unix.Timespec{{Sec: 1000, Nsec: 123}, {Sec: 2000, Nsec: 456}}
	unix.UtimesNano(src, ts)

	in, _ := os.Open(src)
	defer in.Close()
	var st unix.Stat_t
	unix.Fstat(int(in.Fd()), &st)
	id, err := s.CopyUp(in, &st, true)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := s.Lstat(id)
	if got.Size != st.Size || got.Mode != st.Mode || got.Mtim != st.Mtim || got.Atim != st.Atim {
		t.Errorf("copy: size %d mode %o mtime %v atime %v, want %d %o %v %v", got.Size, got.Mode, got.Mtim, got.Atim, st.Size, st.Mode, st.Mtim, st.Atim)
	}
	if got.Blocks > 1024 {
		t.Errorf("sparse copy allocates %d blocks: holes were filled", got.Blocks)
	}
	loc := s.Loc(id)
	buf := make([]byte, 8)
	n, err := unix.Getxattr(filepathProc(loc), "user.k", buf)
	if err != nil || string(buf[:n]) != "v" {
		t.Errorf("xattr = %q (%v), want v", buf[:n], err)
	}
	id2, err := s.CopyUp(in, &st, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Lstat(id2); got.Size != 0 || got.Mode != st.Mode {
		t.Errorf("empty copy-up: size %d mode %o", got.Size, got.Mode)
	}
	count := 0
	s.Objects(func(string) error { count++; return nil })
	if count != 2 {
		t.Errorf("objects = %d, want 2", count)
	}
}

func filepathProc(l Loc) string { return fdPath(l.Dirfd) + "/" + l.Name }

func TestRamdiskFullGivesENOSPC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	s, err := Open(Options{Kind: "ramdisk", Dir: t.TempDir(), RamdiskSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Info().Mode != "tmpfs" {
		t.Fatalf("mode = %s, want tmpfs", s.Info().Mode)
	}
	src := filepath.Join(t.TempDir(), "big")
	os.WriteFile(src, make([]byte, 4<<20), 0644)
	in, _ := os.Open(src)
	defer in.Close()
	var st unix.Stat_t
	unix.Fstat(int(in.Fd()), &st)
	if _, err := s.CopyUp(in, &st, true); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("copy-up of 4 MiB into a 1 MiB ramdisk: %v, want ENOSPC", err)
	}
	count := 0
	s.Objects(func(string) error { count++; return nil })
	if count != 0 {
		t.Errorf("%d partial objects left behind", count)
	}
}
