package daemon

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/procgroup"
	"github.com/agentfs/agentfs/workspace"
)

// The line to a session's supervisor.
//
// Under agentfs run --supervise the session process supervises the
// command: it runs it in a group of processes it can stop whole
// (package procgroup) and starts it again after a rewind. A restore of
// the branch the mount shows (a rewind: agentfs restore -s, or the MCP
// rewind tool, the agent's own included) goes:
//
//	supervisor → daemon      "group PATH"   (first: the top cgroup of the
//	                                         command's processes; a
//	                                         process is one of them when
//	                                         its cgroup is PATH or below)
//	supervisor → daemon      "relaunches N" (at first and before each
//	                                         relaunch: how many are left)
//	daemon     → supervisor  "stop SEQ"     (a rewind asked from outside
//	                                         the command, before anything
//	                                         is restored), or
//	                         "stop SEQ self RUN"
//	                                        (a self-rewind: asked by a
//	                                         process of the command's
//	                                         start RUN, its cgroup leaf
//	                                         run-N, already answered)
//	supervisor → daemon      "stopped SEQ relaunch" or "stopped SEQ final"
//	                                        (every process of the command
//	                                         has ended; whether it is
//	                                         started again after), or
//	                                         "error SEQ MSG", or, for a
//	                                         self-rewind only,
//	                                         "dropped SEQ MSG" (nothing
//	                                         stopped: see below)
//	the restore (its safety snapshot first), with the operation lock
//	daemon     → supervisor  "restored SEQ SNAPSHOT SAFETY", or
//	                         "failed SEQ MSG" (nothing was restored)
//
// SEQ numbers the rewinds: an answer to an earlier one (which the daemon
// gave up waiting for) is dropped, never taken for the current one's.
// The supervisor then starts the command again (or, when it answered
// "final", ends the run). Rewinds are serialized by the link's mutex,
// held from "stop" to the outcome, and taken before the workspace's
// operation lock: the command's processes are stopped without that lock
// held, so that one of them in the middle of a control call (which may
// wait for it) can end. A supervisor that does not answer "stop" within
// StopWait fails the restore, which then changes nothing; the daemon
// tells it "failed SEQ", so that it starts the command again on the
// state it had. A message (MSG) is one line of at most MaxLineMessage
// bytes (LineMessage): both ends read lines of at most 64 KiB.
//
// # Self-rewinds
//
// A process of the command that asks for a rewind cannot wait for it:
// it is among those stopped. The workspace answers it at once and has
// the daemon send "stop SEQ self RUN" right away, RUN being the start
// of the command the asker belongs to; the link's mutex is held from
// then on, as for any rewind, so that a rewind asked meanwhile (from
// outside, or a second one of the same start) comes after it. The
// supervisor owns the pending rewind:
//
//   - when RUN is not the start that runs (an earlier rewind stopped it,
//     or the run has ended), the rewind is dropped: it answers
//     "dropped SEQ WHY", nothing is stopped or restored, and the
//     activity log has a rewind line saying so and why. Two rewinds one
//     start asks at once are one stop and one relaunch: the second is
//     dropped;
//   - otherwise it waits SelfStopDelay (for the answer to reach whoever
//     reads it: a model through its MCP host, a person) and stops the
//     command. A command that ends by itself in that wait, or has
//     already, is stopped for the rewind all the same (what it left
//     running is stopped) and started again, as its answer said.
//
// So the answer the asker gets (Relaunch as the supervisor has
// relaunches left) holds unless the rewind is dropped, a termination
// signal ends the run during it, or the stop fails; it says so.

// StopWait bounds how long a restore waits for the supervisor to stop
// the command: its grace (at most MaxGrace), then SIGKILL and the
// processes' exit (procgroup.KillWait).
const StopWait = 2 * time.Minute

// MaxGrace is the longest --stop-grace: a self-rewind's SelfStopDelay,
// a stop within the grace, SIGKILL and the processes' exit fit in
// StopWait with room to spare.
const MaxGrace = StopWait - procgroup.KillWait - 20*time.Second

// SelfStopDelay is how long the supervisor lets the answer to a
// self-rewind reach whoever reads it before it stops the command.
// (agentfs restore itself holds SIGTERM until it has printed it.)
const SelfStopDelay = 250 * time.Millisecond

// MaxLineMessage bounds a message on the line (LineMessage).
const MaxLineMessage = 1024

// LineMessage is s as one message on the line: newlines made spaces,
// cut at MaxLineMessage bytes (at the start of a character).
func LineMessage(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= MaxLineMessage {
		return s
	}
	return ctl.CutAtRune(s, MaxLineMessage-len(" (cut)")) + " (cut)"
}

