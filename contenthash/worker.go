package contenthash

import (
	"errors"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/procfs"
)

// # The worker
//
// One goroutine, locked to its own thread, which it gives the lowest
// CPU priority (nice 19) and the idle I/O class: file operations never
// wait for it, and it takes the CPU and disk time they leave. In a
// daemon it reads and hashes in a process of its own (helper.go), so
// that its priority counts against other sessions' programs too; where
// it hashes itself, GOMAXPROCS is one higher (morePs). Each
// kick (a snapshot was taken) makes it compute, oldest first, the root
// of every snapshot that has none; the snapshots already done cost a
// read of their root key. A snapshot deleted while its root is being
// computed is skipped.

// Start starts the worker, which computes at once the roots missing
// (of snapshots taken before a crash, or while hashing was off).
func (h *Hasher) Start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running || h.cfg.ReadOnly {
		return
	}
	h.running = true
	h.kick = make(chan struct{}, 1)
	h.stop = make(chan struct{})
	h.done = make(chan struct{})
	h.kick <- struct{}{}
	go h.work()
}

// Kick tells the worker that a snapshot was taken. It never waits.
func (h *Hasher) Kick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running {
		return
	}
	h.busy = true
	select {
	case h.kick <- struct{}{}:
	default: // one is pending: it will see this snapshot too
	}
}

// Close stops the worker and any computation running (abandoned at
// the next file: its snapshot's root is computed again later), and
// waits for the worker. The Hasher computes nothing afterwards.
func (h *Hasher) Close() {
	h.quitOnce.Do(func() { close(h.quit) })
	h.mu.Lock()
	if !h.running {
		h.mu.Unlock()
		return
	}
	h.running = false
	close(h.stop)
	p := h.helper
	h.mu.Unlock()
	if p != nil {
		// The worker may be waiting for the process's answer about a
		// file that never comes (a hung file system, a stopped
		// process): closing must not wait for it.
		p.kill()
	}
	<-h.done
}

// Idle reports whether the worker has nothing left to compute.
func (h *Hasher) Idle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.busy
}

func (h *Hasher) work() {
	defer close(h.done)
	runtime.LockOSThread() // never unlocked: the thread's priority dies with it
	tid := unix.Gettid()
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 19); err != nil {
		h.log.Warn("hash worker: lowering its priority", "err", err)
	}
	procfs.SetIdleIO(tid)
	if len(h.cfg.Helper) == 0 {
		morePs()
	} else {
		// Started from this locked thread, which lives as long as the
		// worker: the process's Pdeathsig fires when the thread ends.
		p, err := startHelper(h.cfg.Helper)
		if err != nil {
			h.log.Warn("hashing in the daemon: the hashing process did not start", "err", err)
			morePs()
		} else {
			h.mu.Lock()
			h.helper = p
			if h.paused {
				p.signal(unix.SIGSTOP)
			}
			h.mu.Unlock()
			defer func() {
				h.mu.Lock()
				h.helper = nil
				h.mu.Unlock()
				if err := p.close(); err != nil {
					h.log.Warn("the hashing process", "err", err)
				}
			}()
		}
	}
	for {
		select {
		case <-h.stop:
			return
		case <-h.kick:
		}
		h.mu.Lock()
		h.busy = true
		h.mu.Unlock()
		h.computeMissing()
		h.mu.Lock()
		if len(h.kick) == 0 {
			h.busy = false
		}
		h.mu.Unlock()
	}
}

// computeMissing computes the root of every snapshot without one.
func (h *Hasher) computeMissing() {
	snaps, err := h.cfg.Meta.Snapshots()
	if err != nil {
		h.log.Error("hash worker: listing snapshots", "err", err)
		return
	}
	for _, snap := range snaps {
		select {
		case <-h.stop:
			return
		default:
		}
		h.mu.Lock()
		failed := h.failed[snap.ID]
		h.mu.Unlock()
		if failed {
			continue // tried: snapshot show and verify try again, and say why
		}
		if _, ok, err := h.cfg.Meta.SnapshotRootOf(snap); err != nil || ok {
			continue
		}
		if !h.waitGate() {
			return
		}
		if _, err := h.compute(snap, true); err != nil {
			if errors.Is(err, branch.ErrNotFound) || errors.Is(err, branch.ErrClosed) || errors.Is(err, ErrClosed) {
				continue // deleted meanwhile, or the store is closing
			}
			h.log.Error("hash worker: computing a snapshot's root", "id", snap.ID, "err", err)
			h.mu.Lock()
			h.failed[snap.ID] = true
			h.mu.Unlock()
		}
	}
}

// waitGate waits while the test gate file exists; false when stopped.
func (h *Hasher) waitGate() bool {
	if h.cfg.Gate == "" {
		return true
	}
	for {
		if _, err := os.Lstat(h.cfg.Gate); err != nil {
			return true
		}
		select {
		case <-h.stop:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// morePs gives the worker's thread a P of its own for as long as the
// process lives, when it hashes itself: at nice 19 the kernel keeps it
// waiting with its P, which the daemon's goroutines would otherwise
// miss (fs does the same for its queues' threads).
func morePs() { runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1) }
