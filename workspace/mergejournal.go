package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/overlay"
)

// # The merge journal
//
// A merge changes its target path by path (overlay.ApplyMerge): a
// daemon killed half way would leave half a merge in the branch. So
// before its first change a merge records, under mergeJournalKey, the
// target branch, the safety snapshot taken of it and the paths the
// plan changes, written through (Settle) before anything is changed;
// the record goes once every change of the merge is written through
// (or the merge was undone). A daemon opening a store that holds the
// record (the one before it died in the middle) takes those paths back
// from the safety snapshot (overlay.UndoMerge) before anything uses
// the branch, then drops the record: a merge is made whole or not at
// all, across a crash too, and what programs wrote to other paths of
// the branch meanwhile is kept. Only one merge runs at a time (opMu),
// so one record is enough.

// mergeJournalKey is the store info key of the merge in progress.
const mergeJournalKey = "merge-journal"

// mergeJournal is the record of a merge in progress.
type mergeJournal struct {
	Branch string             `json:"branch"`
	Safety string             `json:"safety"`
	Paths  []overlay.UndoPath `json:"paths"`
}

// beginMergeJournal records the merge of plan into branch into, whose
// state before it is snapshot safety, and makes the record survive the
// process before the first change is made.
func (w *Workspace) beginMergeJournal(into, safety string, plan *overlay.MergePlan) error {
	paths, err := plan.UndoPaths()
	if err != nil {
		return fmt.Errorf("listing the paths of the merge: %w", err)
	}
	b, err := json.Marshal(mergeJournal{Branch: into, Safety: safety, Paths: paths})
	if err != nil {
		return err
	}
	if err := w.meta.SetInfo(mergeJournalKey, b); err != nil {
		return err
	}
	return w.meta.Settle()
}

// endMergeJournal drops the record once the merge's changes (or its
// undoing) are written through.
func (w *Workspace) endMergeJournal() error {
	if err := w.meta.Settle(); err != nil {
		return err
	}
	return w.meta.DeleteInfo(mergeJournalKey)
}

// dropMergeJournal drops the record of a merge that changed nothing,
// or was undone whole; a failure is logged (the next daemon would undo
// again what is undone).
func (w *Workspace) dropMergeJournal(theirs, into string) {
	if err := w.endMergeJournal(); err != nil {
		w.log.Error("dropping the record of a merge undone", "branch", theirs, "into", into, "err", err)
	}
}

// recoverMerge takes back the merge a daemon before this one left half
// made (see "The merge journal"); the store is opened, no mount uses
// it yet.
func (w *Workspace) recoverMerge() error {
	b, err := w.meta.Info(mergeJournalKey)
	if errors.Is(err, branch.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if w.opts.ReadOnly {
		w.log.Warn("the store holds a merge left half made; a daemon mounting it takes it back")
		return nil
	}
	var j mergeJournal
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("reading the record of a merge left half made: %w", err)
	}
	l, err := w.meta.Layer(j.Branch)
	if errors.Is(err, branch.ErrNotFound) {
		w.log.Warn("a merge was left half made into a branch deleted since", "branch", j.Branch)
		return w.meta.DeleteInfo(mergeJournalKey)
	}
	if err != nil {
		return err
	}
	snap, err := w.meta.Snapshot(j.Safety)
	if err != nil {
		return fmt.Errorf("the merge left half made into branch %q: its safety snapshot %s: %w (agentfs restore %s takes the whole branch back)", j.Branch, j.Safety, err, j.Safety)
	}
	before, err := w.readView(nil, w.meta.SnapshotView(snap))
	if err != nil {
		return err
	}
	defer w.closer(before, "snapshot "+snap.ID)()
	target := w.view
	if l.Name() != w.view.Layer().Name() {
		if target, err = w.newView(l); err != nil {
			return err
		}
		defer w.closer(target, "branch "+l.Name())()
	}
	if err := target.UndoMerge(before, j.Paths); err != nil {
		return fmt.Errorf("taking back the merge left half made into branch %q: %w (agentfs restore %s takes the whole branch back)", j.Branch, err, j.Safety)
	}
	if err := w.endMergeJournal(); err != nil {
		return err
	}
	w.log.Warn("took back a merge the daemon before this one left half made", "branch", j.Branch, "safety", j.Safety, "paths", len(j.Paths))
	return nil
}

// mergeGate holds a merge half way, while the file gate exists, once
// it has made the file gate.reached: for the tests of the journal
// only (Options.MergeGate).
func (w *Workspace) mergeGate(plan *overlay.MergePlan) {
	gate := w.opts.MergeGate
	if gate == "" {
		return
	}
	plan.Step = func(done, total int) {
		if done != total/2 {
			return
		}
		if err := os.WriteFile(gate+".reached", nil, 0o644); err != nil {
			w.log.Warn("merge gate", "err", err)
			return
		}
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(gate); errors.Is(err, os.ErrNotExist) {
				return
			}
		}
		w.log.Warn("merge gate: still there after a minute, going on", "gate", gate)
	}
}
