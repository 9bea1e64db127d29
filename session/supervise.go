package session

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
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
// branch the mount shows makes the daemon ask "stop SEQ"; the supervisor
// ends every process of the command (SIGTERM, Grace, SIGKILL), answers
// "stopped SEQ relaunch" (or "final" when it will not start it again),
// and once the daemon says "restored SEQ SNAPSHOT SAFETY" starts the
// command again with the same arguments, environment and directory,
// plus AGENTFS_RELAUNCH (the count) and AGENTFS_RELAUNCH_SNAPSHOT (what
// it was rewound to), with the terminal given back as it was at the
// start (its foreground process group and modes). Each relaunch is in
// the session record.
//
// The run loop (supervise) is the one owner of the command: it alone
// starts it, stops it and waits for it, one thing at a time. serve only
// passes the daemon's lines on to it, so a "stop" that comes while the
// loop is busy (stopping, or starting the command again) waits until
// the command it is about runs, and is never answered for an empty
// group. A "stop" always finds every process of the command ended
// before it is answered, a command that had ended by itself included
// (what it left running is stopped first): the daemon restores on the
// answer.
//
// A self-rewind ("stop SEQ self RUN": asked by a process of the
// command, which has had its answer) is the supervisor's from then on:
// when RUN, the start that asked, is not the one running (an earlier
// rewind stopped it, or the run has ended) it is dropped ("dropped SEQ
// WHY"); otherwise the loop waits selfStopDelay for the answer to reach
// its reader, then stops the command. A command that ends by itself in
// that wait is stopped for the rewind and started again all the same,
// as its answer said.
//
// The run ends, with the last command's exit code, when the command
// exits by itself (what it left running in the group is stopped), when
// a rewind comes past MaxRestarts relaunches, or when a termination
// signal (SIGINT, SIGQUIT, SIGTERM, SIGHUP) comes during a rewind, when
// there is no command to take it. (When the stop fails and the command
// runs on, a SIGTERM or SIGHUP that came meanwhile is passed on to it.)

// Supervision are the settings of a supervisor.
type Supervision struct {
	// MaxRestarts bounds the relaunches.
	MaxRestarts int
	// Grace is how long the command's processes have to exit after
	// SIGTERM before they are killed; at most daemon.MaxGrace.
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
	// lines carries what the daemon says, in order (serve); it is
	// closed when the daemon is gone.
	lines chan supLine
	// signals carries the termination signals the session process gets
	// once the command runs.
	signals chan os.Signal
	// tty is the terminal as it was at the start, nil when stdin is
	// none or the run is not in its foreground.
	tty *terminal
	// ttyHeld: the command's processes held the terminal's foreground
	// when they were last stopped (run loop only).
	ttyHeld bool
	// restarts counts the relaunches (run loop only); ended says why the
	// run loop ended, for drain.
	restarts int
	ended    string
	// selfStopDelay is how long a self-rewind waits before the stop
	// (daemon.SelfStopDelay); stopGroup stops the group (its Stop).
	selfStopDelay time.Duration
	stopGroup     func(grace time.Duration) error
}

// supLine is one line from the daemon: word, the rewind's number, the
// rest.
type supLine struct{ word, seq, rest string }

// prepareSupervision makes the group and the line, before the daemon
// starts. Where no group can be made (no delegated cgroup, a kernel
// without CLONE_INTO_CGROUP), the run is refused before anything runs.
func (s *process) prepareSupervision(o Supervision) error {
	g, err := procgroup.New("agentfs-" + s.rec.ID)
	if err != nil {
		return fmt.Errorf("agentfs run --supervise stops the agent's processes through a cgroup, and none can be used here: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		_ = g.Close() // empty: nothing was started in it
		return fmt.Errorf("making the supervisor's line to the daemon: %w", err)
	}
	// Our end is non-blocking, so that Go's poller holds it: Close then
	// closes it at once, under serve's pending read, and the daemon sees
	// the line end (a blocking file would stay open until that read
	// returned). The daemon's end stays blocking.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		_ = unix.Close(fds[0]) // just made
		_ = unix.Close(fds[1])
		_ = g.Close()
		return fmt.Errorf("making the supervisor's line to the daemon: %w", err)
	}
	s.super = &supervisor{opts: o, group: g, conn: os.NewFile(uintptr(fds[0]), "supervisor"),
		daemonEnd: os.NewFile(uintptr(fds[1]), "supervisor-daemon"),
		lines:     make(chan supLine, 8), signals: make(chan os.Signal, 8), tty: saveTerminal(os.Stdin),
		selfStopDelay: daemon.SelfStopDelay, stopGroup: g.Stop}
	// The daemon learns which processes a rewind stops: a request from
	// one of them is answered before the stop (workspace.Restore).
	if err := s.super.send("%s %s", daemon.SupGroup, g.Path()); err != nil {
		return fmt.Errorf("telling the daemon the command's cgroup: %w", err)
	}
	if err := s.super.send("%s %d", daemon.SupRelaunches, o.MaxRestarts); err != nil {
		return fmt.Errorf("telling the daemon the command's relaunches: %w", err)
	}
	go s.super.serve()
	return nil
}

