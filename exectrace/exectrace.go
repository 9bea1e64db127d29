// Package exectrace records every program a session's processes start,
// and how each ends: an eBPF program (bpf/exectrace.bpf.c, loaded with
// github.com/cilium/ebpf) on the kernel's sched_process_exec and
// sched_process_exit tracepoints. The kernel runs it in every exec and
// every exit, so no process can start a program unseen, however short
// it lives; a program is never made to wait (records go to a ring
// buffer; one that finds it full is dropped and counted).
//
// # What is traced
//
// A process in a cgroup (Options.Cgroup: an agentfs run session's, and
// any cgroup below it), or whose working directory is on a device
// (Options.MountDev: a plain mount's), and every process a traced one
// forks: the trace follows the process tree (a subshell that leaves the
// mount included), so a `git push` or a `curl` the agent runs outside
// the project is recorded too.
//
// # A record
//
// An exec: the time, pid, parent pid, uid, the arguments (the first
// ArgvMax bytes: longer ones are cut, and say so) and the working
// directory (as the process's mount namespace names it). An exit: the
// time, the pid, when its program started, and the status as wait(2)
// gives it. Exits are recorded
// for the processes whose exec was; a process that execs again without
// exiting has a second exec record.
//
// # Where it cannot run
//
// Loading it needs root (CAP_BPF and CAP_PERFMON), a kernel of 5.17 or
// later (BTF tracepoints, the ring buffer, bpf_loop) with BTF
// (/sys/kernel/btf/vmlinux), and no lockdown forbidding BPF; Start says
// which is missing (ErrUnavailable), and the session runs untraced.
package exectrace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// ArgvMax bounds the bytes of arguments a record keeps; CwdMax those of
// the working directory.
const (
	ArgvMax = 4096
	CwdMax  = 4096
)

// ErrUnavailable: the trace cannot run here; the error says why.
var ErrUnavailable = errors.New("commands are not traced")

// Options say what to trace and where records go.
type Options struct {
	// Cgroup is the directory of a cgroup (version 2): its processes,
	// and those of the cgroups below it, are traced.
	Cgroup string
	// MountDev (a st_dev), when not 0: processes whose working
	// directory is on it are traced.
	MountDev uint64
	// Sink gets each record, in order, on the tracer's goroutine: the
	// first after a quiet spell at once, those that follow it every
	// 10 ms (readInterval), in batches. Lost (on the same goroutine)
	// gets the count of records the ring buffer had no room for since
	// it was last called, at most once a second and once more at Close.
	Sink   func(Record)
	Lost   func(uint64)
	Logger *slog.Logger
}

// Record is one exec or one exit.
type Record struct {
	Exec bool // an exec; else an exit
	Time time.Time
	Pid  int
	// Of an exec:
	Ppid          int
	Uid           uint32
	Argv          []string
	ArgvTruncated bool
	// Cwd is the working directory; when CwdTruncated (deeper than 256
	// names, longer than CwdMax, or unreadable) only its end, after "…".
	Cwd          string
	CwdTruncated bool
	// Of an exit: when its program started (its last exec), and the
	// status, as wait(2) gives it.
	Start  time.Time
	Status unix.WaitStatus
}

// Tracer is a running trace.
type Tracer struct {
	objs    exectraceObjects
	links   []link.Link
	reader  *ringbuf.Reader
	cgroup  *os.File
	boot    time.Duration // wall clock less CLOCK_BOOTTIME
	log     *slog.Logger
	done    chan struct{}
	reading bool // the reader goroutine runs; set before it starts
	once    sync.Once
}

// Available says why the trace cannot run here, or nil.
func Available() error {
	switch {
	case os.Geteuid() != 0:
		return fmt.Errorf("%w: tracing needs root (eBPF)", ErrUnavailable)
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return fmt.Errorf("%w: the kernel has no BTF (/sys/kernel/btf/vmlinux): %v", ErrUnavailable, err)
	}
	if b, err := os.ReadFile("/sys/kernel/security/lockdown"); err == nil && strings.Contains(string(b), "[confidentiality]") {
		return fmt.Errorf("%w: the kernel is locked down (confidentiality), which forbids reading process memory from BPF", ErrUnavailable)
	}
	// bpf_loop is every program type's (the kprobe is one cilium/ebpf
	// can probe): without it the trace's program would not load.
	if err := features.HaveProgramHelper(ebpf.Kprobe, asm.FnLoop); err != nil {
		return fmt.Errorf("%w: the kernel lacks bpf_loop (Linux 5.17): %v", ErrUnavailable, err)
	}
	return nil
}

