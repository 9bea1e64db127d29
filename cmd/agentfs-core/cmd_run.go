package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/session"
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
	// supervise: the command runs under a supervisor that starts it
	// again after a rewind.
	supervise   bool
	maxRestarts int
	stopGrace   time.Duration
	// system: the command's whole file system is the session's view
	// of /; sharedTmp leaves the host's /tmp live in it.
	system, sharedTmp bool
	// record: the directory to write the session's record to.
	record string
}

// supervision is what --supervise and its flags ask for, or nil.
func (o *runOptions) supervision() (*session.Supervision, error) {
	if !o.supervise {
		return nil, nil
	}
	if o.maxRestarts < 0 {
		return nil, cli.Usagef("--max-restarts %d: give a count of 0 or more", o.maxRestarts)
	}
	if o.stopGrace < 0 || o.stopGrace > daemon.MaxGrace {
		return nil, cli.Usagef("--stop-grace %v: give a duration from 0 to %v (a rewind waits at most %v for the agent to stop)", o.stopGrace, daemon.MaxGrace, daemon.StopWait)
	}
	return &session.Supervision{MaxRestarts: o.maxRestarts, Grace: o.stopGrace}, nil
}

func (o *runOptions) AddFlags(flags *pflag.FlagSet) {
	flags.StringVarP(&o.dir, "dir", "C", "", "the project `DIR` (default: the current directory); the command starts in it")
	flags.StringVar(&o.sessionDir, "session-process", "", "internal: run the session whose directory this is")
	flags.IntVar(&o.nsUid, "ns-uid", -1, "internal: the user's uid outside the user namespace")
	flags.IntVar(&o.nsGid, "ns-gid", -1, "internal: the user's gid outside the user namespace")
	flags.BoolVar(&o.supervise, "supervise", false, "run COMMAND under a supervisor: a restore of the session's branch (agentfs restore -s,\nthe MCP rewind tool) stops every process of COMMAND and starts it again")
	flags.IntVar(&o.maxRestarts, "max-restarts", session.DefaultMaxRestarts, "with --supervise: start COMMAND again at most `N` times")
	flags.DurationVar(&o.stopGrace, "stop-grace", session.DefaultGrace, "with --supervise: how long COMMAND's processes have after SIGTERM\nbefore they are killed, a `DURATION` (at most "+daemon.MaxGrace.String()+")")
	flags.BoolVar(&o.system, "system", false, "the command's whole file system is a copy-on-write view of /: what it installs\nor writes anywhere (/etc, /usr, the home directory, /tmp) lands in the session")
	flags.BoolVar(&o.sharedTmp, "shared-tmp", false, "with --system: the host's /tmp, live, instead of the session's")
	flags.StringVar(&o.record, "record", "", "when COMMAND has ended, write the session's record to `DIR` (new or empty), in the\nagent-snapshot bundle format (manifest.json, blobs.parquet); turns --log-reads on")
	o.activity.AddFlags(flags)
	mustHide(flags, "session-process")
	mustHide(flags, "ns-uid")
	mustHide(flags, "ns-gid")
	// Everything from the command on is the command's: agentfs run
	// claude --resume passes --resume to claude.
	flags.SetInterspersed(false)
}

