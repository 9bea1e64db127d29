package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/session"
)

// recordOptions are the flags of agentfs record.
type recordOptions struct {
	session string
	to      string
	stdout  io.Writer
}

func (o *recordOptions) AddFlags(flags *pflag.FlagSet) {
	flags.StringVarP(&o.session, "session", "s", "", "the `SESSION` to record (an id, or its start or end)")
	flags.StringVar(&o.to, "to", "", "write the record to `DIR` (it must not exist, or be empty)")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "record",
		Usage: "-s SESSION --to DIR",
		Help: `Record writes the record of an agentfs run session that has ended to DIR,
in the agent-snapshot bundle format that a ptrace-based tracing tool
writes, so that tools built for it read agentfs sessions:

  DIR/manifest.json   the command, its exit status, the Git repositories
                      it observed, and for every path it looked up,
                      read, listed, wrote or deleted: the operations, the
                      state before (the pre-run snapshot) and after (the
                      end of the run), the Git classification
  DIR/blobs.parquet   the contents those states need (those Git cannot
                      give back), keyed before:PATH and after:PATH

The session must have run with reads logged (agentfs run --record DIR,
which writes the same record at the end of the run, or --log-reads).
DIR must not exist, or be an empty directory, outside the project.
docs/guide.md says what the record holds and what it does not.

Example:
  agentfs run --log-reads -- ./agent.sh
  agentfs record -s a3f9 --to /tmp/a3f9-record`,
		ExitCodes: `Exit codes:
  0  the record was written
  1  error (no such session, one still running, applied or run without
     reads logged, DIR not empty or in the project), or interrupted
     (Ctrl-C, SIGTERM): nothing was written
  2  usage error
`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &recordOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runRecord(ctx, o, args) }
		},
	})
}

func runRecord(ctx context.Context, o *recordOptions, args []string) error {
	if len(args) != 0 {
		return cli.Usagef("record takes no arguments: agentfs record -s SESSION --to DIR")
	}
	if o.session == "" {
		return cli.Usagef("which session? name it with -s SESSION (agentfs sessions lists them)")
	}
	if o.to == "" {
		return cli.Usagef("where to? give the record's directory with --to DIR")
	}
	to, err := filepath.Abs(o.to)
	if err != nil {
		return fmt.Errorf("--to %s: %w", o.to, err)
	}
	r, err := session.Find(o.session)
	if err != nil {
		return err
	}
	// An interrupt stops the record, which then leaves nothing of
	// itself.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := r.WriteBundle(to, cli.Version, ctx.Done())
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "the record of session %s is in %s (%d paths, %d contents, %d bytes)\n", r.ID, to, res.Files, res.Blobs, res.BlobBytes)
	for _, w := range res.Warnings() {
		fmt.Fprintf(o.stdout, "note: %s\n", w)
	}
	return nil
}
