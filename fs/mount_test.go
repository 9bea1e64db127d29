package fs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/agentfs/agentfs/overlay"
)

// requireFUSE skips without root or /dev/fuse, unless the environment
// demands FUSE tests (CI), where it fails instead (testenv.RequireFUSE).
func requireFUSE(t *testing.T) {
	t.Helper()
	testenv.RequireFUSE(t)
}

type testMount struct {
	lower, mnt string
	srv        *Server
}

// mountForTest mounts lower in-process, with an in-memory branch store
// and a backstore in a temporary directory; opts change the mount's
// options.
func mountForTest(t *testing.T, lower string, passthrough bool, opts ...func(*Options)) *testMount {
	t.Helper()
	requireFUSE(t)
	bs, err := backstore.Open(backstore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bs.Close(); err != nil {
			t.Errorf("closing the backstore: %v", err)
		}
	})
	meta, err := branch.Open(branch.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := meta.Close(); err != nil {
			t.Errorf("closing the branch store: %v", err)
		}
	})
	layer, err := meta.Layer("main")
	if err != nil {
		t.Fatal(err)
	}
	view, err := overlay.New(overlay.Config{Lower: lower, Objects: bs, Layer: layer, AllocIno: meta.AllocIno, Sync: meta.Sync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := view.Close(); err != nil {
			t.Errorf("closing the view: %v", err)
		}
	})
	mnt := t.TempDir()
	o := Options{Mountpoint: mnt, View: view, Passthrough: passthrough, AllowOther: true, FsName: lower}
	for _, f := range opts {
		f(&o)
	}
	srv, err := Mount(o)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the stores close only once every
	// thread that serves requests (the ring's queues among them) is
	// gone.
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			return
		}
		srv.Wait()
	})
	return &testMount{lower: lower, mnt: mnt, srv: srv}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReaderOpenedBeforeCopyUpSeesWrites is the case that decides the
// passthrough design: a read-only open of a lower file, then a write
// through another open. The write must go to the upper copy, never to
// the lower file, and the first reader must see it.
func TestReaderOpenedBeforeCopyUpSeesWrites(t *testing.T) {
	for _, pt := range []bool{true, false} {
		name := map[bool]string{true: "passthrough", false: "pagecache"}[pt]
		t.Run(name, func(t *testing.T) {
			lower := t.TempDir()
			writeFile(t, filepath.Join(lower, "f"), "lower data")
			m := mountForTest(t, lower, pt)
			p := filepath.Join(m.mnt, "f")

			r, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			buf := make([]byte, 64)
			n, _ := r.ReadAt(buf, 0)
			if got := string(buf[:n]); got != "lower data" {
				t.Fatalf("first read = %q, want %q", got, "lower data")
			}
			w, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.WriteAt([]byte("UPPER"), 0); err != nil {
				t.Fatal(err)
			}
			w.Close()

			if got := readFile(t, filepath.Join(lower, "f")); got != "lower data" {
				t.Fatalf("lower file = %q after a write through the mount, want %q", got, "lower data")
			}
			n, _ = r.ReadAt(buf, 0)
			if got := string(buf[:n]); got != "UPPER data" {
				t.Errorf("reader opened before copy-up reads %q, want %q", got, "UPPER data")
			}
			if got := readFile(t, p); got != "UPPER data" {
				t.Errorf("new reader reads %q, want %q", got, "UPPER data")
			}
		})
	}
}