func init() {
	cli.Register(&cli.Command{
		Name:  "run",
		Usage: "[-C DIR] [--system [--shared-tmp]] [--] COMMAND [ARGS...]",
		Help: `Run runs COMMAND with the project (the current directory, or DIR) replaced,
for COMMAND and everything it starts, by a copy-on-write view of it, at
the same path: tools, scripts and absolute paths work as usual, and
the project itself is never written. The view lives in a private mount
namespace; other programs keep seeing the project as it is.

Before the command starts, a snapshot of kind pre-run is taken; while
it runs, automatic ones (after changes settle, git commits, builds
that succeed, idle periods); when it ends, one of kind post-run if
anything changed since the last one. As root, every command it runs,
in the project or not, is traced: agentfs log -s ID --exec shows them
(--trace=false turns that off). The command gets the terminal (Ctrl-C reaches it, not agentfs) and its exit
code is agentfs run's (128+N when a signal N killed it). When it exits,
agentfs prints what it changed (paths created, modified, deleted, and
bytes) and how to review, keep or drop the changes: they stay in the
session's store, ${XDG_STATE_HOME:-~/.local/state}/agentfs/sessions/ID,
until the session is discarded. The session's id is in the command's
environment as AGENTFS_SESSION.

With --record DIR, once COMMAND has ended agentfs writes the session's
record to DIR (which must not exist, or be empty, and be outside the
project) in the agent-snapshot bundle format: manifest.json (the
command, its exit status, every path it looked up, read, wrote or
deleted, with its state before and after and its Git classification)
and blobs.parquet (the contents needed to rebuild those states). It
logs reads for that (--log-reads), in a log of 256M unless --log-size
says. agentfs record -s ID --to DIR writes the same record later.

A runaway command cannot fill the disk: the session's branch may hold
at most 300,000 files (--max-files) and half of the space free on the
backstore's file system when the run starts (--max-bytes); past a
limit, the operation that would cross it fails with EDQUOT ("Disk quota
exceeded"), nothing written before is lost, and the activity log says
so once. --max-files off and --max-bytes off lift them.

With --supervise, COMMAND runs under a supervisor: a restore of the
session's branch while it runs (agentfs restore -s SESSION ID, or the
MCP rewind tool, the agent's own included) stops every process of
COMMAND (SIGTERM, --stop-grace, SIGKILL; background and double-forked
ones too), restores, and starts COMMAND again, with AGENTFS_RELAUNCH and
AGENTFS_RELAUNCH_SNAPSHOT in its environment and the terminal as it was
at the start. Past --max-restarts relaunches, or when Ctrl-C, SIGTERM or
SIGHUP comes during a rewind, the run ends instead. It needs a cgroup
(v2) it can make (root, or one delegated to the user) and Linux 5.7 or
later; agentfs run checks both before it mounts anything.

With --system, the command's whole file system is the session's: its
root directory is a copy-on-write view of /, at the same paths, so that
what it installs (apt-get, dpkg, pip), edits (/etc, ~/.bashrc) or
leaves in caches and /tmp lands in the session, and a restore takes it
back; the host is never written. The kernel's filesystems (/proc, /sys,
/dev, /run) are the host's, live; /tmp is the session's (--shared-tmp:
the host's, live). apply -s then writes only the paths it is given.
What cannot be rolled back (processes, the network, devices, /run) is
listed in docs/guide.md.

As root, run needs no setup. As a normal user it works in a user
namespace, where the kernel allows unprivileged ones and /dev/fuse is
usable by all (it says so when not); file I/O then goes through the
page cache (no FUSE passthrough).

Examples:
  cd ~/proj && agentfs run -- claude
  agentfs run -C ~/proj -- make test
  agentfs run --max-bytes 20G --max-files 100000 -- claude
  agentfs run --supervise -- claude     # a rewind restarts the agent
  agentfs run --system -- claude        # the whole system is the session's
  agentfs apply -s ID ~/proj            # a system session: only these paths
  agentfs run --record /tmp/rec -- make # and write its record to /tmp/rec
  agentfs sessions                      # what ran, what it changed
  agentfs diff -s ID                    # review
  agentfs apply -s ID                   # take the changes into the project
  agentfs discard -s ID                 # drop them`,
		ExitCodes: `Exit codes:
  the command's own exit code once it ran (128+N when signal N killed it),
  or 1 when it exited 0 and --record could not write the record;
  before it runs:
  1  error (the message says what went wrong and how to fix it)
  2  usage error (no command, unknown flag)
  127  the command was not found; 126  it could not be started
`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &runOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runRun(ctx, o, args) }
		},
	})
}