// Start loads the program, attaches it and starts delivering records.
func Start(o Options) (*Tracer, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := raiseMemlock(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	t := &Tracer{log: o.Logger, done: make(chan struct{})}
	if err := loadExectraceObjects(&t.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("%w: the kernel refused the program: %+v", ErrUnavailable, ve)
		}
		return nil, fmt.Errorf("%w: loading the program: %v", ErrUnavailable, err)
	}
	cfg := exectraceTraceConfig{}
	if o.Cgroup != "" {
		f, err := os.Open(o.Cgroup)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("the cgroup to trace: %w", err), t.Close())
		}
		t.cgroup = f
		if err := t.objs.Cgroups.Put(uint32(0), uint32(f.Fd())); err != nil {
			return nil, errors.Join(fmt.Errorf("the cgroup to trace: %w", err), t.Close())
		}
		cfg.UseCgroup = 1
	}
	if o.MountDev != 0 {
		// The kernel's dev_t: major in the high 12 bits of 32.
		cfg.Dev = unix.Major(o.MountDev)<<20 | unix.Minor(o.MountDev)
	}
	if err := t.objs.Settings.Put(uint32(0), cfg); err != nil {
		return nil, errors.Join(fmt.Errorf("configuring the trace: %w", err), t.Close())
	}
	t.boot = bootOffset()
	var err error
	if t.reader, err = ringbuf.NewReader(t.objs.Events); err != nil {
		return nil, errors.Join(fmt.Errorf("%w: the ring buffer: %v", ErrUnavailable, err), t.Close())
	}
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{{"sched_process_exec", t.objs.HandleExec}, {"sched_process_fork", t.objs.HandleFork}, {"sched_process_exit", t.objs.HandleExit}} {
		l, err := link.AttachTracing(link.TracingOptions{Program: tp.prog})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("%w: attaching to the tracepoint sched:%s: %v", ErrUnavailable, tp.name, err), t.Close())
		}
		t.links = append(t.links, l)
	}
	t.reading = true
	go t.read(o.Sink, o.Lost)
	return t, nil
}

// bootOffset is the wall clock less CLOCK_BOOTTIME, now.
func bootOffset() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0 // the times then read as after boot: wrong, but ordered
	}
	return time.Duration(time.Now().UnixNano() - ts.Nano())
}

// Dropped counts the records the ring buffer had no room for.
func (t *Tracer) Dropped() uint64 {
	var n uint64
	if err := t.objs.Dropped.Lookup(uint32(0), &n); err != nil {
		t.log.Warn("reading the count of dropped exec records", "err", err)
	}
	return n
}

// Close detaches the program and waits for the reader to deliver what
// was queued.
func (t *Tracer) Close() error {
	var errs []error
	t.once.Do(func() {
		for _, l := range t.links {
			errs = append(errs, l.Close())
		}
		if t.reader != nil {
			// The reader delivers what is queued, then sees
			// ErrFlushed; or, if that fails, ErrClosed at once.
			flushed := false
			if t.reading {
				err := t.reader.Flush()
				errs = append(errs, err)
				if flushed = err == nil; flushed {
					<-t.done
				}
			}
			errs = append(errs, t.reader.Close())
			if t.reading && !flushed {
				<-t.done
			}
		}
		if t.cgroup != nil {
			errs = append(errs, t.cgroup.Close())
		}
		errs = append(errs, t.objs.Close())
	})
	return errors.Join(errs...)
}

// readInterval is how long the reader lets records gather while
// programs start: it then reads what came every readInterval, not at
// every record.
//
// The ring buffer wakes its reader when a record comes and the reader
// has read everything before it: with a reader that waits for each
// record, that is every record, and each wake-up costs the traced
// program an interrupt (the kernel's irq_work) and the daemon a switch
// to its thread. On the project's machine, a virtual one, a shell loop
// of 5,000 /bin/true spent 13 µs of each exec and 10 µs of each exit
// in the trace's programs (kernel.bpf_stats_enabled), and the daemon
// 60–140 µs of CPU a program; the loop took 15% longer than with the
// trace off (agentfs-bench --only spawn). A reader that
// sleeps is not woken: only the first record after it caught up
// interrupts. Reading every 10 ms, the same loop spends 2.4 µs in an
// exec, 0.9 µs in an exit and 10–16 µs of the daemon's CPU a program.
const readInterval = 10 * time.Millisecond

