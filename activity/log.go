// Package activity keeps a mount's two logs in its store: the activity
// log, one JSON line per operation a program did in the mount (time,
// process, command line, branch, operation, paths), and the exec log,
// one line per program a traced process started (op "exec": argv,
// working directory, parent) and one when it ended (op "exit": the
// same, with the exit status and the duration); exectrace makes those
// records. Both are bounded, appended by one writer that no caller
// waits for, and read back by agentfs log (--exec for the second).
// Entries of both share the pid, so a change can be tied to the
// command that made it.
//
// # Writing
//
// Record is called on the FUSE path: it resolves the caller's process
// (proc.go: a map lookup once a thread is known) and queues the entry
// on a buffered channel; it never waits. When the queue is full the
// entry is dropped and counted, and the writer records the count as an
// entry of its own (op "dropped") before the next one. One writer
// goroutine encodes and appends: an entry that comes alone at once,
// and while programs are busy, what gathered every 20 ms (one wake-up,
// one write(2) and one check of each caller per batch), so a reader
// sees an entry moments after the operation.
//
// # Bounds
//
// A log is two segments in the store: its Stream's name (activity.log,
// exec.log), appended to, and the name with ".1", the segment before.
// When the first would grow past half of Options.MaxBytes it becomes
// the second (replacing the one before) and a new one starts: the log
// never holds more than MaxBytes (plus one line), and always the most
// recent half of it at least.
package activity

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Stream names one log of a store.
type Stream string

// The logs of a store.
const (
	Activity Stream = "activity.log" // what programs did in the mount
	Exec     Stream = "exec.log"     // the programs traced processes started
)

// The files of a log, in the store directory.
func (s Stream) cur() string { return string(s) }
func (s Stream) old() string { return string(s) + ".1" }

// A rotation makes these for a moment (one may outlive a crash).
func (s Stream) newName() string { return string(s) + ".new" }
func (s Stream) tmpName() string { return s.old() + ".tmp" }

// Rotated reports whether the log in store dir has rotated at least
// once (it reached half its bound): its oldest entries may be gone (a
// second rotation drops them).
func (s Stream) Rotated(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, s.old()))
	return err == nil
}

// FileNames are every name the log may leave in the store directory.
func (s Stream) FileNames() []string { return []string{s.cur(), s.old(), s.newName(), s.tmpName()} }

// FileNames are every name the logs may leave in a store directory.
var FileNames = append(Activity.FileNames(), Exec.FileNames()...)

// Defaults.
const (
	DefaultMaxBytes = 16 << 20
	MinMaxBytes     = 16 << 10
	defaultQueue    = 8192
)

// OpDropped is the op of the entry that counts entries dropped because
// the queue was full.
const OpDropped = "dropped"

// OpRewind is the op of the entry of a supervised rewind: the session's
// command was stopped, its branch restored (Detail says to what), and
// the command started again.
const OpRewind = "rewind"

// The ops of the exec log: a program started, and ended.
const (
	OpExec = "exec"
	OpExit = "exit"
)

// Entry is one line of the log.
type Entry struct {
	Time time.Time `json:"time"`
	// Pid is the process (thread group); Tid the calling thread when it
	// is not the process's main thread.
	Pid     int    `json:"pid,omitempty"`
	Tid     int    `json:"tid,omitempty"`
	Uid     uint32 `json:"uid"`
	Command string `json:"command,omitempty"`
	Branch  string `json:"branch,omitempty"`
	Op      string `json:"op"`
	Path    string `json:"path,omitempty"`
	Path2   string `json:"path2,omitempty"`
	// Attrs names the attributes a setattr changed, the limit a quota
	// event reached; "exchange" for a rename that swapped its two
	// paths.
	Attrs string `json:"attrs,omitempty"`
	// Count is the number of entries dropped (op "dropped").
	Count int64 `json:"count,omitempty"`
	// Detail says what an entry of agentfs's own (op "rewind") did.
	Detail string `json:"detail,omitempty"`

	// Exec records (ops "exec" and "exit"). Time is when the program
	// started (exec) or ended (exit).
	Ppid int `json:"ppid,omitempty"`
	// Argv is the program's arguments as it started, cut at
	// exectrace.ArgvMax bytes (ArgvCut says so).
	Argv    []string `json:"argv,omitempty"`
	ArgvCut bool     `json:"argv_cut,omitempty"`
	// Cwd is the working directory; CwdCut says it is only its end
	// (deeper or longer than exectrace.CwdMax).
	Cwd    string `json:"cwd,omitempty"`
	CwdCut bool   `json:"cwd_cut,omitempty"`
	// Start is when an exited program started; Exit its exit code, or
	// Signal the signal that ended it; DurationNs the time between.
	Start      time.Time `json:"start,omitzero"`
	Exit       *int      `json:"exit,omitempty"`
	Signal     int       `json:"signal,omitempty"`
	DurationNs int64     `json:"duration_ns,omitempty"`

	proc  procInfo // what the cache said at Record
	given bool     // Add: Pid and Command are as given, not looked up
}