// send writes one line to the daemon. Only the run loop writes, once
// serve runs.
func (v *supervisor) send(format string, args ...any) error {
	_, err := fmt.Fprintf(v.conn, format+"\n", args...)
	return err
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

// serve passes the daemon's lines on to the run loop.
func (v *supervisor) serve() {
	defer close(v.lines)
	sc := bufio.NewScanner(v.conn)
	for sc.Scan() {
		word, rest, _ := strings.Cut(sc.Text(), " ")
		seq, rest, _ := strings.Cut(rest, " ")
		v.lines <- supLine{word: word, seq: seq, rest: rest}
	}
}

// signal passes a signal the session process got to the run loop.
func (v *supervisor) signal(sig os.Signal) {
	select {
	case v.signals <- sig:
	default: // eight are waiting: one more changes nothing
	}
}

// running is a command started, and its exit.
type running struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
}

// watch waits for cmd (started) in the background.
func watch(cmd *exec.Cmd) running {
	r := running{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // its exit status is what counts, read from ProcessState
		close(r.exited)
	}()
	return r
}

// hasExited reports whether the command has exited; when it has, it
// has been waited for (its ProcessState is set). A command that has
// exited but that watch has not waited for yet counts: waitid, without
// reaping it, says so.
func (r running) hasExited() bool {
	select {
	case <-r.exited:
		return true
	default:
	}
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, r.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	// ECHILD: watch has just reaped it.
	if errors.Is(err, unix.ECHILD) || err == nil && info.Signo == int32(unix.SIGCHLD) {
		<-r.exited
		return true
	}
	return false
}

// supervise waits for the command, stopping it and starting it again
// for each rewind; it returns the exit code of the last run of the
// command. It is the only owner of the command (see Supervision).
func (s *process) supervise(cmd *exec.Cmd, o ProcessOptions) int {
	v := s.super
	defer v.restoreTerminal(s)
	cur := watch(cmd)
	lines := v.lines
	for {
		var l supLine
		select {
		case <-cur.exited:
			// A stop the daemon sent before the loop saw the exit is
			// served first: it came before the exit, or with it.
			stop, ok := pendingStop(lines)
			if !ok {
				return v.endedByItself(s, cur)
			}
			l = stop
		case sig := <-v.signals:
			// SIGINT and SIGQUIT are the command's: the terminal sends
			// them to it too.
			if sig == syscall.SIGTERM || sig == syscall.SIGHUP {
				_ = cur.cmd.Process.Signal(sig) // it may have exited
			}
			continue
		case got, ok := <-lines:
			if !ok {
				lines = nil // the daemon is gone: the command runs on, without rewinds
				continue
			}
			if got.word != daemon.SupStop {
				continue // an outcome no stop waits for
			}
			l = got
		}
		next, code, end := s.serveStop(cur, l, o)
		if end {
			return code
		}
		cur = next
	}
}

// pendingStop takes the lines the daemon has sent already, without
// waiting, up to the first "stop", which it returns.
func pendingStop(lines <-chan supLine) (supLine, bool) {
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return supLine{}, false
			}
			if l.word == daemon.SupStop {
				return l, true
			}
		default:
			return supLine{}, false
		}
	}
}

// selfAsker returns the start of the command that asked the rewind of
// stop line l, when it is a self-rewind ("stop SEQ self RUN").
func selfAsker(l supLine) (asker string, self bool) {
	return strings.CutPrefix(l.rest, daemon.SupSelf+" ")
}

// serveStop serves the daemon's "stop" l while cur is (or was last) the
// command: a self-rewind of a start that is no longer cur is dropped; a
// rewind from outside that finds cur ended by itself ends the run;
// otherwise the command is stopped for the rewind (rewind). end says
// the run ends, with code.
func (s *process) serveStop(cur running, l supLine, o ProcessOptions) (next running, code int, end bool) {
	v := s.super
	asker, self := selfAsker(l)
	if running := v.group.Leaf(); self && asker != running {
		v.answer(s, "%s %s %s", daemon.SupDropped, l.seq, daemon.LineMessage(fmt.Sprintf(
			"the start of the command that asked it (%s) is no longer running: an earlier rewind stopped it (%s runs now)", asker, running)))
		return cur, 0, false
	}
	if !self && cur.hasExited() {
		// It ended by itself as the rewind came: the run ends. What it
		// left running is stopped before the answer, on which the daemon
		// restores.
		code := v.endedByItself(s, cur)
		v.answer(s, "%s %s %s", daemon.SupStopped, l.seq, daemon.SupFinal)
		return cur, code, true
	}
	return s.rewind(cur, l.seq, self, o)
}

