package daemon

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/autosnap"
	"github.com/agentfs/agentfs/fs"
	"github.com/agentfs/agentfs/overlay"
)

// The daemon's side of the activity log and of automatic snapshots.
//
// The fs server reports each operation (fs.Activity) to the daemon's
// activityHook, on the FUSE path: it queues a log entry (activity) and,
// with automatic snapshots on, the changed paths for the scheduler
// (autosnap); neither waits. The exec trace (exectrace.go) gives the
// same runner what commands ran, for the build and idle triggers. The
// runner's goroutine takes each snapshot that falls due through the
// workspace (AutoSnapshot), which serializes it with the control
// operations and applies the retention policy.

// activityHook is the activity log and automatic snapshots of a daemon.
type activityHook struct {
	d    *Daemon
	log  *activity.Log
	auto *autosnap.Runner // nil when automatic snapshots are off
	// ignore are the rules of automatic snapshots (nil when they are
	// off).
	ignore *autosnap.Ignore
}

var _ fs.Activity = (*activityHook)(nil)

// viewFileMax bounds what automatic snapshots read of a file of the
// view (git refs and commits, .gitignore).
const viewFileMax = 1 << 20

// startActivity opens the activity log in the store and, when they are
// on, starts automatic snapshots. The workspace must be open.
func (d *Daemon) startActivity() error {
	s := d.plan.Activity
	log, err := activity.Open(activity.Options{Dir: d.store, MaxBytes: s.LogSize, Logger: d.log})
	if err != nil {
		return fmt.Errorf("the store %s: %w", d.store, err)
	}
	a := &activityHook{d: d, log: log}
	d.activity = a
	if !s.AutoSnapshot {
		return nil
	}
	ignore, err := d.ignorePatterns()
	if err != nil {
		return err
	}
	a.ignore = ignore
	sched := &autosnap.Scheduler{Quiet: s.QuietPeriod, Ignore: ignore, NoGit: !s.Git}
	var cmds *autosnap.Commands
	if s.Build || s.Idle > 0 {
		patterns := autosnap.DefaultPatterns()
		for _, c := range s.BuildCommands {
			p, err := autosnap.ParsePattern(c)
			if err != nil {
				return fmt.Errorf("build-command = %s: %w", c, err)
			}
			patterns = append(patterns, p)
		}
		cmds = &autosnap.Commands{Build: s.Build, BuildPatterns: patterns, Idle: s.Idle}
	}
	a.auto = autosnap.Start(sched, cmds, a.takeAuto)
	d.log.Info("automatic snapshots on", "quiet_period", s.QuietPeriod, "keep", s.Keep, "ignore_patterns", ignore.Len(),
		"git", s.Git, "build", s.Build, "build_commands", len(s.BuildCommands), "idle", s.Idle)
	return nil
}

// branchOf names the branch process pid works on (the command
// triggers ask, as a build starts).
func (d *Daemon) branchOf(pid int) string {
	srv := d.srv.Load()
	if srv == nil {
		return ""
	}
	v, _ := srv.Resolve(uint32(pid))
	return v.BranchName()
}

// ignorePatterns returns the ignore rules: the configuration's and,
// unless turned off, git's (.gitignore files at any depth,
// .git/info/exclude, the user's core.excludesFile), read from the
// branch's view when first needed and again when they change.
func (d *Daemon) ignorePatterns() (*autosnap.Ignore, error) {
	ig, err := autosnap.NewIgnore(autosnap.IgnoreOptions{Patterns: d.plan.Activity.Ignore, Git: d.plan.Activity.Gitignore,
		Read: func(branch, p string) ([]byte, error) {
			v := d.ws.LiveView(branch)
			if v == nil {
				return nil, os.ErrNotExist
			}
			return v.ReadFile(p, viewFileMax)
		}})
	if err != nil {
		return nil, fmt.Errorf("ignore patterns: %w", err)
	}
	return ig, nil
}