func TestPassthroughActiveAsRoot(t *testing.T) {
	lower := t.TempDir()
	m := mountForTest(t, lower, true)
	if !m.srv.Passthrough() {
		t.Fatalf("passthrough not granted although running as root on a kernel with FUSE passthrough")
	}
	p := filepath.Join(m.mnt, "new")
	data := bytes.Repeat([]byte("x"), 1<<20)
	if err := os.WriteFile(p, data, 0644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (err %v), want %d", len(got), err, len(data))
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil || st.Size != int64(len(data)) {
		t.Fatalf("size = %d (err %v), want %d", st.Size, err, len(data))
	}
}

// TestFuseDescriptorCloseOnExec: a process started after the mount
// (the daemon starts the hashing process, as nobody) must not inherit
// the /dev/fuse connection, with which it could read and answer the
// kernel's requests. go-fuse opens it without O_CLOEXEC.
func TestFuseDescriptorCloseOnExec(t *testing.T) {
	m := mountForTest(t, t.TempDir(), true)
	writeFile(t, filepath.Join(m.mnt, "f"), "x")
	out, err := exec.Command("sh", "-c", `for f in /proc/$$/fd/*; do echo "$f $(readlink "$f")"; done`).CombinedOutput()
	if err != nil {
		t.Fatalf("listing a child's descriptors: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasSuffix(line, " /dev/fuse") {
			t.Errorf("a process started after the mount inherited the FUSE connection: %s", line)
		}
	}
}

func TestWhiteoutAndOpaque(t *testing.T) {
	lower := t.TempDir()
	writeFile(t, filepath.Join(lower, "d/a"), "a")
	writeFile(t, filepath.Join(lower, "d/b"), "b")
	m := mountForTest(t, lower, true)
	d := filepath.Join(m.mnt, "d")
	if err := os.Remove(filepath.Join(d, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(d, "a")); !os.IsNotExist(err) {
		t.Fatalf("removed file still visible: %v", err)
	}
	if err := os.RemoveAll(d); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d, 0755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(d)
	if err != nil || len(ents) != 0 {
		t.Fatalf("new dir over whiteout lists %v (err %v), want nothing", ents, err)
	}
	if got := readFile(t, filepath.Join(lower, "d/b")); got != "b" {
		t.Fatalf("lower changed: %q", got)
	}
}

// TestIOModeTransitions opens one file in every order of page-cache and
// passthrough opens: the kernel refuses to mix the two modes on an
// inode, so a wrong choice shows up as a failed open (EBUSY/ETXTBSY).
func TestIOModeTransitions(t *testing.T) {
	lower := t.TempDir()
	writeFile(t, filepath.Join(lower, "f"), "0123456789")
	m := mountForTest(t, lower, true)
	p := filepath.Join(m.mnt, "f")
	open := func(flag int) *os.File {
		t.Helper()
		f, err := os.OpenFile(p, flag, 0)
		if err != nil {
			t.Fatalf("open(%#x): %v", flag, err)
		}
		return f
	}
	r1 := open(os.O_RDONLY) // lower: page cache
	w1 := open(os.O_RDWR)   // copy-up; page cache because r1 is open
	if _, err := w1.WriteAt([]byte("AB"), 0); err != nil {
		t.Fatal(err)
	}
	r2 := open(os.O_RDONLY) // upper, but still page cache
	buf := make([]byte, 10)
	for _, f := range []*os.File{r1, r2} {
		if n, _ := f.ReadAt(buf, 0); string(buf[:n]) != "AB23456789" {
			t.Errorf("read %q, want AB23456789", buf[:n])
		}
	}
	r1.Close()
	w1.Close()
	r2.Close()
	// All closed: the next opens are passthrough, and must agree.
	w2 := open(os.O_RDWR)
	r3 := open(os.O_RDONLY)
	if _, err := w2.WriteAt([]byte("CD"), 2); err != nil {
		t.Fatal(err)
	}
	if n, _ := r3.ReadAt(buf, 0); string(buf[:n]) != "ABCD456789" {
		t.Errorf("passthrough read %q, want ABCD456789", buf[:n])
	}
	w2.Close()
	r3.Close()
	if got := readFile(t, filepath.Join(lower, "f")); got != "0123456789" {
		t.Errorf("lower file changed: %q", got)
	}
}

// TestLowerHardLinksStayLinked writes one name of a lower hard link
// after the kernel has looked up both: the other name must show the
// write (and the same inode), not the lower file.
func TestLowerHardLinksStayLinked(t *testing.T) {
	lower := t.TempDir()
	writeFile(t, filepath.Join(lower, "h1"), "lower")
	if err := os.Link(filepath.Join(lower, "h1"), filepath.Join(lower, "h2")); err != nil {
		t.Fatal(err)
	}
	m := mountForTest(t, lower, true)
	var st1, st2 unix.Stat_t
	if err := unix.Stat(filepath.Join(m.mnt, "h1"), &st1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(m.mnt, "h2"), &st2); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(m.mnt, "h1"), filepath.Join(m.mnt, "h3")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.mnt, "h1"), []byte("upper"), 0644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"h1", "h2", "h3"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(m.mnt, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino != st1.Ino || st.Nlink != 3 {
			t.Errorf("%s: ino %d nlink %d, want %d 3", name, st.Ino, st.Nlink, st1.Ino)
		}
		if got := readFile(t, filepath.Join(m.mnt, name)); got != "upper" {
			t.Errorf("%s reads %q, want %q", name, got, "upper")
		}
	}
	if got := readFile(t, filepath.Join(lower, "h2")); got != "lower" {
		t.Errorf("lower changed: %q", got)
	}
}

// TestLowerEditsShow edits the lower directory from outside while
// the kernel has everything cached: the mount shows each edit soon
// (the watcher's invalidation), except where the mount has its own
// version of the path.
func TestLowerEditsShow(t *testing.T) {
	forIOModes(t, testLowerEditsShow)
}

// forIOModes runs test on a mount with passthrough and on one with the
// page cache and a writeback cache (where the kernel keeps its own
// sizes and times of files: a change behind its back needs a new
// inode).
func forIOModes(t *testing.T, test func(t *testing.T, mount func(lower string) *testMount)) {
	t.Run("passthrough", func(t *testing.T) {
		test(t, func(lower string) *testMount { return mountForTest(t, lower, true) })
	})
	t.Run("writeback", func(t *testing.T) {
		test(t, func(lower string) *testMount {
			m := mountForTest(t, lower, false, func(o *Options) { o.WritebackCache = true })
			if !m.srv.WritebackCache() || m.srv.Passthrough() {
				t.Fatalf("writeback cache %v, passthrough %v: want the writeback cache alone", m.srv.WritebackCache(), m.srv.Passthrough())
			}
			return m
		})
	})
}

func testLowerEditsShow(t *testing.T, mount func(string) *testMount) {
	lower := t.TempDir()
	writeFile(t, filepath.Join(lower, "d/changed"), "old")
	writeFile(t, filepath.Join(lower, "d/gone"), "x")
	writeFile(t, filepath.Join(lower, "d/mine"), "lower")
	writeFile(t, filepath.Join(lower, "d/chmodded"), "x")
	m := mount(lower)
	at := func(p string) string { return filepath.Join(m.mnt, p) }
	// Fill the kernel's caches: data, attributes, a negative entry.
	// A reader holds d/changed open: the kernel keeps its inode.
	readFile(t, at("d/changed"))
	held, err := os.Open(at("d/changed"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// Only to fill the caches: d/new fails (the negative entry), and
	// the checks below see what the others did.
	for _, p := range []string{"d/gone", "d/chmodded"} {
		if _, err := os.Stat(at(p)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(at("d/new")); !os.IsNotExist(err) {
		t.Fatalf("stat of d/new before it exists: %v, want ENOENT", err)
	}
	if _, err := os.ReadDir(at("d")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, at("d/mine"), "upper")

	writeFile(t, filepath.Join(lower, "d/changed"), "new contents")
	if err := os.Remove(filepath.Join(lower, "d/gone")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(lower, "d/new"), "n")
	writeFile(t, filepath.Join(lower, "d/mine"), "lower again")
	if err := os.Chmod(filepath.Join(lower, "d/chmodded"), 0600); err != nil {
		t.Fatal(err)
	}

	// Waiting for an asynchronous event, not timing anything: give up
	// after a generous deadline.
	deadline := time.Now().Add(10 * time.Second)
	var problems []string
	for {
		problems = nil
		if got, _ := os.ReadFile(at("d/changed")); string(got) != "new contents" {
			problems = append(problems, fmt.Sprintf("d/changed reads %q", got))
		}
		if _, err := os.Stat(at("d/gone")); !os.IsNotExist(err) {
			problems = append(problems, fmt.Sprintf("d/gone: stat %v", err))
		}
		if _, err := os.Stat(at("d/new")); err != nil {
			problems = append(problems, fmt.Sprintf("d/new: stat %v", err))
		}
		if st, err := os.Stat(at("d/chmodded")); err != nil || st.Mode().Perm() != 0600 {
			problems = append(problems, fmt.Sprintf("d/chmodded: mode %v, %v", st.Mode(), err))
		}
		names := map[string]bool{}
		ents, _ := os.ReadDir(at("d"))
		for _, e := range ents {
			names[e.Name()] = true
		}
		if !names["new"] || names["gone"] {
			problems = append(problems, fmt.Sprintf("listing %v", names))
		}
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if got := readFile(t, at("d/mine")); got != "upper" {
		t.Errorf("a path changed in the mount shows the lower edit: %q", got)
	}
}

// TestInvalidateAfterReload replaces the layer's entries (as a restore
// does) while the kernel has names, attributes, data, a negative entry
// and listings cached: after Reload and Invalidate the mount shows the
// new state at once.
func TestInvalidateAfterReload(t *testing.T) {
	forIOModes(t, testInvalidateAfterReload)
}

func testInvalidateAfterReload(t *testing.T, mount func(string) *testMount) {
	lower := t.TempDir()
	writeFile(t, filepath.Join(lower, "d/f"), "lower")
	writeFile(t, filepath.Join(lower, "d/gone"), "x")
	m := mount(lower)
	at := func(p string) string { return filepath.Join(m.mnt, p) }
	view := m.srv.views.def.Load().view
	layer := view.Layer()
	// The state to come back to is the lower tree (no entries).
	writeFile(t, at("d/f"), "upper, and longer")
	writeFile(t, at("d/new"), "new")
	if err := os.Remove(at("d/gone")); err != nil {
		t.Fatal(err)
	}
	readFile(t, at("d/f"))
	// Only to fill the caches: d/gone fails (the negative entry).
	if _, err := os.ReadDir(at("d")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(at("d/gone")); !os.IsNotExist(err) {
		t.Fatalf("stat of the removed d/gone: %v, want ENOENT", err)
	}

	var b branch.Batch
	if err := layer.Load(func(p string, _ *branch.Entry) error { b.Delete(p); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := layer.Commit(&b); err != nil {
		t.Fatal(err)
	}
	stale, err := view.Reload()
	if err != nil {
		t.Fatal(err)
	}
	m.srv.Invalidate(stale)

	if got := readFile(t, at("d/f")); got != "lower" {
		t.Errorf("d/f reads %q after the restore, want %q", got, "lower")
	}
	if _, err := os.Stat(at("d/new")); !os.IsNotExist(err) {
		t.Errorf("d/new after the restore: %v, want it gone", err)
	}
	if _, err := os.Stat(at("d/gone")); err != nil {
		t.Errorf("d/gone after the restore: %v", err)
	}
	var names []string
	ents, _ := os.ReadDir(at("d"))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if fmt.Sprint(names) != "[f gone]" {
		t.Errorf("listing after the restore: %v", names)
	}
}

// TestWritebackCache: with a writeback cache the kernel holds writes
// back, and agentfs must still see every byte at the moments that
// matter (close, fsync, WriteBack); the kernel reads pages through
// write-only handles and computes O_APPEND offsets itself.
func TestWritebackCache(t *testing.T) {
	lower := t.TempDir()
	writeFile(t, filepath.Join(lower, "f"), "hello world")
	// A control request that reads the files: it answers how much of
	// "new" agentfs has.
	control := ctl.NewServer(0, nil)
	var view *overlay.FS
	control.Handle(ctl.OpSnapshotCreate, func(ctl.Caller, json.RawMessage) (any, error) {
		b, err := view.ReadFile("new", 1<<20)
		return len(b), err
	})
	m := mountForTest(t, lower, false, func(o *Options) { o.WritebackCache = true; o.Control = control })
	if !m.srv.WritebackCache() || m.srv.Passthrough() {
		t.Fatalf("writeback cache %v, passthrough %v: want the writeback cache alone", m.srv.WritebackCache(), m.srv.Passthrough())
	}
	view = m.srv.views.def.Load().view
	at := func(p string) string { return filepath.Join(m.mnt, p) }
	inView := func(p string) string {
		t.Helper()
		b, err := view.ReadFile(p, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// Small writes to a file held open stay in the kernel (its
	// writeback waits 30 s) until WriteBack.
	w, err := os.Create(at("new"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	for range 16 {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat(at("new")); err != nil || st.Size() != 16*4096 {
		t.Fatalf("stat of a file being written: %v, %v; want 64 KiB", st, err)
	}
	if got := len(inView("new")); got == 16*4096 {
		t.Errorf("agentfs has all 64 KiB before the kernel was asked to write them back: no writeback cache")
	}
	c, err := ctl.Dial(m.mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing the control connection: %v", err)
		}
	}()
	var seen int
	if err := c.Do(ctl.OpSnapshotCreate, nil, &seen); err != nil {
		t.Fatal(err)
	}
	if seen != 16*4096 {
		t.Errorf("a control request that reads the files found %d bytes of the file, want all 64 KiB", seen)
	}
	writeBack := func(how string, chunks int) {
		t.Helper()
		for range 16 {
			if _, err := w.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.srv.WriteBack(); err != nil {
			t.Fatal(err)
		}
		if got := inView("new"); got != string(bytes.Repeat(chunk, chunks)) {
			t.Errorf("after WriteBack %s agentfs has %d bytes of the file, want all %d KiB", how, len(got), chunks*4)
		}
	}
	writeBack("by handle", 32)
	// Without the privilege to open an inode by its handle (a daemon
	// that is not root), WriteBack opens it by its name.
	old := openByHandle
	openByHandle = func(int, unix.FileHandle, int) (int, error) { return -1, unix.EPERM }
	defer func() { openByHandle = old }()
	writeBack("by name", 48)
	openByHandle = old

	// A write-only open, a partial page: the kernel reads the page
	// first, through the write-only handle.
	wo, err := os.OpenFile(at("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wo.WriteAt([]byte("X"), 3); err != nil {
		t.Fatal(err)
	}
	if err := wo.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := inView("f"); got != "helXo world" {
		t.Errorf("after close agentfs has %q, want %q", got, "helXo world")
	}
	if got := readFile(t, filepath.Join(lower, "f")); got != "hello world" {
		t.Errorf("the lower file changed: %q", got)
	}

	// Two appenders: the kernel decides where each write goes.
	a1, err := os.OpenFile(at("log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0644)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := os.OpenFile(at("log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		f := a1
		if i%2 == 1 {
			f = a2
		}
		if _, err := fmt.Fprintf(f, "line %d\n", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := a1.Sync(); err != nil {
		t.Fatal(err)
	}
	want := "line 0\nline 1\nline 2\nline 3\n"
	if got := inView("log"); got != want {
		t.Errorf("after fsync agentfs has %q, want %q", got, want)
	}
	a1.Close()
	a2.Close()

	// A shared mapping: its stores reach agentfs by WriteBack too.
	mf, err := os.OpenFile(at("mapped"), os.O_RDWR|os.O_CREATE, 0644)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if err := mf.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(mf.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Munmap(mem); err != nil {
			t.Errorf("munmap: %v", err)
		}
	}()
	copy(mem, "mapped bytes")
	if err := m.srv.WriteBack(); err != nil {
		t.Fatal(err)
	}
	if got := inView("mapped"); !strings.HasPrefix(got, "mapped bytes") {
		t.Errorf("after WriteBack agentfs has %q..., want the mapping's stores", got[:min(len(got), 12)])
	}
}
