package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

// gcOptions are the flags of agentfs gc.
type gcOptions struct {
	mountFlag
	grace          time.Duration
	json           bool
	stdout, stderr io.Writer
}

func (o *gcOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.DurationVar(&o.grace, "grace", time.Minute, "spare unreferenced files changed less than this `DURATION` ago\n(a change in progress may still be about to name them)")
	flags.BoolVar(&o.json, "json", false, "print JSON")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "gc",
		Usage: "[-C DIR] [--grace DURATION] [--json]",
		Help: `Gc removes from the backstore the files that no branch, no snapshot and
no open file uses any more: what deleted snapshots and branches, and
restores, left behind. It prints the bytes it freed. Files changed in
the last --grace are kept, since a change in progress may be about to
use them. It is safe while the mount is in use.

Examples:
  agentfs snapshot delete 1a2b3c4d && agentfs gc
  agentfs gc -C /mnt/ws --grace 10s`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &gcOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runGC(ctx, o, args) }
		},
	})
}

func runGC(ctx context.Context, o *gcOptions, args []string) error {
	if len(args) != 0 {
		return cli.Usagef("gc takes no arguments")
	}
	if o.grace < time.Second {
		return cli.Usagef("--grace %v is too short: a copy in progress could lose its file; use 1s or more", o.grace)
	}
	rep, err := callWithProgress(&o.mountFlag, o.stderr, o.json, func(c *workspace.Client) (ctl.GCReply, error) { return c.GC(ctl.GCArgs{Grace: o.grace}) })
	if err != nil {
		return err
	}
	if o.json {
		return cli.PrintJSON(o.stdout, rep)
	}
	fmt.Fprintf(o.stdout, "freed %d bytes (%s): removed %d of %d files\n", rep.Freed, cli.HumanBytes(rep.Freed), rep.Removed, rep.Objects)
	if rep.Young > 0 {
		fmt.Fprintf(o.stdout, "kept %d unused files changed in the last %v (run gc again later)\n", rep.Young, rep.Grace)
	}
	return nil
}
