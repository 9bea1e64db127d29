package daemon

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/procgroup"
)

// The line to a session's supervisor.
//
// Under agentfs run --supervise the session process supervises the
// command: it runs it in a group of processes it can stop whole
// (package procgroup) and starts it again after a rewind. A restore of
// the branch the mount shows (a rewind: agentfs restore -s, or the MCP
// rewind tool, the agent's own included) goes, with the workspace's
// operation lock held:
//
//	supervisor → daemon      "group PATH"  (first: the cgroup of the
//	                                        command's processes)
//	daemon     → supervisor  "stop"        (before anything is restored)
//	supervisor → daemon      "stopped"     (every process of the command
//	                                        has ended), or "error MSG"
//	the restore (its safety snapshot first)
//	daemon     → supervisor  "restored SNAPSHOT SAFETY", or "failed MSG"
//
// The supervisor then starts the command again (or, past its restarts,
// ends the run). The line is a socket pair the session process made;
// one request is in flight at a time (the operation lock serializes
// restores). A supervisor that does not answer "stop" within StopWait
// fails the restore, which then changes nothing.

// StopWait bounds how long a restore waits for the supervisor to stop
// the command: its grace, then SIGKILL and the processes' exit.
const StopWait = 2 * time.Minute

// Supervisor line words.
const (
	SupGroup    = "group"
	SupStop     = "stop"
	SupStopped  = "stopped"
	SupError    = "error"
	SupRestored = "restored"
	SupFailed   = "failed"
)

// supervisorLink is the daemon's end of the line.
type supervisorLink struct {
	mu    sync.Mutex // one exchange at a time
	conn  *os.File
	lines chan string // what the supervisor said, line by line
	group atomic.Pointer[string]
}

func newSupervisorLink(conn *os.File) *supervisorLink {
	l := &supervisorLink{conn: conn, lines: make(chan string, 4)}
	go func() {
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			if path, ok := strings.CutPrefix(sc.Text(), SupGroup+" "); ok {
				l.group.Store(&path)
				continue
			}
			l.lines <- sc.Text()
		}
		close(l.lines) // the supervisor is gone
	}()
	return l
}

// inGroup reports whether process pid is one of the command's.
func (l *supervisorLink) inGroup(pid uint32) bool {
	g := l.group.Load()
	return g != nil && pid != 0 && procgroup.Of(int(pid)) == *g
}

func (l *supervisorLink) close() {
	_ = l.conn.Close() // ends the reader; nothing was written but lines
}

// stop asks the supervisor to stop the command and waits for it.
func (l *supervisorLink) stop() error {
	if _, err := fmt.Fprintln(l.conn, SupStop); err != nil {
		return fmt.Errorf("asking the session's supervisor to stop the command: %w", err)
	}
	select {
	case line, ok := <-l.lines:
		switch {
		case !ok:
			return fmt.Errorf("the session's supervisor is gone")
		case line == SupStopped:
			return nil
		case strings.HasPrefix(line, SupError+" "):
			return fmt.Errorf("the session's supervisor could not stop the command: %s", strings.TrimPrefix(line, SupError+" "))
		}
		return fmt.Errorf("the session's supervisor answered %q to stop", line)
	case <-time.After(StopWait):
		return fmt.Errorf("the session's supervisor did not stop the command within %v", StopWait)
	}
}

// Supervised implements workspace.Mount: in a supervised session, a
// restore of the branch the mount shows stops and relaunches the
// command.
func (d *Daemon) Supervised(name string, pid uint32) (supervised, inside bool) {
	if d.super == nil || name != d.shown.Load().Layer().Name() {
		return false, false
	}
	return true, d.super.inGroup(pid)
}

// Rewinding implements workspace.Mount: it has the supervisor stop the
// command.
func (d *Daemon) Rewinding(name string) (func(snapshot, safety string, err error), error) {
	d.super.mu.Lock()
	if err := d.super.stop(); err != nil {
		d.super.mu.Unlock()
		return nil, err
	}
	d.log.Info("the session's command was stopped for a rewind", "branch", name)
	return func(snapshot, safety string, err error) {
		defer d.super.mu.Unlock()
		line := fmt.Sprintf("%s %s %s", SupRestored, snapshot, safety)
		if err != nil {
			line = SupFailed + " " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		if _, werr := fmt.Fprintln(d.super.conn, line); werr != nil {
			d.log.Error("telling the session's supervisor the rewind's outcome", "err", werr)
		}
		d.recordRewind(name, snapshot, safety, err)
	}, nil
}

// recordRewind writes a supervised rewind to the activity log.
func (d *Daemon) recordRewind(name, snapshot, safety string, err error) {
	if d.activity == nil {
		return
	}
	detail := fmt.Sprintf("snapshot %s, safety snapshot %s: the command is started again", snapshot, safety)
	if err != nil {
		detail = fmt.Sprintf("snapshot %s failed: %v: the command is started again on the state before", snapshot, err)
	}
	d.activity.log.Record(activity.Entry{Time: time.Now(), Tid: os.Getpid(), Branch: name, Op: activity.OpRewind, Detail: detail})
}
