package workspace

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// newWorkspace opens a new store over a project holding files.
func newWorkspace(t *testing.T, files map[string]string) *Workspace {
	t.Helper()
	lower := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(lower, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return openWorkspace(t, Options{Lower: lower})
}

// writeFile writes name in the root of view v, creating it if needed.
func writeFile(t *testing.T, v *overlay.FS, name, content string) {
	t.Helper()
	var f *overlay.File
	n, _, err := v.Lookup(v.Root(), name)
	switch {
	case errors.Is(err, unix.ENOENT):
		_, f, _, err = v.Create(v.Root(), name, unix.O_WRONLY, 0o644, overlay.Caller{})
	case err == nil:
		f, err = v.Open(n, unix.O_WRONLY|unix.O_TRUNC)
	}
	if err != nil {
		t.Fatalf("opening %s for writing: %v", name, err)
	}
	if _, err := f.WriteAt([]byte(content), 0); err != nil {
		t.Fatalf("writing %s: %v", name, err)
	}
	if err := f.Release(); err != nil {
		t.Fatalf("closing %s: %v", name, err)
	}
}

// readFile reads name in the root of view v ("" with ok false when it
// does not exist).
func readFile(t *testing.T, v *overlay.FS, name string) (string, bool) {
	t.Helper()
	b, err := v.ReadFile(name, 1<<20)
	if errors.Is(err, unix.ENOENT) {
		return "", false
	}
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return string(b), true
}

// isKind checks that err is of kind k, carries its errno, and says want.
func isKind(t *testing.T, what string, err error, k *Kind, want string) {
	t.Helper()
	var e *Error
	switch {
	case !errors.As(err, &e):
		t.Errorf("%s: error %v (%T), want an *Error", what, err, err)
	case !errors.Is(err, k) || !errors.Is(err, k.Errno()):
		t.Errorf("%s: error %q is not of kind %v (errno %v)", what, err, k, k.Errno())
	case !strings.Contains(err.Error(), want):
		t.Errorf("%s: error %q does not say %q", what, err, want)
	}
}

var self = Self()

// TestOpenErrors: a store is used by one process at a time and
// remembers its project.
func TestOpenErrors(t *testing.T) {
	lower, other, store := t.TempDir(), t.TempDir(), t.TempDir()
	w, err := Open(Options{Store: store, Lower: lower})
	if err != nil {
		t.Fatalf("opening a new store: %v", err)
	}
	_, err = Open(Options{Store: store, Lower: lower})
	if !errors.Is(err, branch.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("second open: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Options{Store: store, Lower: other})
	if err == nil || !strings.Contains(err.Error(), "was made for the lower directory "+lower) {
		t.Errorf("other lower: %v, want 'was made for the lower directory %s'", err, lower)
	}
	w, err = Open(Options{Store: store, Lower: lower})
	if err != nil {
		t.Fatalf("reopening with the right lower: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotsAndTags: create, list with the size each added, tags
// keep their snapshot, and the errors of unknown and bad references.
func TestSnapshotsAndTags(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "lower a\n"})
	s1, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "empty"})
	if err != nil || s1.Kind != branch.KindManual || s1.Branch != "main" || s1.Label != "empty" {
		t.Fatalf("CreateSnapshot = %+v, %v", s1, err)
	}
	writeFile(t, w.View(), "big", strings.Repeat("x", 64<<10))
	s2, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "with big"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := w.Snapshots()
	if err != nil || len(list.Snapshots) != 2 {
		t.Fatalf("Snapshots = %+v, %v", list, err)
	}
	if got := list.Snapshots[1]; got.ID != s2.ID || got.SizeAdded < 64<<10 || list.Snapshots[0].SizeAdded != 0 {
		t.Errorf("sizes added: %d then %d, want 0 then at least 64 KiB", list.Snapshots[0].SizeAdded, got.SizeAdded)
	}
	_, err = w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Kind: branch.KindSafety})
	isKind(t, "a safety snapshot asked for", err, ErrInvalid, "cannot be asked for")
	_, err = w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Branch: "nope"})
	isKind(t, "a snapshot of an unknown branch", err, ErrNotFound, `no branch "nope"`)
	info, err := w.SetTag(self, "good", s2.ID[:6])
	if err != nil || info.ID != s2.ID || len(info.Tags) != 1 || info.Tags[0] != "good" {
		t.Fatalf("SetTag by prefix = %+v, %v", info, err)
	}
	_, err = w.SetTag(self, "a/b", s2.ID)
	isKind(t, "a bad tag name", err, ErrInvalid, "choose a tag name")
	_, err = w.DeleteSnapshot(self, "good")
	isKind(t, "deleting a tagged snapshot", err, ErrBusy, "tag --delete good")
	if del, err := w.DeleteTag(self, "good"); err != nil || del.Ref != s2.ID {
		t.Errorf("DeleteTag = %+v, %v", del, err)
	}
	_, err = w.DeleteTag(self, "good")
	isKind(t, "deleting a deleted tag", err, ErrNotFound, `no tag "good"`)
	if _, err := w.DeleteSnapshot(self, s2.ID); err != nil {
		t.Errorf("deleting the untagged snapshot: %v", err)
	}
	_, err = w.DeleteSnapshot(self, s2.ID)
	isKind(t, "deleting it again", err, ErrNotFound, "no snapshot or tag")
	_, err = w.DeleteSnapshot(self, s1.ID[:3])
	isKind(t, "a prefix of 3 digits", err, ErrNotFound, "at least 4 digits")
	_, err = w.DeleteSnapshot(self, "")
	isKind(t, "no reference", err, ErrInvalid, "no snapshot given")
}

