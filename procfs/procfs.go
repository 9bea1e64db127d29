// Package procfs is everything agentfs reads of /proc: a process's stat
// (state, parent, start time), status (uids, groups, thread group,
// memory), command line, the mount table (mountinfo), the namespaces it
// runs in, and whether it is alive (with a pidfd to wait for its exit).
// Every caller goes through here, so that each file is parsed once, the
// same way.
//
// # Cost
//
// Some readers run on the FUSE path (the caller of a request is
// resolved to its branch, its groups are read for setgid rules, the
// activity log names its command): Root.Read and ReadStat read with
// plain open/read/close system calls into the caller's buffer, and
// ParseStat allocates nothing, so that a first request of a new process
// waits for three system calls, not for the runtime's file machinery.
// The rest (status, cmdline, mountinfo) are for the control path and
// use os.ReadFile.
//
// # Roots
//
// A Root is the directory procfs reads ("/proc"); tests hand the readers
// a fake tree. The package-level functions read the real /proc.
package procfs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is a /proc tree: "/proc", or a directory laid out like it.
type Root string

// Default is the real /proc.
const Default Root = "/proc"

// path returns ROOT/PID/name.
func (r Root) path(pid int, name string) string {
	return string(r) + "/" + strconv.Itoa(pid) + "/" + name
}

// Read reads file name of /proc/PID into buf with one read(2), and
// returns what was read: what /proc says of a process in stat, status or
// (the start of) cmdline fits the buffers callers give. Plain system
// calls: os.ReadFile's fcntls and epoll registration would double the
// cost on the FUSE path.
func (r Root) Read(pid int, name string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(r.path(pid, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// Stat is what agentfs uses of /proc/PID/stat.
type Stat struct {
	// Comm is the command name (field 2, without its parentheses);
	// ParseStat leaves it empty, ParseStatComm fills it.
	Comm  string
	State byte   // field 3: R, S, D, Z, X, ...
	Ppid  int    // field 4
	Start uint64 // field 22: clock ticks after boot
}

// ErrMalformed is returned for a /proc file that does not read as the
// kernel writes it.
var ErrMalformed = errors.New("malformed /proc file")

// ReadStat reads /proc/PID/stat (or /proc/TID/stat: a thread's) without
// allocating but for the path.
func (r Root) ReadStat(pid int) (Stat, error) {
	var buf [1024]byte
	b, err := r.Read(pid, "stat", buf[:])
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// ReadStat reads /proc/PID/stat of the real /proc.
func ReadStat(pid int) (Stat, error) { return Default.ReadStat(pid) }

// ParseStat parses a stat line, "pid (comm) state ppid ... starttime
// ...". The command name may hold anything, spaces and parentheses
// included: the fields follow the last ')'. It allocates nothing.
func ParseStat(b []byte) (Stat, error) {
	i := len(b) - 1
	for i >= 0 && b[i] != ')' {
		i--
	}
	if i < 0 {
		return Stat{}, fmt.Errorf("stat: no command name: %w", ErrMalformed)
	}
	var st Stat
	field := 2 // the command name was field 2
	var cur uint64
	inNum := false
	for _, c := range b[i+1:] {
		if c == ' ' || c == '\n' {
			if inNum {
				switch field {
				case 4:
					st.Ppid = int(cur)
				case 22:
					st.Start = cur
					return st, nil
				}
			}
			if c == ' ' {
				field++
			}
			cur, inNum = 0, false
			continue
		}
		if field == 3 && st.State == 0 {
			st.State = c
		}
		if c >= '0' && c <= '9' {
			cur = cur*10 + uint64(c-'0')
			inNum = true
		} else {
			inNum = false
		}
	}
	if field == 22 && inNum {
		st.Start = cur // the line ended at the start time
		return st, nil
	}
	return Stat{}, fmt.Errorf("stat: no start time: %w", ErrMalformed)
}

// ParseStatComm is ParseStat with the command name.
func ParseStatComm(b []byte) (Stat, error) {
	st, err := ParseStat(b)
	if err != nil {
		return st, err
	}
	open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
	if open >= 0 && end > open {
		st.Comm = string(b[open+1 : end])
	}
	return st, nil
}

// StartTime returns the start time of process pid (clock ticks after
// boot), or 0 when it is gone: with the pid it names one process for
// good, as pids are reused.
func StartTime(pid int) uint64 {
	if pid <= 0 {
		return 0
	}
	st, err := ReadStat(pid)
	if err != nil {
		return 0
	}
	return st.Start
}

// Parent returns the parent pid of pid, or 0 when it is gone.
func Parent(pid int) int {
	if pid <= 0 {
		return 0
	}
	st, err := ReadStat(pid)
	if err != nil {
		return 0
	}
	return st.Ppid
}

// Status returns the values of the given keys of /proc/PID/status
// ("Uid", "Groups", "Tgid", "VmRSS", ...): the text after "KEY:",
// trimmed; "" for a key the file does not have.
func (r Root) Status(pid int, keys ...string) ([]string, error) {
	b, err := os.ReadFile(r.path(pid, "status"))
	if err != nil {
		return nil, err
	}
	return StatusValues(string(b), keys...), nil
}

// Status reads keys of /proc/PID/status of the real /proc.
func Status(pid int, keys ...string) ([]string, error) { return Default.Status(pid, keys...) }

// StatusValues returns the values of keys in the text of a status file.
func StatusValues(text string, keys ...string) []string {
	out := make([]string, len(keys))
	for line := range strings.Lines(text) {
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for i, k := range keys {
			if name == k {
				out[i] = strings.TrimSpace(val)
			}
		}
	}
	return out
}

// ParseIDs parses a status value of decimal ids ("1000 1000 1000 1000",
// or "" for none).
func ParseIDs(v string) ([]uint32, error) {
	var ids []uint32
	for _, w := range strings.Fields(v) {
		n, err := strconv.ParseUint(w, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not an id list: %w", v, ErrMalformed)
		}
		ids = append(ids, uint32(n))
	}
	return ids, nil
}

// Uid returns the real uid of process pid.
func Uid(pid int) (uint32, error) {
	v, err := Status(pid, "Uid")
	if err != nil {
		return 0, err
	}
	ids, err := ParseIDs(v[0])
	if err != nil || len(ids) == 0 {
		return 0, fmt.Errorf("/proc/%d/status: Uid %q: %w", pid, v[0], ErrMalformed)
	}
	return ids[0], nil
}

// Groups returns the supplementary groups of process (or thread) pid.
func Groups(pid int) ([]uint32, error) {
	v, err := Status(pid, "Groups")
	if err != nil {
		return nil, err
	}
	ids, err := ParseIDs(v[0])
	if err != nil {
		return nil, fmt.Errorf("/proc/%d/status: Groups: %w", pid, err)
	}
	return ids, nil
}

// Cmdline returns the arguments of process pid; nil for a kernel thread
// or a zombie, an error when it is gone.
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(Default.path(pid, "cmdline"))
	if err != nil {
		return nil, err
	}
	return SplitCmdline(b), nil
}

// SplitCmdline splits the NUL-separated arguments of a cmdline file.
func SplitCmdline(b []byte) []string {
	s := strings.TrimRight(string(b), "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// CommandLine returns the command line of process pid as one line (its
// arguments joined by spaces), "" when unknown.
func CommandLine(pid int) string {
	args, err := Cmdline(pid)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.Join(args, " "))
}
