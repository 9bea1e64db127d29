package workspace

import (
	"sync"
	"time"

	"github.com/agentfs/agentfs/ctl"
)

// The progress of the long operations (apply, export, gc, fsck, diff,
// push): one record, as one runs at a time (they hold opMu), that the
// operation updates as it goes and Progress reads without waiting for
// opMu, through another connection (the CLI's progress bar).

// progressTracker is the operation running's record.
//
// A push runs most of its course without opMu (push.go), so another
// operation may start and end meanwhile: a tracker publishes only over
// its own record (or none), and its end clears only its own, so that
// neither takes the other's away.
type progressTracker struct {
	w    *Workspace
	p    ctl.Progress
	last *ctl.Progress // the record it published last
}

// startProgress records that op (counting in unit) began; the tracker
// updates it, and end clears it. opMu is held.
func (w *Workspace) startProgress(op, unit string) (t *progressTracker, end func()) {
	t = &progressTracker{w: w, p: ctl.Progress{Running: true, Op: op, Unit: unit}}
	t.last = &ctl.Progress{Running: true, Op: op, Unit: unit}
	w.progress.Store(t.last)
	w.waitProgressGate()
	return t, t.end
}

// set publishes done of total (0: unknown) items and bytes of
// totalBytes. Its calls come one at a time.
func (t *progressTracker) set(done, total, bytes, totalBytes int64) {
	p := t.p
	p.Done, p.Total, p.Bytes, p.TotalBytes = done, total, bytes, totalBytes
	if t.w.progress.CompareAndSwap(t.last, &p) || t.w.progress.CompareAndSwap(nil, &p) {
		t.last = &p
	}
}

// end clears the tracker's record, if it is still the one published.
func (t *progressTracker) end() { t.w.progress.CompareAndSwap(t.last, nil) }

// Progress is the progress of the long operation running, if any. It
// does not wait for opMu: it is asked while the operation holds it.
func (w *Workspace) Progress() ctl.Progress {
	p := w.progress.Load()
	if p == nil {
		return ctl.Progress{}
	}
	w.openProgressGate()
	return *p
}

// ApplyProgress is the progress of the apply running, if any, as
// OpApplyProgress answers it (Progress says it of every operation).
func (w *Workspace) ApplyProgress() ctl.ApplyProgress {
	p := w.Progress()
	if p.Op != "apply" {
		return ctl.ApplyProgress{}
	}
	return ctl.ApplyProgress{Running: true, Done: int(p.Done), Total: int(p.Total), Bytes: p.Bytes, TotalBytes: p.TotalBytes}
}

// # The progress gate
//
// With Options.ProgressGate (a daemon started with
// AGENTFS_TEST_PROGRESS_GATE=1, for the tests of the progress bars), a
// long operation waits, once it has recorded that it runs, until
// Progress has been asked (or progressGateWait passed): a client's
// first look then finds it running, however fast it is, so that what
// the CLI draws does not depend on how long the operation takes.

// progressGateWait bounds the wait of the gate.
const progressGateWait = 30 * time.Second

type progressGate struct {
	mu     sync.Mutex
	opened chan struct{}
}

func (w *Workspace) waitProgressGate() {
	if !w.opts.ProgressGate {
		return
	}
	w.gate.mu.Lock()
	w.gate.opened = make(chan struct{})
	ch := w.gate.opened
	w.gate.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(progressGateWait):
		w.log.Warn("progress gate: nobody asked for the progress")
	}
}

func (w *Workspace) openProgressGate() {
	if !w.opts.ProgressGate {
		return
	}
	w.gate.mu.Lock()
	defer w.gate.mu.Unlock()
	if w.gate.opened != nil {
		close(w.gate.opened)
		w.gate.opened = nil
	}
}