// Supervisor line words.
const (
	SupGroup      = "group"
	SupRelaunches = "relaunches"
	SupStop       = "stop"
	SupSelf       = "self" // after "stop SEQ": a self-rewind, the asker's start follows
	SupStopped    = "stopped"
	SupError      = "error"
	SupDropped    = "dropped"
	SupRestored   = "restored"
	SupFailed     = "failed"
	// What follows "stopped SEQ": whether the command starts again.
	SupRelaunch = "relaunch"
	SupFinal    = "final"
)

// supervisorLink is the daemon's end of the line.
type supervisorLink struct {
	mu    sync.Mutex // one rewind at a time, from "stop" to its outcome; taken before workspace's opMu
	seq   uint64     // the last rewind's number; mu
	conn  *os.File
	lines chan string // what the supervisor said, line by line, but group and relaunches
	group atomic.Pointer[string]
	// left: the relaunches left, as the supervisor last said (-1 before
	// it says), one less as soon as it answers "stopped SEQ relaunch":
	// before the relaunched command can ask.
	left atomic.Int64
}

func newSupervisorLink(conn *os.File) *supervisorLink {
	l := &supervisorLink{conn: conn, lines: make(chan string, 4)}
	l.left.Store(-1)
	go func() {
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			line := sc.Text()
			if path, ok := strings.CutPrefix(line, SupGroup+" "); ok {
				l.group.Store(&path)
				continue
			}
			if n, ok := strings.CutPrefix(line, SupRelaunches+" "); ok {
				if v, err := strconv.ParseInt(n, 10, 64); err == nil {
					l.left.Store(v)
				}
				continue
			}
			l.lines <- line
		}
		close(l.lines) // the supervisor is gone
	}()
	return l
}

// startOf reports whether process pid is one of the command's (its
// cgroup is the group's top or below it), and the start of the command
// it belongs to: the leaf it is in or below ("" when it is in the top).
func (l *supervisorLink) startOf(pid uint32) (inside bool, run string) {
	g := l.group.Load()
	if g == nil || pid == 0 {
		return false, ""
	}
	p := procgroup.Of(int(pid))
	if !procgroup.Within(p, *g) {
		return false, ""
	}
	return true, procgroup.LeafOf(p, *g)
}

func (l *supervisorLink) close() {
	_ = l.conn.Close() // ends the reader; nothing was written but lines
}

// send writes one line to the supervisor.
func (l *supervisorLink) send(format string, args ...any) error {
	_, err := fmt.Fprintf(l.conn, format+"\n", args...)
	return err
}

// stopLocked asks the supervisor to stop the command and waits for it:
// it returns whether the supervisor starts the command again after the
// restore, or, for a self-rewind asked by start asker (a leaf, "" for
// a rewind from outside), why the supervisor dropped it. l.mu is held.
func (l *supervisorLink) stopLocked(asker string) (relaunch bool, dropped string, err error) {
	l.seq++
	seq := strconv.FormatUint(l.seq, 10)
	stop := SupStop + " " + seq
	if asker != "" {
		stop += " " + SupSelf + " " + asker
	}
	if err := l.send("%s", stop); err != nil {
		return false, "", fmt.Errorf("asking the session's supervisor to stop the command: %w", err)
	}
	timeout := time.After(StopWait)
	for {
		select {
		case line, ok := <-l.lines:
			if !ok {
				return false, "", fmt.Errorf("the session's supervisor is gone")
			}
			word, rest, _ := strings.Cut(line, " ")
			n, rest, _ := strings.Cut(rest, " ")
			if n != seq {
				continue // the late answer to a rewind given up on
			}
			switch {
			case word == SupStopped && rest == SupRelaunch:
				// The relaunched command may ask before the supervisor
				// says how many are left.
				if left := l.left.Load(); left > 0 {
					l.left.CompareAndSwap(left, left-1)
				}
				return true, "", nil
			case word == SupStopped && rest == SupFinal:
				return false, "", nil
			case word == SupDropped && asker != "":
				return false, rest, nil
			case word == SupError:
				return false, "", fmt.Errorf("the session's supervisor could not stop the command: %s", rest)
			}
			return false, "", fmt.Errorf("the session's supervisor answered %q to stop", line)
		case <-timeout:
			// It may still be stopping: it learns that nothing is
			// restored, and starts what it stopped again.
			_ = l.send("%s %s the restore gave up waiting %v for the command to stop", SupFailed, seq, StopWait)
			return false, "", fmt.Errorf("the session's supervisor did not stop the command within %v", StopWait)
		}
	}
}

