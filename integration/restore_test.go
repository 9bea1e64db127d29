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

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

// TestRestore: after changes of every kind, restore brings the mount
// back to the snapshot, stat for stat, for this process (whose kernel
// caches hold the changed state: file data, attributes, names, absent
// names) and for others; it prints the undo line, and the undo brings
// the changes back.
func TestRestore(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("a", "lower a"),
		harness.LowerFile("keep", "keep"),
		harness.LowerFile("d/x", "x"),
		harness.LowerFile("e/y", "y"),
		harness.LowerFile("meta", "meta"),
	))
	harness.WriteFile(t, m.Path("a"), "snapshot a, longer than the lower one")
	harness.WriteFile(t, m.Path("new1"), "new1")
	if err := os.Mkdir(m.Path("dir1"), 0o750); err != nil {
		t.Fatal(err)
	}
	snapState := harness.SnapshotTree(m.Dir)
	mustf(t, snapState.Err, "recording the mount before the changes")
	id := takeSnapshot(t, m.Dir, "before the changes")

	harness.WriteFile(t, m.Path("a"), "v2")
	must(t, os.Remove(m.Path("new1")))
	harness.WriteFile(t, m.Path("new2"), "new2")
	must(t, os.RemoveAll(m.Path("d")))
	must(t, os.Rename(m.Path("e"), m.Path("e2")))
	must(t, os.Chmod(m.Path("meta"), 0o600))
	must(t, os.Remove(m.Path("dir1")))
	must(t, os.Truncate(m.Path("keep"), 2))
	changedState := harness.SnapshotTree(m.Dir)
	mustf(t, changedState.Err, "recording the mount after the changes")
	// The changes took: else the restore below would test nothing.
	requireChanged(t, snapState, changedState, "a", "new1", "new2", "d", "d/x", "e", "e/y", "e2", "e2/y", "meta", "dir1", "keep")

	// Fill this process's kernel caches with the changed state.
	harness.ReadFile(t, m.Path("a"))
	harness.Lstat(t, m.Path("a"))
	harness.ListDir(t, m.Dir)
	harness.ListDir(t, m.Path("e2"))
	if errnoOfStat(m.Path("new1")) != unix.ENOENT || errnoOfStat(m.Path("d/x")) != unix.ENOENT {
		t.Fatalf("new1 and d/x should be gone before the restore")
	}
	// Files held open across the restore.
	rfd, err := os.Open(m.Path("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer rfd.Close()
	wfd, err := os.OpenFile(m.Path("new2"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wfd.Close()

	r := mustC(t, m.Dir, "restore", id)
	undo := undoID(t, r)
	if !strings.Contains(r.Stdout, "restored snapshot "+id) {
		t.Errorf("restore does not say what it restored:\n%s", r)
	}

	for _, d := range diffStates(snapState, harness.SnapshotTree(m.Dir)) {
		t.Errorf("after restore: %s", d)
	}
	if got := harness.ReadFile(t, m.Path("a")); got != "snapshot a, longer than the lower one" {
		t.Errorf("a after restore = %q", got)
	}
	if st := harness.Lstat(t, m.Path("meta")); st.Mode&0o777 != 0o644 {
		t.Errorf("meta mode after restore = %o, want 644", st.Mode&0o777)
	}
	for _, p := range []string{"new2", "e2"} {
		if e := errnoOfStat(m.Path(p)); e != unix.ENOENT {
			t.Errorf("%s after restore: %s, want ENOENT", p, harness.ErrName(e))
		}
	}
	// Another process sees the same.
	cmd := exec.Command("sh", "-c", "cat a new1 d/x e/y && ls")
	cmd.Dir, cmd.Env = m.Dir, append(os.Environ(), "LC_ALL=C")
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
	if err := wfd.Sync(); err != nil {
		t.Errorf("fsync of a file opened before the restore: %v", err)
	}
	if e := errnoOfStat(m.Path("new2")); e != unix.ENOENT {
		t.Errorf("new2 after a write through a descriptor opened before the restore: %s, want ENOENT", harness.ErrName(e))
	}

	r = mustC(t, m.Dir, "restore", undo)
	for _, d := range diffStates(changedState, harness.SnapshotTree(m.Dir)) {
		t.Errorf("after undoing the restore (restore %s): %s", undo, d)
	}
	if got := harness.ReadFile(t, m.Path("new2")); got != "new2" {
		t.Errorf("new2 after the undo = %q, want %q (the late write reaches no snapshot)", got, "new2")
	}
	if snaps := listSnapshots(t, m.Dir); findSnapshot(snaps, undo) == nil || findSnapshot(snaps, undo).Kind != "safety" {
		t.Errorf("the undo snapshot %s is not listed as a safety snapshot: %+v", undo, snaps)
	}
}

// requireChanged fails the test now unless each of paths differs between
// the recordings before and after (as diffStates compares them): a
// restore is only tested where the state it undoes really changed.
func requireChanged(t *testing.T, before, after harness.Tree, paths ...string) {
	t.Helper()
	changed := map[string]bool{}
	for _, d := range diffStates(before, after) {
		changed[strings.Fields(d)[0]] = true
	}
	var unchanged []string
	for _, p := range paths {
		if !changed[p] {
			unchanged = append(unchanged, p)
		}
	}
	if len(unchanged) > 0 {
		t.Fatalf("before the restore: %v did not change (changed: %v)", unchanged, sortedKeys(changed))
	}
}

// TestRestoreKeptStore: a kept store's snapshots survive unmounting;
// the mount comes back on the branch it showed; snapshots restore.
func TestRestoreKeptStore(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	m := harness.NewMount(t, harness.WithStore(store), harness.WithLower(harness.LowerFile("a", "lower")))
	harness.WriteFile(t, m.Path("a"), "v1")
	id := takeSnapshot(t, m.Dir, "v1")
	harness.WriteFile(t, m.Path("a"), "v2")
	mustC(t, m.Dir, "branch", "create", "b2")
	mustC(t, m.Dir, "branch", "switch", "b2")
	harness.WriteFile(t, m.Path("a"), "b2")
	m.Remount()
	if b := currentBranch(t, m.Dir); b != "b2" {
		t.Errorf("after remount the mount shows branch %q, want b2 (the one it showed)", b)
	}
	if got := harness.ReadFile(t, m.Path("a")); got != "b2" {
		t.Errorf("a after remount = %q, want b2", got)
	}
	if s := findSnapshot(listSnapshots(t, m.Dir), id); s == nil || s.Label != "v1" {
		t.Fatalf("snapshot %s after remount: %+v", id, s)
	}
	mustC(t, m.Dir, "restore", id)
	if got := harness.ReadFile(t, m.Path("a")); got != "v1" {
		t.Errorf("a after restoring %s (of main) into b2 = %q, want v1", id, got)
	}
	mustC(t, m.Dir, "branch", "switch", "main")
	if got := harness.ReadFile(t, m.Path("a")); got != "v2" {
		t.Errorf("a on main = %q, want v2", got)
	}
}

// TestRestoreCurrentDirectory: a shell whose current directory is below
// the mount root is left, after a restore, in a directory that was in
// effect deleted (it lists empty); cd "$PWD" enters the restored one.
func TestRestoreCurrentDirectory(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("d/f", "f")))
	id := takeSnapshot(t, m.Dir, "")
	harness.WriteFile(t, m.Path("d/later"), "later")
	if got, want := harness.ListDir(t, m.Path("d")), []string{"f", "later"}; !equalStrings(got, want) {
		t.Fatalf("d lists %v before the restore, want %v", got, want)
	}
	script := harness.Bin() + " restore " + id + ` >/dev/null && echo "old: $(ls)" && cd "$PWD" && echo "new: $(ls)"`
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = m.Path("d")
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
	m := harness.NewMount(t)
	harness.WriteFile(t, m.Path("w"), "snapshot")
	harness.WriteFile(t, m.Path("r"), "snapshot")
	id := takeSnapshot(t, m.Dir, "w and r as snapshot")
	harness.WriteFile(t, m.Path("w"), "changed")
	harness.WriteFile(t, m.Path("r"), "changed")
	for _, name := range []string{"w", "r"} {
		if got := harness.ReadFile(t, m.Path(name)); got != "changed" {
			t.Fatalf("%s before the restore = %q, want %q", name, got, "changed")
		}
	}
	wfd, err := os.OpenFile(m.Path("w"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wfd.Close()
	rfd, err := os.Open(m.Path("r"))
	if err != nil {
		t.Fatal(err)
	}
	defer rfd.Close()
	undo := undoID(t, mustC(t, m.Dir, "restore", id))

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
			killed := "the daemon was killed"
			if err := unix.Kill(m.Status.Pid, unix.SIGKILL); err != nil {
				killed = fmt.Sprintf("killing the daemon: %v", err)
			}
			t.Fatalf("%s did not return within 20 s (%s)", what, killed)
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
		if got := harness.ReadFile(t, m.Path(name)); got != "snapshot" {
			t.Errorf("%s after the restore = %q, want %q", name, got, "snapshot")
		}
		if st := harness.Lstat(t, m.Path(name)); st.Mode&0o777 != 0o644 {
			t.Errorf("%s mode after the restore = %o, want 644", name, st.Mode&0o777)
		}
	}
	mustC(t, m.Dir, "restore", undo)
	for _, name := range []string{"w", "r"} {
		if got := harness.ReadFile(t, m.Path(name)); got != "changed" {
			t.Errorf("%s after undoing the restore = %q, want %q (changes through old descriptors reach no snapshot)", name, got, "changed")
		}
		if st := harness.Lstat(t, m.Path(name)); st.Mode&0o777 != 0o644 {
			t.Errorf("%s mode after undoing the restore = %o, want 644", name, st.Mode&0o777)
		}
	}
}

// TestRestoreKeepsWhatDidNotChange: a restore drops from the kernel
// only what changed. A shell whose current directory the restore leaves
// as it was stays in it (it lists the directory, not an empty deleted
// one); a directory made after the snapshot, whose subtree the kernel
// had cached, is gone with everything below it; a kept directory whose
// entries changed lists the restored ones.
func TestRestoreKeepsWhatDidNotChange(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("keep/f", "f"), harness.LowerFile("mixed/old", "old")))
	harness.WriteFile(t, m.Path("keep/mine"), "mine")
	id := takeSnapshot(t, m.Dir, "")
	if err := os.MkdirAll(m.Path("new/x"), 0o755); err != nil {
		t.Fatal(err)
	}
	harness.WriteFile(t, m.Path("new/x/y"), "y")
	harness.WriteFile(t, m.Path("mixed/added"), "added")
	harness.WriteFile(t, m.Path("mixed/old"), "changed")
	for _, p := range []string{"new/x/y", "mixed/added", "mixed/old", "keep/f", "keep/mine"} {
		if _, err := os.Stat(m.Path(p)); err != nil {
			t.Fatal(err)
		}
	}
	script := harness.Bin() + " restore " + id + ` >/dev/null && echo "here: $(ls)"`
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = m.Path("keep")
	out, err := cmd.CombinedOutput()
	if want := "here: f mine\n"; err != nil || strings.ReplaceAll(string(out), "\n", " ") != strings.ReplaceAll(want, "\n", " ") {
		t.Errorf("a shell in keep, which the restore leaves as it was, printed %q, %v; want %q", out, err, want)
	}
	for _, p := range []string{"new", "new/x", "new/x/y", "mixed/added"} {
		if _, err := os.Lstat(m.Path(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the restore: %v, want ENOENT", p, err)
		}
	}
	if got, want := harness.ListDir(t, m.Path("mixed")), []string{"old"}; !equalStrings(got, want) {
		t.Errorf("mixed lists %v after the restore, want %v", got, want)
	}
	if got := harness.ReadFile(t, m.Path("mixed/old")); got != "old" {
		t.Errorf("mixed/old after the restore = %q, want %q", got, "old")
	}
	if got := harness.ReadFile(t, m.Path("keep/mine")); got != "mine" {
		t.Errorf("keep/mine after the restore = %q, want %q", got, "mine")
	}
}

// TestRestoreNegativeEntries: a name the kernel knows to be absent
// appears when a restore brings it back, also when a restore before
// left it absent (and the kernel's negative entry in place).
func TestRestoreNegativeEntries(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("keep/f", "f")))
	harness.WriteFile(t, m.Path("keep/later"), "later")
	withLater := takeSnapshot(t, m.Dir, "")
	if err := os.Remove(m.Path("keep/later")); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second lookup is answered by the kernel's negative entry
		if _, err := os.Lstat(m.Path("keep/later")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("keep/later after rm: %v, want ENOENT", err)
		}
	}
	without := takeSnapshot(t, m.Dir, "")
	harness.WriteFile(t, m.Path("other"), "other")
	mustC(t, m.Dir, "restore", without) // keep/later stays absent
	if _, err := os.Lstat(m.Path("keep/later")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("keep/later after the first restore: %v, want ENOENT", err)
	}
	mustC(t, m.Dir, "restore", withLater)
	if got := harness.ReadFile(t, m.Path("keep/later")); got != "later" {
		t.Errorf("keep/later after the restore that brings it back = %q, want %q", got, "later")
	}
}

