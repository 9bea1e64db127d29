package activity

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/agentfs/agentfs/procfs"
)

// # Who did it
//
// The FUSE request header names the calling thread, not its process.
// procCache maps a thread id to its thread group (the process id, from
// /proc/TID/status) and the process's command line (/proc/TID/cmdline).
// It is consulted on the FUSE path, where the caller is alive for sure
// (its request is in flight): a hit costs a map lookup, a miss (the
// first request of a thread) three small reads of /proc. The writer
// checks each entry again off the FUSE path (recheck, one read of
// /proc/TID/cmdline compared byte for byte; once per thread in a batch
// of entries the writer finds queued together): a thread that
// called exec since it was cached gets its new command line, and a
// thread id the kernel gave to a new process (its start time differs)
// is dropped from the cache.

// maxCommand bounds the command line kept for an entry, in bytes.
const maxCommand = 1024

// maxProcs bounds the cache; it starts over when full.
const maxProcs = 8192

type procInfo struct {
	pid   int    // thread group id
	cmd   string // command line, shell-quoted
	raw   string // the command line as read (at most maxRawCmdline bytes)
	start uint64 // the thread's start time (field 22 of stat); 0 when unknown
}

// maxRawCmdline is how much of /proc/TID/cmdline is read.
const maxRawCmdline = 4096

type procCache struct {
	root procfs.Root // "/proc"; tests use a fake tree
	buf  []byte      // recheck's buffer (the writer's alone)

	mu sync.RWMutex
	m  map[uint32]procInfo
}

func newProcCache(root string) *procCache {
	return &procCache{root: procfs.Root(root), m: map[uint32]procInfo{}, buf: make([]byte, maxRawCmdline)}
}

// lookup returns the process and command line of thread tid.
func (c *procCache) lookup(tid uint32) procInfo {
	if tid == 0 {
		return procInfo{}
	}
	c.mu.RLock()
	info, ok := c.m[tid]
	c.mu.RUnlock()
	if ok {
		return info
	}
	info = c.resolve(tid)
	c.store(tid, info)
	return info
}

func (c *procCache) store(tid uint32, info procInfo) {
	c.mu.Lock()
	if len(c.m) >= maxProcs {
		clear(c.m)
	}
	c.m[tid] = info
	c.mu.Unlock()
}

// recheck reads thread tid's command line again (off the FUSE path)
// and returns what entry of tid should say, given info was what the
// cache said when it was recorded.
func (c *procCache) recheck(tid uint32, info procInfo) procInfo {
	if tid == 0 {
		return info
	}
	raw, ok := c.readRaw(tid, c.buf)
	if !ok || len(raw) == 0 || string(raw) == info.raw {
		return info // gone or exiting (it said what it was), or unchanged
	}
	now := c.resolve(tid)
	if now.start != info.start {
		// Another process has the thread id now: the entry keeps what
		// the cache said; the cache forgets it.
		c.mu.Lock()
		delete(c.m, tid)
		c.mu.Unlock()
		return info
	}
	c.store(tid, now) // it called exec
	return now
}

// resolve reads what /proc says of tid. What cannot be read stays
// empty (the thread may be gone).
func (c *procCache) resolve(tid uint32) procInfo {
	info := procInfo{pid: int(tid)}
	var buf [4096]byte
	if b, err := c.root.Read(int(tid), "status", buf[:]); err == nil {
		if pid, err := strconv.Atoi(procfs.StatusValues(string(b), "Tgid")[0]); err == nil {
			info.pid = pid
		}
	}
	comm := ""
	if b, err := c.root.Read(int(tid), "stat", buf[:]); err == nil {
		if st, err := procfs.ParseStatComm(b); err == nil {
			comm, info.start = st.Comm, st.Start
		}
	}
	if raw, ok := c.readRaw(tid, make([]byte, maxRawCmdline)); ok && len(raw) > 0 {
		info.raw, info.cmd = string(raw), formatCmdline(raw)
	} else if comm != "" {
		info.cmd = "[" + comm + "]" // a kernel thread, or a zombie
	}
	return info
}

// readRaw reads (the start of) tid's command line into buf, with as
// few system calls as it takes (open, read, close): os.ReadFile's fcntls
// and epoll registration would double the cost of a miss, which a new
// process's first request waits for.
func (c *procCache) readRaw(tid uint32, buf []byte) ([]byte, bool) {
	b, err := c.root.Read(int(tid), "cmdline", buf)
	return b, err == nil
}

// formatCmdline turns a NUL-separated argument list into one line, each
// argument quoted when a shell would need it, at most maxCommand bytes.
func formatCmdline(b []byte) string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return ""
	}
	return CommandLine(strings.Split(string(b), "\x00"), maxCommand)
}

// CommandLine writes argv as a shell would read it back, each argument
// quoted when it needs to be, cut to at most max bytes (and "…").
func CommandLine(argv []string, max int) string {
	var sb strings.Builder
	for i, arg := range argv {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(shellQuote(arg))
		if sb.Len() > max {
			break
		}
	}
	s := sb.String()
	if len(s) > max {
		s = cutUTF8(s, max) + "…"
	}
	return s
}

// cutUTF8 cuts s to at most n bytes, at a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// shellQuote quotes arg for a shell when it holds anything but plain
// characters.
func shellQuote(arg string) string {
	if arg != "" && strings.Trim(arg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return arg
	}
	return "'" + strings.ReplaceAll(arg, "'", `'\''`) + "'"
}
