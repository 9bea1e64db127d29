package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/autosnap"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/fs"
	"github.com/agentfs/agentfs/overlay"
)

// The daemon's side of the activity log and of automatic snapshots.
//
// The fs server reports each operation (fs.Activity) to the daemon's
// daemonActivity, on the FUSE path: it queues a log entry
// (internal/activity) and, with automatic snapshots on, the changed
// paths for the scheduler (internal/autosnap); neither waits. The
// scheduler's goroutine takes each snapshot that falls due with d.opMu
// held, as a control operation would, then applies the retention
// policy.

// daemonActivity is the activity log and automatic snapshots of a
// daemon.
type daemonActivity struct {
	d      *daemon
	log    *activity.Log
	auto   *autosnap.Runner // nil when automatic snapshots are off
	policy autosnap.Policy
}

var _ fs.Activity = (*daemonActivity)(nil)

// viewFileMax bounds what automatic snapshots read of a file of the
// view (git refs and commits, .gitignore).
const viewFileMax = 1 << 20

// startActivity opens the activity log in the store and, when they are
// on, starts automatic snapshots. The view must be open.
func (d *daemon) startActivity() error {
	s := d.plan.activity
	log, err := activity.Open(activity.Options{Dir: d.plan.store, MaxBytes: s.logSize, Logger: d.log})
	if err != nil {
		return fmt.Errorf("the store %s: %w", d.plan.store, err)
	}
	a := &daemonActivity{d: d, log: log, policy: autosnap.Policy{Keep: s.keep}}
	d.activity = a
	if !s.autoSnapshot {
		return nil
	}
	ignore, err := d.ignorePatterns()
	if err != nil {
		return err
	}
	sched := &autosnap.Scheduler{Quiet: s.quietPeriod, Ignore: ignore}
	a.auto = autosnap.Start(sched, a.takeAuto)
	d.log.Info("automatic snapshots on", "quiet_period", s.quietPeriod, "keep", s.keep, "ignore_patterns", ignore.Len())
	return nil
}

// ignorePatterns returns the patterns of the configuration and, unless
// turned off, of the project's .gitignore and .git/info/exclude, as
// the view shows them at mount.
func (d *daemon) ignorePatterns() (*autosnap.Matcher, error) {
	m := &autosnap.Matcher{}
	for _, p := range d.plan.activity.ignore {
		if err := m.Add(p); err != nil {
			return nil, fmt.Errorf("ignore pattern %q: %w", p, err)
		}
	}
	if !d.plan.activity.gitignore {
		return m, nil
	}
	for _, name := range []string{".gitignore", ".git/info/exclude"} {
		b, err := d.view.ReadFile(name, viewFileMax)
		if err != nil {
			continue // none, or not a file: nothing to honour
		}
		if err := m.AddFile(strings.NewReader(string(b))); err != nil {
			d.log.Warn("reading ignore patterns", "file", name, "err", err)
		}
	}
	return m, nil
}

// closeActivity stops automatic snapshots and closes the log (what is
// queued is written).
func (d *daemon) closeActivity() {
	a := d.activity
	if a == nil {
		return
	}
	if a.auto != nil {
		a.auto.Stop()
	}
	if err := a.log.Close(); err != nil {
		d.log.Warn("closing the activity log", "err", err)
	}
}

// Record implements fs.Activity.
func (a *daemonActivity) Record(ev fs.Event) {
	if ev.Class != fs.CloseWrite {
		a.log.Record(activity.Entry{Time: ev.Time, Tid: int(ev.Pid), Uid: ev.Uid, Branch: ev.Branch,
			Op: ev.Op, Path: ev.Path, Path2: ev.Path2, Attrs: ev.Attrs})
	}
	if a.auto == nil || ev.Class == fs.Read {
		return
	}
	c := autosnap.Change{Time: ev.Time, Branch: ev.Branch, Dir: ev.Op == fs.OpMkdir || ev.Op == fs.OpRmdir}
	switch ev.Op {
	case fs.OpCopyRange:
		c.Paths = []string{ev.Path2} // the source did not change
	case fs.OpRename, fs.OpLink:
		c.Paths = []string{ev.Path, ev.Path2}
	default:
		c.Paths = []string{ev.Path}
	}
	// A file no longer in the tree is not in a snapshot either.
	c.Paths = slices.DeleteFunc(c.Paths, func(p string) bool { return p == fs.DeletedPath })
	a.auto.Add(c)
}

