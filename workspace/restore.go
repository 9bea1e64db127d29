package workspace

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// Restore makes the caller's branch the state of a snapshot, for every
// process at once: a safety snapshot of the current state (which
// undoes the restore) is taken and the branch's entries are reset to
// the snapshot's in one commit (overlay.FS.RestoreKeeping), and the
// kernel's caches of the old state dropped while the index is updated
// and the store syncs.
// Processes that hold open files the restore changes keep those
// files, as if they had been deleted and replaced; the kernel's caches
// of what did not change stay (overlay.FS.Restore). With a.DryRun it
// lists the changes it would make, and makes none.
//
// # Supervised sessions
//
// In a supervised session (agentfs run --supervise) a restore of the
// branch the mount shows (a rewind) stops every process of the
// session's command first (reply.Stopped), and the supervisor starts
// the command again after unless it has no relaunches left
// (reply.Relaunch). The stop runs without opMu: a process of the
// command may be in a control call that waits for opMu, and could not
// end while the rewind held it; rewinds are serialized by the Mount
// instead (Rewinding). Once the command is stopped, the restore takes
// opMu and resolves the snapshot and the branch again (a retention
// prune, a switch or a deletion may have come in between).
//
// A process of that command asking for a rewind (an agent rewinding
// itself: a self-rewind) cannot wait for it, as it is among those
// stopped: its reply comes at once (reply.Deferred, without the safety
// snapshot; Relaunch says what the supervisor will do), and the rewind
// is handed to the supervisor right after (restoreLater), tied to the
// start of the command the asker belongs to (Supervision.Run). The
// supervisor owns it from then on (daemon/supervisor.go, Self-rewinds):
// it lets the reply reach its reader before it stops the command, and
// drops the rewind (nothing stopped, nothing restored, a rewind line in
// the activity log saying why) when that start is no longer the one
// running: another rewind stopped it first, or the run has ended. So a
// self-rewind never stops a command started after the one that asked
// it, nor applies a snapshot its asker chose to a later start.
func (w *Workspace) Restore(c ctl.Caller, a ctl.RestoreArgs) (ctl.RestoreReply, error) {
	var rewind bool // supervised, asked from outside the command: stop, then restore
	reply, err := locked(w, func() (ctl.RestoreReply, error) {
		snap, err := w.resolveSnapshot(a.Ref)
		if err != nil {
			return ctl.RestoreReply{}, err
		}
		view := w.callerView(c)
		cur := view.Layer().Name()
		reply := ctl.RestoreReply{Snapshot: snapshotInfo(snap, w.tags()), Branch: cur}
		var sup Supervision
		if m := w.attached(); m != nil {
			sup = m.Supervised(cur, c.Pid)
		}
		if a.DryRun {
			v, err := w.openRefLocked(snap.ID)
			if err != nil {
				return ctl.RestoreReply{}, err
			}
			defer v.close()
			cs, err := changes(view, v.fs)
			if err != nil {
				return ctl.RestoreReply{}, eioErrorf(err, "comparing branch %q with snapshot %s: %v", cur, snap.ID, err)
			}
			reply.Changes, reply.Stopped, reply.Relaunch = changeInfos(cs), sup.Supervised, sup.Supervised && sup.Relaunch
			return reply, nil
		}
		if err := w.writable("restoring snapshot " + snap.ID); err != nil {
			return ctl.RestoreReply{}, err
		}
		switch {
		case sup.Inside:
			reply.Stopped, reply.Relaunch, reply.Deferred = true, sup.Relaunch, true
			go w.restoreLater(c, snap.ID, cur, sup.Run)
			return reply, nil
		case sup.Supervised:
			rewind = true
			return reply, nil
		}
		safety, stale, err := w.restoreLocked(view, snap)
		if err != nil {
			return ctl.RestoreReply{}, err
		}
		si := snapshotInfo(safety, nil)
		reply.Safety = &si
		w.log.Info("snapshot restored", "snapshot", snap.ID, "branch", cur, "safety", safety.ID, "stale nodes", len(stale), "pid", c.Pid)
		return reply, nil
	})
	if err != nil || !rewind {
		return reply, err
	}
	rw, err := w.attached().Rewinding(reply.Branch, reply.Snapshot.ID, "")
	if err != nil {
		return ctl.RestoreReply{}, eioErrorf(err, "restoring snapshot %s: %v: nothing was restored", reply.Snapshot.ID, err)
	}
	return w.rewindStopped(c, reply.Snapshot.ID, reply.Branch, rw)
}