// TestRestoreBusyDirectory: a directory in which many names changed is
// dropped from the kernel whole: after the restore every file in it
// reads as in the snapshot, the names made since are gone, and a shell
// whose current directory it is still lists it.
func TestRestoreBusyDirectory(t *testing.T) {
	m := harness.NewMount(t)
	if err := os.Mkdir(m.Path("busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 50 {
		name := fmt.Sprintf("f%02d", i)
		harness.WriteFile(t, m.Path("busy/"+name), "old")
		want = append(want, name)
	}
	id := takeSnapshot(t, m.Dir, "")
	for i := range 50 {
		harness.WriteFile(t, m.Path(fmt.Sprintf("busy/f%02d", i)), "new")
		harness.WriteFile(t, m.Path(fmt.Sprintf("busy/n%02d", i)), "new")
	}
	for i := range 50 {
		if got := harness.ReadFile(t, m.Path(fmt.Sprintf("busy/f%02d", i))); got != "new" {
			t.Fatalf("busy/f%02d before the restore = %q", i, got)
		}
	}
	cmd := exec.Command("sh", "-c", harness.Bin()+" restore "+id+` >/dev/null && ls | wc -l`)
	cmd.Dir = m.Path("busy")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "50" {
		t.Errorf("a shell in busy across the restore counted %q, %v; want 50", out, err)
	}
	for i := range 50 {
		if got := harness.ReadFile(t, m.Path(fmt.Sprintf("busy/f%02d", i))); got != "old" {
			t.Errorf("busy/f%02d after the restore = %q, want %q", i, got, "old")
		}
		if _, err := os.Lstat(m.Path(fmt.Sprintf("busy/n%02d", i))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("busy/n%02d after the restore: %v, want ENOENT", i, err)
		}
	}
	if got := harness.ListDir(t, m.Path("busy")); !equalStrings(got, want) {
		t.Errorf("busy lists %v after the restore, want %v", got, want)
	}
}

// TestRestoreManyNamesInADirectory: a directory where more names
// changed than a restore tells the kernel of one by one on old kernels
// (it drops the directory whole there; from Linux 6.2 each name is
// expired, and the kernel looks it up again at its next use): every
// name this process had looked up (rewritten files, files made after
// the snapshot, deleted ones, a subdirectory made after it with its
// own files) reads as in the snapshot, and a name looked up only
// through the subdirectory's cached entries is gone with it.
func TestRestoreManyNamesInADirectory(t *testing.T) {
	m := harness.NewMount(t)
	d := m.Path("d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		harness.WriteFile(t, filepath.Join(d, fmt.Sprintf("f%02d", i)), fmt.Sprintf("snapshot %d", i))
	}
	id := takeSnapshot(t, m.Dir, "60 files")
	for i := range 40 { // rewritten
		harness.WriteFile(t, filepath.Join(d, fmt.Sprintf("f%02d", i)), fmt.Sprintf("changed %d", i))
	}
	for i := 50; i < 60; i++ { // deleted
		if err := os.Remove(filepath.Join(d, fmt.Sprintf("f%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 { // made
		harness.WriteFile(t, filepath.Join(d, fmt.Sprintf("n%02d", i)), "new")
	}
	if err := os.MkdirAll(filepath.Join(d, "sub", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	harness.WriteFile(t, filepath.Join(d, "sub", "deeper", "x"), "new")
	// Every name in the kernel's caches, the absent ones too.
	for i := range 60 {
		name := filepath.Join(d, fmt.Sprintf("f%02d", i))
		if _, err := os.Stat(name); i < 50 && err != nil || i >= 50 && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat %s before the restore: %v", name, err)
		}
		harness.ReadFile(t, filepath.Join(d, fmt.Sprintf("n%02d", i%40)))
	}
	subFd, err := unix.Open(filepath.Join(d, "sub"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(subFd)
	mustC(t, m.Dir, "restore", id)

	for i := range 60 {
		if got, want := harness.ReadFile(t, filepath.Join(d, fmt.Sprintf("f%02d", i))), fmt.Sprintf("snapshot %d", i); got != want {
			t.Errorf("f%02d after the restore = %q, want %q", i, got, want)
		}
	}
	for i := range 40 {
		if _, err := os.Lstat(filepath.Join(d, fmt.Sprintf("n%02d", i))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("n%02d, made after the snapshot, after the restore: %v, want ENOENT", i, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(d, "sub", "deeper", "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sub/deeper/x, made after the snapshot, after the restore: %v, want ENOENT", err)
	}
	if got := harness.ListDir(t, d); len(got) != 60 {
		t.Errorf("d lists %d names after the restore, want 60: %v", len(got), got)
	}
	// The subdirectory held open is the deleted one: it lists empty.
	if names, err := readDirFd(subFd); err != nil || len(names) != 0 {
		t.Errorf("the directory held open lists %v, %v after the restore; want nothing", names, err)
	}
}

// readDirFd lists the names in the directory open at fd.
func readDirFd(fd int) ([]string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, err
	}
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return names, err
		}
		if n == 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// TestRestoreHardLinkNames: a restore that removes one name of a file
// with two (a hard link made after the snapshot) leaves no process
// the removed name, though the file's node is known to the daemon by
// its other name only; the kept name reads as in the snapshot.
func TestRestoreHardLinkNames(t *testing.T) {
	m := harness.NewMount(t)
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(m.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	harness.WriteFile(t, m.Path("a/x"), "snapshot")
	harness.WriteFile(t, m.Path("b/other"), "other")
	id := takeSnapshot(t, m.Dir, "")
	must(t, os.Link(m.Path("a/x"), m.Path("b/y")))
	harness.WriteFile(t, m.Path("b/y"), "through the link")
	// Both names in the kernel's caches.
	if got := harness.ReadFile(t, m.Path("a/x")); got != "through the link" {
		t.Fatalf("a/x before the restore = %q", got)
	}
	harness.Lstat(t, m.Path("b/y"))
	mustC(t, m.Dir, "restore", id)
	if _, err := os.Lstat(m.Path("b/y")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("b/y, linked after the snapshot, after the restore: %v, want ENOENT", err)
	}
	if got := harness.ReadFile(t, m.Path("a/x")); got != "snapshot" {
		t.Errorf("a/x after the restore = %q, want %q", got, "snapshot")
	}
	if got, want := harness.ListDir(t, m.Path("b")), []string{"other"}; !equalStrings(got, want) {
		t.Errorf("b lists %v after the restore, want %v", got, want)
	}
}

// TestRestoreNamesMadeThroughTheMount: names made through the mount
// after the snapshot, each looked up absent first (as every create
// is), then rewritten, renamed and deleted there, and names looked up
// absent and never made: after a restore, every one of them shows the
// snapshot, in the lookups of this process whose caches held the
// changed state.
func TestRestoreNamesMadeThroughTheMount(t *testing.T) {
	m := harness.NewMount(t)
	must(t, os.Mkdir(m.Path("d"), 0o755))
	harness.WriteFile(t, m.Path("d/kept"), "snapshot kept")
	harness.WriteFile(t, m.Path("d/gone"), "snapshot gone")
	harness.WriteFile(t, m.Path("d/moved"), "snapshot moved")
	id := takeSnapshot(t, m.Dir, "")
	for _, p := range []string{"d/made", "d/renamed", "d/absent"} {
		if _, err := os.Lstat(m.Path(p)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s before it is made: %v", p, err)
		}
	}
	must(t, os.Remove(m.Path("d/gone")))
	if _, err := os.Lstat(m.Path("d/gone")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("d/gone after rm: %v", err)
	}
	// Names made in d after d/gone was looked up absent: its negative
	// entry stays.
	harness.WriteFile(t, m.Path("d/made"), "made")
	harness.WriteFile(t, m.Path("d/kept"), "changed")
	must(t, os.Rename(m.Path("d/moved"), m.Path("d/renamed")))
	must(t, os.Mkdir(m.Path("d/dir"), 0o755))
	for _, p := range []string{"d/gone", "d/moved", "d/absent"} {
		if _, err := os.Lstat(m.Path(p)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s before the restore: %v", p, err)
		}
	}
	for _, p := range []string{"d/made", "d/renamed", "d/kept", "d/dir"} {
		harness.Lstat(t, m.Path(p))
	}
	mustC(t, m.Dir, "restore", id)
	for p, want := range map[string]string{"d/kept": "snapshot kept", "d/gone": "snapshot gone", "d/moved": "snapshot moved"} {
		if got := harness.ReadFile(t, m.Path(p)); got != want {
			t.Errorf("%s after the restore = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{"d/made", "d/renamed", "d/absent", "d/dir"} {
		if _, err := os.Lstat(m.Path(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the restore: %v, want ENOENT", p, err)
		}
	}
}
