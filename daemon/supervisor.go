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
//	supervisor → daemon      "relaunches N" (at first and after each
//	                                         relaunch: how many are left)
//	daemon     → supervisor  "stop SEQ"     (before anything is restored)
//	supervisor → daemon      "stopped SEQ relaunch" or "stopped SEQ final"
//	                                        (every process of the command
//	                                         has ended; whether it is
//	                                         started again after), or
//	                                         "error SEQ MSG"
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
// state it had.

// StopWait bounds how long a restore waits for the supervisor to stop
// the command: its grace (at most MaxGrace), then SIGKILL and the
// processes' exit (procgroup.KillWait).
const StopWait = 2 * time.Minute

// MaxGrace is the longest --stop-grace: a stop within it, SIGKILL and
// the processes' exit fit in StopWait with room to spare.
const MaxGrace = StopWait - procgroup.KillWait - 20*time.Second

// Supervisor line words.
const (
	SupGroup      = "group"
	SupRelaunches = "relaunches"
	SupStop       = "stop"
	SupStopped    = "stopped"
	SupError      = "error"
	SupRestored   = "restored"
	SupFailed     = "failed"
	// What follows "stopped SEQ": whether the command starts again.
	SupRelaunch = "relaunch"
	SupFinal    = "final"
)

// supervisorLink is the daemon's end of the line.
type supervisorLink struct {
	mu    sync.Mutex // one rewind at a time, from "stop" to its outcome; before workspace's opMu
	seq   uint64     // the last rewind's number; mu
	conn  *os.File
	lines chan string // what the supervisor said, line by line, but group and relaunches
	group atomic.Pointer[string]
	// left: the relaunches left, as the supervisor last said (-1 before
	// it says).
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

// inGroup reports whether process pid is one of the command's: its
// cgroup is the group's top or below it.
func (l *supervisorLink) inGroup(pid uint32) bool {
	g := l.group.Load()
	return g != nil && pid != 0 && procgroup.Within(procgroup.Of(int(pid)), *g)
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
// restore. l.mu is held.
func (l *supervisorLink) stopLocked() (relaunch bool, err error) {
	l.seq++
	seq := strconv.FormatUint(l.seq, 10)
	if err := l.send("%s %s", SupStop, seq); err != nil {
		return false, fmt.Errorf("asking the session's supervisor to stop the command: %w", err)
	}
	timeout := time.After(StopWait)
	for {
		select {
		case line, ok := <-l.lines:
			if !ok {
				return false, fmt.Errorf("the session's supervisor is gone")
			}
			word, rest, _ := strings.Cut(line, " ")
			n, rest, _ := strings.Cut(rest, " ")
			if n != seq {
				continue // the late answer to a rewind given up on
			}
			switch {
			case word == SupStopped && rest == SupRelaunch:
				return true, nil
			case word == SupStopped && rest == SupFinal:
				return false, nil
			case word == SupError:
				return false, fmt.Errorf("the session's supervisor could not stop the command: %s", rest)
			}
			return false, fmt.Errorf("the session's supervisor answered %q to stop", line)
		case <-timeout:
			// It may still be stopping: it learns that nothing is
			// restored, and starts what it stopped again.
			_ = l.send("%s %s the restore gave up waiting %v for the command to stop", SupFailed, seq, StopWait)
			return false, fmt.Errorf("the session's supervisor did not stop the command within %v", StopWait)
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
	return workspace.Supervision{Supervised: true, Inside: d.super.inGroup(pid), Relaunch: d.super.left.Load() != 0}
}

// Rewinding implements workspace.Mount: it has the supervisor stop the
// command. It is called without the workspace's operation lock; the
// rewind's Done is called with it.
func (d *Daemon) Rewinding(name string) (workspace.Rewind, error) {
	l := d.super
	l.mu.Lock()
	if shown := d.shown.Load().Layer().Name(); name != shown {
		l.mu.Unlock()
		return workspace.Rewind{}, fmt.Errorf("branch %q is no longer the one the mount shows (%q): its command is not stopped", name, shown)
	}
	relaunch, err := l.stopLocked()
	if err != nil {
		l.mu.Unlock()
		return workspace.Rewind{}, err
	}
	seq := l.seq
	d.log.Info("the session's command was stopped for a rewind", "branch", name, "relaunch", relaunch)
	return workspace.Rewind{Relaunch: relaunch, Done: func(snapshot, safety string, err error) {
		defer l.mu.Unlock()
		line := fmt.Sprintf("%s %d %s %s", SupRestored, seq, snapshot, safety)
		if err != nil {
			line = fmt.Sprintf("%s %d %s", SupFailed, seq, strings.ReplaceAll(err.Error(), "\n", " "))
		}
		if werr := l.send("%s", line); werr != nil {
			d.log.Error("telling the session's supervisor the rewind's outcome", "err", werr)
		}
		d.recordRewind(name, snapshot, safety, relaunch, err)
	}}, nil
}

// recordRewind writes a supervised rewind to the activity log.
func (d *Daemon) recordRewind(name, snapshot, safety string, relaunch bool, err error) {
	if d.activity == nil {
		return
	}
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
	d.activity.log.Record(activity.Entry{Time: time.Now(), Tid: os.Getpid(), Branch: name, Op: activity.OpRewind, Detail: detail})
}