// TestDiffRestoreExport: what changed from a snapshot, a dry run that
// changes nothing, a restore with its safety snapshot, and an export.
func TestDiffRestoreExport(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "lower a\n"})
	v := w.View()
	writeFile(t, v, "a.txt", "changed a\n")
	s1, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "one"})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, v, "b.txt", "new b\n")
	rep, err := w.Diff(self, ctl.DiffArgs{From: s1.ID, Patch: true})
	if err != nil || len(rep.Changes) != 1 || rep.Changes[0].Path != "b.txt" || rep.Changes[0].Kind != ctl.Created {
		t.Fatalf("Diff from the snapshot = %+v, %v; want b.txt created", rep, err)
	}
	if rep.From != "snapshot "+s1.ID || rep.To != "branch main" || !strings.Contains(rep.Patch, "+new b") {
		t.Errorf("Diff: from %q to %q, patch %q", rep.From, rep.To, rep.Patch)
	}
	if rep, err := w.Diff(self, ctl.DiffArgs{}); err != nil || len(rep.Changes) != 2 || rep.From != "the project (lower)" {
		t.Errorf("Diff from the project = %+v, %v; want a.txt and b.txt", rep, err)
	}
	_, err = w.Diff(self, ctl.DiffArgs{From: "nothing"})
	isKind(t, "a diff from nothing", err, ErrNotFound, `"nothing" is neither "lower", a branch, a snapshot id nor a tag`)

	dry, err := w.Restore(self, ctl.RestoreArgs{Ref: s1.ID, DryRun: true})
	if err != nil || dry.Safety != nil || len(dry.Changes) != 1 || dry.Changes[0].Kind != ctl.Deleted {
		t.Fatalf("Restore dry run = %+v, %v; want b.txt deleted, no safety snapshot", dry, err)
	}
	if _, ok := readFile(t, v, "b.txt"); !ok {
		t.Fatal("the dry run removed b.txt")
	}
	res, err := w.Restore(self, ctl.RestoreArgs{Ref: s1.ID})
	if err != nil || res.Safety == nil || res.Safety.Kind != branch.KindSafety || res.Branch != "main" {
		t.Fatalf("Restore = %+v, %v", res, err)
	}
	if _, ok := readFile(t, v, "b.txt"); ok {
		t.Error("b.txt is still there after the restore")
	}
	if got, _ := readFile(t, v, "a.txt"); got != "changed a\n" {
		t.Errorf("a.txt after the restore = %q", got)
	}
	// The safety snapshot undoes it.
	if _, err := w.Restore(self, ctl.RestoreArgs{Ref: res.Safety.ID}); err != nil {
		t.Fatal(err)
	}
	if got, _ := readFile(t, v, "b.txt"); got != "new b\n" {
		t.Errorf("b.txt after restoring the safety snapshot = %q", got)
	}

	to := filepath.Join(t.TempDir(), "export")
	ex, err := w.Export(self, ctl.ExportArgs{Ref: s1.ID, To: to})
	if err != nil || ex.What != "snapshot "+s1.ID {
		t.Fatalf("Export = %+v, %v", ex, err)
	}
	if b, err := os.ReadFile(filepath.Join(to, "a.txt")); err != nil || string(b) != "changed a\n" {
		t.Errorf("exported a.txt = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(to, "b.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("b.txt, taken after the snapshot, was exported: %v", err)
	}
	_, err = w.Export(self, ctl.ExportArgs{Ref: "main", To: filepath.Join(w.Lower(), "out")})
	isKind(t, "an export into the project", err, ErrInvalid, "which agentfs never writes to")
	_, err = w.Export(self, ctl.ExportArgs{Ref: "main", To: "relative/dir"})
	isKind(t, "an export to a relative path", err, ErrInvalid, "not a clean absolute path")
}

