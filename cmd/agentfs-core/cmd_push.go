package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/remote"
	"github.com/agentfs/agentfs/session"
	"github.com/agentfs/agentfs/workspace"
)

// pushOptions are the flags of agentfs push.
type pushOptions struct {
	mountFlag
	remote         string
	parallel       int
	json           bool
	stdout, stderr io.Writer
}

func (o *pushOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.StringVar(&o.remote, "remote", "", "the `REMOTE` to push to (default: the only one there is)")
	flags.IntVar(&o.parallel, "parallel", 0, fmt.Sprintf("upload `N` objects at once (default %d)", remote.DefaultParallel))
	flags.BoolVar(&o.json, "json", false, "print the result as JSON, and the progress as JSON lines on stderr")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "push",
		Usage: "-s SESSION [--remote R] | [-C DIR] [--remote R] ID...",
		Help: `Push sends to a remote (agentfs remote add) a whole session, with -s:
every snapshot, the state of every branch and the session's record; or
the snapshots ID of a mount. A snapshot goes as a document of its
changes against the project, and the files it changed as objects named
by the SHA-256 of their contents: only the objects the remote lacks are
sent, so a second session from the same project sends only what it
changed. The documents are written after every object they name, so
an interrupted push leaves no document naming a missing object; push
again to resume: what arrived is not sent again.

Credentials come from the AWS variables (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY) or the remote's profile in ~/.aws/credentials.

Examples:
  agentfs push -s 20261121-140305-a3f9 --remote team
  agentfs push 1a2b3c4d
  agentfs push -s last --json`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &pushOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runPush(ctx, o, args) }
		},
	})
}

func runPush(_ context.Context, o *pushOptions, args []string) error {
	a := ctl.PushArgs{Refs: args, Parallel: o.parallel}
	switch {
	case o.Session != "" && len(args) > 0:
		return cli.Usagef("push -s SESSION sends the whole session: give no snapshot ID beside it")
	case o.Session == "" && len(args) == 0:
		return cli.Usagef("push takes snapshot IDs, or -s SESSION")
	case o.parallel < 0:
		return cli.Usagef("--parallel takes a count of at least 1")
	}
	cfg, err := remote.Find(o.remote)
	if err != nil {
		return err
	}
	creds, err := remote.ResolveCredentials(cfg)
	if err != nil {
		return err
	}
	a.Remote = ctl.RemoteSpec{Name: cfg.Name, URL: cfg.URL, Endpoint: cfg.Endpoint, Region: cfg.Region,
		AccessKey: creds.AccessKey, SecretKey: creds.SecretKey, SessionToken: creds.SessionToken}
	if o.Session != "" {
		r, err := session.Find(o.Session)
		if err != nil {
			return err
		}
		if !r.HasStore() {
			return fmt.Errorf("session %s was discarded: its store is gone, nothing to push", r.ID)
		}
		s := &ctl.PushSession{ID: r.ID, Project: r.Project, Command: r.Command, Started: r.Started,
			ExitCode: r.ExitCode, State: string(r.Live()), PreRun: r.PreRun}
		if r.Ended != nil {
			s.Ended = *r.Ended
		}
		a.Session = s
		o.Session = r.ID
	}
	rep, err := callWithProgress(&o.mountFlag, o.stderr, o.json, func(c *workspace.Client) (ctl.PushReply, error) {
		return c.Push(a)
	})
	if err != nil {
		return err
	}
	if o.json {
		return cli.PrintJSON(o.stdout, rep)
	}
	what := fmt.Sprintf("%d snapshots", len(rep.Snapshots))
	if rep.Session != "" {
		what = fmt.Sprintf("session %s (%d snapshots, %d branches)", rep.Session, len(rep.Snapshots), len(rep.Branches))
	}
	fmt.Fprintf(o.stdout, "pushed %s to %s (%s): %d objects sent (%s), %d already there (%s)\n",
		what, rep.Remote, rep.URL, rep.Sent, cli.HumanBytes(rep.SentBytes), rep.Skipped, cli.HumanBytes(rep.SkippedBytes))
	fmt.Fprintf(o.stdout, "hashes: %d known to the store, %d files read (%s)\n", rep.Known, rep.Hashed, cli.HumanBytes(rep.HashedBytes))
	if rep.PartsKept > 0 {
		fmt.Fprintf(o.stdout, "resumed: %d parts of large objects were on the remote already, %d sent\n", rep.PartsKept, rep.PartsSent)
	}
	return nil
}
