package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Checklist 1: upper beats lower; a non-directory hides what is below
// it; directories merge.
func TestUpperBeatsLowerAndDirsMerge(t *testing.T) {
	lower := newLower(t, map[string]string{"d/a": "lower a", "d/b": "lower b", "x/": ""})
	m := mount(t, lower)
	if err := os.WriteFile(m.path("d/a"), []byte("upper a"), 0644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.path("d/c"), []byte("upper c"), 0644); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"d/a": "upper a", "d/b": "lower b", "d/c": "upper c"} {
		if got := readString(t, m.path(p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if got := listNames(t, m.path("d")); strings.Join(got, ",") != "a,b,c" {
		t.Errorf("merged listing = %v, want [a b c]", got)
	}
	// A file replacing a directory hides it entirely.
	if err := os.Remove(m.path("x")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.path("x"), []byte("file"), 0644); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, m.path("x")); st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("x mode = %o, want a regular file", st.Mode)
	}
}

func listNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// Checklist 2 and 3: whiteouts, opaque directories, rmdir on the merged view.
func TestWhiteoutsAndOpaqueDirs(t *testing.T) {
	lower := newLower(t, map[string]string{"d/a": "a", "d/sub/b": "b", "f": "f"})
	m := mount(t, lower)
	if err := os.Remove(m.path("f")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(m.path("f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("whited-out file: lstat err = %v, want ENOENT", err)
	}
	if got := listNames(t, m.dir); strings.Join(got, ",") != "d" {
		t.Errorf("root listing = %v, want [d] (whiteouts are invisible)", got)
	}
	if err := os.WriteFile(m.path("f"), []byte("new"), 0600); err != nil {
		t.Fatalf("create over whiteout: %v", err)
	}
	if got := readString(t, m.path("f")); got != "new" {
		t.Errorf("created over whiteout: %q", got)
	}
	if err := unix.Rmdir(m.path("d")); err != unix.ENOTEMPTY {
		t.Errorf("rmdir of merged non-empty dir: %v, want ENOTEMPTY", err)
	}
	os.Remove(m.path("d/a"))
	if err := unix.Rmdir(m.path("d")); err != unix.ENOTEMPTY {
		t.Errorf("rmdir with a lower subdir left: %v, want ENOTEMPTY", err)
	}
	if err := os.RemoveAll(m.path("d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.path("d"), 0755); err != nil {
		t.Fatalf("mkdir over whiteout: %v", err)
	}
	if got := listNames(t, m.path("d")); len(got) != 0 {
		t.Errorf("dir made over a whiteout lists %v, want nothing (opaque)", got)
	}
}

// Checklist 4: readdir de-duplicated, internal names hidden, d_type and
// d_ino right, offsets stable for seekdir/telldir.
func TestReaddir(t *testing.T) {
	spec := map[string]string{"d/l": "->target", "d/sub/": ""}
	for i := 0; i < 300; i++ {
		spec[fmt.Sprintf("d/file%03d", i)] = "x"
	}
	lower := newLower(t, spec)
	m := mount(t, lower)
	for i := 0; i < 300; i += 7 {
		os.WriteFile(m.path(fmt.Sprintf("d/file%03d", i)), []byte("changed"), 0644)
	}
	os.WriteFile(m.path("d/new"), []byte("n"), 0644)
	os.Remove(m.path("d/file001"))

	fd, err := unix.Open(m.path("d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	all := readDirents(t, fd)
	seen := map[string]bool{}
	for _, e := range all {
		if seen[e.name] {
			t.Errorf("%q listed twice", e.name)
		}
		seen[e.name] = true
		if e.name == "." || e.name == ".." {
			continue
		}
		st := lstat(t, m.path("d/"+e.name))
		if e.ino != st.Ino {
			t.Errorf("%s: d_ino %d != st_ino %d", e.name, e.ino, st.Ino)
		}
		if want := uint8(st.Mode & unix.S_IFMT >> 12); e.typ != want {
			t.Errorf("%s: d_type %d, want %d", e.name, e.typ, want)
		}
	}
	if seen["file001"] || !seen["new"] || len(all) != 2+300-1+2+1 {
		t.Errorf("listing has %d names (file001 %v, new %v), want %d", len(all), seen["file001"], seen["new"], 2+300-1+2+1)
	}
	// Seek back to the offset of the 100th entry: the rest repeats.
	if _, err := unix.Seek(fd, int64(all[99].off), 0); err != nil {
		t.Fatal(err)
	}
	rest := readDirents(t, fd)
	if len(rest) != len(all)-100 || rest[0].name != all[100].name {
		t.Errorf("after seekdir: %d names starting %q, want %d starting %q", len(rest), rest[0].name, len(all)-100, all[100].name)
	}
	if seen[".agentfs.ctl"] {
		t.Errorf("control file listed")
	}
	if got := listNames(t, m.dir); strings.Contains(strings.Join(got, ","), ".agentfs") {
		t.Errorf("root listing shows an internal name: %v", got)
	}
}

type dirent struct {
	name string
	ino  uint64
	typ  uint8
	off  int64
}

func readDirents(t testing.TB, fd int) []dirent {
	t.Helper()
	var out []dirent
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents: %v", err)
		}
		if n == 0 {
			return out
		}
		b := buf[:n]
		for len(b) > 0 {
			ino := *(*uint64)(unsafePointer(&b[0]))
			off := *(*int64)(unsafePointer(&b[8]))
			reclen := int(*(*uint16)(unsafePointer(&b[16])))
			typ := b[18]
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			out = append(out, dirent{string(name), ino, typ, off})
			b = b[reclen:]
		}
	}
}

// Checklist 5 and 6: read-only opens never copy up; metadata changes
// copy no data; O_TRUNC copies no data; copy-up happens once under
// concurrency.
func TestCopyUpWhenAndHowMuch(t *testing.T) {
	big := strings.Repeat("0123456789", 1<<17) // 1.25 MB
	lower := newLower(t, map[string]string{"big": big, "meta": big, "trunc": big, "conc": "start\n"})
	store := filepath.Join(t.TempDir(), "store")
	m := mount(t, lower, withStore(store))
	n0 := storeBytes(t, store)
	if got := readString(t, m.path("big")); got != big {
		t.Fatal("read of lower file differs")
	}
	if n := storeBytes(t, store); n != n0 {
		t.Errorf("a read-only open grew the store by %d bytes: it copied up", n-n0)
	}
	if err := os.Chmod(m.path("meta"), 0600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(m.path("meta"), time1, time1)
	if n := storeBytes(t, store); n-n0 > 64<<10 {
		t.Errorf("chmod+utimes grew the store by %d bytes: metadata changes must copy no data", n-n0)
	}
	if st := lstat(t, m.path("meta")); st.Size != int64(len(big)) || st.Mode&07777 != 0600 {
		t.Errorf("meta: size %d mode %o, want %d 0600", st.Size, st.Mode&07777, len(big))
	}
	f, err := os.OpenFile(m.path("trunc"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n := storeBytes(t, store); n-n0 > 64<<10 {
		t.Errorf("O_TRUNC copy-up grew the store by %d bytes: it copied data", n-n0)
	}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			f, err := os.OpenFile(m.path("conc"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Error(err)
				return
			}
			fmt.Fprintf(f, "line %02d\n", i)
			f.Close()
		}(i)
	}
	wg.Wait()
	got := readString(t, m.path("conc"))
	if !strings.HasPrefix(got, "start\n") || strings.Count(got, "\n") != 17 {
		t.Errorf("concurrent copy-up + append: %q, want start plus 16 lines", got)
	}
}

func storeBytes(t testing.TB, store string) int64 {
	var total int64
	filepath.Walk(store, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && strings.Contains(p, "/objects/") {
			st := info.Sys().(*unixStat)
			total += st.Blocks * 512
		}
		return nil
	})
	return total
}

// Checklist 7: copy-up preserves mode (setid too), owner, ns times,
// xattrs and holes; the parent's mtime does not change.
func TestCopyUpPreservesAttributes(t *testing.T) {
	lower := newLower(t, map[string]string{"d/": ""})
	p := filepath.Join(lower, "d/f")
	f, _ := os.Create(p)
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("tail"), 1<<30)
	f.Close()
	os.Chown(p, 1234, 5678)
	os.Chmod(p, 0750|os.ModeSetgid)
	unix.Setxattr(p, "user.color", []byte("blue"), 0)
	unix.Setxattr(p, "trusted.t", []byte("tv"), 0)
	ts := []unix.Timespec{{Sec: 1500000000, Nsec: 123456789}, {Sec: 1600000000, Nsec: 987654321}}
	unix.UtimesNano(p, ts)
	unix.UtimesNano(filepath.Join(lower, "d"), ts)
	m := mount(t, lower)
	dirBefore := lstat(t, m.path("d"))
	before := lstat(t, m.path("d/f"))
	if err := unix.Setxattr(m.path("d/f"), "user.other", []byte("x"), 0); err != nil {
		t.Fatal(err) // a metadata copy-up first
	}
	w, err := os.OpenFile(m.path("d/f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteAt([]byte("HEAD"), 0) // then the data copy-up
	w.Close()
	after := lstat(t, m.path("d/f"))
	if after.Mode != before.Mode || after.Uid != 1234 || after.Gid != 5678 {
		t.Errorf("after copy-up: mode %o uid %d gid %d, want %o 1234 5678", after.Mode, after.Uid, after.Gid, before.Mode)
	}
	if after.Atim != ts[0] {
		t.Errorf("atime after copy-up = %v, want %v", after.Atim, ts[0])
	}
	if after.Blocks > 2048 {
		t.Errorf("st_blocks after copy-up of a sparse file = %d: holes were filled", after.Blocks)
	}
	for name, want := range map[string]string{"user.color": "blue", "trusted.t": "tv", "user.other": "x"} {
		buf := make([]byte, 64)
		n, err := unix.Getxattr(m.path("d/f"), name, buf)
		if err != nil || string(buf[:n]) != want {
			t.Errorf("xattr %s = %q (%v), want %q", name, buf[:max(n, 0)], err, want)
		}
	}
	if dirAfter := lstat(t, m.path("d")); dirAfter.Mtim != dirBefore.Mtim {
		t.Errorf("parent mtime changed by copy-up: %v -> %v", dirBefore.Mtim, dirAfter.Mtim)
	}
	r, _ := os.Open(m.path("d/f"))
	buf := make([]byte, 4)
	r.ReadAt(buf, 1<<30)
	r.Close()
	if string(buf) != "tail" {
		t.Errorf("data past the hole = %q, want tail", buf)
	}
}

// Checklist 8 and 17: copy-up of files the caller may write although
// the daemon's open would be refused; permission checks for others.
func TestPermissions(t *testing.T) {
	lower := newLower(t, map[string]string{"ro": "read only", "mine": "mine", "secret": "s", "shared/": ""})
	os.Chmod(lower, 0755)
	os.Chown(filepath.Join(lower, "ro"), 1000, 1000)
	os.Chmod(filepath.Join(lower, "ro"), 0444)
	os.Chown(filepath.Join(lower, "mine"), 1000, 1000)
	os.Chmod(filepath.Join(lower, "mine"), 0600)
	os.Chmod(filepath.Join(lower, "secret"), 0600)
	os.Chmod(filepath.Join(lower, "shared"), 0777)
	m := mount(t, lower)
	os.Chmod(filepath.Dir(m.dir), 0755)
	// Root may write a 0444 file (CAP_DAC_OVERRIDE).
	if err := os.WriteFile(m.path("ro"), []byte("root wrote"), 0); err != nil {
		t.Errorf("root writing a 0444 file: %v", err)
	}
	if out, err := asUser(1000, 1000, "echo user >> "+m.path("mine")+" && cat "+m.path("mine")); err != nil || out != "mineuser\n" {
		t.Errorf("owner appending to its 0600 file: %q %v", out, err)
	}
	if out, err := asUser(1000, 1000, "cat "+m.path("secret")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("another user reading a 0600 root file: %q %v, want Permission denied", out, err)
	}
	if out, err := asUser(1000, 1000, "echo x > "+m.path("ro")); err == nil {
		t.Errorf("owner writing its 0444 file succeeded: %q", out)
	}
	if out, err := asUser(1000, 1001, "umask 022; touch "+m.path("shared/n")+" && mkdir "+m.path("shared/d")); err != nil {
		t.Fatalf("creating as uid 1000: %s %v", out, err)
	}
	st := lstat(t, m.path("shared/n"))
	if st.Uid != 1000 || st.Gid != 1001 || st.Mode&0777 != 0644 {
		t.Errorf("new file: uid %d gid %d mode %o, want 1000 1001 644 (umask once)", st.Uid, st.Gid, st.Mode&0777)
	}
	// setgid directory inheritance.
	os.Mkdir(m.path("sg"), 0775)
	os.Chown(m.path("sg"), 0, 4242)
	os.Chmod(m.path("sg"), 0777|os.ModeSetgid)
	if out, err := asUser(1000, 1000, "touch "+m.path("sg/f")+" && mkdir "+m.path("sg/d")); err != nil {
		t.Fatalf("%s %v", out, err)
	}
	if st := lstat(t, m.path("sg/f")); st.Gid != 4242 {
		t.Errorf("file in setgid dir: gid %d, want 4242", st.Gid)
	}
	if st := lstat(t, m.path("sg/d")); st.Gid != 4242 || st.Mode&unix.S_ISGID == 0 {
		t.Errorf("dir in setgid dir: gid %d mode %o, want 4242 with setgid", st.Gid, st.Mode)
	}
}

// Checklist 9 and 14: a descriptor opened before copy-up sees later
// writes; unlinked-but-open files; mmap across copy-up.
func TestOpenFilesAcrossCopyUp(t *testing.T) {
	lower := newLower(t, map[string]string{"f": "lower data", "m": strings.Repeat("m", 8192)})
	m := mount(t, lower)
	r, err := os.Open(m.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	mapped, err := unix.Mmap(int(r.Fd()), 0, 10, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mapped)
	if err := os.WriteFile(m.path("f"), []byte("UPPER data"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	r.ReadAt(buf, 0)
	if string(buf) != "UPPER data" {
		t.Errorf("reader opened before copy-up reads %q, want %q", buf, "UPPER data")
	}
	// Shared writable mmap of a lower file, then read through another fd.
	w, err := os.OpenFile(m.path("m"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mm, err := unix.Mmap(int(w.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	copy(mm[100:], "MMAPPED")
	unix.Msync(mm, unix.MS_SYNC)
	unix.Munmap(mm)
	w.Close()
	if got := readString(t, m.path("m"))[100:107]; got != "MMAPPED" {
		t.Errorf("after shared mmap write: %q", got)
	}
	// Private mmap does not write through.
	p, _ := os.Open(m.path("m"))
	pm, err := unix.Mmap(int(p.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	copy(pm, "PRIVATE")
	unix.Munmap(pm)
	p.Close()
	if got := readString(t, m.path("m"))[:7]; got != "mmmmmmm" {
		t.Errorf("private mmap leaked into the file: %q", got)
	}
	// Unlinked but open.
	u, err := os.OpenFile(m.path("tmp"), os.O_CREATE|os.O_RDWR, 0600)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(m.path("tmp"))
	u.WriteAt([]byte("alive"), 0)
	u.ReadAt(buf[:5], 0)
	var st unix.Stat_t
	unix.Fstat(int(u.Fd()), &st)
	u.Close()
	if string(buf[:5]) != "alive" || st.Nlink != 0 {
		t.Errorf("unlinked open file: read %q nlink %d, want alive 0", buf[:5], st.Nlink)
	}
}

// Checklist 10 and 11: st_ino stable across copy-up and remount, one
// st_dev, st_nlink right, link() works.
func TestInodesAndLinks(t *testing.T) {
	lower := newLower(t, map[string]string{"a": "a", "d/b": "b"})
	os.Link(filepath.Join(lower, "a"), filepath.Join(lower, "a2"))
	store := filepath.Join(t.TempDir(), "store")
	m := mount(t, lower, withStore(store))
	ino := lstat(t, m.path("d/b")).Ino
	dev := lstat(t, m.path("d/b")).Dev
	os.WriteFile(m.path("d/b"), []byte("changed"), 0)
	if st := lstat(t, m.path("d/b")); st.Ino != ino {
		t.Errorf("st_ino changed by copy-up: %d -> %d", ino, st.Ino)
	}
	if st := lstat(t, m.path("a")); st.Nlink != 2 || st.Ino != lstat(t, m.path("a2")).Ino {
		t.Errorf("lower hard links: nlink %d, inos %d/%d; want 2 and equal", st.Nlink, st.Ino, lstat(t, m.path("a2")).Ino)
	}
	if err := os.Link(m.path("d/b"), m.path("d/c")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(m.path("a"), m.path("d/alink")); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, m.path("d/c")); st.Nlink != 2 || st.Ino != ino || st.Dev != dev {
		t.Errorf("after link: nlink %d ino %d dev %d, want 2 %d %d", st.Nlink, st.Ino, st.Dev, ino, dev)
	}
	os.WriteFile(m.path("d/c"), []byte("via c"), 0)
	if got := readString(t, m.path("d/b")); got != "via c" {
		t.Errorf("write through one link not seen through the other: %q", got)
	}
	newIno := lstat(t, m.path("d/c")).Ino
	m.unmount()
	m.mount()
	if st := lstat(t, m.path("d/b")); st.Ino != ino || st.Nlink != 2 {
		t.Errorf("after remount: ino %d nlink %d, want %d 2", st.Ino, st.Nlink, ino)
	}
	if st := lstat(t, m.path("d/c")); st.Ino != newIno {
		t.Errorf("after remount: new link ino %d, want %d", st.Ino, newIno)
	}
	if got := readString(t, m.path("d/b")); got != "via c" {
		t.Errorf("after remount: %q", got)
	}
	for _, p := range []string{"", "d", "a", "d/b"} {
		if st := lstat(t, m.path(p)); st.Dev != dev {
			t.Errorf("%s: st_dev %d, want one device %d", p, st.Dev, dev)
		}
	}
}

// Checklist 12 and 13: renames.
func TestRenames(t *testing.T) {
	lower := newLower(t, map[string]string{"ld/x": "x", "ld/sub/y": "y", "md/l": "l", "f": "f", "g": "g", "e/": "", "full/z": "z"})
	m := mount(t, lower)
	os.WriteFile(m.path("md/u"), []byte("u"), 0644) // md is merged now
	for _, r := range [][2]string{{"ld", "ld2"}, {"md", "md2"}} {
		if err := os.Rename(m.path(r[0]), m.path(r[1])); err != nil {
			t.Fatalf("rename %s -> %s: %v (overlayfs says EXDEV; agentfs must not)", r[0], r[1], err)
		}
		if _, err := os.Lstat(m.path(r[0])); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after rename", r[0])
		}
	}
	if got := readString(t, m.path("ld2/sub/y")); got != "y" {
		t.Errorf("ld2/sub/y = %q", got)
	}
	if got := listNames(t, m.path("md2")); strings.Join(got, ",") != "l,u" {
		t.Errorf("md2 = %v, want [l u]", got)
	}
	if err := os.Rename(m.path("f"), m.path("e/f")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(m.path("f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("renamed lower file still at its source")
	}
	if err := unix.Renameat2(unix.AT_FDCWD, m.path("g"), unix.AT_FDCWD, m.path("e/f"), unix.RENAME_NOREPLACE); err != unix.EEXIST {
		t.Errorf("RENAME_NOREPLACE onto a file: %v, want EEXIST", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, m.path("g"), unix.AT_FDCWD, m.path("e/f"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", err)
	}
	if readString(t, m.path("g")) != "f" || readString(t, m.path("e/f")) != "g" {
		t.Errorf("exchange: g=%q e/f=%q", readString(t, m.path("g")), readString(t, m.path("e/f")))
	}
	for _, c := range []struct {
		from, to string
		want     error
	}{
		{"ld2", "g", unix.ENOTDIR},
		{"g", "ld2", unix.EISDIR},
		{"ld2", "full", unix.ENOTEMPTY},
		{"ld2", "ld2/sub/inside", unix.EINVAL},
		{"nothing", "x", unix.ENOENT},
	} {
		if err := unix.Rename(m.path(c.from), m.path(c.to)); err != c.want {
			t.Errorf("rename %s -> %s: %v, want %v", c.from, c.to, err, c.want)
		}
	}
}

// Checklist 15: locks, fallocate, holes, copy_file_range, fsync, syncfs.
func TestFileOperations(t *testing.T) {
	lower := newLower(t, map[string]string{"src": strings.Repeat("s", 100000)})
	m := mount(t, lower)
	f, err := os.OpenFile(m.path("lk"), os.O_CREATE|os.O_RDWR, 0644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Errorf("flock: %v", err)
	}
	g, _ := os.OpenFile(m.path("lk"), os.O_RDWR, 0)
	defer g.Close()
	if err := unix.Flock(int(g.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != unix.EWOULDBLOCK {
		t.Errorf("second flock: %v, want EWOULDBLOCK", err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Errorf("OFD lock: %v", err)
	}
	if err := unix.FcntlFlock(g.Fd(), unix.F_OFD_SETLK, &lk); err != unix.EAGAIN {
		t.Errorf("conflicting OFD lock: %v, want EAGAIN", err)
	}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_RDLCK}); err != nil && err != unix.EAGAIN {
		t.Errorf("POSIX lock: %v", err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
		t.Errorf("fallocate: %v", err)
	}
	if st := lstat(t, m.path("lk")); st.Size != 1<<20 || st.Blocks < 2048 {
		t.Errorf("after fallocate: size %d blocks %d, want %d and >= 2048", st.Size, st.Blocks, 1<<20)
	}
	f.WriteAt(bytes.Repeat([]byte("d"), 1<<20), 0)
	f.WriteAt([]byte("data"), 4<<20)
	if off, err := unix.Seek(int(f.Fd()), 1<<20, unix.SEEK_DATA); err != nil || off != 4<<20 {
		t.Errorf("SEEK_DATA from 1 MiB = %d, %v; want %d", off, err, 4<<20)
	}
	if off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_HOLE); err != nil || off != 1<<20 {
		t.Errorf("SEEK_HOLE = %d, %v; want %d", off, err, 1<<20)
	}
	src, _ := os.Open(m.path("src"))
	defer src.Close()
	dst, _ := os.Create(m.path("dst"))
	defer dst.Close()
	n, err := unix.CopyFileRange(int(src.Fd()), nil, int(dst.Fd()), nil, 100000, 0)
	if err != nil || n != 100000 {
		t.Errorf("copy_file_range = %d, %v", n, err)
	}
	if err := dst.Sync(); err != nil {
		t.Errorf("fsync: %v", err)
	}
	if err := unix.Syncfs(int(dst.Fd())); err != nil {
		t.Errorf("syncfs: %v", err)
	}
	if readString(t, m.path("dst")) != readString(t, m.path("src")) {
		t.Errorf("copy_file_range result differs")
	}
}

// Checklist 18 and 19: internal names, special files.
func TestControlFileAndSpecialFiles(t *testing.T) {
	lower := newLower(t, map[string]string{"l": "->target", "f": "f"})
	m := mount(t, lower)
	ctl := m.path(".agentfs.ctl")
	if _, err := os.Lstat(ctl); err != nil {
		t.Errorf("control file: %v", err)
	}
	if err := os.WriteFile(ctl, []byte("x"), 0644); err == nil {
		t.Errorf("writing the control file succeeded")
	}
	if err := os.Remove(ctl); err == nil {
		t.Errorf("removing the control file succeeded")
	}
	if err := os.Rename(ctl, m.path("stolen")); err == nil {
		t.Errorf("renaming the control file succeeded")
	}
	if err := os.Rename(m.path("f"), ctl); err == nil {
		t.Errorf("renaming onto the control file succeeded")
	}
	if err := unix.Lchown(m.path("l"), 77, 88); err != nil {
		t.Fatal(err)
	}
	ts := []unix.Timespec{{Sec: 100}, {Sec: 200}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, m.path("l"), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	st := lstat(t, m.path("l"))
	if st.Uid != 77 || st.Gid != 88 || st.Mtim.Sec != 200 || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("symlink after lchown/lutimes: uid %d gid %d mtime %d mode %o", st.Uid, st.Gid, st.Mtim.Sec, st.Mode)
	}
	if target, _ := os.Readlink(m.path("l")); target != "target" {
		t.Errorf("readlink = %q", target)
	}
	if err := unix.Mkfifo(m.path("fifo"), 0644); err != nil {
		t.Fatal(err)
	}
	go func() {
		w, err := os.OpenFile(m.path("fifo"), os.O_WRONLY, 0)
		if err == nil {
			w.Write([]byte("through the fifo"))
			w.Close()
		}
	}()
	if got := readString(t, m.path("fifo")); got != "through the fifo" {
		t.Errorf("fifo read %q", got)
	}
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	if err := unix.Bind(sock, &unix.SockaddrUnix{Name: m.path("sock")}); err != nil {
		t.Errorf("bind a unix socket in the mount: %v", err)
	} else if st := lstat(t, m.path("sock")); st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		t.Errorf("socket mode %o", st.Mode)
	}
	if err := unix.Mknod(m.path("null"), unix.S_IFCHR|0666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatalf("mknod char device: %v", err)
	}
	if st := lstat(t, m.path("null")); st.Rdev != unix.Mkdev(1, 3) {
		t.Errorf("device rdev %x, want %x", st.Rdev, unix.Mkdev(1, 3))
	}
}

// Long names and long paths work (fd-relative everywhere).
func TestLongNamesAndPaths(t *testing.T) {
	lower := newLower(t, nil)
	long := strings.Repeat("n", 255)
	deep := lower
	for i := 0; len(deep) < 3600; i++ {
		deep = filepath.Join(deep, strings.Repeat(string(rune('a'+i%26)), 200))
	}
	if err := os.MkdirAll(deep, 0755); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(lower, deep)
	m := mount(t, lower)
	if err := os.WriteFile(m.path(long), []byte("x"), 0644); err != nil {
		t.Errorf("255-byte name: %v", err)
	}
	if err := os.WriteFile(m.path(long+"x"), nil, 0644); !errors.Is(err, unix.ENAMETOOLONG) {
		t.Errorf("256-byte name: %v, want ENAMETOOLONG", err)
	}
	p := m.path(rel + "/file")
	if err := os.WriteFile(p, []byte("deep"), 0644); err != nil {
		t.Fatalf("write near PATH_MAX (%d bytes): %v", len(p), err)
	}
	if got := readString(t, p); got != "deep" {
		t.Errorf("deep read %q", got)
	}
}