// Options configure a Log.
type Options struct {
	// Dir is the store directory the log files live in.
	Dir string
	// Stream is the log (Activity when empty).
	Stream Stream
	// MaxBytes bounds the two segments together (DefaultMaxBytes when
	// 0; at least MinMaxBytes).
	MaxBytes int64
	// Queue is the number of entries that may wait for the writer.
	Queue  int
	Logger *slog.Logger
	// procRoot is /proc (tests use a fake tree).
	procRoot string
	// hold, when set, keeps the writer from starting until it is
	// closed (tests fill the queue).
	hold chan struct{}
	// rotateStep, when set, is called between the steps of a rotation
	// (tests read the log there).
	rotateStep func(step string)
}

// Log appends entries to the activity log of a store.
type Log struct {
	opts   Options
	procs  *procCache
	queue  chan Entry
	drops  atomic.Int64
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once

	// Owned by the writer goroutine.
	f    *os.File
	w    *bufio.Writer
	size int64
	line []byte // the line being written
	werr error  // the last write error, logged once
}

// Open opens (or creates) the log in o.Dir and starts its writer.
func Open(o Options) (*Log, error) {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxBytes < MinMaxBytes {
		return nil, fmt.Errorf("activity log size %d bytes: at least %d", o.MaxBytes, MinMaxBytes)
	}
	if o.Queue <= 0 {
		o.Queue = defaultQueue
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.procRoot == "" {
		o.procRoot = "/proc"
	}
	if o.Stream == "" {
		o.Stream = Activity
	}
	l := &Log{opts: o, procs: newProcCache(o.procRoot), queue: make(chan Entry, o.Queue),
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := l.openSegment(); err != nil {
		return nil, err
	}
	go l.run()
	return l, nil
}

// Record queues e. e.Tid is the calling thread as the kernel reported
// it (0 when unknown); Record fills in the process and command line. It
// never blocks: when the queue is full, e is counted as dropped.
func (l *Log) Record(e Entry) {
	e.proc = l.procs.lookup(uint32(e.Tid))
	select {
	case l.queue <- e:
	default:
		l.drops.Add(1)
	}
}

// Add queues e as given, with no process lookup: agentfs's own
// entries, and exec records (which carry their pid). Like Record, it
// never blocks.
func (l *Log) Add(e Entry) {
	e.given = true
	select {
	case l.queue <- e:
	default:
		l.drops.Add(1)
	}
}

// Close writes what is queued and closes the log. Entries recorded
// afterwards are lost.
func (l *Log) Close() error {
	l.closed.Do(func() { close(l.stop) })
	<-l.done
	return l.werr
}

// batchInterval is how long the writer lets entries gather while
// programs are busy: it then wakes once per batch, not once per entry.
const batchInterval = 20 * time.Millisecond

// run is the writer. Idle, it waits for an entry and writes it at once;
// busy, it writes what gathered every batchInterval, until a batch
// finds the queue empty.
func (l *Log) run() {
	defer close(l.done)
	defer l.closeSegment()
	if l.opts.hold != nil {
		<-l.opts.hold
	}
	checked := map[uint32]callerCheck{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case e := <-l.queue:
			l.write(e, checked)
		case <-l.stop:
			l.drain(checked)
			return
		}
		for {
			l.drain(checked)
			l.flush()
			clear(checked)
			timer.Reset(batchInterval)
			select {
			case <-timer.C:
			case <-l.stop:
				timer.Stop()
				l.drain(checked)
				return
			}
			if len(l.queue) == 0 {
				break
			}
		}
	}
}

// drain writes every entry queued, then the count of those dropped.
func (l *Log) drain(checked map[uint32]callerCheck) {
	for {
		select {
		case e := <-l.queue:
			l.write(e, checked)
		default:
			l.writeDrops()
			return
		}
	}
}

// callerCheck is what the writer found checking a thread's caller in
// the current batch: each thread is checked once per batch.
type callerCheck struct {
	from procInfo // what the cache said
	now  procInfo // what the check said
}

// write appends e, preceded by the count of entries dropped before it.
func (l *Log) write(e Entry, checked map[uint32]callerCheck) {
	l.writeDrops()
	if e.given {
		l.append(e)
		return
	}
	tid := uint32(e.Tid)
	c, ok := checked[tid]
	if !ok || c.from != e.proc {
		c = callerCheck{from: e.proc, now: l.procs.recheck(tid, e.proc)}
		checked[tid] = c
	}
	info := c.now
	e.Pid, e.Command = info.pid, info.cmd
	if e.Tid == e.Pid {
		e.Tid = 0
	}
	l.append(e)
}

func (l *Log) writeDrops() {
	if n := l.drops.Swap(0); n > 0 {
		l.append(Entry{Time: time.Now(), Op: OpDropped, Count: n})
	}
}

// append encodes e as one line, starting a new segment first when the
// current one would grow past its half of the bound.
func (l *Log) append(e Entry) {
	l.line = append(appendEntry(l.line[:0], &e), '\n')
	line := l.line
	if l.size > 0 && l.size+int64(len(line)) > l.opts.MaxBytes/2 {
		if err := l.rotate(); err != nil {
			l.fail(err)
		}
	}
	if l.w == nil {
		return
	}
	n, err := l.w.Write(line)
	l.size += int64(n)
	if err != nil {
		l.fail(err)
	}
}

func (l *Log) flush() {
	if l.w != nil {
		if err := l.w.Flush(); err != nil {
			l.fail(err)
		}
	}
}

// fail logs a write error once per kind of error.
func (l *Log) fail(err error) {
	if l.werr == nil || l.werr.Error() != err.Error() {
		l.opts.Logger.Warn("writing a log", "log", l.opts.Stream, "err", err)
	}
	l.werr = err
}

func (l *Log) path(name string) string { return filepath.Join(l.opts.Dir, name) }

// openSegment opens the current segment for appending.
func (l *Log) openSegment() error {
	f, err := os.OpenFile(l.path(l.opts.Stream.cur()), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0600)
	if err != nil {
		return fmt.Errorf("opening the log %s: %w", l.opts.Stream, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("opening the log %s: %w", l.opts.Stream, err)
	}
	l.f, l.w, l.size = f, bufio.NewWriterSize(f, 64<<10), st.Size()
	return nil
}

func (l *Log) closeSegment() {
	if l.f == nil {
		return
	}
	l.flush()
	if err := l.f.Close(); err != nil {
		l.fail(err)
	}
	l.f, l.w = nil, nil
}

// rotate makes the current segment the old one and starts a new one.
// The current name names a segment at every instant, so a reader never finds
// the log missing: the current segment is first linked in as the old
// one (a reader then sees one segment under both names, and reads it
// once), and an empty segment made under a temporary name then
// replaces it. If a step fails, appending goes on in the segment the
// current name names.
func (l *Log) rotate() error {
	l.closeSegment()
	err := l.linkOld()
	if err == nil {
		l.step("linked")
		err = l.startSegment()
	}
	if err != nil {
		err = fmt.Errorf("rotating the log %s: %w", l.opts.Stream, err)
	}
	if l.f == nil {
		err = errors.Join(err, l.openSegment())
	}
	return err
}

// linkOld makes the old segment's name a second name of the current one.
func (l *Log) linkOld() error {
	tmp := l.path(l.opts.Stream.tmpName())
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Link(l.path(l.opts.Stream.cur()), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.path(l.opts.Stream.old())); err != nil {
		_ = os.Remove(tmp) // the rename's error is the one to report; the next rotation removes tmp first
		return err
	}
	return nil
}

// startSegment makes an empty segment and renames it over the current
// one.
func (l *Log) startSegment() error {
	tmp := l.path(l.opts.Stream.newName())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0600)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, l.path(l.opts.Stream.cur())); err != nil {
		f.Close()
		_ = os.Remove(tmp) // the rename's error is the one to report; the next rotation truncates tmp
		return err
	}
	l.f, l.w, l.size = f, bufio.NewWriterSize(f, 64<<10), 0
	return nil
}

// step calls the test hook between the steps of a rotation.
func (l *Log) step(name string) {
	if l.opts.rotateStep != nil {
		l.opts.rotateStep(name)
	}
}
