package session

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/procgroup"
)

// Supervision: agentfs run --supervise.
//
// The session process is the command's supervisor. It is not part of
// the command's process tree: it starts the command in a group of
// processes it can stop whole (procgroup: a cgroup, which no process of
// the command can leave by double-forking or starting a session), and
// it survives a rewind. The daemon and the supervisor share a line (a
// socket pair; daemon/supervisor.go has the protocol): a restore of the
// branch the mount shows makes the daemon ask "stop"; the supervisor
// ends every process of the command (SIGTERM, Grace, SIGKILL), answers
// "stopped", and once the daemon says "restored SNAPSHOT SAFETY" starts
// the command again with the same arguments, environment, directory and
// terminal, plus AGENTFS_RELAUNCH (the count) and
// AGENTFS_RELAUNCH_SNAPSHOT (what it was rewound to). Each relaunch is
// in the session record. When the command exits by itself, the run ends
// as an unsupervised one does, with its exit code, and what it left
// running in the group is stopped. Past MaxRestarts relaunches, a
// rewind still stops the command, and the run ends.

// Supervision are the settings of a supervisor.
type Supervision struct {
	// MaxRestarts bounds the relaunches.
	MaxRestarts int
	// Grace is how long the command's processes have to exit after
	// SIGTERM before they are killed.
	Grace time.Duration
}

// Defaults of agentfs run --supervise.
const (
	DefaultMaxRestarts = 10
	DefaultGrace       = 5 * time.Second
)

// args are the session process's flags for s.
func (s Supervision) args() []string {
	return []string{"--supervise", "--max-restarts", strconv.Itoa(s.MaxRestarts), "--stop-grace", s.Grace.String()}
}

// Environment variables a relaunched command gets.
const (
	EnvRelaunch         = "AGENTFS_RELAUNCH"
	EnvRelaunchSnapshot = "AGENTFS_RELAUNCH_SNAPSHOT"
)

// supervisor is the state of a supervised run.
type supervisor struct {
	opts      Supervision
	group     *procgroup.Group
	conn      *os.File // our end of the line to the daemon
	daemonEnd *os.File // the daemon's, until it has its copy

	mu       sync.Mutex
	stopping bool // the daemon asked to stop: the command's end is a rewind's
	// outcomes carries the daemon's "restored ..." or "failed ..."
	// lines; it is closed when the daemon is gone.
	outcomes chan string
}

// prepareSupervision makes the group and the line, before the daemon
// starts. Where no group can be made, the run is refused before
// anything runs.
func (s *process) prepareSupervision(o Supervision) error {
	g, err := procgroup.New("agentfs-" + s.rec.ID)
	if err != nil {
		return fmt.Errorf("agentfs run --supervise stops the agent's processes through a cgroup, and none can be made here: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		_ = g.Close() // empty: nothing was started in it
		return fmt.Errorf("making the supervisor's line to the daemon: %w", err)
	}
	s.super = &supervisor{opts: o, group: g, conn: os.NewFile(uintptr(fds[0]), "supervisor"),
		daemonEnd: os.NewFile(uintptr(fds[1]), "supervisor-daemon"), outcomes: make(chan string, 1)}
	// The daemon learns which processes a rewind stops: a request from
	// one of them is answered before the stop (workspace.Restore).
	if _, err := fmt.Fprintf(s.super.conn, "%s %s\n", daemon.SupGroup, g.Path()); err != nil {
		return fmt.Errorf("telling the daemon the command's cgroup: %w", err)
	}
	go s.super.serve(s)
	return nil
}

// closeDaemonEnd closes our copy of the daemon's end of the line.
func (v *supervisor) closeDaemonEnd() {
	if v.daemonEnd != nil {
		_ = v.daemonEnd.Close() // the daemon holds its own copy
		v.daemonEnd = nil
	}
}

// closeSupervision ends the group (what is left in it) and the line.
func (s *process) closeSupervision() {
	v := s.super
	if v == nil {
		return
	}
	v.closeDaemonEnd()
	if err := v.group.Close(); err != nil {
		fmt.Fprintf(s.stderr, "agentfs run: %v\n", err)
	}
	_ = v.conn.Close() // ends serve; the daemon is gone or going
}

// serve answers the daemon: "stop" stops the group; the restore's
// outcome goes to the run loop.
func (v *supervisor) serve(s *process) {
	defer close(v.outcomes)
	sc := bufio.NewScanner(v.conn)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == daemon.SupStop:
			v.mu.Lock()
			v.stopping = true
			v.mu.Unlock()
			reply := daemon.SupStopped
			if err := v.group.Stop(v.opts.Grace); err != nil {
				reply = daemon.SupError + " " + strings.ReplaceAll(err.Error(), "\n", " ")
				// The daemon restores nothing: what was stopped starts
				// again on the state it had.
				v.outcomes <- daemon.SupFailed + " " + err.Error()
			}
			if _, err := fmt.Fprintln(v.conn, reply); err != nil {
				fmt.Fprintf(s.stderr, "agentfs run: answering the daemon: %v\n", err)
			}
		case strings.HasPrefix(line, daemon.SupRestored+" "), strings.HasPrefix(line, daemon.SupFailed+" "):
			v.outcomes <- line
		}
	}
}

// supervise waits for the command, starting it again after each rewind;
// it returns the exit code of the last run of the command. started is
// told of each relaunched command (for the signals passed on to it).
func (s *process) supervise(cmd *exec.Cmd, started func(*exec.Cmd), o ProcessOptions) int {
	v := s.super
	for restarts := 0; ; restarts++ {
		_ = cmd.Wait() // its exit status is what counts, read below
		code := ExitCodeOf(cmd.ProcessState)
		v.mu.Lock()
		rewound := v.stopping
		v.mu.Unlock()
		if !rewound {
			// It ended by itself: what it left running goes too.
			if err := v.group.Stop(v.opts.Grace); err != nil {
				fmt.Fprintf(s.stderr, "agentfs run: %v\n", err)
			}
			return code
		}
		line, ok := <-v.outcomes
		v.mu.Lock()
		v.stopping = false
		v.mu.Unlock()
		if !ok {
			fmt.Fprintf(s.stderr, "agentfs run: the session's daemon is gone during a rewind: not starting %s again\n", s.rec.CommandString())
			return code
		}
		rl := Relaunch{Time: time.Now().Round(0), ExitCode: code}
		if rest, ok := strings.CutPrefix(line, daemon.SupRestored+" "); ok {
			rl.Snapshot, rl.Safety, _ = strings.Cut(rest, " ")
		} else {
			rl.Error = strings.TrimPrefix(line, daemon.SupFailed+" ")
		}
		if restarts >= v.opts.MaxRestarts {
			fmt.Fprintf(s.stderr, "agentfs run: the command was stopped for a rewind; not starting it again: it was started again %d times already (--max-restarts %d)\n", restarts, v.opts.MaxRestarts)
			return code
		}
		s.rec.Relaunches = append(s.rec.Relaunches, rl)
		if err := s.rec.Save(); err != nil {
			fmt.Fprintf(s.stderr, "agentfs run: %v\n", err)
		}
		env := []string{fmt.Sprintf("%s=%d", EnvRelaunch, restarts+1), EnvRelaunchSnapshot + "=" + rl.Snapshot}
		cmd = s.command(o.Command, o.NsUid, o.NsGid, env)
		if err := s.start(cmd); err != nil {
			fmt.Fprintf(s.stderr, "agentfs run: starting %s again after the rewind: %v\n", o.Command[0], err)
			return 126
		}
		started(cmd)
	}
}
