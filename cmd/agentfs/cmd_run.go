package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/pflag"
)

// runOptions are the flags of agentfs run.
type runOptions struct {
	dir            string
	stdout, stderr io.Writer
	// Set by agentfs run for the session process it starts in the new
	// namespaces (runSession).
	sessionDir   string
	nsUid, nsGid int
	// activity: automatic snapshots (on by default) and the log.
	activity activityFlags
}

func (o *runOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.dir, "dir", "C", "", "the project `DIR` (default: the current directory); the command starts in it")
	fs.StringVar(&o.sessionDir, "session-process", "", "internal: run the session whose directory this is")
	fs.IntVar(&o.nsUid, "ns-uid", -1, "internal: the user's uid outside the user namespace")
	fs.IntVar(&o.nsGid, "ns-gid", -1, "internal: the user's gid outside the user namespace")
	o.activity.AddFlags(fs)
	fs.MarkHidden("session-process")
	fs.MarkHidden("ns-uid")
	fs.MarkHidden("ns-gid")
	// Everything from the command on is the command's: agentfs run
	// claude --resume passes --resume to claude.
	fs.SetInterspersed(false)
}

func init() {
	register(&command{
		name:    "run",
		summary: "run a command on a private copy-on-write view of the project, as a session",
		usage:   "[-C DIR] [--] COMMAND [ARGS...]",
		help: `Run runs COMMAND with the project (the current directory, or DIR) replaced,
for COMMAND and everything it starts, by a copy-on-write view of it, at
the same path: tools, scripts and absolute paths work as usual, and
the project itself is never written. The view lives in a private mount
namespace; other programs keep seeing the project as it is.

Before the command starts, a snapshot of kind pre-run is taken. The
command gets the terminal (Ctrl-C reaches it, not agentfs) and its exit
code is agentfs run's (128+N when a signal N killed it). When it exits,
agentfs prints what it changed (paths created, modified, deleted, and
bytes) and how to review, keep or drop the changes: they stay in the
session's store, ${XDG_STATE_HOME:-~/.local/state}/agentfs/sessions/ID,
until the session is discarded. The session's id is in the command's
environment as AGENTFS_SESSION.

As root, run needs no setup. As a normal user it works in a user
namespace, where the kernel allows unprivileged ones and /dev/fuse is
usable by all (it says so when not); file I/O then goes through the
page cache (no FUSE passthrough).

Examples:
  cd ~/proj && agentfs run -- claude
  agentfs run -C ~/proj -- make test
  agentfs sessions                      # what ran, what it changed
  agentfs diff -s ID                    # review
  agentfs apply -s ID                   # take the changes into the project
  agentfs discard -s ID                 # drop them`,
		exitCodes: `Exit codes:
  the command's own exit code once it ran (128+N when signal N killed it);
  before it runs:
  1  error (the message says what went wrong and how to fix it)
  2  usage error (no command, unknown flag)
  127  the command was not found; 126  it could not be started
`,
		setup: func(fs *pflag.FlagSet, out streams) runFunc {
			o := &runOptions{stdout: out.stdout, stderr: out.stderr}
			o.AddFlags(fs)
			return func(ctx context.Context, args []string) error { return runRun(ctx, o, args) }
		},
	})
}

// The processes of agentfs run:
//
//	agentfs run (the user's namespaces): checks, creates the session,
//	  starts the session process in new namespaces, waits for it
//	session process (agentfs run --session-process DIR, in a private
//	  mount namespace, and as a normal user a user namespace):
//	  starts the daemon, takes the pre-run snapshot, runs the
//	  command, summarizes, unmounts, records the end (run_session.go)
//	daemon (agentfs mount --session-mount, its own session (setsid),
//	  in the session process's namespaces): serves the view over
//	  the project's path
//	the command (in the same namespaces; as a normal user a nested
//	  user namespace gives it back the user's uid), in the terminal's
//	  foreground process group with agentfs run and the session
//	  process, which leave Ctrl-C (SIGINT, SIGQUIT) to it and pass
//	  SIGTERM and SIGHUP on.