// takeAuto takes an automatic snapshot that fell due, then applies the
// retention policy.
func (a *daemonActivity) takeAuto(due autosnap.Due) {
	d := a.d
	d.writeBack()
	d.opMu.Lock()
	defer d.opMu.Unlock()
	view := d.liveView(due.Branch)
	if view == nil {
		d.log.Warn("automatic snapshot skipped: the branch is not shown by this mount any more", "branch", due.Branch)
		return
	}
	label := due.Label(func(p string) ([]byte, error) { return view.ReadFile(p, viewFileMax) })
	snap, err := view.Snapshot(label, branch.KindAuto)
	if err != nil {
		d.log.Error("automatic snapshot", "branch", due.Branch, "id", snap.ID, "err", err)
		if snap.ID == "" {
			return
		}
	} else {
		d.log.Info("automatic snapshot taken", "id", snap.ID, "branch", snap.Branch, "label", snap.Label)
	}
	if _, err := d.pruneLocked(nil, false); err != nil {
		d.log.Error("thinning automatic snapshots", "err", err)
	}
}

// writeBack has the kernel send the writes it holds for the daemon's
// mounts (with a writeback cache), the main one and every branch mount,
// before a control request that reads the files
// (fs.Options.WriteBackAll, whichever mount it came through) and before
// a snapshot the daemon takes on its own, so that they include them.
// d.opMu is not held while the kernel writes: nothing that serves a
// WRITE may wait for it.
func (d *daemon) writeBack() {
	var srvs []*fs.Server
	if srv := d.srv.Load(); srv != nil {
		srvs = append(srvs, srv)
	}
	d.opMu.Lock()
	for _, bm := range d.branchMounts {
		srvs = append(srvs, bm.srv)
	}
	d.opMu.Unlock()
	for _, srv := range srvs {
		if err := srv.WriteBack(); err != nil {
			d.log.Warn("writing back the kernel's cached writes", "err", err)
		}
	}
}

// liveView returns the live view of branch name (the mount's, or one a
// bound process sees), or nil. d.opMu is held.
func (d *daemon) liveView(name string) *overlay.FS {
	return d.views[name]
}

// pruneResult is what pruneLocked deleted (or would delete).
type pruneResult struct {
	deleted []branch.Snapshot
	kept    int
	policy  string
}

// pruneLocked deletes automatic snapshots: the keep newest when keep is
// set, else those the retention policy thins out. d.opMu is held.
func (d *daemon) pruneLocked(keep *int, dryRun bool) (pruneResult, error) {
	snaps, err := d.meta.Snapshots()
	if err != nil {
		return pruneResult{}, err
	}
	// Tagged snapshots and those branches were made from are pinned.
	pinned := map[string]bool{}
	for _, id := range d.tags() {
		pinned[id] = true
	}
	infos, err := d.meta.LayerInfos()
	if err != nil {
		return pruneResult{}, err
	}
	for _, li := range infos {
		pinned[li.Origin] = true
	}
	var list []autosnap.Snap
	byID := map[string]branch.Snapshot{}
	auto := 0
	for _, s := range snaps {
		list = append(list, autosnap.Snap{ID: s.ID, Kind: s.Kind, Created: s.Created, Pinned: pinned[s.ID]})
		byID[s.ID] = s
		if s.Kind == branch.KindAuto && !pinned[s.ID] {
			auto++
		}
	}
	var drop []autosnap.Snap
	var r pruneResult
	if keep != nil {
		drop = autosnap.KeepNewest(*keep, list)
		r.policy = fmt.Sprintf("keep the %d newest automatic snapshots", *keep)
	} else {
		drop = d.activityPolicy().Prune(time.Now(), list)
		r.policy = fmt.Sprintf("all automatic snapshots of the last hour, then one per hour for a day, then one per day; at most %d", d.activityPolicy().Keep)
	}
	var errs []error
	for _, s := range drop {
		if !dryRun {
			if err := d.meta.DeleteSnapshot(s.ID); err != nil {
				errs = append(errs, err)
				continue
			}
			d.log.Info("automatic snapshot deleted", "id", s.ID, "created", s.Created)
		}
		r.deleted = append(r.deleted, byID[s.ID])
	}
	r.kept = auto - len(r.deleted)
	return r, errors.Join(errs...)
}

// activityPolicy is the mount's retention policy.
func (d *daemon) activityPolicy() autosnap.Policy {
	if d.activity != nil {
		return d.activity.policy
	}
	return autosnap.Policy{Keep: d.plan.activity.keep}
}