// Supervised implements workspace.Mount: in a supervised session, a
// restore of the branch the mount shows stops the command, and starts
// it again while the supervisor has relaunches left.
func (d *Daemon) Supervised(name string, pid uint32) workspace.Supervision {
	if d.super == nil || name != d.shown.Load().Layer().Name() {
		return workspace.Supervision{}
	}
	sup := workspace.Supervision{Supervised: true, Relaunch: d.super.left.Load() != 0}
	sup.Inside, sup.Run = d.super.startOf(pid)
	return sup
}

// Rewinding implements workspace.Mount: it has the supervisor stop the
// command, for a rewind to snapshot of branch name asked from outside
// (asker "") or by a process of the command's start asker (a
// self-rewind: see Self-rewinds). It is called without the workspace's
// operation lock, and holds the link's mutex until the rewind's Done
// (which the workspace calls after it has released the operation lock).
// A rewind that is not carried out (the branch no longer shown, the
// command not stopped, a self-rewind dropped) has its rewind line in
// the activity log here.
func (d *Daemon) Rewinding(name, snapshot, asker string) (workspace.Rewind, error) {
	l := d.super
	l.mu.Lock()
	if shown := d.shown.Load().Layer().Name(); name != shown {
		l.mu.Unlock()
		err := fmt.Errorf("branch %q is no longer the one the mount shows (%q): its command is not stopped", name, shown)
		d.recordNotRewound(name, snapshot, asker, err.Error())
		return workspace.Rewind{}, err
	}
	relaunch, dropped, err := l.stopLocked(asker)
	if err != nil || dropped != "" {
		l.mu.Unlock()
		if err != nil {
			d.recordNotRewound(name, snapshot, asker, err.Error())
			return workspace.Rewind{}, err
		}
		d.log.Info("a self-rewind was dropped", "branch", name, "snapshot", snapshot, "asker", asker, "why", dropped)
		d.recordNotRewound(name, snapshot, asker, "dropped: "+dropped)
		return workspace.Rewind{}, fmt.Errorf("%w: %s", workspace.ErrRewindDropped, dropped)
	}
	seq := l.seq
	d.log.Info("the session's command was stopped for a rewind", "branch", name, "relaunch", relaunch, "asker", asker)
	return workspace.Rewind{Relaunch: relaunch, Done: func(snapshot, safety string, err error) {
		defer l.mu.Unlock()
		line := fmt.Sprintf("%s %d %s %s", SupRestored, seq, snapshot, safety)
		if err != nil {
			line = fmt.Sprintf("%s %d %s", SupFailed, seq, LineMessage(err.Error()))
		}
		if werr := l.send("%s", line); werr != nil {
			d.log.Error("telling the session's supervisor the rewind's outcome", "err", werr)
		}
		d.recordRewind(name, snapshot, safety, asker, relaunch, err)
	}}, nil
}

// rewindDetail is the detail of a rewind's line in the activity log:
// a rewind to snapshot asked by asker ("" from outside) restored it
// after safety (err nil), or failed with err; the command is started
// again after (relaunch) or not.
func rewindDetail(snapshot, safety, asker string, relaunch bool, err error) string {
	next := "the command is started again"
	if !relaunch {
		next = "the command is not started again: the run ends"
	}
	detail := fmt.Sprintf("snapshot %s, safety snapshot %s: %s", snapshot, safety, next)
	if err != nil {
		detail = fmt.Sprintf("snapshot %s failed: %v: %s, on the state before", snapshot, err, next)
		if !relaunch {
			detail = fmt.Sprintf("snapshot %s failed: %v: %s", snapshot, err, next)
		}
	}
	return selfPrefix(asker) + detail
}

// notRewoundDetail is the detail of the line of a rewind to snapshot
// that was not carried out, and why.
func notRewoundDetail(snapshot, asker, why string) string {
	return selfPrefix(asker) + fmt.Sprintf("snapshot %s not restored, nothing stopped by it: %s", snapshot, why)
}

// selfPrefix marks the line of a self-rewind.
func selfPrefix(asker string) string {
	if asker == "" {
		return ""
	}
	return "asked by the command (" + asker + "): "
}

// recordRewind writes a supervised rewind to the activity log.
func (d *Daemon) recordRewind(name, snapshot, safety, asker string, relaunch bool, err error) {
	d.recordRewindLine(name, rewindDetail(snapshot, safety, asker, relaunch, err))
}

// recordNotRewound writes a rewind that was not carried out to the
// activity log.
func (d *Daemon) recordNotRewound(name, snapshot, asker, why string) {
	d.recordRewindLine(name, notRewoundDetail(snapshot, asker, why))
}

func (d *Daemon) recordRewindLine(name, detail string) {
	if d.activity == nil {
		return
	}
	d.activity.log.Record(activity.Entry{Time: time.Now(), Tid: os.Getpid(), Branch: name, Op: activity.OpRewind, Detail: detail})
}