func runRun(ctx context.Context, o *runOptions, args []string) error {
	if o.sessionDir != "" {
		return runSession(o, args)
	}
	if len(args) == 0 {
		return usagef("run needs a command: agentfs run [-C DIR] [--] COMMAND [ARGS...]")
	}
	dir := o.dir
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			return fmt.Errorf("the current directory: %w: cd to the project, or give it with -C DIR", err)
		}
	}
	project, err := realDir(dir, "project directory")
	if err != nil {
		return err
	}
	if project == "/" {
		return errors.New("the project directory is /: agentfs run shows a project directory, not the whole system; cd to the project, or give it with -C DIR")
	}
	// A bad config file is an error before anything is made.
	cfg, err := loadConfig(project)
	if err != nil {
		return err
	}
	settings, err := o.activity.resolve(cfg, true)
	if err != nil {
		return err
	}
	root := os.Geteuid() == 0
	if err := checkRunFuse(root); err != nil {
		return err
	}
	rec, err := createSession(project, project, args)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		os.RemoveAll(rec.dir())
		return fmt.Errorf("finding the agentfs binary: %w", err)
	}
	child := exec.Command(self, "run", "--session-process", rec.dir(),
		"--ns-uid", strconv.Itoa(os.Getuid()), "--ns-gid", strconv.Itoa(os.Getgid()))
	child.Args = append(child.Args, settings.daemonArgs()...)
	child.Args = append(append(child.Args, "--"), args...)
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
		os.RemoveAll(rec.dir())
		if !root {
			return usernsError(err)
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
					child.Process.Signal(s)
				}
			case <-done:
				return
			}
		}
	}()
	werr := child.Wait()
	close(done)
	code := exitCodeOf(child.ProcessState)
	if werr != nil && child.ProcessState == nil {
		return fmt.Errorf("waiting for the session process: %w", werr)
	}
	return finishRun(o.stderr, rec, code)
}

// finishRun returns agentfs run's outcome once the session process has
// exited with code: the command's exit code when it ran; otherwise the
// session process said why (a session that never ran its command is
// removed).
func finishRun(stderr io.Writer, rec *sessionRecord, code int) error {
	r, err := loadSession(rec.dir())
	switch {
	case errors.Is(err, os.ErrNotExist):
		// The session process removed it: the command never ran.
		return exitCodeError{code: code}
	case err != nil:
		return err
	case r.ExitCode != nil:
		if *r.ExitCode == 0 {
			return nil
		}
		return exitCodeError{code: *r.ExitCode}
	case r.State == stateStarting && !r.daemonAlive():
		os.RemoveAll(r.dir())
		if code > 128 {
			fmt.Fprintf(stderr, "agentfs run: the session process was killed (signal %d) before the command started; nothing was kept\n", code-128)
		}
		return exitCodeError{code: max(code, 1)}
	}
	// The command may have run, but the session process did not
	// record its end: it was killed.
	r.Error = fmt.Sprintf("the session process exited with code %d before recording the command's end", code)
	if !r.daemonAlive() {
		r.State = stateEnded
	}
	if err := r.save(); err != nil {
		fmt.Fprintf(stderr, "agentfs run: %v\n", err)
	}
	fmt.Fprintf(stderr, "agentfs run: the session process ended (code %d) before the command's end was recorded; session %s keeps what was changed: agentfs sessions, agentfs diff -s %s\n", code, r.ID, r.ID)
	return exitCodeError{code: max(code, 1)}
}

// exitCodeOf is a process's exit code as a shell gives it: 128+N when
// signal N killed it.
func exitCodeOf(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// checkRunFuse checks /dev/fuse before a session is created: as a
// normal user, the daemon opens it as root of a user namespace, where
// only the permission bits for others count.
func checkRunFuse(root bool) error {
	if root {
		return checkFuseDevice()
	}
	f, err := os.OpenFile(devFuse, os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s is missing: load the fuse module (modprobe fuse), or run the container with --device /dev/fuse", devFuse)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s cannot be opened (permission denied): agentfs run as a normal user mounts from a user namespace, which needs %s usable by all (chmod 0666 %s, the usual setting); or run agentfs run as root (sudo)", devFuse, devFuse, devFuse)
	case err != nil:
		return fmt.Errorf("%s cannot be opened: %w: load the fuse module (modprobe fuse), or run the container with --device /dev/fuse", devFuse, err)
	}
	return f.Close()
}