// rewindStopped restores snapshot ref into branch cur, whose supervised
// command rw has stopped: under opMu, with the snapshot and the branch
// resolved again. rw.Done is told the outcome whatever happens, a panic
// included (the next rewind waits for it), once opMu is released.
func (w *Workspace) rewindStopped(c ctl.Caller, ref, cur string, rw Rewind) (ctl.RestoreReply, error) {
	snapID, safetyID := ref, ""
	outcome := errors.New("the restore ended in a panic (the daemon's log has it)")
	defer func() { rw.Done(snapID, safetyID, outcome) }()
	reply, err := locked(w, func() (ctl.RestoreReply, error) {
		snap, err := w.resolveSnapshot(ref)
		if err != nil {
			return ctl.RestoreReply{}, err
		}
		snapID = snap.ID
		view := w.views[cur]
		if view == nil || !w.attached().Supervised(cur, 0).Supervised {
			return ctl.RestoreReply{}, errorf(ErrBusy, "restoring snapshot %s: branch %q was switched away from or deleted while its command was being stopped: nothing was restored; restore again", snap.ID, cur)
		}
		safety, stale, err := w.restoreLocked(view, snap)
		if err != nil {
			return ctl.RestoreReply{}, err
		}
		safetyID = safety.ID
		si := snapshotInfo(safety, nil)
		w.log.Info("snapshot restored (supervised)", "snapshot", snap.ID, "branch", cur, "safety", safety.ID, "stale nodes", len(stale), "relaunch", rw.Relaunch, "pid", c.Pid)
		return ctl.RestoreReply{Snapshot: snapshotInfo(snap, w.tags()), Branch: cur, Safety: &si, Stopped: true, Relaunch: rw.Relaunch}, nil
	})
	outcome = err
	return reply, err
}

// restoreLocked restores snap into view: a safety snapshot taken and
// the entries reset in one commit, the kernel's caches dropped while
// the index is updated and the store syncs. It returns once the
// outcome is on disk and the kernel has been told. opMu is held.
//
// The kernel is told from a goroutine of its own, started while the
// view's lock is held (overlay.FS.RestoreKeeping's tell), which this
// one waits for only once the view's lock is released: a notification
// may wait for a LOOKUP in its directory, which waits for that lock.
func (w *Workspace) restoreLocked(view *overlay.FS, snap branch.Snapshot) (branch.Snapshot, []overlay.Stale, error) {
	cur := view.Layer().Name()
	var told chan struct{}
	var panicked any // a panic while telling, raised again here (for the control server's recover)
	// A panic of RestoreKeeping after it told still waits for the
	// telling (the view's lock is released by then).
	defer func() {
		if told != nil {
			<-told
		}
	}()
	r, err := view.RestoreKeeping(snap, fmt.Sprintf("before restoring %s", snap.ID), func(stale []overlay.Stale) {
		told = make(chan struct{})
		go func() {
			defer close(told)
			defer func() { panicked = recover() }()
			w.invalidate(stale) // before a relaunched command looks
		}()
	})
	if told != nil {
		<-told
		told = nil
		if panicked != nil {
			panic(panicked)
		}
	}
	if r.Safety.ID == "" {
		return branch.Snapshot{}, nil, storeError(err, fmt.Sprintf("restoring snapshot %s into branch %q (nothing was restored)", snap.ID, cur))
	}
	safety := r.Safety
	// The hash worker computes the safety snapshot's root once the
	// restore is done, not beside it.
	defer w.hashes.Kick()
	if err != nil {
		w.log.Error("restore failed", "snapshot", snap.ID, "safety", safety.ID, "err", err)
		return branch.Snapshot{}, nil, storeError(err, fmt.Sprintf("restoring snapshot %s into branch %q (the state before is in snapshot %s: agentfs restore %s)", snap.ID, cur, safety.ID, safety.ID))
	}
	if err := r.Synced(); err != nil {
		return branch.Snapshot{}, nil, storeError(err, fmt.Sprintf("restored snapshot %s into branch %q, but the store could not be synced: the restore, and its safety snapshot %s, may not survive a power loss", snap.ID, cur, safety.ID))
	}
	return safety, r.Stale, nil
}

// restoreLater is a self-rewind (see Restore), asked by process c of
// the supervised command's start asker for branch cur: once the reply
// is made it has the supervisor stop the command and restores, then
// makes the change durable, as the control server does after an
// operation. The supervisor waits for the reply to reach its reader
// before it stops anything (agentfs restore holds SIGTERM until it has
// printed it). A panic is logged, not let to end the daemon.
func (w *Workspace) restoreLater(c ctl.Caller, ref, cur, asker string) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("deferred restore: panic", "snapshot", ref, "branch", cur, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	// Restore holds opMu until it has made the reply.
	w.opMu.Lock()
	closed := w.closed
	w.opMu.Unlock()
	if closed {
		return
	}
	rw, err := w.attached().Rewinding(cur, ref, asker)
	if errors.Is(err, ErrRewindDropped) {
		w.log.Info("deferred restore dropped", "snapshot", ref, "branch", cur, "pid", c.Pid, "start", asker, "why", err)
		return
	}
	if err != nil {
		w.log.Error("deferred restore: stopping the command", "snapshot", ref, "branch", cur, "pid", c.Pid, "err", err)
		return
	}
	_, err = w.rewindStopped(c, ref, cur, rw)
	if serr := w.Settle(); serr != nil {
		w.log.Error("deferred restore: making it durable", "snapshot", ref, "err", serr)
	}
	if err != nil {
		w.log.Error("deferred restore", "snapshot", ref, "branch", cur, "pid", c.Pid, "err", err)
	}
}
