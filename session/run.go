package session

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/config"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/procfs"
	"github.com/agentfs/agentfs/workspace"
)

// The processes of agentfs run:
//
//	agentfs run (the user's namespaces): checks, creates the session,
//	  starts the session process in new namespaces, waits for it (Run)
//	session process (agentfs run --session-process DIR, in a private
//	  mount namespace, and as a normal user a user namespace):
//	  starts the daemon, takes the pre-run snapshot, runs the
//	  command, summarizes, unmounts, records the end (RunProcess)
//	daemon (agentfs mount --session-mount, its own session (setsid),
//	  in the session process's namespaces): serves the view over
//	  the project's path
//	the command (in the same namespaces; as a normal user a nested
//	  user namespace gives it back the user's uid), in the terminal's
//	  foreground process group with agentfs run and the session
//	  process, which leave Ctrl-C (SIGINT, SIGQUIT) to it and pass
//	  SIGTERM and SIGHUP on.

// ExitError ends agentfs run with an exit code of its own (the
// command's, or 126/127 when it could not start), after Msg when there
// is one.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Msg
}

// RunOptions are what agentfs run was asked.
type RunOptions struct {
	// Project is the project directory, as given ("" for the current
	// directory); the command starts in it.
	Project string
	Command []string
	// Activity are the flags of automatic snapshots and the log.
	Activity config.Overrides
	// Supervise, when set, runs the command under a supervisor.
	Supervise *Supervision
	// Record, when set, is the directory (absolute) to write the
	// session's record to once the command has ended (bundle.go); it
	// turns reads logging on.
	Record  string
	Version string // agentfs's, for the record's store
	Stderr  io.Writer
}

// RecordLogSize is the activity log's bound of agentfs run --record
// (unless --log-size says, or the configuration more): the record's
// operations are the log's entries, lookups included, and a bounded log
// drops its oldest ones.
const RecordLogSize = 256 << 20

