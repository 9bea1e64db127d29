package procfs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// LowerOwnPriority gives this process the lowest priority there is: a
// session and autogroup of its own at nice 19, SCHED_IDLE for each of
// its threads, the idle I/O class. Each step is best effort. For the
// helper processes that do background work (hashing, deleting a private
// store): threads the Go runtime starts later inherit it.
func LowerOwnPriority() {
	_, _ = unix.Setsid()
	_ = os.WriteFile("/proc/self/autogroup", []byte("19"), 0)
	tids, _ := os.ReadDir("/proc/self/task")
	for _, t := range tids {
		var tid int
		if _, err := fmt.Sscan(t.Name(), &tid); err != nil {
			continue
		}
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 19)
		_ = unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0)
		SetIdleIO(tid)
	}
}

// SetIdleIO puts thread tid in the idle I/O class (ioprio_set), where
// the I/O scheduler supports classes.
func SetIdleIO(tid int) {
	const (
		ioprioWhoProcess = 1
		ioprioClassIdle  = 3
		ioprioClassShift = 13
	)
	_, _, _ = unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), ioprioClassIdle<<ioprioClassShift)
}
