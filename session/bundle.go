package session

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/hostpath"
	"github.com/agentfs/agentfs/record"
	"github.com/agentfs/agentfs/workspace"
)

// # Records (agentfs run --record, agentfs record -s)
//
// The record of a session is a bundle in the agent-snapshot format
// (package record) made from its store once it has ended: the
// before-state is the pre-run snapshot, the after-state the post-run
// snapshot (or, when none was taken because nothing changed since the
// newest snapshot, or post-run snapshots are off, the session's branch
// as it is now, which nothing changes once the session has ended but a
// restore -s), the operations the activity log's entries, which must
// include reads (the session ran with reads logged: --log-reads, or
// --record, which turns it on).

// CheckBundleTarget checks that dir (absolute) can take the record of a
// session of project: outside the project, and new or empty.
func CheckBundleTarget(dir, project string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("the record directory %q: give an absolute path", dir)
	}
	if hostpath.InsideAny(dir, []string{project}) {
		return fmt.Errorf("the record directory %s is inside the project %s, which agentfs never writes to: choose a directory outside it", dir, project)
	}
	return record.CheckTarget(dir)
}

// BundleResult says what WriteBundle wrote, and what the record could
// not hold.
type BundleResult struct {
	record.Result
	// Dropped counts the activity log's entries that were dropped (the
	// log's queue was full): operations of the record may be missing
	// (the states are whole: every path changed is recorded).
	Dropped int64
}

// Warnings says what the record may not hold right, one line each: the
// operations of dropped log entries, before-states the project changed
// since the run started.
func (b BundleResult) Warnings() []string {
	var out []string
	if b.Dropped > 0 {
		out = append(out, fmt.Sprintf("%d entries of the activity log were dropped (its queue was full): the record may miss some operations", b.Dropped))
	}
	if n := len(b.Stale); n > 0 {
		list := strings.Join(b.Stale[:min(n, 5)], ", ")
		if n > 5 {
			list += fmt.Sprintf(" and %d more", n-5)
		}
		out = append(out, fmt.Sprintf("%d paths of the project changed after the run started (%s): their before-states are the project's files as they are now, not as the command found them", n, list))
	}
	return out
}

// hiddenPaths returns the filter of paths hidden from the session's
// mount (the hide patterns its store recorded), which never appear in a
// record: a path the patterns hide as a file or as a directory (the
// filter is not told which), and so the branch's own files at hidden
// paths too. nil when there are none.
func hiddenPaths(w *workspace.Workspace) func(p string) bool {
	rules, _ := w.HideRules()
	if rules.Empty() {
		return nil
	}
	return func(p string) bool { return rules.Hidden(p, false) || rules.Hidden(p, true) }
}

// WriteBundle writes the record of the ended session r to dir (absolute,
// outside the project, new or empty). version is agentfs's.
func (r *Record) WriteBundle(dir, version string) (BundleResult, error) {
	switch st := r.Live(); {
	case st == StateRunning || st == StateStarting:
		return BundleResult{}, fmt.Errorf("session %s is still running: record it once its command has ended", r.ID)
	case st == StateDiscarded || !r.HasStore():
		return BundleResult{}, fmt.Errorf("session %s was discarded: its store, which the record is made from, is gone", r.ID)
	case !r.LogReads:
		return BundleResult{}, fmt.Errorf("session %s ran without reads logged: its activity log lacks what the command read, which a record needs; run the command again with agentfs run --record DIR (or --log-reads)", r.ID)
	case r.PreRun == "":
		return BundleResult{}, fmt.Errorf("session %s has no pre-run snapshot: there is no before-state to record", r.ID)
	case st == StateApplied:
		return BundleResult{}, fmt.Errorf("session %s was applied: the project now holds its changes, and its pre-run snapshot reads the project's files through, so its before-states are gone; record a session before applying it (agentfs run --record DIR records it at its end)", r.ID)
	}
	if err := CheckBundleTarget(dir, r.Project); err != nil {
		return BundleResult{}, err
	}
	var res BundleResult
	in := record.Input{Project: r.Project, Command: r.Command, ExitStatus: -1, StartCwd: r.Dir}
	if r.ExitCode != nil {
		in.ExitStatus = *r.ExitCode
	}
	// The user who ran it: the session directory is theirs.
	if st, err := os.Stat(r.SessionDir()); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			in.Uid, in.Gid = sys.Uid, sys.Gid
		}
	}
	w, closeStore, err := r.openStore(version)
	if err != nil {
		return res, err
	}
	defer func() { _ = closeStore() }() // only read: the record's outcome stands
	pre, after, err := r.recordedStates(w)
	if err != nil {
		return res, err
	}
	// The operations on the session's branch (agentfs exec -b may
	// have worked in others of its store).
	err = activity.Read(r.Store, activity.Activity, func(l activity.Line) error {
		switch {
		case l.Op == activity.OpDropped:
			res.Dropped += l.Count
		case l.Op == activity.OpRewind, l.Branch != "" && l.Branch != pre.Branch:
		default:
			in.Events = append(in.Events, record.Event{Op: l.Op, Path: l.Path, Path2: l.Path2})
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("session %s: reading its activity log: %w", r.ID, err)
	}
	diff, err := w.Diff(ctl.Caller{}, ctl.DiffArgs{From: r.PreRun, To: after})
	if err != nil {
		return res, fmt.Errorf("session %s: the changes of the run: %w", r.ID, err)
	}
	for _, c := range diff.Changes {
		in.Changed = append(in.Changed, record.Change{Path: c.Path, Deleted: c.Kind == ctl.Deleted})
	}
	err = w.ReadTrees([]string{r.PreRun, after}, func(trees []*workspace.RefTree) error {
		in.Before, in.After = trees[0], trees[1]
		res.Result, err = record.Write(dir, in, record.Options{Hidden: hiddenPaths(w), BeforeTime: pre.Created})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("session %s: writing its record to %s: %w", r.ID, dir, err)
	}
	return res, nil
}

// recordedStates returns the pre-run snapshot and names the state at
// the end of the run: the post-run snapshot, else the branch the
// pre-run snapshot was taken of.
func (r *Record) recordedStates(w *workspace.Workspace) (pre ctl.SnapshotInfo, after string, err error) {
	list, err := w.Snapshots()
	if err != nil {
		return pre, "", fmt.Errorf("session %s: listing its snapshots: %w", r.ID, err)
	}
	i := slices.IndexFunc(list.Snapshots, func(s ctl.SnapshotInfo) bool { return s.ID == r.PreRun })
	if i < 0 {
		return pre, "", fmt.Errorf("session %s: its pre-run snapshot %s is gone (deleted or pruned): there is no before-state to record", r.ID, r.PreRun)
	}
	pre = list.Snapshots[i]
	if r.PostRun != "" {
		return pre, r.PostRun, nil
	}
	return pre, pre.Branch, nil
}