// endedByItself ends the run after the command exited on its own: what
// it left running in the group is stopped, and a rewind asked from now
// on is answered at once (drain).
func (v *supervisor) endedByItself(s *process, cur running) int {
	v.ttyHeld = v.tty.agentHolds(v.group) // before what is left is stopped
	if err := v.stopGroup(v.opts.Grace); err != nil {
		fmt.Fprintf(s.stderr, "agentfs run: %v\n", err)
	}
	code := ExitCodeOf(cur.cmd.ProcessState)
	v.ended = fmt.Sprintf("the command ended by itself (exit code %d)", code)
	return code
}

// drain answers the rewinds asked once the run loop has ended, until
// the line closes: there is no command to stop or start again. A rewind
// from outside restores all the same ("stopped final"); a self-rewind
// is dropped, as the start that asked it has ended.
func (v *supervisor) drain() {
	for l := range v.lines {
		if l.word != daemon.SupStop {
			continue
		}
		// The line may be closing under it: the run is ending.
		if _, self := selfAsker(l); self {
			_ = v.send("%s %s %s", daemon.SupDropped, l.seq, daemon.LineMessage("the run has ended: "+v.ended))
			continue
		}
		_ = v.send("%s %s %s", daemon.SupStopped, l.seq, daemon.SupFinal)
	}
}

// answer tells the daemon a line, or says on stderr why it could not.
func (v *supervisor) answer(s *process, format string, args ...any) {
	if err := v.send(format, args...); err != nil {
		fmt.Fprintf(s.stderr, "agentfs run: answering the session's daemon: %v\n", err)
	}
}

// rewind serves the daemon's "stop seq" for the running command cur: it
// stops the command's processes, answers, waits for the restore's
// outcome and starts the command again. A self-rewind (self) first
// waits selfStopDelay, for its answer to reach whoever reads it. end
// says the run ends instead, with code.
func (s *process) rewind(cur running, seq string, self bool, o ProcessOptions) (next running, code int, end bool) {
	v := s.super
	// stopSignal: a termination signal came, no relaunch; forward: the
	// last SIGTERM or SIGHUP among them, the command's should it run on.
	var stopSignal, forward os.Signal
	noteSignal := func(sig os.Signal) {
		if stopSignal == nil {
			stopSignal = sig
		}
		if sig == syscall.SIGTERM || sig == syscall.SIGHUP {
			forward = sig
		}
	}
	if self {
		v.awaitSelfStop(cur, noteSignal)
	}
	v.ttyHeld = v.tty.agentHolds(v.group) // before its holder is stopped
	stopped := make(chan error, 1)
	go func() { stopped <- v.stopGroup(v.opts.Grace) }()
	var stopErr error
	for waiting := true; waiting; {
		select {
		case stopErr = <-stopped:
			waiting = false
		case sig := <-v.signals:
			noteSignal(sig)
		}
	}
	if stopErr != nil {
		// Nothing is restored. A command that ended of our SIGTERM
		// starts again on the state it had; one still running runs on,
		// and gets the SIGTERM or SIGHUP that came meanwhile, as it
		// would have without the rewind (SIGINT and SIGQUIT reached it
		// from the terminal).
		v.answer(s, "%s %s %s", daemon.SupError, seq, daemon.LineMessage(stopErr.Error()))
		fmt.Fprintf(s.stderr, "agentfs run: stopping the command for a rewind: %v\n", stopErr)
		if !cur.hasExited() {
			if forward != nil {
				_ = cur.cmd.Process.Signal(forward) // it may have exited since
			}
			return cur, 0, false
		}
		code = ExitCodeOf(cur.cmd.ProcessState)
		rl := Relaunch{Time: time.Now().Round(0), ExitCode: code, Error: "stopping the command: " + stopErr.Error()}
		return s.relaunch(rl, stopSignal, o)
	}
	// The group is empty: the command has exited, unless it moved
	// itself out of its cgroup (see procgroup's Limits); our child, it
	// can still be killed.
	select {
	case <-cur.exited:
	case <-time.After(5 * time.Second):
		fmt.Fprintf(s.stderr, "agentfs run: the command's process %d left its cgroup and outlived the stop: killing it\n", cur.cmd.Process.Pid)
		_ = cur.cmd.Process.Kill() // it may have exited meanwhile
		<-cur.exited
	}
	code = ExitCodeOf(cur.cmd.ProcessState)
	final := v.restarts >= v.opts.MaxRestarts || stopSignal != nil
	word := daemon.SupRelaunch
	if final {
		word = daemon.SupFinal
	}
	v.answer(s, "%s %s %s", daemon.SupStopped, seq, word)
	// The restore's outcome. The daemon holds its rewind lock until it
	// has sent it, so no other "stop" comes first.
	rl := Relaunch{ExitCode: code}
	for waiting := true; waiting; {
		select {
		case sig := <-v.signals:
			noteSignal(sig)
		case l, ok := <-v.lines:
			switch {
			case !ok:
				fmt.Fprintf(s.stderr, "agentfs run: the session's daemon is gone during a rewind: not starting %s again\n", s.rec.CommandString())
				v.ended = "the session's daemon is gone"
				return cur, code, true
			case l.seq != seq:
				continue // another rewind's late outcome
			case l.word == daemon.SupRestored:
				rl.Snapshot, rl.Safety, _ = strings.Cut(l.rest, " ")
				waiting = false
			case l.word == daemon.SupFailed:
				rl.Error = l.rest
				waiting = false
			}
		}
	}
	for pending := true; pending; { // a signal that came with the outcome
		select {
		case sig := <-v.signals:
			noteSignal(sig)
		default:
			pending = false
		}
	}
	rl.Time = time.Now().Round(0)
	return s.relaunch(rl, stopSignal, o)
}

