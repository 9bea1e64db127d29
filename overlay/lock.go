package overlay

import (
	"time"

	"golang.org/x/sys/unix"
)

// rlockAside takes v.mu for reading without queueing on it, for a
// reader off the requests' path: the releaser (activity events of a
// close), a FORGET (reaping an unlinked node's object).
//
// Why: a reader blocked on a sync.RWMutex is granted the lock when the
// writer unlocks, and holds it from then on, until it is scheduled and
// done. On a virtual machine, waking a thread on another CPU takes tens
// of microseconds (perf bench sched pipe: 52–63 µs a round trip across
// CPUs, 2.4 µs on one), and all that time the next writer waits: the
// queue thread serving the next CREATE or UNLINK, which then sleeps and
// has to be woken across CPUs in turn. Creating and removing small
// files, each such convoy cost 50 µs or more; one in ten UNLINKs waited
// that long for v.mu. A reader that tries instead (yielding the CPU in
// between) holds the lock only while it runs.
//
// After rlockAsideSpin of trying (a writer that holds the lock for long:
// a snapshot, a large rename) it queues as RLock does.
func (v *FS) rlockAside() {
	if v.mu.TryRLock() {
		return
	}
	deadline := time.Now().Add(rlockAsideSpin)
	for !v.mu.TryRLock() {
		if time.Now().After(deadline) {
			v.mu.RLock()
			return
		}
		// A raw system call: the caller may be a locked thread, whose
		// runtime.Gosched hands its P over. On Linux sched_yield always
		// succeeds.
		_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// rlockAsideSpin bounds how long rlockAside tries before it queues.
const rlockAsideSpin = 500 * time.Microsecond