// TestApply: apply writes the branch's changes into the project, and
// only what is asked; afterwards they are no differences any more.
func TestApply(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "lower a\n"})
	v := w.View()
	writeFile(t, v, "a.txt", "changed a\n")
	writeFile(t, v, "c.txt", "new c\n")
	lowerA := func() string {
		b, err := os.ReadFile(filepath.Join(w.Lower(), "a.txt"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	dry, err := w.Apply(self, ctl.ApplyArgs{DryRun: true})
	if err != nil || len(dry.Applied) != 2 || !dry.DryRun || lowerA() != "lower a\n" {
		t.Fatalf("Apply dry run = %+v, %v, project a.txt %q", dry, err, lowerA())
	}
	rep, err := w.Apply(self, ctl.ApplyArgs{Paths: []string{"c.txt"}})
	if err != nil || len(rep.Applied) != 1 || rep.Applied[0].Path != "c.txt" || rep.Lower != w.Lower() {
		t.Fatalf("Apply c.txt = %+v, %v", rep, err)
	}
	if b, err := os.ReadFile(filepath.Join(w.Lower(), "c.txt")); err != nil || string(b) != "new c\n" {
		t.Errorf("project c.txt = %q, %v", b, err)
	}
	if lowerA() != "lower a\n" {
		t.Error("apply of c.txt wrote a.txt")
	}
	if d, err := w.Diff(self, ctl.DiffArgs{}); err != nil || len(d.Changes) != 1 || d.Changes[0].Path != "a.txt" {
		t.Errorf("Diff after applying c.txt = %+v, %v; want only a.txt", d, err)
	}
	_, err = w.Apply(self, ctl.ApplyArgs{Paths: []string{"c.txt"}})
	isKind(t, "applying c.txt again", err, ErrNotFound, "nothing was applied")
	_, err = w.Apply(self, ctl.ApplyArgs{Paths: []string{"../etc"}})
	isKind(t, "a path outside the mount", err, ErrInvalid, "is not a path inside the mount")
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Apply(self, ctl.ApplyArgs{Branch: s.ID})
	isKind(t, "applying a snapshot", err, ErrInvalid, "is not a branch")
	if p := w.ApplyProgress(); p.Running {
		t.Errorf("ApplyProgress after the applies = %+v, want none running", p)
	}
}

// TestBranches: create, list, switch, and what cannot be deleted.
func TestBranches(t *testing.T) {
	w := newWorkspace(t, nil)
	writeFile(t, w.View(), "on-main", "m\n")
	b, err := w.CreateBranch(self, ctl.BranchCreateArgs{Name: "try"})
	if err != nil || b.Name != "try" || b.Origin == "" || b.Current || b.Default {
		t.Fatalf("CreateBranch = %+v, %v", b, err)
	}
	_, err = w.CreateBranch(self, ctl.BranchCreateArgs{Name: "try"})
	isKind(t, "creating it again", err, ErrExists, "exists already")
	_, err = w.CreateBranch(self, ctl.BranchCreateArgs{Name: "x", From: "nope"})
	isKind(t, "a branch from nothing", err, ErrNotFound, "no snapshot or tag")
	for _, name := range []string{"a/b", "..", "x\ty", "", "-x", "abcd"} {
		_, err := w.CreateBranch(self, ctl.BranchCreateArgs{Name: name})
		isKind(t, fmt.Sprintf("branch name %q", name), err, ErrInvalid, "choose a branch name")
	}
	list, err := w.Snapshots()
	if err != nil || len(list.Snapshots) != 1 {
		t.Errorf("snapshots after one branch and refused names: %+v, %v; want the branch's one", list, err)
	}
	if _, err := w.SwitchBranch(self, "try"); err != nil {
		t.Fatal(err)
	}
	if got, _ := readFile(t, w.View(), "on-main"); got != "m\n" {
		t.Errorf("branch try does not show what main had when it was made: %q", got)
	}
	writeFile(t, w.View(), "on-try", "t\n")
	branches, err := w.Branches(self)
	if err != nil || len(branches.Branches) != 2 {
		t.Fatalf("Branches = %+v, %v", branches, err)
	}
	for _, b := range branches.Branches {
		if (b.Name == "try") != (b.Current && b.Default) {
			t.Errorf("branch %+v: want try current and default, main neither", b)
		}
	}
	_, err = w.DeleteBranch(self, "try")
	isKind(t, "deleting the branch shown", err, ErrBusy, "switch to another first")
	_, err = w.DeleteBranch(self, "main")
	isKind(t, "deleting main", err, ErrBusy, "branch main cannot be deleted")
	_, err = w.SwitchBranch(self, "gone")
	isKind(t, "switching to an unknown branch", err, ErrNotFound, "agentfs branch create gone makes it")
	if _, err := w.SwitchBranch(self, "main"); err != nil {
		t.Fatal(err)
	}
	if _, ok := readFile(t, w.View(), "on-try"); ok {
		t.Error("main shows a file of branch try")
	}
	if _, err := w.DeleteBranch(self, "try"); err != nil {
		t.Errorf("deleting branch try: %v", err)
	}
}

// fakeMount records what the workspace asks of a mount.
type fakeMount struct {
	shown    *overlay.FS
	bound    map[int]*overlay.FS
	retired  []string
	invalids int // Invalidate calls
	// supervised: Rewinding of this branch stops (or, with stopErr,
	// fails to); rewinds records the outcomes told. norelaunch: the
	// supervisor has no relaunches left. duringStop, when set, runs
	// inside Rewinding (what the command's processes do while they are
	// being stopped).
	supervised string
	inside     uint32 // a process of the supervised command, of start run-1
	stopErr    error
	norelaunch bool
	duringStop func()
	mu         sync.Mutex // rewinds, which a deferred restore appends to
	rewinds    []string
	// panicInvalidate makes Invalidate panic (a restore that panics).
	panicInvalidate bool
	// duringInvalidate, when set, runs inside Invalidate (what telling
	// the kernel may wait for).
	duringInvalidate func()
}

func (m *fakeMount) Supervised(name string, pid uint32) Supervision {
	on := name == m.supervised && m.shown.Layer().Name() == name // as the daemon: the branch it shows
	sup := Supervision{Supervised: on, Inside: on && pid == m.inside, Relaunch: !m.norelaunch}
	if sup.Inside {
		sup.Run = "run-1"
	}
	return sup
}

func (m *fakeMount) told() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.rewinds...)
}