// read delivers records until the reader is closed, or has delivered
// what was queued when Close flushed it. Idle, it waits for a record,
// and delivers it at once; then, while records come, it reads what
// came every readInterval. At most once a second while records come,
// and once at the end, it gives lost the count of those lost.
func (t *Tracer) read(sink func(Record), lost func(uint64)) {
	defer close(t.done)
	var rec ringbuf.Record
	busy := false
	var dropped uint64
	var checked time.Time
	checkLost := func(now time.Time) {
		checked = now
		if n := t.Dropped(); n > dropped && lost != nil {
			lost(n - dropped)
			dropped = n
		}
	}
	for {
		if busy {
			time.Sleep(readInterval)
			t.reader.SetDeadline(time.Now()) // what came, without waiting
		} else {
			t.reader.SetDeadline(time.Time{}) // wait for a record
		}
		n := 0
		for {
			err := t.reader.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				if !errors.Is(err, ringbuf.ErrFlushed) && !errors.Is(err, ringbuf.ErrClosed) {
					t.log.Error("reading exec records", "err", err)
				}
				checkLost(time.Now())
				return
			}
			n++
			if r, err := t.decode(rec.RawSample); err != nil {
				t.log.Warn("an exec record", "err", err)
			} else if sink != nil {
				sink(r)
			}
			if !busy {
				break // the first after a quiet spell; the rest in a moment
			}
		}
		busy = n > 0
		if now := time.Now(); busy && now.Sub(checked) >= time.Second {
			checkLost(now)
		}
	}
}

// decode turns a raw record into a Record.
func (t *Tracer) decode(b []byte) (Record, error) {
	if len(b) < 4 {
		return Record{}, fmt.Errorf("a record of %d bytes", len(b))
	}
	switch binary.NativeEndian.Uint32(b) {
	case 1:
		var h exectraceExecHeader
		n := int(unsafe.Sizeof(h))
		if len(b) < n {
			return Record{}, fmt.Errorf("an exec record of %d bytes", len(b))
		}
		h = *(*exectraceExecHeader)(unsafe.Pointer(&b[0]))
		data := b[n:]
		if int(h.ArgvLen)+int(h.CwdLen) > len(data) {
			return Record{}, fmt.Errorf("an exec record of %d bytes says it holds %d+%d", len(b), h.ArgvLen, h.CwdLen)
		}
		r := Record{Exec: true, Time: t.wall(h.TimeNs), Pid: int(h.Pid), Ppid: int(h.Ppid), Uid: h.Uid,
			ArgvTruncated: h.Flags&1 != 0, CwdTruncated: h.Flags&2 != 0}
		r.Argv = splitArgv(data[:h.ArgvLen])
		r.Cwd = joinCwd(data[h.ArgvLen : h.ArgvLen+h.CwdLen])
		if r.CwdTruncated {
			r.Cwd = "…" + r.Cwd // its end only
		}
		return r, nil
	case 2:
		var e exectraceExitEvent
		if len(b) < int(unsafe.Sizeof(e)) {
			return Record{}, fmt.Errorf("an exit record of %d bytes", len(b))
		}
		e = *(*exectraceExitEvent)(unsafe.Pointer(&b[0]))
		return Record{Time: t.wall(e.TimeNs), Start: t.wall(e.StartNs), Pid: int(e.Pid), Status: unix.WaitStatus(e.Status)}, nil
	}
	return Record{}, fmt.Errorf("a record of kind %d", binary.NativeEndian.Uint32(b))
}

// wall turns a CLOCK_BOOTTIME reading into the wall clock.
func (t *Tracer) wall(ns uint64) time.Time {
	return time.Unix(0, int64(ns)+int64(t.boot))
}

// splitArgv splits NUL-separated arguments (the last may lack its NUL:
// cut).
func splitArgv(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// joinCwd makes a path of NUL-ended components given leaf first.
func joinCwd(b []byte) string {
	parts := splitArgv(b)
	if len(parts) == 0 {
		return "/"
	}
	var sb strings.Builder
	for i := len(parts) - 1; i >= 0; i-- {
		sb.WriteByte('/')
		sb.WriteString(parts[i])
	}
	return sb.String()
}

// raiseMemlock lifts RLIMIT_MEMLOCK where the kernel charges BPF maps
// and programs to it (before Linux 5.11; later kernels charge them to
// the memory cgroup, and the limit is left alone). It does what
// cilium/ebpf/rlimit.RemoveMemlock does, without importing that
// package: its init creates a BPF map to probe the kernel (a system
// call, a walk of /proc/self/mountinfo) in every agentfs process, the
// short CLI commands included, which cost them a tenth of their start.
func raiseMemlock() error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return fmt.Errorf("uname: %w", err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &major, &minor); err == nil &&
		(major > 5 || major == 5 && minor >= 11) {
		return nil
	}
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &inf); err != nil {
		return fmt.Errorf("raising RLIMIT_MEMLOCK (Linux before 5.11 charges BPF memory to it): %w", err)
	}
	return nil
}
