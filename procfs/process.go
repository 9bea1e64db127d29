package procfs

import (
	"errors"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Alive reports whether pid is a running process. A zombie (killed, not
// yet reaped by its parent) is not, once all its threads have exited:
// its first thread turns zombie at once, while another may still be
// leaving io_uring, holding what the process held (a store's lock).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := unix.Kill(pid, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	tasks, err := os.ReadDir(Default.path(pid, "task"))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	var buf [1024]byte
	for _, task := range tasks {
		b, err := Default.Read(pid, "task/"+task.Name()+"/stat", buf[:])
		if err != nil {
			continue // exited meanwhile
		}
		st, err := ParseStat(b)
		if err == nil && (st.State == 'Z' || st.State == 'X') {
			continue
		}
		return true
	}
	return false
}

// SameProcess reports whether pid is alive and is the process that
// started at start (0: any process with that pid).
func SameProcess(pid int, start uint64) bool {
	return pid > 0 && Alive(pid) && (start == 0 || StartTime(pid) == start)
}

// Process watches one process: through a pidfd where the kernel has
// them, so that waiting for its exit and signalling it cannot reach a
// later process that got the same pid.
type Process struct {
	pid   int
	pidfd int
}

// Watch starts watching pid. Close releases the pidfd.
func Watch(pid int) *Process {
	p := &Process{pid: pid, pidfd: -1}
	if pid > 0 {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			p.pidfd = fd
		}
	}
	return p
}

// Pid is the process id watched.
func (p *Process) Pid() int { return p.pid }

// Wait waits up to d for the process to exit and reports whether it
// did. A pid of 0 or less has exited.
func (p *Process) Wait(d time.Duration) bool {
	if p.pid <= 0 {
		return true
	}
	if p.pidfd >= 0 {
		deadline := time.Now().Add(d)
		for {
			ms := max(int(time.Until(deadline).Milliseconds()), 0)
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}, ms)
			if err == unix.EINTR {
				continue
			}
			return err == nil && n > 0
		}
	}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !Alive(p.pid) {
			return true
		}
	}
	return !Alive(p.pid)
}

// Signal sends sig to the process (not to a later one with its pid,
// where pidfds exist).
func (p *Process) Signal(sig syscall.Signal) error {
	if p.pidfd >= 0 {
		return unix.PidfdSendSignal(p.pidfd, sig, nil, 0)
	}
	if p.pid > 0 {
		return unix.Kill(p.pid, sig)
	}
	return nil
}

// Close releases the pidfd.
func (p *Process) Close() error {
	if p.pidfd < 0 {
		return nil
	}
	err := unix.Close(p.pidfd)
	p.pidfd = -1
	return err
}

// InUserNamespace reports whether this process runs in a user namespace
// other than the initial one (whose uid_map maps every id to itself).
func InUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return !isIdentityMap(string(b))
}

func isIdentityMap(s string) bool {
	f := splitFields(s)
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// MountNamespace returns the mount namespace of pid ("self" for this
// process is pid 0), as the kernel names it: "mnt:[4026531841]".
func MountNamespace(pid int) (string, error) {
	p := "/proc/self/ns/mnt"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/ns/mnt"
	}
	return os.Readlink(p)
}