func (m *fakeMount) Rewinding(name, snapshot, asker string) (Rewind, error) {
	if m.duringStop != nil {
		m.duringStop()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopErr != nil {
		m.rewinds = append(m.rewinds, fmt.Sprintf("not stopped for %s (%s): %v", snapshot, asker, m.stopErr))
		return Rewind{}, m.stopErr
	}
	if asker != "" {
		m.rewinds = append(m.rewinds, "stopped, asked by "+asker)
	} else {
		m.rewinds = append(m.rewinds, "stopped")
	}
	return Rewind{Relaunch: !m.norelaunch, Done: func(snap, safety string, err error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.rewinds = append(m.rewinds, fmt.Sprintf("restored %s %s %v", snap, safety, err))
	}}, nil
}

func (m *fakeMount) Resolve(pid uint32) (*overlay.FS, int) {
	if v := m.bound[int(pid)]; v != nil {
		return v, int(pid)
	}
	return m.shown, 0
}
func (m *fakeMount) Show(v *overlay.FS)   { m.shown = v }
func (m *fakeMount) Retire(v *overlay.FS) { m.retired = append(m.retired, v.Layer().Name()) }
func (m *fakeMount) Invalidate(stale []overlay.Stale) {
	if m.panicInvalidate {
		panic("Invalidate")
	}
	if m.duringInvalidate != nil {
		m.duringInvalidate()
	}
	m.invalids++
}
func (m *fakeMount) Unbind(pid int) bool             { _, ok := m.bound[pid]; delete(m.bound, pid); return ok }
func (m *fakeMount) NamespacedUsers(name string) int { return 0 }
func (m *fakeMount) CanNamespace() bool              { return false }
func (m *fakeMount) Describe(st *ctl.Status)         { st.Pid, st.IOMode, st.Transport = 42, "fake", "fake" }
func (m *fakeMount) Contains(p string) bool          { return false }
func (m *fakeMount) BindNamespaced(int, *overlay.FS) (string, error) {
	return "", errors.New("not in a fake")
}
func (m *fakeMount) Bind(pid int, v *overlay.FS) error { m.bound[pid] = v; return nil }
func (m *fakeMount) Bindings() []Binding {
	var out []Binding
	for pid, v := range m.bound {
		out = append(out, Binding{Pid: pid, View: v})
	}
	return out
}

// TestBindings: binding needs a mount; with one, a bound process acts
// on its branch, and deleting the branch cuts it off.
func TestBindings(t *testing.T) {
	w := newWorkspace(t, nil)
	_, err := w.Bind(self, ctl.BindArgs{Branch: "main"})
	isKind(t, "binding without a mount", err, ErrNotMounted, "binding needs a mounted store")
	m := &fakeMount{shown: w.View(), bound: map[int]*overlay.FS{}}
	w.Attach(m)
	if _, err := w.CreateBranch(self, ctl.BranchCreateArgs{Name: "side"}); err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Process.Kill() // sleep 60: still there
		_ = child.Wait()         // killed: its status says so
	})
	pid := child.Process.Pid
	// Until the child has exec'd, its command line is not sleep's.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(b), "sleep\x0060") {
			break
		}
	}
	_, err = w.Bind(self, ctl.BindArgs{Pid: -3, Branch: "side"})
	isKind(t, "a negative pid", err, ErrInvalid, "bad process id")
	_, err = w.Bind(self, ctl.BindArgs{Pid: os.Getpid(), Branch: "side"})
	isKind(t, "binding the daemon", err, ErrInvalid, "is the agentfs daemon")
	_, err = w.Bind(ctl.Caller{Pid: 1, Uid: 12345}, ctl.BindArgs{Pid: pid, Branch: "side"})
	isKind(t, "binding another user's process", err, ErrPermission, "only root may bind another user's processes")
	info, err := w.Bind(self, ctl.BindArgs{Pid: pid, Branch: "side"})
	if err != nil || info.Branch != "side" || info.BoundBy != pid || !strings.Contains(info.Command, "sleep 60") {
		t.Fatalf("Bind = %+v, %v", info, err)
	}
	bound := ctl.Caller{Pid: uint32(pid), Uid: self.Uid}
	snap, err := w.CreateSnapshot(bound, ctl.SnapshotCreateArgs{})
	if err != nil || snap.Branch != "side" {
		t.Errorf("a snapshot asked by the bound process = %+v, %v; want one of branch side", snap, err)
	}
	if st := w.Status(); st.Pid != 42 || st.Offline || len(st.Bindings) != 1 || st.Bindings[0].Branch != "side" {
		t.Errorf("Status with a mount = %+v", st)
	}
	if _, err := w.DeleteBranch(self, "side"); err != nil {
		t.Fatal(err)
	}
	if len(m.retired) != 1 || m.retired[0] != "side" {
		t.Errorf("views retired = %q, want side's", m.retired)
	}
	if _, err := w.Unbind(self, ctl.BindArgs{Pid: pid}); err != nil {
		t.Errorf("Unbind: %v", err)
	}
	_, err = w.Unbind(self, ctl.BindArgs{Pid: pid})
	isKind(t, "unbinding again", err, ErrInvalid, "is not bound to a branch")
}

// TestPruneAndAutomatic: automatic snapshots thin out; tagged ones and
// the others stay.
func TestPruneAndAutomatic(t *testing.T) {
	w := newWorkspace(t, nil)
	for i := range 3 {
		writeFile(t, w.View(), "f", fmt.Sprint(i))
		w.AutoSnapshot("main", branch.KindAuto, func(v *overlay.FS) string { return fmt.Sprintf("auto %d", i) })
	}
	manual, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	list, _ := w.Snapshots()
	if len(list.Snapshots) != 4 || list.Snapshots[0].Kind != branch.KindAuto || list.Snapshots[0].Label != "auto 0" {
		t.Fatalf("snapshots = %+v, want 3 automatic ones and a manual one", list)
	}
	if _, err := w.SetTag(self, "keep", list.Snapshots[0].ID); err != nil {
		t.Fatal(err)
	}
	zero := 0
	dry, err := w.Prune(self, ctl.PruneArgs{Keep: &zero, DryRun: true})
	if err != nil || len(dry.Deleted) != 2 {
		t.Fatalf("Prune dry run = %+v, %v; want the 2 untagged automatic ones", dry, err)
	}
	if _, err := w.Prune(self, ctl.PruneArgs{Keep: &zero}); err != nil {
		t.Fatal(err)
	}
	list, _ = w.Snapshots()
	if len(list.Snapshots) != 2 || list.Snapshots[1].ID != manual.ID {
		t.Errorf("after prune: %+v, want the tagged automatic one and the manual one", list)
	}
	bad := -1
	_, err = w.Prune(self, ctl.PruneArgs{Keep: &bad})
	isKind(t, "a negative keep", err, ErrInvalid, "keep a count of 0 or more")
	// A branch no process sees is skipped.
	w.AutoSnapshot("nobody", branch.KindAuto, func(*overlay.FS) string { return "x" })
	if l, _ := w.Snapshots(); len(l.Snapshots) != 2 {
		t.Errorf("an automatic snapshot of an unseen branch was taken: %+v", l)
	}
}

// TestMaintenance: gc and fsck on a sound store find nothing wrong.
func TestMaintenance(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a": "a"})
	writeFile(t, w.View(), "a", "new")
	if _, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{}); err != nil {
		t.Fatal(err)
	}
	gc, err := w.GC(self, ctl.GCArgs{})
	if err != nil || gc.Removed != 0 || gc.Objects == 0 {
		t.Errorf("GC = %+v, %v; want objects looked at and none removed", gc, err)
	}
	fsck, err := w.Fsck(self, ctl.FsckArgs{})
	if err != nil || fsck.Failed() || fsck.Snapshots != 1 || fsck.Branches != 1 {
		t.Errorf("Fsck = %+v, %v", fsck, err)
	}
	if st := w.Status(); !st.Offline || st.Lower != w.Lower() || st.Branch != "main" || st.Version != "test" || st.Objects == 0 {
		t.Errorf("Status offline = %+v", st)
	}
}

