package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
)

// runSession is the session process of agentfs run (see cmd_run.go):
// in the session's private mount namespace it mounts the view over the
// project, takes the pre-run snapshot, runs the command, and once the
// command has exited records its end, summarizes the changes, unmounts
// and prints the summary. Its exit code is the command's.
//
// If anything fails before the command starts, the daemon is stopped,
// the session is removed (nothing happened in it) and the error
// returned.
func runSession(o *runOptions, args []string) error {
	rec, err := loadSession(o.sessionDir)
	if err != nil {
		return fmt.Errorf("the session %s: %w", o.sessionDir, err)
	}
	if len(args) == 0 {
		return usagef("run needs a command")
	}
	// Ctrl-C before the command runs stops the setup; once it runs,
	// SIGINT and SIGQUIT are the command's (the terminal sends them to
	// it as well), SIGTERM and SIGHUP are passed on to it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var interrupted atomic.Value // os.Signal received during setup
	var command atomic.Pointer[os.Process]
	go func() {
		for s := range sigs {
			if p := command.Load(); p != nil {
				if s == syscall.SIGTERM || s == syscall.SIGHUP {
					p.Signal(s)
				}
				continue
			}
			interrupted.CompareAndSwap(nil, s)
		}
	}()

	cfg, err := loadConfig(rec.Project)
	if err != nil {
		return err
	}
	settings, err := o.activity.resolve(cfg, true)
	if err != nil {
		return err
	}
	s := &sessionProcess{rec: rec, stderr: os.Stderr, activity: settings}
	abandon := func(err error) error {
		s.stopDaemon()
		os.RemoveAll(rec.dir())
		return err
	}
	checkInterrupt := func() error {
		if sig, ok := interrupted.Load().(os.Signal); ok {
			return abandon(fmt.Errorf("interrupted (%v) before the command started; nothing was kept", sig))
		}
		return nil
	}
	if err := s.startDaemon(); err != nil {
		return abandon(err)
	}
	if err := checkInterrupt(); err != nil {
		return err
	}
	if err := s.preRunSnapshot(); err != nil {
		return abandon(err)
	}
	if err := checkInterrupt(); err != nil {
		return err
	}
	cmd := s.command(args, o.nsUid, o.nsGid)
	if err := cmd.Start(); err != nil {
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		fmt.Fprintf(os.Stderr, "agentfs run: cannot run %s: %v\n", args[0], err)
		abandon(nil)
		return exitCodeError{code: code}
	}
	command.Store(cmd.Process)
	cmd.Wait()
	code := exitCodeOf(cmd.ProcessState)
	return s.finish(code)
}

// sessionProcess is the state of runSession.
type sessionProcess struct {
	rec      *sessionRecord
	stderr   io.Writer
	daemon   *exec.Cmd
	activity activitySettings // what agentfs run resolved (flags, config)
}

// startDaemon mounts the view over the project (a daemon serving it
// from this mount namespace) and records the session as running.
func (s *sessionProcess) startDaemon() error {
	r := s.rec
	p := &mountPlan{lower: r.Project, mountpoint: r.Mountpoint, store: r.Store, backstore: "hostfs", session: true, activity: s.activity}
	d, err := spawnDaemon(p)
	if err != nil {
		return fmt.Errorf("mounting the session's view of %s: %w", r.Project, err)
	}
	s.daemon = d
	r.DaemonPid = d.Process.Pid
	r.DaemonStart = processStart(r.DaemonPid)
	r.UserNamespace = inUserNamespace()
	r.State = stateRunning
	return r.save()
}

// preRunSnapshot takes the snapshot of kind pre-run, labelled with the
// command.
func (s *sessionProcess) preRunSnapshot() error {
	r := s.rec
	c, err := ctl.Dial(r.Mountpoint)
	if err != nil {
		return err
	}
	defer c.Close()
	var info ctl.SnapshotInfo
	if err := c.Do(ctl.OpSnapshotCreate, ctl.SnapshotCreateArgs{Label: r.commandString(), Kind: branch.KindPreRun}, &info); err != nil {
		return fmt.Errorf("taking the pre-run snapshot: %w", err)
	}
	r.PreRun = info.ID
	return r.save()
}

// command returns the command to run, in the project, with the
// terminal; as a normal user in a nested user namespace that maps the
// user's own uid and gid back (to the root of this one), so that it
// runs as the user, without capabilities.
func (s *sessionProcess) command(args []string, uid, gid int) *exec.Cmd {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = s.rec.Dir // by path: through the mount
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The last of a name wins: PWD is the directory it starts in.
	cmd.Env = append(os.Environ(), "PWD="+s.rec.Dir, "AGENTFS_SESSION="+s.rec.ID)
	if s.rec.UserNamespace && uid >= 0 && gid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Unshareflags: syscall.CLONE_NEWUSER,
			UidMappings:  []syscall.SysProcIDMap{{ContainerID: uid, HostID: 0, Size: 1}},
			GidMappings:  []syscall.SysProcIDMap{{ContainerID: gid, HostID: 0, Size: 1}},
		}
	}
	return cmd
}

