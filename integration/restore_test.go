package integration

// agentfs restore (the snapshots issue): every process sees the
// restored state at once, with nothing stale in the kernel's caches;
// the safety snapshot undoes it; open files keep what they opened.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRestore: after changes of every kind, restore brings the mount
// back to the snapshot, stat for stat, for this process (whose kernel
// caches hold the changed state: file data, attributes, names, absent
// names) and for others; it prints the undo line, and the undo brings
// the changes back.
func TestRestore(t *testing.T) {
	m := newMount(t, withLower(
		lowerFile("a", "lower a"),
		lowerFile("keep", "keep"),
		lowerFile("d/x", "x"),
		lowerFile("e/y", "y"),
		lowerFile("meta", "meta"),
	))
	writeFile(t, m.path("a"), "snapshot a, longer than the lower one")
	writeFile(t, m.path("new1"), "new1")
	if err := os.Mkdir(m.path("dir1"), 0o750); err != nil {
		t.Fatal(err)
	}
	snapState := snapshotTree(m.dir)
	id := takeSnapshot(t, m.dir, "before the changes")

	writeFile(t, m.path("a"), "v2")
	os.Remove(m.path("new1"))
	writeFile(t, m.path("new2"), "new2")
	os.RemoveAll(m.path("d"))
	os.Rename(m.path("e"), m.path("e2"))
	os.Chmod(m.path("meta"), 0o600)
	os.Remove(m.path("dir1"))
	os.Truncate(m.path("keep"), 2)
	changedState := snapshotTree(m.dir)

	// Fill this process's kernel caches with the changed state.
	readFile(t, m.path("a"))
	lstat(t, m.path("a"))
	listDir(t, m.dir)
	listDir(t, m.path("e2"))
	if errnoOfStat(m.path("new1")) != unix.ENOENT || errnoOfStat(m.path("d/x")) != unix.ENOENT {
		t.Fatalf("new1 and d/x should be gone before the restore")
	}
	// Files held open across the restore.
	rfd, err := os.Open(m.path("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer rfd.Close()
	wfd, err := os.OpenFile(m.path("new2"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wfd.Close()

	r := mustC(t, m.dir, "restore", id)
	undo := undoID(t, r)
	if !strings.Contains(r.stdout, "restored snapshot "+id) {
		t.Errorf("restore does not say what it restored:\n%s", r)
	}

	for _, d := range diffStates(snapState, snapshotTree(m.dir)) {
		t.Errorf("after restore: %s", d)
	}
	if got := readFile(t, m.path("a")); got != "snapshot a, longer than the lower one" {
		t.Errorf("a after restore = %q", got)
	}
	if st := lstat(t, m.path("meta")); st.Mode&0o777 != 0o644 {
		t.Errorf("meta mode after restore = %o, want 644", st.Mode&0o777)
	}
	for _, p := range []string{"new2", "e2"} {
		if e := errnoOfStat(m.path(p)); e != unix.ENOENT {
			t.Errorf("%s after restore: %s, want ENOENT", p, errName(e))
		}
	}
	// Another process sees the same.
	cmd := exec.Command("sh", "-c", "cat a new1 d/x e/y && ls")
	cmd.Dir, cmd.Env = m.dir, append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if want := "snapshot a, longer than the lower onenew1xya\nd\ndir1\ne\nkeep\nmeta\nnew1\n"; err != nil || string(out) != want {
		t.Errorf("another process after restore: cat and ls = %q, %v; want %q", out, err, want)
	}

	// Open files keep the files they opened; writes reach nothing.
	buf := make([]byte, 64)
	if n, _ := rfd.ReadAt(buf, 0); string(buf[:n]) != "v2" {
		t.Errorf("a file opened before the restore reads %q, want the file it opened (%q)", buf[:n], "v2")
	}
	if _, err := wfd.WriteAt([]byte("late write"), 0); err != nil {
		t.Errorf("writing a file opened before the restore: %v", err)
	}
	wfd.Sync()
	if e := errnoOfStat(m.path("new2")); e != unix.ENOENT {
		t.Errorf("new2 after a write through a descriptor opened before the restore: %s, want ENOENT", errName(e))
	}

	r = mustC(t, m.dir, "restore", undo)
	for _, d := range diffStates(changedState, snapshotTree(m.dir)) {
		t.Errorf("after undoing the restore (restore %s): %s", undo, d)
	}
	if got := readFile(t, m.path("new2")); got != "new2" {
		t.Errorf("new2 after the undo = %q, want %q (the late write reaches no snapshot)", got, "new2")
	}
	if snaps := listSnapshots(t, m.dir); findSnapshot(snaps, undo) == nil || findSnapshot(snaps, undo).Kind != "safety" {
		t.Errorf("the undo snapshot %s is not listed as a safety snapshot: %+v", undo, snaps)
	}
}

// TestRestoreKeptStore: a kept store's snapshots survive unmounting;
// the mount comes back on the branch it showed; snapshots restore.
func TestRestoreKeptStore(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := newMount(t, withStore(store), withLower(lowerFile("a", "lower")))
	writeFile(t, m.path("a"), "v1")
	id := takeSnapshot(t, m.dir, "v1")
	writeFile(t, m.path("a"), "v2")
	mustC(t, m.dir, "branch", "create", "b2")
	mustC(t, m.dir, "branch", "switch", "b2")
	writeFile(t, m.path("a"), "b2")
	m.remount()
	if b := currentBranch(t, m.dir); b != "b2" {
		t.Errorf("after remount the mount shows branch %q, want b2 (the one it showed)", b)
	}
	if got := readFile(t, m.path("a")); got != "b2" {
		t.Errorf("a after remount = %q, want b2", got)
	}
	if s := findSnapshot(listSnapshots(t, m.dir), id); s == nil || s.Label != "v1" {
		t.Fatalf("snapshot %s after remount: %+v", id, s)
	}
	mustC(t, m.dir, "restore", id)
	if got := readFile(t, m.path("a")); got != "v1" {
		t.Errorf("a after restoring %s (of main) into b2 = %q, want v1", id, got)
	}
	mustC(t, m.dir, "branch", "switch", "main")
	if got := readFile(t, m.path("a")); got != "v2" {
		t.Errorf("a on main = %q, want v2", got)
	}
}

// TestRestoreCurrentDirectory: a shell whose current directory is below
// the mount root is left, after a restore, in a directory that was in
// effect deleted (it lists empty); cd "$PWD" enters the restored one.
func TestRestoreCurrentDirectory(t *testing.T) {
	m := newMount(t, withLower(lowerFile("d/f", "f")))
	id := takeSnapshot(t, m.dir, "")
	writeFile(t, m.path("d/later"), "later")
	script := agentfsBin + " restore " + id + ` >/dev/null && echo "old: $(ls)" && cd "$PWD" && echo "new: $(ls)"`
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = m.path("d")
	out, err := cmd.CombinedOutput()
	if want := "old: \nnew: f\n"; err != nil || string(out) != want {
		t.Errorf("a shell in d across a restore printed %q, %v; want %q", out, err, want)
	}
}

// TestRestoreReopenThroughProc: files held open across a restore can be
// reached again through /proc/self/fd/N. A file held open for writing
// is the same file through the new descriptor: reads, writes and
// fchmod reach what the old descriptor has, never the restored file
// or a snapshot. A file held open for reading only may refuse to be
// changed (ESTALE: its data may be the safety snapshot's), but must
// never change a snapshot. Before, a writable reopen made the daemon
// clone the file in a loop until the disk was full, and with
// passthrough a read-only reopen failed with EIO.
func TestRestoreReopenThroughProc(t *testing.T) {
	m := newMount(t)
	writeFile(t, m.path("w"), "snapshot")
	writeFile(t, m.path("r"), "snapshot")
	id := takeSnapshot(t, m.dir, "w and r as snapshot")
	writeFile(t, m.path("w"), "changed")
	writeFile(t, m.path("r"), "changed")
	wfd, err := os.OpenFile(m.path("w"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wfd.Close()
	rfd, err := os.Open(m.path("r"))
	if err != nil {
		t.Fatal(err)
	}
	defer rfd.Close()
	undo := undoID(t, mustC(t, m.dir, "restore", id))

	// Each step in a goroutine: a daemon that loops must fail the test,
	// not hang it (nor fill the disk).
	step := func(what string, fn func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			// Stop the daemon before it fills the disk with clones.
			unix.Kill(m.status.Pid, unix.SIGKILL)
			t.Fatalf("%s did not return within 20 s (the daemon was killed)", what)
			return nil
		}
	}
	proc := func(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

	var again *os.File
	if err := step("reopening w for writing", func() (err error) {
		again, err = os.OpenFile(proc(wfd), os.O_RDWR, 0)
		return err
	}); err != nil {
		t.Fatalf("opening a file held open for writing across a restore again through /proc/self/fd: %v", err)
	}
	if got := readAll(t, again); got != "changed" {
		t.Errorf("the reopened descriptor reads %q, want the file held open (%q)", got, "changed")
	}
	if _, err := again.WriteAt([]byte("late"), 0); err != nil {
		t.Errorf("writing through the reopened descriptor: %v", err)
	}
	if got := readAll(t, wfd); got != "lateged" {
		t.Errorf("the first descriptor reads %q after a write through the second, want %q", got, "lateged")
	}
	if err := step("fchmod of w", func() error { return wfd.Chmod(0o600) }); err != nil {
		t.Errorf("fchmod of a file held open for writing across a restore: %v", err)
	}
	again.Close()

	var rw *os.File
	err = step("reopening r for writing", func() (err error) {
		rw, err = os.OpenFile(proc(rfd), os.O_RDWR, 0)
		return err
	})
	switch {
	case err == nil:
		if _, err := rw.WriteAt([]byte("late"), 0); err != nil {
			t.Errorf("writing through the reopened descriptor of r: %v", err)
		}
		rw.Close()
	case !errors.Is(err, unix.ESTALE):
		t.Errorf("reopening a file held open for reading across a restore, for writing: %v, want success or ESTALE", err)
	}
	if got := step("reopening r for reading", func() error {
		f, err := os.Open(proc(rfd))
		if err == nil {
			f.Close()
		}
		return err
	}); got != nil {
		t.Errorf("reopening a file held open for reading across a restore, for reading: %v", got)
	}
	if err := step("fchmod of r", func() error { return rfd.Chmod(0o600) }); err != nil && !errors.Is(err, unix.ESTALE) {
		t.Errorf("fchmod of a file held open for reading across a restore: %v, want success or ESTALE", err)
	}
	wfd.Close()
	rfd.Close()

	for _, name := range []string{"w", "r"} {
		if got := readFile(t, m.path(name)); got != "snapshot" {
			t.Errorf("%s after the restore = %q, want %q", name, got, "snapshot")
		}
		if st := lstat(t, m.path(name)); st.Mode&0o777 != 0o644 {
			t.Errorf("%s mode after the restore = %o, want 644", name, st.Mode&0o777)
		}
	}
	mustC(t, m.dir, "restore", undo)
	for _, name := range []string{"w", "r"} {
		if got := readFile(t, m.path(name)); got != "changed" {
			t.Errorf("%s after undoing the restore = %q, want %q (changes through old descriptors reach no snapshot)", name, got, "changed")
		}
		if st := lstat(t, m.path(name)); st.Mode&0o777 != 0o644 {
			t.Errorf("%s mode after undoing the restore = %o, want 644", name, st.Mode&0o777)
		}
	}
}