// TestRestoreReadOnlyStore: restore on a store that cannot be written
// is EROFS, says so, and takes no safety snapshot.
func TestRestoreReadOnlyStore(t *testing.T) {
	lower, store := t.TempDir(), t.TempDir()
	w, err := Open(Options{Store: store, Lower: lower})
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, err = Open(Options{Store: store, Lower: lower, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	}()
	_, err = w.Restore(self, ctl.RestoreArgs{Ref: s.ID})
	isKind(t, "restore on a read-only store", err, ErrReadOnly, "nothing was changed")
	for what, err := range map[string]error{
		"gc":          second(w.GC(self, ctl.GCArgs{})),
		"fsck repair": second(w.Fsck(self, ctl.FsckArgs{Repair: true})),
		"apply":       second(w.Apply(self, ctl.ApplyArgs{})),
		"snapshot":    second(w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})),
		"branch":      second(w.CreateBranch(self, ctl.BranchCreateArgs{Name: "b", From: s.ID})),
	} {
		isKind(t, what+" on a read-only store", err, ErrReadOnly, "open it writable")
	}
	if _, err := w.Fsck(self, ctl.FsckArgs{}); err != nil {
		t.Errorf("fsck (no repair) of a read-only store: %v", err)
	}
	if list, err := w.Snapshots(); err != nil || len(list.Snapshots) != 1 {
		t.Errorf("snapshots after the refused restore: %+v, %v; want only %s", list, err, s.ID)
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// second is the error of a call's two results.
func second[T any](_ T, err error) error { return err }

// TestLocalClient: the operations served to this process through a
// control server give the same results and the same kinds of errors.
func TestLocalClient(t *testing.T) {
	w := newWorkspace(t, nil)
	closed := false
	c := Local(w, "test store", nil, func() error { closed = true; return nil })
	info, err := c.CreateSnapshot(ctl.SnapshotCreateArgs{Label: "via client"})
	if err != nil || info.Label != "via client" {
		t.Fatalf("CreateSnapshot through the client = %+v, %v", info, err)
	}
	_, err = c.DeleteSnapshot("nope")
	isKind(t, "an unknown snapshot through the client", err, ErrNotFound, `no snapshot or tag "nope"`)
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("the client's error %v does not carry ENOENT", err)
	}
	if st, err := c.Status(); err != nil || st.Lower != w.Lower() || !st.Offline || st.Session || !strings.Contains(st.IOMode, "opened by this command") {
		t.Errorf("Status through the client = %+v, %v", st, err)
	}
	if err := c.Ping(); err != nil {
		t.Errorf("Ping through the client: %v", err)
	}
	_, err = c.Unmount()
	if !errors.Is(err, syscall.ENOSYS) {
		t.Errorf("Unmount of a local workspace without an unmount operation: %v, want ENOSYS", err)
	}
	if err := c.Close(); err != nil || !closed {
		t.Errorf("Close = %v, closed %v", err, closed)
	}
}

// TestRestoreInvalidates: every restore drops the kernel's caches, also
// one that leaves no node stale (the kernel may remember that a name the
// restore brings back did not exist).
func TestRestoreInvalidates(t *testing.T) {
	w := newWorkspace(t, nil)
	m := &fakeMount{shown: w.View(), bound: map[int]*overlay.FS{}}
	w.Attach(m)
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := w.Restore(self, ctl.RestoreArgs{Ref: s.ID}); err != nil {
			t.Fatal(err)
		}
		if m.invalids != i+1 {
			t.Fatalf("after restore %d: %d invalidations, want %d", i+1, m.invalids, i+1)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a second Attach did not panic")
		}
	}()
	w.Attach(m)
}

// TestRestoreTellsTheKernelAside: the kernel is told of a restore by a
// goroutine of its own, started while the restore holds the view's
// lock. Telling may wait for a lookup in flight (the kernel holds the
// directory's lock for it), which waits for the view's lock: the
// restore must not wait for the telling then (this test would hang),
// and must wait for it before it returns (the kernel never serves a
// name the restore changed after that). The lookup finds the restored
// state.
func TestRestoreTellsTheKernelAside(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	v := w.View()
	m := &fakeMount{shown: v, bound: map[int]*overlay.FS{}}
	var during string
	var duringErr error
	m.duringInvalidate = func() {
		var b []byte
		b, duringErr = v.ReadFile("a.txt", 1<<20)
		during = string(b)
	}
	w.Attach(m)
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, v, "a.txt", "changed\n")
	if _, err := w.Restore(self, ctl.RestoreArgs{Ref: s.ID}); err != nil {
		t.Fatal(err)
	}
	if m.invalids != 1 {
		t.Fatalf("the restore returned with %d invalidations done, want 1", m.invalids)
	}
	if duringErr != nil || during != "a\n" {
		t.Errorf("a read while the kernel was told: %q, %v; want the restored %q", during, duringErr, "a\n")
	}
}