func runRun(ctx context.Context, o *runOptions, args []string) error {
	if len(args) == 0 {
		return cli.Usagef("run needs a command: agentfs run [-C DIR] [--] COMMAND [ARGS...]")
	}
	sup, err := o.supervision()
	if err != nil {
		return err
	}
	if o.sessionDir != "" {
		return runSessionProcess(o, args, sup)
	}
	rec := ""
	if o.record != "" {
		if rec, err = filepath.Abs(o.record); err != nil {
			return fmt.Errorf("--record %s: %w", o.record, err)
		}
	}
	return runError(session.Run(session.RunOptions{Project: o.dir, Command: args, Activity: o.activity.overrides(), Supervise: sup,
		System: o.system, SharedTmp: o.sharedTmp, Record: rec, Version: cli.Version, Stderr: o.stderr}))
}

// runSessionProcess is the session process that agentfs run starts in
// the session's namespaces (session.RunProcess): once the command has
// ended it prints what the command changed, and exits with its code.
func runSessionProcess(o *runOptions, args []string, sup *session.Supervision) error {
	e, err := session.RunProcess(session.ProcessOptions{SessionDir: o.sessionDir, Command: args, NsUid: o.nsUid, NsGid: o.nsGid,
		Activity: o.activity.overrides(), Supervise: sup, Stderr: o.stderr})
	if err != nil {
		return runError(err)
	}
	printSummary(o.stderr, e.Record, e.SummaryErr)
	if e.UnmountErr != nil {
		fmt.Fprintf(o.stderr, "agentfs run: %v\n", e.UnmountErr)
	}
	return runError(exitCode(*e.Record.ExitCode))
}

// exitCode is the error of a command's exit code (nil for 0).
func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return &session.ExitError{Code: code}
}

// runError turns the session's exit codes into agentfs's.
func runError(err error) error {
	var ee *session.ExitError
	if errors.As(err, &ee) {
		return cli.ExitCodeError{Code: ee.Code, Msg: ee.Msg}
	}
	return err
}

// printSummary tells what the session's command changed and what to do
// next.
func printSummary(w io.Writer, r *session.Record, serr error) {
	code := 0
	if r.ExitCode != nil {
		code = *r.ExitCode
	}
	fmt.Fprintf(w, "\nagentfs run: session %s ended: %s exited with code %d\n", r.ID, r.CommandString(), code)
	switch {
	case serr != nil:
		fmt.Fprintf(w, "  what it changed could not be read: %v\n", serr)
	case r.Summary.Total() == 0:
		fmt.Fprintf(w, "  no changes; %s was not touched\n  drop the session:  agentfs discard -s %s\n", touched(r), r.ID)
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
		line("created:", sum.Created, cli.HumanBytes(sum.CreatedBytes))
		line("modified:", sum.Modified, cli.HumanBytes(sum.ModifiedBytes)+" now, "+signedBytes(sum.Delta-sum.CreatedBytes+sum.DeletedBytes))
		line("deleted:", sum.Deleted, cli.HumanBytes(sum.DeletedBytes))
	}
	fmt.Fprintf(w, "  %s was not touched; the changes are in the session\n", touched(r))
	fmt.Fprintf(w, "  review:   agentfs diff -s %s\n", r.ID)
	if r.KindOf() == session.KindSystem {
		fmt.Fprintf(w, "  apply:    agentfs apply -s %s PATH...   (only the paths named)\n", r.ID)
	} else {
		fmt.Fprintf(w, "  apply:    agentfs apply -s %s\n", r.ID)
	}
	fmt.Fprintf(w, "  discard:  agentfs discard -s %s\n", r.ID)
}

// touched names what a session never writes: the project, or the
// system.
func touched(r *session.Record) string {
	if r.KindOf() == session.KindSystem {
		return "the system"
	}
	return "the project " + r.Project
}