// closeActivity stops automatic snapshots and closes the log (what is
// queued is written).
func (d *Daemon) closeActivity() {
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
func (a *activityHook) Record(ev fs.Event) {
	a.d.lastOp.Store(ev.Time.UnixNano())
	if a.d.plan.Activity.Hash && !a.d.hashPaused.Load() {
		a.d.pauseHashing()
	}
	if ev.Class != fs.CloseWrite {
		a.log.Record(activity.Entry{Time: ev.Time, Tid: int(ev.Pid), Uid: ev.Uid, Branch: ev.Branch,
			Op: ev.Op, Path: ev.Path, Path2: ev.Path2, Attrs: ev.Attrs})
	}
	if a.auto == nil || ev.Class == fs.Read || ev.Op == fs.OpQuota {
		return // a refused operation changed nothing
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

// takeAuto takes an automatic snapshot that fell due.
func (a *activityHook) takeAuto(due autosnap.Due) {
	a.d.writeBack()
	a.d.ws.AutoSnapshot(due.Branch, due.Kind, func(v *overlay.FS) string {
		return due.Label(func(p string) ([]byte, error) { return v.ReadFile(p, viewFileMax) })
	})
}

// writeBack has the kernel send the writes it holds for the daemon's
// mounts (with a writeback cache), the main one and every branch mount,
// before a control request that reads the files
// (fs.Options.WriteBackAll, whichever mount it came through) and before
// a snapshot the daemon takes on its own, so that they include them. No
// lock is held while the kernel writes: nothing that serves a WRITE may
// wait for it.
func (d *Daemon) writeBack() {
	var srvs []*fs.Server
	if srv := d.srv.Load(); srv != nil {
		srvs = append(srvs, srv)
	}
	for _, bm := range d.branchMountList() {
		srvs = append(srvs, bm.srv)
	}
	for _, srv := range srvs {
		if err := srv.WriteBack(); err != nil {
			d.log.Warn("writing back the kernel's cached writes", "err", err)
		}
	}
}

// The hash worker's pace: before each file it reads, it waits until
// no operation was seen for hashQuiet, and at most hashMaxWait, so
// that it reads and hashes between the bursts of the programs writing
// in the mount rather than in them (on a loaded machine its idle
// priorities alone still cost those programs: docs/benchmarks.md),
// and still makes progress under a load that never pauses.
const (
	hashQuiet   = 100 * time.Millisecond
	hashMaxWait = time.Second
)

// hashYield is the workspace's HashYield: see hashQuiet.
func (d *Daemon) hashYield(quit <-chan struct{}) { d.hashWait(quit) }

// hashWait waits as hashYield does and returns how many times it
// slept (for the tests).
func (d *Daemon) hashWait(quit <-chan struct{}) int {
	deadline := time.Now().Add(hashMaxWait)
	for n := 0; ; n++ {
		idle := time.Since(time.Unix(0, d.lastOp.Load()))
		left := time.Until(deadline)
		if idle >= hashQuiet || left <= 0 {
			return n
		}
		t := time.NewTimer(min(hashQuiet-idle, left))
		select {
		case <-quit:
			t.Stop()
			return n
		case <-t.C:
		}
	}
}

// pauseHashing stops the hashing process at the first operation of a
// burst (one signal a burst, not one an operation), and resumeHashing
// lets it go on once the mount has been quiet for hashQuiet: a file
// being hashed when programs start changing files waits for them.
func (d *Daemon) pauseHashing() {
	if !d.hashPaused.CompareAndSwap(false, true) {
		return
	}
	d.ws.Hashes().Pause(true)
	time.AfterFunc(hashQuiet, d.resumeHashing)
}

// resumeHashing: see pauseHashing.
func (d *Daemon) resumeHashing() {
	if idle := time.Since(time.Unix(0, d.lastOp.Load())); idle < hashQuiet {
		time.AfterFunc(hashQuiet-idle, d.resumeHashing)
		return
	}
	d.ws.Hashes().Pause(false)
	d.hashPaused.Store(false)
}