// Run runs a session, as agentfs run does: it checks the request,
// creates the session, starts the session process in new namespaces
// (agentfs run --session-process) and waits for it. It returns the
// command's exit code as an *ExitError (nil for 0), or why the session
// could not run the command.
func Run(o RunOptions) error {
	dir := o.Project
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			return fmt.Errorf("the current directory: %w: cd to the project, or give it with -C DIR", err)
		}
	}
	project, err := daemon.RealDir(dir, "project directory")
	if err != nil {
		return err
	}
	if project == "/" {
		return errors.New("the project directory is /: agentfs run shows a project directory, not the whole system; cd to the project, or give it with -C DIR")
	}
	if o.Record != "" {
		// A record needs reads logged; a bad target is refused before
		// anything runs.
		if err := CheckBundleTarget(o.Record, project); err != nil {
			return err
		}
		on := true
		o.Activity.LogReads = &on
	}
	// A bad config file or flag is an error before anything is made.
	cfg, err := config.Load(project)
	if err != nil {
		return err
	}
	settings, err := config.Resolve(cfg, o.Activity, true)
	if err != nil {
		return &daemon.UsageError{Msg: err.Error()}
	}
	if o.Record != "" && o.Activity.LogSize == "" {
		// The record's operations are the log's: it must keep them
		// all (every lookup is logged).
		settings.LogSize = max(settings.LogSize, RecordLogSize)
	}
	root := os.Geteuid() == 0
	if err := daemon.CheckFuseDevice(!root); err != nil {
		return err
	}
	rec, err := Create(project, project, o.Command)
	if err != nil {
		return err
	}
	rec.Supervised = o.Supervise != nil
	if err := rec.Save(); err != nil {
		rec.remove()
		return err
	}
	self, err := os.Executable()
	if err != nil {
		rec.remove()
		return fmt.Errorf("finding the agentfs binary: %w", err)
	}
	child := exec.Command(self, "run", "--session-process", rec.SessionDir(),
		"--ns-uid", strconv.Itoa(os.Getuid()), "--ns-gid", strconv.Itoa(os.Getgid()))
	child.Args = append(child.Args, daemon.SettingsArgs(settings)...)
	if o.Supervise != nil {
		child.Args = append(child.Args, o.Supervise.args()...)
	}
	child.Args = append(append(child.Args, "--"), o.Command...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.Dir = "/"
	if root {
		// A private mount namespace; Go makes / rprivate in it, so
		// that the mount does not propagate back.
		child.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	} else {
		// Root of a new user namespace (the user's uid as 0), with a
		// private mount namespace it owns.
		child.SysProcAttr = &syscall.SysProcAttr{
			Unshareflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings:  []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings:  []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := child.Start(); err != nil {
		rec.remove()
		if !root {
			return daemon.UsernsError(err)
		}
		return fmt.Errorf("creating a private mount namespace: %w: agentfs run needs CAP_SYS_ADMIN (in a container: --cap-add SYS_ADMIN)", err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				// SIGINT and SIGQUIT come from the terminal, which sends
				// them to the command too: they are the command's.
				if s == syscall.SIGTERM || s == syscall.SIGHUP {
					_ = child.Process.Signal(s) // it may have exited
				}
			case <-done:
				return
			}
		}
	}()
	werr := child.Wait()
	close(done)
	code := ExitCodeOf(child.ProcessState)
	if werr != nil && child.ProcessState == nil {
		return fmt.Errorf("waiting for the session process: %w", werr)
	}
	err = finishRun(o.Stderr, rec, code)
	if o.Record != "" {
		err = recordRun(o, rec, err)
	}
	return err
}

// recordRun writes the record of the session rec once it has ended
// (agentfs run --record), and returns the run's outcome: runErr, or the
// record's error when the command succeeded (it is told on o.Stderr
// otherwise, and the command's exit code stands).
func recordRun(o RunOptions, rec *Record, runErr error) error {
	r, err := Load(rec.SessionDir())
	if err != nil {
		// The session was removed: the command never ran.
		return runErr
	}
	res, err := r.WriteBundle(o.Record, o.Version)
	if err == nil {
		fmt.Fprintf(o.Stderr, "agentfs run: the record of session %s is in %s (%d paths, %d contents, %d bytes)\n", r.ID, o.Record, res.Files, res.Blobs, res.BlobBytes)
		for _, w := range res.Warnings() {
			fmt.Fprintf(o.Stderr, "agentfs run: note: %s\n", w)
		}
		return runErr
	}
	if runErr == nil {
		return err
	}
	fmt.Fprintf(o.Stderr, "agentfs run: %v\n", err)
	return runErr
}

// remove removes the session's directory: it never ran its command.
func (r *Record) remove() {
	if err := os.RemoveAll(r.SessionDir()); err != nil {
		fmt.Fprintf(os.Stderr, "agentfs run: removing the session %s: %v\n", r.SessionDir(), err)
	}
}

// finishRun returns agentfs run's outcome once the session process has
// exited with code: the command's exit code when it ran; otherwise the
// session process said why (a session that never ran its command is
// removed).
func finishRun(stderr io.Writer, rec *Record, code int) error {
	r, err := Load(rec.SessionDir())
	switch {
	case errors.Is(err, os.ErrNotExist):
		// The session process removed it: the command never ran.
		return &ExitError{Code: code}
	case err != nil:
		return err
	case r.ExitCode != nil:
		if *r.ExitCode == 0 {
			return nil
		}
		return &ExitError{Code: *r.ExitCode}
	case r.State == StateStarting && !r.DaemonAlive():
		r.remove()
		if code > 128 {
			fmt.Fprintf(stderr, "agentfs run: the session process was killed (signal %d) before the command started; nothing was kept\n", code-128)
		}
		return &ExitError{Code: max(code, 1)}
	}
	// The command may have run, but the session process did not
	// record its end: it was killed.
	r.Error = fmt.Sprintf("the session process exited with code %d before recording the command's end", code)
	if !r.DaemonAlive() {
		r.State = StateEnded
	}
	if err := r.Save(); err != nil {
		fmt.Fprintf(stderr, "agentfs run: %v\n", err)
	}
	fmt.Fprintf(stderr, "agentfs run: the session process ended (code %d) before the command's end was recorded; session %s keeps what was changed: agentfs sessions, agentfs diff -s %s\n", code, r.ID, r.ID)
	return &ExitError{Code: max(code, 1)}
}

// ExitCodeOf is a process's exit code as a shell gives it: 128+N when
// signal N killed it.
func ExitCodeOf(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// ProcessOptions are what the session process was started with.
type ProcessOptions struct {
	SessionDir   string
	Command      []string
	NsUid, NsGid int // the user's ids outside the user namespace
	Activity     config.Overrides
	// Supervise, when set, runs the command under a supervisor that
	// starts it again after a rewind (supervise.go).
	Supervise *Supervision
	Stderr    io.Writer
}

// Ended is what a session's command did: the record (exit code,
// summary), and what could not be done at its end.
type Ended struct {
	Record *Record
	// SummaryErr: what the command changed could not be read.
	// UnmountErr: the daemon did not exit when asked.
	SummaryErr, UnmountErr error
}

// RunProcess is the session process of agentfs run: in the session's
// private mount namespace it mounts the view over the project, takes
// the pre-run snapshot, runs the command, and once the command has
// exited records its end, summarizes the changes and unmounts.
//
// If anything fails before the command starts, the daemon is stopped,
// the session is removed (nothing happened in it) and the error
// returned (an *ExitError of 127 or 126 when the command could not be
// started, after saying so on o.Stderr).
func RunProcess(o ProcessOptions) (*Ended, error) {
	rec, err := Load(o.SessionDir)
	if err != nil {
		return nil, fmt.Errorf("the session %s: %w", o.SessionDir, err)
	}
	// Ctrl-C before the command runs stops the setup; once it runs,
	// SIGINT and SIGQUIT are the command's (the terminal sends them to
	// it as well), SIGTERM and SIGHUP are passed on to it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var interrupted atomic.Value // os.Signal received during setup
	// once the command runs, what a signal does (nil before)
	var onSignal atomic.Pointer[func(os.Signal)]
	go func() {
		for s := range sigs {
			if f := onSignal.Load(); f != nil {
				(*f)(s)
				continue
			}
			interrupted.CompareAndSwap(nil, s)
		}
	}()

	cfg, err := config.Load(rec.Project)
	if err != nil {
		return nil, err
	}
	settings, err := config.Resolve(cfg, o.Activity, true)
	if err != nil {
		return nil, &daemon.UsageError{Msg: err.Error()}
	}
	rec.LogReads = settings.LogReads // saved with the running state
	s := &process{rec: rec, stderr: o.Stderr, activity: settings}
	abandon := s.abandon
	if o.Supervise != nil {
		if err := s.prepareSupervision(*o.Supervise); err != nil {
			return nil, abandon(err)
		}
	}
	checkInterrupt := func() error {
		if sig, ok := interrupted.Load().(os.Signal); ok {
			return abandon(fmt.Errorf("interrupted (%v) before the command started; nothing was kept", sig))
		}
		return nil
	}
	if err := s.startDaemon(); err != nil {
		return nil, abandon(err)
	}
	if err := checkInterrupt(); err != nil {
		return nil, err
	}
	if err := s.preRunSnapshot(); err != nil {
		return nil, abandon(err)
	}
	if err := checkInterrupt(); err != nil {
		return nil, err
	}
	cmd := s.command(o.Command, o.NsUid, o.NsGid, nil)
	if err := s.start(cmd); err != nil {
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		fmt.Fprintf(o.Stderr, "agentfs run: cannot run %s: %v\n", o.Command[0], err)
		return nil, abandon(&ExitError{Code: code})
	}
	if s.super != nil {
		// The supervisor's run loop handles the signals.
		f := s.super.signal
		onSignal.Store(&f)
		code := s.supervise(cmd, o)
		go s.super.drain()
		return s.finish(code), nil
	}
	forward := func(sig os.Signal) {
		if sig == syscall.SIGTERM || sig == syscall.SIGHUP {
			_ = cmd.Process.Signal(sig) // it may have exited
		}
	}
	onSignal.Store(&forward)
	_ = cmd.Wait() // its exit status is what counts, read below
	return s.finish(ExitCodeOf(cmd.ProcessState)), nil
}

// abandon ends a session whose command never ran, with err: the
// supervisor's line is closed first, so that a rewind the daemon has in
// flight ends at once (the supervisor is gone) instead of holding up
// the daemon's exit for up to daemon.StopWait; then the daemon is
// stopped and the session removed.
func (s *process) abandon(err error) error {
	s.closeSupervision()
	s.stopDaemon()
	s.rec.remove()
	return err
}

// start starts cmd: in the supervisor's group of processes when there
// is one.
func (s *process) start(cmd *exec.Cmd) error {
	if s.super != nil {
		return s.super.group.Start(cmd)
	}
	return cmd.Start()
}

// process is the state of RunProcess.
type process struct {
	rec      *Record
	stderr   io.Writer
	daemon   *exec.Cmd
	activity config.Settings // what agentfs run resolved (flags, config)
	super    *supervisor     // with --supervise (supervise.go)
}

// startDaemon mounts the view over the project (a daemon serving it
// from this mount namespace) and records the session as running.
func (s *process) startDaemon() error {
	r := s.rec
	p := &daemon.Plan{Lower: r.Project, Mountpoint: r.Mountpoint, Store: r.Store, Backstore: "hostfs", Session: true, Activity: s.activity}
	var line *os.File
	if s.super != nil {
		line = s.super.daemonEnd
		p.TraceCgroup = s.super.group.Dir()
	}
	d, err := daemon.Start(p, line)
	if s.super != nil {
		s.super.closeDaemonEnd() // the daemon has its copy
	}
	if err != nil {
		return fmt.Errorf("mounting the session's view of %s: %w", r.Project, err)
	}
	s.daemon = d
	r.DaemonPid = d.Process.Pid
	r.DaemonStart = procfs.StartTime(r.DaemonPid)
	r.UserNamespace = procfs.InUserNamespace()
	r.State = StateRunning
	return r.Save()
}

// preRunSnapshot takes the snapshot of kind pre-run, labelled with the
// command.
func (s *process) preRunSnapshot() (err error) {
	r := s.rec
	c, err := workspace.Dial(r.Mountpoint)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // a control file, only asked
	info, err := c.CreateSnapshot(ctl.SnapshotCreateArgs{Label: r.CommandString(), Kind: branch.KindPreRun})
	if err != nil {
		return fmt.Errorf("taking the pre-run snapshot: %w", err)
	}
	r.PreRun = info.ID
	return r.Save()
}

// postRunSnapshot takes the snapshot of kind post-run, labelled with
// the command and its exit code, if the branch changed since its newest
// snapshot: the end of every session is then a point to restore, diff
// or export.
func (s *process) postRunSnapshot(code int) (err error) {
	r := s.rec
	c, err := workspace.Dial(r.Mountpoint)
	if err != nil {
		return fmt.Errorf("taking the post-run snapshot: %w", err)
	}
	defer func() { _ = c.Close() }() // a control file, only asked
	label := fmt.Sprintf("%s (exit %d)", r.CommandString(), code)
	info, err := c.CreateSnapshot(ctl.SnapshotCreateArgs{Label: label, Kind: branch.KindPostRun, IfChanged: true})
	if err != nil {
		return fmt.Errorf("taking the post-run snapshot: %w", err)
	}
	r.PostRun = info.ID
	return r.Save()
}

// command returns the command to run, in the project, with the
// terminal; as a normal user in a nested user namespace that maps the
// user's own uid and gid back (to the root of this one), so that it
// runs as the user, without capabilities.
func (s *process) command(args []string, uid, gid int, extraEnv []string) *exec.Cmd {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = s.rec.Dir // by path: through the mount
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The last of a name wins: PWD is the directory it starts in.
	cmd.Env = append(os.Environ(), "PWD="+s.rec.Dir, "AGENTFS_SESSION="+s.rec.ID)
	cmd.Env = append(cmd.Env, extraEnv...)
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
// unmounts and records the session as ended.
func (s *process) finish(code int) *Ended {
	r := s.rec
	now := time.Now().Round(0)
	r.Ended, r.ExitCode = &now, &code
	if err := r.Save(); err != nil {
		fmt.Fprintf(s.stderr, "agentfs run: %v\n", err)
	}
	e := &Ended{Record: r}
	if s.activity.PostRun {
		if err := s.postRunSnapshot(code); err != nil {
			fmt.Fprintf(s.stderr, "agentfs run: %v\n", err)
		}
	}
	sum, err := s.summary()
	if err == nil {
		r.Summary = &sum
	}
	e.SummaryErr = err
	e.UnmountErr = s.unmount()
	if s.activity.Hash && e.UnmountErr == nil {
		// Once the daemon is gone, so that the session's end waits for
		// no snapshot being hashed while the mount is up (and takes no
		// automatic snapshot after the post-run one meanwhile).
		if err := s.recordRoots(); err != nil {
			fmt.Fprintf(s.stderr, "agentfs run: recording the roots of the session's snapshots: %v\n", err)
		}
	}
	s.closeSupervision()
	r.State = StateEnded
	if e.UnmountErr != nil {
		r.Error = e.UnmountErr.Error()
	}
	if err := r.Save(); err != nil {
		fmt.Fprintf(s.stderr, "agentfs run: %v\n", err)
	}
	return e
}

// recordRoots records the chain of the roots of the session's
// snapshots, from its store once the daemon has ended: the roots its
// worker computed, and those it had not got to, computed here.
func (s *process) recordRoots() error {
	c, err := s.rec.openOffline("")
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // what it changed, it settled
	list, err := c.SnapshotsWith(ctl.SnapshotListArgs{WaitRoots: true})
	if err != nil {
		return err
	}
	s.rec.Roots, err = RootChain(list.Snapshots)
	return err
}

// RootChain links the roots of snaps, in order (see RootLink).
func RootChain(snaps []ctl.SnapshotInfo) ([]RootLink, error) {
	var links []RootLink
	var chain [32]byte
	for _, sn := range snaps {
		root, err := hex.DecodeString(sn.Root)
		if err != nil || len(root) != 32 {
			return links, fmt.Errorf("snapshot %s: no root (%s)", sn.ID, sn.RootStatus)
		}
		chain = sha256.Sum256(append(chain[:], root...))
		links = append(links, RootLink{Snapshot: sn.ID, Kind: sn.Kind, Root: sn.Root, Chain: hex.EncodeToString(chain[:])})
	}
	return links, nil
}

// summary counts the changes from the project to the session's branch.
func (s *process) summary() (Summary, error) {
	c, err := workspace.Dial(s.rec.Mountpoint)
	if err != nil {
		return Summary{}, err
	}
	defer func() { _ = c.Close() }() // a control file, only asked
	rep, err := c.Diff(ctl.DiffArgs{})
	if err != nil {
		return Summary{}, err
	}
	return Summarize(rep.Changes), nil
}

// unmount asks the daemon to unmount and waits for it to exit (its
// store is then closed and consistent); SIGTERM, then SIGKILL, if it
// does not. Programs the command left running in the mount lose it.
func (s *process) unmount() error {
	if s.daemon == nil {
		return nil
	}
	if c, err := workspace.Dial(s.rec.Mountpoint); err == nil {
		if _, err := c.Unmount(); err != nil {
			fmt.Fprintf(s.stderr, "agentfs run: asking the session's daemon to unmount: %v\n", err)
		}
		_ = c.Close() // the daemon is going; waitDaemon says whether it went
	} else {
		s.signalDaemon(syscall.SIGTERM)
	}
	return s.waitDaemon(daemon.ExitWait)
}

// stopDaemon stops the daemon during a failed setup.
func (s *process) stopDaemon() {
	if s.daemon == nil {
		return
	}
	s.signalDaemon(syscall.SIGTERM)
	// The session is removed right after: its store's fate, which the
	// error would point at, no longer matters.
	_ = s.waitDaemon(daemon.ExitWait)
}

// signalDaemon sends sig to the daemon, which may have exited.
func (s *process) signalDaemon(sig syscall.Signal) {
	if err := s.daemon.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		fmt.Fprintf(s.stderr, "agentfs run: signalling the session's daemon: %v\n", err)
	}
}

// waitDaemon waits up to d for the daemon to exit, then terminates it.
func (s *process) waitDaemon(d time.Duration) error {
	done := make(chan struct{})
	go func() {
		_ = s.daemon.Wait() // how it exited is in its log
		close(done)
	}()
	defer func() { s.daemon = nil }()
	select {
	case <-done:
		return nil
	case <-time.After(d):
	}
	s.signalDaemon(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
	}
	s.signalDaemon(syscall.SIGKILL)
	<-done
	return fmt.Errorf("the session's daemon (pid %d) did not exit when asked: it was killed; agentfs fsck -s %s checks its store", s.rec.DaemonPid, s.rec.ID)
}
