package workspace

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/ctl"
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
// then an error) leaves the target as it was, and says so.
func TestMergeAllOrNothing(t *testing.T) {
	w := newWorkspace(t, map[string]string{"f": "base\n"})
	if _, err := w.CreateBranch(self, ctl.BranchCreateArgs{Name: "try"}); err != nil {
		t.Fatal(err)
	}
	l, err := w.meta.Layer("try")
	if err != nil {
		t.Fatal(err)
	}
	try, err := w.viewOf(l)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, try, "f", "theirs\n")
	writeFile(t, try, "g", "new\n")
	defer func(orig func(*overlay.FS, *overlay.MergePlan) ([]overlay.Stale, error)) { applyMerge = orig }(applyMerge)
	applyMerge = func(v *overlay.FS, p *overlay.MergePlan) ([]overlay.Stale, error) {
		if _, err := v.ApplyMerge(p); err != nil {
			return nil, err
		}
		return nil, errors.New("the disk failed")
	}
	_, err = w.Merge(self, ctl.MergeArgs{Branch: "try"})
	isKind(t, "a merge that fails halfway", err, ErrIO, "nothing was merged")
	if got, _ := readFile(t, w.View(), "f"); got != "base\n" {
		t.Errorf("f after a failed merge = %q, want it as it was", got)
	}
	if _, ok := readFile(t, w.View(), "g"); ok {
		t.Errorf("g is there after a failed merge")
	}
}