// TestSupervisedRestore: a restore of a supervised branch is told the
// mount first and its outcome after; one the mount cannot stop restores
// nothing.
func TestSupervisedRestore(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	m := &fakeMount{shown: w.View(), bound: map[int]*overlay.FS{}, supervised: "main"}
	w.Attach(m)
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, w.View(), "a.txt", "changed\n")
	rep, err := w.Restore(self, ctl.RestoreArgs{Ref: s.ID})
	if err != nil || !rep.Stopped || !rep.Relaunch {
		t.Fatalf("Restore of the supervised branch = %+v, %v; want Stopped, Relaunch", rep, err)
	}
	want := []string{"stopped", fmt.Sprintf("restored %s %s <nil>", s.ID, rep.Safety.ID)}
	if got := m.told(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the mount was told %q, want %q", got, want)
	}
	if dry, err := w.Restore(self, ctl.RestoreArgs{Ref: s.ID, DryRun: true}); err != nil || !dry.Relaunch || len(m.told()) != 2 {
		t.Errorf("a dry run: %+v, %v, told %q; want Relaunch said, nothing told", dry, err, m.told())
	}
	// A process of the supervised command gets its reply at once; the
	// restore follows.
	writeFile(t, w.View(), "a.txt", "by the agent\n")
	m.inside = 4242
	rep, err = w.Restore(ctl.Caller{Pid: 4242}, ctl.RestoreArgs{Ref: s.ID})
	if err != nil || !rep.Deferred || !rep.Stopped || !rep.Relaunch || rep.Safety != nil {
		t.Fatalf("Restore asked by the agent itself = %+v, %v; want Deferred", rep, err)
	}
	if !waitFor(func() bool { return len(m.told()) == 4 }) {
		t.Fatalf("the deferred restore told the mount %q", m.told())
	}
	if got, _ := readFile(t, w.View(), "a.txt"); got != "a\n" {
		t.Errorf("a.txt after the deferred restore = %q", got)
	}
	if got := m.told()[2]; got != "stopped, asked by run-1" {
		t.Errorf("the deferred restore stopped the command as %q, want it tied to the asker's start run-1", got)
	}
	m.inside = 0
	writeFile(t, w.View(), "a.txt", "again\n")
	m.mu.Lock()
	m.stopErr = errors.New("the agent would not stop")
	m.mu.Unlock()
	before, _ := w.Snapshots()
	_, err = w.Restore(self, ctl.RestoreArgs{Ref: s.ID})
	isKind(t, "a restore whose agent could not be stopped", err, ErrIO, "the agent would not stop: nothing was restored")
	if got, _ := readFile(t, w.View(), "a.txt"); got != "again\n" {
		t.Errorf("a.txt after the refused restore = %q", got)
	}
	if after, _ := w.Snapshots(); len(after.Snapshots) != len(before.Snapshots) {
		t.Errorf("the refused restore took a snapshot: %d, then %d", len(before.Snapshots), len(after.Snapshots))
	}
}

// TestSelfRewindDropped: a self-rewind the supervisor drops (the start
// that asked it no longer runs) restores nothing and takes no safety
// snapshot.
func TestSelfRewindDropped(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	m := &fakeMount{shown: w.View(), bound: map[int]*overlay.FS{}, supervised: "main", inside: 4242}
	w.Attach(m)
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, w.View(), "a.txt", "changed\n")
	before, _ := w.Snapshots()
	m.stopErr = fmt.Errorf("%w: an earlier rewind stopped run-1", ErrRewindDropped)
	if rep, err := w.Restore(ctl.Caller{Pid: 4242}, ctl.RestoreArgs{Ref: s.ID}); err != nil || !rep.Deferred {
		t.Fatalf("the self-rewind = %+v, %v; want Deferred", rep, err)
	}
	if !waitFor(func() bool { return len(m.told()) == 1 }) {
		t.Fatalf("the self-rewind told the mount %q", m.told())
	}
	if got, want := m.told()[0], "not stopped for "+s.ID+" (run-1)"; !strings.HasPrefix(got, want) {
		t.Errorf("the mount was told %q, want %q...", got, want)
	}
	if got, _ := readFile(t, w.View(), "a.txt"); got != "changed\n" {
		t.Errorf("a.txt after a dropped self-rewind = %q, want it unchanged", got)
	}
	if after, _ := w.Snapshots(); len(after.Snapshots) != len(before.Snapshots) {
		t.Errorf("the dropped self-rewind took a snapshot: %d, then %d", len(before.Snapshots), len(after.Snapshots))
	}
}

// TestRewindStopsWithoutOpLock: the supervised command is stopped
// before the restore takes the operation lock, so that a process of it
// in the middle of a control call (which needs the lock) can end.
func TestRewindStopsWithoutOpLock(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	m := &fakeMount{shown: w.View(), bound: map[int]*overlay.FS{}, supervised: "main"}
	w.Attach(m)
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, inside := range []uint32{0, 4242} {
		m.inside = inside
		var callErr error
		done := make(chan struct{})
		m.duringStop = func() {
			// The agent's `agentfs snapshot list`, which the stop waits
			// for: it cannot end while the lock is held.
			go func() {
				_, callErr = w.Snapshots()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				callErr = errors.New("the control call waited 5s for the operation lock the rewind held while stopping the command")
			}
		}
		writeFile(t, w.View(), "a.txt", "changed\n")
		n := len(m.told())
		if _, err := w.Restore(ctl.Caller{Pid: inside}, ctl.RestoreArgs{Ref: s.ID}); err != nil {
			t.Fatal(err)
		}
		if !waitFor(func() bool { return len(m.told()) == n+2 }) {
			t.Fatalf("the rewind (caller %d) told the mount %q", inside, m.told())
		}
		<-done
		if callErr != nil {
			t.Errorf("caller %d: %v", inside, callErr)
		}
	}
}

// TestRewindWithoutRelaunch: when the supervisor has no relaunches
// left, the reply says the command is stopped and not started again:
// a dry run, a deferred rewind and a rewind alike.
func TestRewindWithoutRelaunch(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	m := &fakeMount{shown: w.View(), bound: map[int]*overlay.FS{}, supervised: "main", norelaunch: true}
	w.Attach(m)
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what   string
		caller uint32
		dry    bool
	}{{"a dry run", 0, true}, {"a rewind", 0, false}, {"a deferred rewind", 4242, false}} {
		m.inside = 4242
		rep, err := w.Restore(ctl.Caller{Pid: tc.caller}, ctl.RestoreArgs{Ref: s.ID, DryRun: tc.dry})
		if err != nil || !rep.Stopped || rep.Relaunch {
			t.Errorf("%s = %+v, %v; want Stopped, not Relaunch", tc.what, rep, err)
		}
	}
}

