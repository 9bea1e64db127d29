package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/hide"
	"github.com/agentfs/agentfs/overlay"
)

// TestMergeBase: a merge compares both sides with the latest snapshot of
// their common history: where their chains of origins meet, the earlier
// of the two points; the project when they never meet.
func TestMergeBase(t *testing.T) {
	w := newWorkspace(t, map[string]string{"f": "lower\n"})
	s, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Label: "s"})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []ctl.BranchCreateArgs{{Name: "a", From: s.ID}, {Name: "c", From: s.ID}} {
		if _, err := w.CreateBranch(self, b); err != nil {
			t.Fatal(err)
		}
	}
	tsnap, err := w.CreateSnapshot(self, ctl.SnapshotCreateArgs{Branch: "a", Label: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateBranch(self, ctl.BranchCreateArgs{Name: "b", From: tsnap.ID}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ branch, into, want string }{
		{"a", "main", s.ID},     // a fork of main
		{"main", "a", s.ID},     // the other way round
		{"c", "a", s.ID},        // siblings
		{"b", "main", s.ID},     // a fork of a fork
		{"b", "a", tsnap.ID},    // a fork of a
		{"a", "b", tsnap.ID},    // a into its fork
		{"b", "c", s.ID},        // cousins
		{"main", "main", ""},    // refused
		{"nope", "main", "err"}, // refused
	} {
		rep, err := w.Merge(self, ctl.MergeArgs{Branch: tc.branch, Into: tc.into, DryRun: true})
		switch {
		case tc.want == "" || tc.want == "err":
			if err == nil {
				t.Errorf("merge %s into %s: no error", tc.branch, tc.into)
			}
		case err != nil:
			t.Errorf("merge %s into %s: %v", tc.branch, tc.into, err)
		case rep.Base != tc.want:
			t.Errorf("merge %s into %s: base %s, want %s", tc.branch, tc.into, rep.Base, tc.want)
		}
	}
	// A base given by the caller; the project as the base.
	rep, err := w.Merge(self, ctl.MergeArgs{Branch: "a", Base: "lower", DryRun: true})
	if err != nil || rep.Base != LowerRef {
		t.Errorf("merge with --base lower: base %q, %v", rep.Base, err)
	}
	_, err = w.Merge(self, ctl.MergeArgs{Branch: "a", Base: "c", DryRun: true})
	isKind(t, "a branch as the base", err, ErrInvalid, "is a branch")
}

// TestMergeUndo: a merge takes a safety snapshot of the target first;
// restoring it undoes the merge; a dry run takes none and changes
// nothing; a read-only store refuses a merge.
func TestMergeUndo(t *testing.T) {
	w := newWorkspace(t, map[string]string{"f": "one\ntwo\nthree\n"})
	if _, err := w.CreateBranch(self, ctl.BranchCreateArgs{Name: "try"}); err != nil {
		t.Fatal(err)
	}
	l, err := w.meta.Layer("try")
	if err != nil {
		t.Fatal(err)
	}
	try, err := w.viewOf(l) // the live view a process in branch try writes through
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, try, "f", "ONE\ntwo\nthree\n")
	writeFile(t, try, "new", "new\n")
	writeFile(t, w.View(), "f", "one\ntwo\nTHREE\n")
	before, err := w.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	dry, err := w.Merge(self, ctl.MergeArgs{Branch: "try", DryRun: true})
	if err != nil || dry.Safety != nil || len(dry.Changes) != 2 {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	if after, _ := w.Snapshots(); len(after.Snapshots) != len(before.Snapshots) {
		t.Errorf("a dry run took a snapshot")
	}
	rep, err := w.Merge(self, ctl.MergeArgs{Branch: "try"})
	if err != nil || rep.Safety == nil || rep.Unresolved != 0 {
		t.Fatalf("merge: %+v, %v", rep, err)
	}
	if got, _ := readFile(t, w.View(), "f"); got != "ONE\ntwo\nTHREE\n" {
		t.Errorf("f after the merge = %q", got)
	}
	if _, err := w.Restore(self, ctl.RestoreArgs{Ref: rep.Safety.ID}); err != nil {
		t.Fatal(err)
	}
	if got, _ := readFile(t, w.View(), "f"); got != "one\ntwo\nTHREE\n" {
		t.Errorf("f after the undo = %q", got)
	}
	if _, ok := readFile(t, w.View(), "new"); ok {
		t.Errorf("new is still there after the undo")
	}
	if got, _ := readFile(t, try, "f"); got != "ONE\ntwo\nthree\n" {
		t.Errorf("the merge changed the branch merged in: f = %q", got)
	}
	if !strings.Contains(rep.Safety.Label, "before merging try") {
		t.Errorf("safety snapshot label %q", rep.Safety.Label)
	}
}

// TestMergeAllOrNothing: a merge that fails halfway (its changes made,
// then an error) leaves the target as it was, and says so; what a
// program wrote meanwhile to a path the merge does not change is kept
// (the merge's paths are taken back, not the whole branch).
func TestMergeAllOrNothing(t *testing.T) {
	w := newWorkspace(t, map[string]string{"f": "base\n", "other": "o\n"})
	tryBranch(t, w)
	defer func(orig func(*overlay.FS, *overlay.MergePlan) ([]overlay.Stale, error)) { applyMerge = orig }(applyMerge)
	applyMerge = func(v *overlay.FS, p *overlay.MergePlan) ([]overlay.Stale, error) {
		writeFile(t, v, "other", "written meanwhile\n")
		if _, err := v.ApplyMerge(p); err != nil {
			return nil, err
		}
		return nil, errors.New("the disk failed")
	}
	_, err := w.Merge(self, ctl.MergeArgs{Branch: "try"})
	isKind(t, "a merge that fails halfway", err, ErrIO, "nothing was merged")
	if got, _ := readFile(t, w.View(), "f"); got != "base\n" {
		t.Errorf("f after a failed merge = %q, want it as it was", got)
	}
	if _, ok := readFile(t, w.View(), "g"); ok {
		t.Errorf("g is there after a failed merge")
	}
	if got, _ := readFile(t, w.View(), "other"); got != "written meanwhile\n" {
		t.Errorf("other = %q after a failed merge: what a program wrote meanwhile to a path the merge does not change was lost", got)
	}
}

// TestMergeKeepsWritesMadeMeanwhile: a program writing the target
// after the merge was planned keeps what it wrote: the merge refuses,
// changes nothing (no restore over the write) and says to merge again.
func TestMergeKeepsWritesMadeMeanwhile(t *testing.T) {
	w := newWorkspace(t, map[string]string{"f": "base\n", "other": "o\n"})
	tryBranch(t, w)
	defer func(orig func(*overlay.FS, *overlay.MergePlan) ([]overlay.Stale, error)) { applyMerge = orig }(applyMerge)
	applyMerge = func(v *overlay.FS, p *overlay.MergePlan) ([]overlay.Stale, error) {
		writeFile(t, v, "f", "written meanwhile\n")
		writeFile(t, v, "other", "also written meanwhile\n")
		return v.ApplyMerge(p)
	}
	_, err := w.Merge(self, ctl.MergeArgs{Branch: "try"})
	if err == nil || !strings.Contains(err.Error(), "merge again") {
		t.Fatalf("merge over a write made meanwhile: %v, want an error saying to merge again", err)
	}
	if got, _ := readFile(t, w.View(), "f"); got != "written meanwhile\n" {
		t.Errorf("f = %q: the write made during the merge was lost", got)
	}
	if got, _ := readFile(t, w.View(), "other"); got != "also written meanwhile\n" {
		t.Errorf("other = %q: the write made during the merge was lost", got)
	}
	if _, ok := readFile(t, w.View(), "g"); ok {
		t.Errorf("g is there after a refused merge")
	}
}

// tryBranch creates branch try of w, in which f is changed and g
// created.
func tryBranch(t *testing.T, w *Workspace) {
	t.Helper()
	try := newBranchView(t, w, "try")
	writeFile(t, try, "f", "theirs\n")
	writeFile(t, try, "g", "new\n")
}

// TestMergeTwice: a merge snapshots the branch it merges in and
// answers it (Merged); merging the branch again from that snapshot
// (--base) takes only what the branch changed since, with no conflict
// on what the first merge took.
func TestMergeTwice(t *testing.T) {
	w := newWorkspace(t, map[string]string{"f": "one\ntwo\nthree\n"})
	try := newBranchView(t, w, "try")
	writeFile(t, try, "f", "ONE\ntwo\nthree\n")
	writeFile(t, try, "n", "n1\n")
	rep, err := w.Merge(self, ctl.MergeArgs{Branch: "try"})
	if err != nil || rep.Unresolved != 0 {
		t.Fatalf("first merge: %+v, %v", rep, err)
	}
	if rep.Merged == nil {
		t.Fatalf("the first merge answers no snapshot of try to merge again from")
	}
	writeFile(t, w.View(), "f", "ONE\ntwo\nTHREE\n")
	writeFile(t, try, "f", "ONE!\ntwo\nthree\n")
	writeFile(t, try, "n", "n2\n")
	rep, err = w.Merge(self, ctl.MergeArgs{Branch: "try", Base: rep.Merged.ID})
	if err != nil || rep.Unresolved != 0 {
		t.Fatalf("second merge from %s: %+v, %v", rep.Base, rep.Conflicts, err)
	}
	if got, _ := readFile(t, w.View(), "f"); got != "ONE!\ntwo\nTHREE\n" {
		t.Errorf("f after the second merge = %q", got)
	}
	if got, _ := readFile(t, w.View(), "n"); got != "n2\n" {
		t.Errorf("n after the second merge = %q", got)
	}
}

// newBranchView creates branch name of w and returns its view.
func newBranchView(t *testing.T, w *Workspace, name string) *overlay.FS {
	t.Helper()
	if _, err := w.CreateBranch(self, ctl.BranchCreateArgs{Name: name}); err != nil {
		t.Fatal(err)
	}
	l, err := w.meta.Layer(name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := w.viewOf(l)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMergeHiddenPaths: a hidden project file is no file of either
// side: a merge never writes its content into the target, and a file
// the branch made of its own at the hidden path is taken like any
// other.
func TestMergeHiddenPaths(t *testing.T) {
	lower := t.TempDir()
	for name, content := range map[string]string{".env": "secret\n", "a.txt": "a\n"} {
		if err := os.WriteFile(filepath.Join(lower, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := hide.New([]hide.Pattern{{Pattern: ".env", From: hide.FromUser}})
	if err != nil {
		t.Fatal(err)
	}
	w := openWorkspace(t, Options{Lower: lower, Hide: rules})
	try := newBranchView(t, w, "try")
	writeFile(t, try, ".env", "own\n")
	writeFile(t, try, "a.txt", "A\n")
	rep, err := w.Merge(self, ctl.MergeArgs{Branch: "try"})
	if err != nil || rep.Unresolved != 0 {
		t.Fatalf("merge: %+v, %v", rep, err)
	}
	if got, _ := readFile(t, w.View(), ".env"); got != "own\n" {
		t.Errorf(".env after the merge = %q, want the branch's own", got)
	}
	if got, _ := readFile(t, w.View(), "a.txt"); got != "A\n" {
		t.Errorf("a.txt after the merge = %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(lower, ".env")); err != nil || string(b) != "secret\n" {
		t.Errorf("the project's .env = %q, %v", b, err)
	}
}

// TestMergeOverQuota: a merge that would take the target past its
// quota fails whole (EDQUOT named), the target as it was.
func TestMergeOverQuota(t *testing.T) {
	w := openWorkspace(t, Options{Lower: t.TempDir(), Limits: overlay.Limits{Bytes: 100 << 10}})
	try := newBranchView(t, w, "try")
	writeFile(t, try, "t", strings.Repeat("t", 60<<10))
	writeFile(t, w.View(), "m", strings.Repeat("m", 60<<10))
	_, err := w.Merge(self, ctl.MergeArgs{Branch: "try"})
	if err == nil || !strings.Contains(err.Error(), "nothing was merged") || !strings.Contains(err.Error(), "limit of the branch is reached") {
		t.Fatalf("a merge past the quota: %v, want an error naming the quota, nothing merged", err)
	}
	if _, ok := readFile(t, w.View(), "t"); ok {
		t.Errorf("t is there after a merge that failed")
	}
	if got, _ := readFile(t, w.View(), "m"); len(got) != 60<<10 {
		t.Errorf("m holds %d bytes after a failed merge", len(got))
	}
}

// openWorkspace opens a workspace of o in a new store, closed when the
// test ends.
func openWorkspace(t *testing.T, o Options) *Workspace {
	t.Helper()
	o.Store, o.Version = t.TempDir(), "test"
	w, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	return w
}

// TestMergeBadSidePaths: --ours and --theirs paths outside the tree are
// refused, naming the path, before anything is done.
func TestMergeBadSidePaths(t *testing.T) {
	w := newWorkspace(t, map[string]string{"f": "base\n"})
	tryBranch(t, w)
	for _, a := range []ctl.MergeArgs{{Branch: "try", Theirs: []string{"../f"}}, {Branch: "try", Ours: []string{"/etc/passwd"}}} {
		_, err := w.Merge(self, a)
		isKind(t, "a side path outside the tree", err, ErrInvalid, "is not a path inside the mount")
	}
	if _, ok := readFile(t, w.View(), "g"); ok {
		t.Errorf("a refused merge took g")
	}
	rep, err := w.Merge(self, ctl.MergeArgs{Branch: "try", Theirs: []string{"./f"}, DryRun: true})
	if err != nil || rep.Unresolved != 0 {
		t.Errorf("merge --theirs ./f: %+v, %v", rep, err)
	}
}