// finish records the command's exit code, summarizes what it changed,
// unmounts, records the session as ended and prints the summary.
func (s *sessionProcess) finish(code int) error {
	r := s.rec
	now := time.Now().Round(0)
	r.Ended, r.ExitCode = &now, &code
	if err := r.save(); err != nil {
		fmt.Fprintf(s.stderr, "agentfs run: %v\n", err)
	}
	sum, serr := s.summary()
	if serr == nil {
		r.Summary = &sum
	}
	uerr := s.unmount()
	r.State = stateEnded
	if uerr != nil {
		r.Error = uerr.Error()
	}
	if err := r.save(); err != nil {
		fmt.Fprintf(s.stderr, "agentfs run: %v\n", err)
	}
	printSummary(s.stderr, r, serr)
	if uerr != nil {
		fmt.Fprintf(s.stderr, "agentfs run: %v\n", uerr)
	}
	if code == 0 {
		return nil
	}
	return exitCodeError{code: code}
}

// summary counts the changes from the project to the session's branch.
func (s *sessionProcess) summary() (changeSummary, error) {
	c, err := ctl.Dial(s.rec.Mountpoint)
	if err != nil {
		return changeSummary{}, err
	}
	defer c.Close()
	var rep ctl.DiffReply
	if err := c.Do(ctl.OpDiff, ctl.DiffArgs{}, &rep); err != nil {
		return changeSummary{}, err
	}
	return summarize(rep.Changes), nil
}

// unmount asks the daemon to unmount and waits for it to exit (its
// store is then closed and consistent); SIGTERM, then SIGKILL, if it
// does not. Programs the command left running in the mount lose it.
func (s *sessionProcess) unmount() error {
	if s.daemon == nil {
		return nil
	}
	if c, err := ctl.Dial(s.rec.Mountpoint); err == nil {
		c.Do(ctl.OpUnmount, nil, nil)
		c.Close()
	} else {
		s.daemon.Process.Signal(syscall.SIGTERM)
	}
	return s.waitDaemon(busyWait + detachGrace + abortWait + 5*time.Second)
}

// stopDaemon stops the daemon during a failed setup.
func (s *sessionProcess) stopDaemon() {
	if s.daemon == nil {
		return
	}
	s.daemon.Process.Signal(syscall.SIGTERM)
	s.waitDaemon(busyWait + detachGrace + abortWait + 5*time.Second)
}

// waitDaemon waits up to d for the daemon to exit, then terminates it.
func (s *sessionProcess) waitDaemon(d time.Duration) error {
	done := make(chan struct{})
	go func() { s.daemon.Wait(); close(done) }()
	defer func() { s.daemon = nil }()
	select {
	case <-done:
		return nil
	case <-time.After(d):
	}
	s.daemon.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
	}
	s.daemon.Process.Kill()
	<-done
	return fmt.Errorf("the session's daemon (pid %d) did not exit when asked: it was killed; agentfs fsck -s %s checks its store", s.rec.DaemonPid, s.rec.ID)
}

// printSummary tells what the session's command changed and what to do
// next.
func printSummary(w io.Writer, r *sessionRecord, serr error) {
	code := 0
	if r.ExitCode != nil {
		code = *r.ExitCode
	}
	fmt.Fprintf(w, "\nagentfs run: session %s ended: %s exited with code %d\n", r.ID, r.commandString(), code)
	switch {
	case serr != nil:
		fmt.Fprintf(w, "  what it changed could not be read: %v\n", serr)
	case r.Summary.total() == 0:
		fmt.Fprintf(w, "  no changes; the project %s was not touched\n  drop the session:  agentfs discard -s %s\n", r.Project, r.ID)
		return
	default:
		sum := r.Summary
		line := func(what string, n int, bytes string) {
			if n == 0 {
				fmt.Fprintf(w, "  %-9s  0\n", what)
				return
			}
			fmt.Fprintf(w, "  %-9s  %d (%s)\n", what, n, bytes)
		}
		line("created:", sum.Created, humanBytes(sum.CreatedBytes))
		line("modified:", sum.Modified, humanBytes(sum.ModifiedBytes)+" now, "+signedBytes(sum.Delta-sum.CreatedBytes+sum.DeletedBytes))
		line("deleted:", sum.Deleted, humanBytes(sum.DeletedBytes))
	}
	fmt.Fprintf(w, "  the project %s was not touched; the changes are in the session\n", r.Project)
	fmt.Fprintf(w, "  review:   agentfs diff -s %s\n", r.ID)
	fmt.Fprintf(w, "  apply:    agentfs apply -s %s\n", r.ID)
	fmt.Fprintf(w, "  discard:  agentfs discard -s %s\n", r.ID)
}