// TestRewindResolvesAgain: what a rewind restores is resolved once the
// command is stopped, under the operation lock: a snapshot deleted and a
// branch switched away from meanwhile restore nothing, and the
// supervisor is told so (it starts the command again on the state it
// had).
func TestRewindResolvesAgain(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	m := &fakeMount{shown: w.View(), bound: map[int]*overlay.FS{}, supervised: "main"}
	w.Attach(m)
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, w.View(), "a.txt", "changed\n")
	// Deferred: the snapshot is deleted (retention, a person) while the
	// command is being stopped.
	m.inside = 4242
	m.duringStop = func() {
		if _, err := w.DeleteSnapshot(self, s.ID); err != nil {
			t.Errorf("deleting the snapshot during the stop: %v", err)
		}
	}
	if rep, err := w.Restore(ctl.Caller{Pid: 4242}, ctl.RestoreArgs{Ref: s.ID}); err != nil || !rep.Deferred {
		t.Fatalf("the deferred rewind = %+v, %v", rep, err)
	}
	if !waitFor(func() bool { return len(m.told()) == 2 }) {
		t.Fatalf("the deferred rewind told the mount %q", m.told())
	}
	if got := m.told()[1]; !strings.Contains(got, "not found") && !strings.Contains(got, "no snapshot") {
		t.Errorf("the supervisor was told %q, want the snapshot's absence", got)
	}
	if got, _ := readFile(t, w.View(), "a.txt"); got != "changed\n" {
		t.Errorf("a.txt after a rewind to a deleted snapshot = %q, want it unchanged", got)
	}
	// Synchronous: the branch is switched away from meanwhile.
	s2, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateBranch(self, ctl.BranchCreateArgs{Name: "side"}); err != nil {
		t.Fatal(err)
	}
	m.inside = 0
	m.duringStop = func() {
		if _, err := w.SwitchBranch(self, "side"); err != nil {
			t.Errorf("switching during the stop: %v", err)
		}
	}
	writeFile(t, w.View(), "a.txt", "after s2\n")
	_, err = w.Restore(self, ctl.RestoreArgs{Ref: s2.ID})
	isKind(t, "a rewind of a branch switched away from during the stop", err, ErrBusy, "nothing was restored")
	if got := m.told(); len(got) != 4 || !strings.Contains(got[3], "switched away") {
		t.Errorf("the supervisor was told %q, want the failure", got)
	}
}

// TestRewindPanic: a restore that panics still tells the supervisor its
// outcome (the next rewind waits for it) and releases the operation
// lock; a deferred one does not end the process.
func TestRewindPanic(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	m := &fakeMount{shown: w.View(), bound: map[int]*overlay.FS{}, supervised: "main", panicInvalidate: true}
	w.Attach(m)
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the restore did not panic")
			}
		}()
		_, _ = w.Restore(self, ctl.RestoreArgs{Ref: s.ID})
	}()
	if got := m.told(); len(got) != 2 || !strings.Contains(got[1], "panic") {
		t.Errorf("after a panic the supervisor was told %q, want the failure", got)
	}
	if _, err := w.Snapshots(); err != nil {
		t.Errorf("an operation after the panic: %v", err)
	}
	m.inside = 4242
	if _, err := w.Restore(ctl.Caller{Pid: 4242}, ctl.RestoreArgs{Ref: s.ID}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { return len(m.told()) == 4 }) {
		t.Fatalf("the deferred rewind that panicked told the mount %q", m.told())
	}
	if got := m.told()[3]; !strings.Contains(got, "panic") {
		t.Errorf("after a deferred panic the supervisor was told %q", got)
	}
}