// awaitSelfStop is a self-rewind's wait before the stop: selfStopDelay,
// cut short when the command ends by itself (it is then stopped for the
// rewind all the same, and started again, as its answer said) or a
// termination signal comes (noted: the run ends after the rewind).
func (v *supervisor) awaitSelfStop(cur running, noteSignal func(os.Signal)) {
	timer := time.NewTimer(v.selfStopDelay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-cur.exited:
	case sig := <-v.signals:
		noteSignal(sig)
	}
}

// relaunch starts the command again after a rewind rl, unless a
// termination signal came during it or no relaunches are left; end says
// the run ends, with code.
func (s *process) relaunch(rl Relaunch, stopSignal os.Signal, o ProcessOptions) (next running, code int, end bool) {
	v := s.super
	switch {
	case stopSignal != nil:
		fmt.Fprintf(s.stderr, "agentfs run: %v during a rewind: not starting %s again\n", stopSignal, s.rec.CommandString())
		v.ended = fmt.Sprintf("%v came during a rewind", stopSignal)
		return running{}, rl.ExitCode, true
	case v.restarts >= v.opts.MaxRestarts:
		fmt.Fprintf(s.stderr, "agentfs run: the command was stopped for a rewind; not starting it again: it was started again %d times already (--max-restarts %d)\n", v.restarts, v.opts.MaxRestarts)
		v.ended = fmt.Sprintf("a rewind stopped the command with no relaunch left (--max-restarts %d)", v.opts.MaxRestarts)
		return running{}, rl.ExitCode, true
	}
	s.rec.Relaunches = append(s.rec.Relaunches, rl)
	if err := s.rec.Save(); err != nil {
		fmt.Fprintf(s.stderr, "agentfs run: %v\n", err)
	}
	v.restoreTerminal(s)
	env := []string{fmt.Sprintf("%s=%d", EnvRelaunch, v.restarts+1), EnvRelaunchSnapshot + "=" + rl.Snapshot}
	cmd := s.command(o.Command, o.NsUid, o.NsGid, env)
	// Before the start: the new command may rewind itself at once, and
	// its answer says whether it would be started again.
	v.answer(s, "%s %d", daemon.SupRelaunches, v.opts.MaxRestarts-v.restarts-1)
	if err := s.start(cmd); err != nil {
		fmt.Fprintf(s.stderr, "agentfs run: starting %s again after the rewind: %v\n", o.Command[0], err)
		v.ended = "starting the command again failed"
		return running{}, 126, true
	}
	v.restarts++
	return watch(cmd), 0, false
}

// restoreTerminal gives the terminal back as it was at the start.
func (v *supervisor) restoreTerminal(s *process) {
	if err := v.tty.restore(v.ttyHeld); err != nil {
		fmt.Fprintf(s.stderr, "agentfs run: giving the terminal back: %v\n", err)
	}
}
