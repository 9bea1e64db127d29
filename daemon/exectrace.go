package daemon

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/autosnap"
	"github.com/agentfs/agentfs/exectrace"
)

// The daemon's side of the exec trace.
//
// traceHook.start, once the mount is up, loads the trace (package exectrace)
// for the session's cgroup (Plan.TraceCgroup) and for the processes
// working in the mount (its device), and opens the exec log in the
// store. The tracer's goroutine hands each record to traceHook.record,
// which writes it to the exec log (an exit with what its exec said:
// argv, working directory, parent) and gives it to the command
// triggers (autosnap.Commands). Neither step waits: a full queue drops
// the entry and counts it. When the trace does not run, the exec log's
// first entry (op "trace") says why, and so does agentfs status.

// maxRunning bounds the programs whose exec the daemon keeps until
// their exit; beyond it an exit is written without its argv.
const maxRunning = 1 << 16

// traceHook is the exec trace of a daemon.
type traceHook struct {
	d      *Daemon
	log    *activity.Log
	tracer *exectrace.Tracer
	status atomic.Pointer[string] // "on: ..." or "off: ..."
	// running holds the exec entries of programs still running, by
	// pid. Only the tracer's goroutine uses it.
	running map[int]*activity.Entry
}

// start starts the exec trace, or records why it does not run. The
// mount is up.
func (t *traceHook) start() {
	d := t.d
	s := d.plan.Activity
	log, err := activity.Open(activity.Options{Dir: d.store, Stream: activity.Exec, MaxBytes: s.ExecLogSize, Logger: d.log})
	if err != nil {
		d.log.Error("opening the exec log", "err", err)
		t.setStatus(fmt.Sprintf("off: the exec log cannot be opened (%v)", err))
		return
	}
	t.log = log
	switch {
	case !s.Trace:
		t.off("turned off (--trace=false, or enabled = false in [trace] of the configuration)")
		return
	case d.userns:
		t.off("agentfs runs as a normal user (in a user namespace), and tracing needs root (eBPF): run agentfs as root to trace commands")
		return
	}
	o := exectrace.Options{Cgroup: d.plan.TraceCgroup, Sink: t.record, Lost: t.lost, Logger: d.log}
	var st unix.Stat_t
	if err := unix.Stat(d.plan.Mountpoint, &st); err == nil {
		o.MountDev = st.Dev
	}
	tracer, err := exectrace.Start(o)
	if err != nil {
		why := err.Error()
		if errors.Is(err, exectrace.ErrUnavailable) {
			why = trimUnavailable(why)
		}
		t.off(why)
		return
	}
	t.tracer = tracer
	scope := "the processes working in the mount, and what they start"
	if o.Cgroup != "" {
		scope = "the session's processes (cgroup " + o.Cgroup + "), those working in the mount, and what they start"
	}
	t.setStatus("on: " + scope)
	t.log.Add(activity.Entry{Time: time.Now(), Op: activity.OpTrace, Detail: "on: " + scope})
	d.log.Info("commands are traced", "cgroup", o.Cgroup, "mount_dev", o.MountDev)
}

// trimUnavailable drops the "commands are not traced: " that
// exectrace.ErrUnavailable puts first: the status says "off: ".
func trimUnavailable(why string) string {
	prefix := exectrace.ErrUnavailable.Error() + ": "
	if len(why) > len(prefix) && why[:len(prefix)] == prefix {
		return why[len(prefix):]
	}
	return why
}

func (t *traceHook) setStatus(s string) { t.status.Store(&s) }

// off records that commands are not traced, and why.
func (t *traceHook) off(why string) {
	t.setStatus("off: " + why)
	t.log.Add(activity.Entry{Time: time.Now(), Op: activity.OpTrace, Detail: "off: " + why})
	t.d.log.Warn("commands are not traced", "why", why)
}

// Status says whether commands are traced, and why not.
func (t *traceHook) Status() string {
	if t == nil {
		return "off: the mount is not up"
	}
	if s := t.status.Load(); s != nil {
		return *s
	}
	return "off: starting"
}

// record writes one record of the trace and hands it to the command
// triggers. It runs on the tracer's goroutine.
func (t *traceHook) record(r exectrace.Record) {
	auto := (*autosnap.Runner)(nil)
	if a := t.d.activity; a != nil {
		auto = a.auto
	}
	var cmd autosnap.Command
	if r.Exec {
		e := &activity.Entry{Time: r.Time, Pid: r.Pid, Ppid: r.Ppid, Uid: r.Uid, Op: activity.OpExec,
			Argv: r.Argv, ArgvCut: r.ArgvTruncated, Cwd: r.Cwd, CwdCut: r.CwdTruncated}
		if len(t.running) >= maxRunning {
			for pid := range t.running { // forget one: its exit is lost
				delete(t.running, pid)
				break
			}
		}
		t.running[r.Pid] = e
		t.log.Add(*e)
		cmd = autosnap.Command{Time: r.Time, Pid: r.Pid, Ppid: r.Ppid, Argv: r.Argv}
		if auto != nil && auto.IsBuild(r.Argv) {
			// The branch it works on, while it runs (a build that
			// ends before the triggers look would be gone).
			cmd.Branch = t.d.branchOf(r.Pid)
		}
	} else {
		e := activity.Entry{Time: r.Time, Pid: r.Pid, Op: activity.OpExit, Start: r.Start}
		// Its exec: the one of the same pid that started when it did
		// (an exec record lost, the pid's earlier program is not it).
		if ex := t.running[r.Pid]; ex != nil && ex.Time.Equal(r.Start) {
			e.Ppid, e.Uid, e.Argv, e.ArgvCut, e.Cwd, e.CwdCut = ex.Ppid, ex.Uid, ex.Argv, ex.ArgvCut, ex.Cwd, ex.CwdCut
		}
		delete(t.running, r.Pid)
		switch {
		case r.Status.Exited():
			code := r.Status.ExitStatus()
			e.Exit = &code
		case r.Status.Signaled():
			e.Signal = int(r.Status.Signal())
		}
		if !r.Start.IsZero() {
			e.DurationNs = int64(r.Time.Sub(r.Start))
		}
		t.log.Add(e)
		cmd = autosnap.Command{Time: r.Time, Pid: r.Pid, End: true, OK: e.Exit != nil && *e.Exit == 0, Start: r.Start}
	}
	if auto != nil {
		auto.AddCommand(cmd)
	}
}

// lost writes to the exec log that n records did not fit in the ring
// buffer (the tracer's goroutine).
func (t *traceHook) lost(n uint64) {
	t.log.Add(activity.Entry{Time: time.Now(), Op: activity.OpDropped, Count: int64(n)})
	t.d.log.Warn("exec records dropped: the trace's ring buffer was full", "count", n)
}

// close stops the trace and closes the exec log (what is queued is
// written).
func (t *traceHook) close() {
	if t == nil {
		return
	}
	if t.tracer != nil {
		if err := t.tracer.Close(); err != nil {
			t.d.log.Warn("stopping the exec trace", "err", err)
		}
	}
	if t.log != nil {
		if err := t.log.Close(); err != nil {
			t.d.log.Warn("closing the exec log", "err", err)
		}
	}
}