// TestClosedAndPaths: a closed workspace refuses operations; a store is
// opened for a clean absolute project path only.
func TestClosedAndPaths(t *testing.T) {
	lower, store := t.TempDir(), t.TempDir()
	for _, bad := range []string{"relative", lower + "/../" + filepath.Base(lower), ""} {
		if _, err := Open(Options{Store: store, Lower: bad}); err == nil || !strings.Contains(err.Error(), "clean absolute path") {
			t.Errorf("Open with project %q: %v, want a refusal", bad, err)
		}
	}
	w, err := Open(Options{Store: store, Lower: lower})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = w.Snapshots()
	isKind(t, "an operation after Close", err, ErrClosed, "is closed")
	if err := w.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// TestErrnos: a host's error keeps its errno for the protocol and is of
// kind ErrIO; the kinds' own errnos are theirs.
func TestErrnos(t *testing.T) {
	err := ioErrorf(syscall.ENOSPC, "writing: %v", syscall.ENOSPC)
	var en syscall.Errno
	if !errors.As(err, &en) || en != syscall.ENOSPC || !errors.Is(err, ErrIO) || errors.Is(err, ErrNotFound) {
		t.Errorf("ioErrorf(ENOSPC): errno %v, kind ErrIO %v", en, errors.Is(err, ErrIO))
	}
	err = eioErrorf(syscall.EACCES, "comparing")
	if !errors.As(err, &en) || en != syscall.EIO {
		t.Errorf("eioErrorf(EACCES) sends %v, want EIO", en)
	}
	err = errorf(ErrBusy, "busy")
	if !errors.As(err, &en) || en != syscall.EBUSY {
		t.Errorf("ErrBusy sends %v, want EBUSY", en)
	}
	back := fromCtl(&ctl.Error{Errno: syscall.EXDEV, Msg: "cross-device"})
	if !errors.Is(back, ErrIO) || !errors.Is(back, syscall.EXDEV) || back.Error() != "cross-device" {
		t.Errorf("fromCtl(EXDEV) = %v: want ErrIO carrying EXDEV", back)
	}
}

// TestDiffPaths: a diff narrowed to paths lists, and patches, only the
// changes at or below them.
func TestDiffPaths(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	writeFile(t, w.View(), "a.txt", "A\n")
	writeFile(t, w.View(), "b.txt", "B\n")
	rep, err := w.Diff(self, ctl.DiffArgs{Paths: []string{"b.txt"}, Patch: true})
	if err != nil || len(rep.Changes) != 1 || rep.Changes[0].Path != "b.txt" || strings.Contains(rep.Patch, "a.txt") || !strings.Contains(rep.Patch, "+B") {
		t.Errorf("Diff of b.txt = %+v, %v", rep, err)
	}
	if rep, err := w.Diff(self, ctl.DiffArgs{Paths: []string{"."}}); err != nil || len(rep.Changes) != 2 {
		t.Errorf("Diff of . = %+v, %v; want both", rep, err)
	}
	_, err = w.Diff(self, ctl.DiffArgs{Paths: []string{"../x"}})
	isKind(t, "a diff outside the mount", err, ErrInvalid, "diff: \"../x\" is not a path inside the mount")
}

// TestActivity: entries of the log, selected by time, operation and
// path, the newest kept past the limit.
func TestActivity(t *testing.T) {
	w := newWorkspace(t, nil)
	if rep, err := w.Activity(ctl.ActivityArgs{}); err != nil || len(rep.Entries) != 0 {
		t.Fatalf("Activity of a store with no log = %+v, %v", rep, err)
	}
	log, err := activity.Open(activity.Options{Dir: w.Store()})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Hour)
	for i, e := range []activity.Entry{
		{Op: "create", Path: "src/a.go"}, {Op: "write", Path: "src/a.go"}, {Op: "unlink", Path: "old.txt"},
		{Op: "rename", Path: "x", Path2: "src/x"}, {Op: "write", Path: "srcfoo"},
	} {
		e.Time = start.Add(time.Duration(i) * time.Minute)
		log.Record(e)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args ctl.ActivityArgs
		ops  string
		more bool
	}{
		{ctl.ActivityArgs{}, "create write unlink rename write", false},
		{ctl.ActivityArgs{Op: "write"}, "write write", false},
		{ctl.ActivityArgs{PathPrefix: "src"}, "create write rename", false},
		{ctl.ActivityArgs{PathPrefix: "/src/"}, "create write rename", false},
		{ctl.ActivityArgs{Since: start.Add(150 * time.Second)}, "rename write", false},
		{ctl.ActivityArgs{Limit: 2}, "rename write", true},
	} {
		rep, err := w.Activity(c.args)
		var ops []string
		for _, e := range rep.Entries {
			ops = append(ops, e.Op)
		}
		if err != nil || strings.Join(ops, " ") != c.ops || rep.Truncated != c.more {
			t.Errorf("Activity(%+v) = %v (truncated %v), %v; want %s (%v)", c.args, ops, rep.Truncated, err, c.ops, c.more)
		}
	}
	_, err = w.Activity(ctl.ActivityArgs{Limit: -1})
	isKind(t, "a negative limit", err, ErrInvalid, "a limit of -1")
}

// TestTriggerKinds: build and idle snapshots are automatic (retention
// thins them); a post-run one is taken only when the branch changed
// since its newest snapshot, and kept like a pre-run one.
func TestTriggerKinds(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a": "a"})
	// Unchanged from the project, no snapshot yet: none.
	if info, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Kind: branch.KindPostRun, IfChanged: true}); err != nil || info.ID != "" {
		t.Fatalf("post-run of an unchanged branch = %+v, %v; want none", info, err)
	}
	writeFile(t, w.View(), "f", "1")
	w.AutoSnapshot("", branch.KindBuild, func(*overlay.FS) string { return "make: succeeded in 1s" })
	// Nothing changed since: no idle snapshot of the same state.
	w.AutoSnapshot("main", branch.KindIdle, func(*overlay.FS) string { return "idle, unchanged" })
	w.AutoSnapshot("main", branch.KindManual, func(*overlay.FS) string { return "not automatic" })
	writeFile(t, w.View(), "f", "2")
	w.AutoSnapshot("main", branch.KindIdle, func(*overlay.FS) string { return "idle for 30s after make" })
	// The newest snapshot is an automatic one (retention may delete
	// it): the end still gets a post-run snapshot of its own.
	post, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Kind: branch.KindPostRun, IfChanged: true, Label: "end"})
	if err != nil || post.ID == "" || post.Kind != branch.KindPostRun {
		t.Fatalf("post-run after automatic snapshots = %+v, %v", post, err)
	}
	if info, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Kind: branch.KindPostRun, IfChanged: true}); err != nil || info.ID != "" {
		t.Fatalf("post-run with nothing changed since the last post-run = %+v, %v; want none", info, err)
	}
	list, _ := w.Snapshots()
	var kinds []string
	for _, s := range list.Snapshots {
		kinds = append(kinds, s.Kind+":"+s.Label)
	}
	if want := []string{"build:make: succeeded in 1s", "idle:idle for 30s after make", "post-run:end"}; !slices.Equal(kinds, want) {
		t.Fatalf("snapshots = %q, want %q", kinds, want)
	}
	zero := 0
	if r, err := w.Prune(self, ctl.PruneArgs{Keep: &zero}); err != nil || len(r.Deleted) != 2 {
		t.Fatalf("Prune = %+v, %v; want the build and idle snapshots deleted", r, err)
	}
	if list, _ = w.Snapshots(); len(list.Snapshots) != 1 || list.Snapshots[0].ID != post.ID {
		t.Errorf("after prune: %+v, want the post-run one", list)
	}
	_, err = w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Kind: branch.KindBuild})
	isKind(t, "asking for a build snapshot", err, ErrInvalid, "cannot be asked for")
}
