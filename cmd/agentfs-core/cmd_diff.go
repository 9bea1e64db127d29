package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

// diffOptions are the flags of agentfs diff.
type diffOptions struct {
	mountFlag
	json, stat, patch bool
	stdout, stderr    io.Writer
}

func (o *diffOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.BoolVar(&o.stat, "stat", false, "a summary: each path with its change in size, then the totals")
	flags.BoolVar(&o.patch, "patch", false, "the changes of text files as a unified diff (patch -p1 and git apply\ntake it; binary files are named, not included)")
	flags.BoolVar(&o.json, "json", false, "print JSON")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "diff",
		Usage: "[-C DIR] [FROM [TO]] [--stat] [--patch] [--json]",
		Help: `Diff lists what changed from FROM to TO, one path a line:

  A  created         D  deleted         M  contents changed
  P  mode, owner or xattrs changed      T  type changed (file to directory, ...)

FROM and TO are each "lower" (the project as it is), a snapshot (an id,
a prefix of at least 4 digits, or a tag) or a branch. By default FROM
is lower and TO the current branch: what the mount changed. Times alone
are no change; a file written and written back is none either.

Examples:
  agentfs diff                    # the project to the current branch
  agentfs diff 1a2b               # snapshot 1a2b... to the current branch
  agentfs diff main try2 --stat   # two branches
  agentfs diff --patch > changes.patch`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &diffOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runDiff(ctx, o, args) }
		},
	})
}

func runDiff(ctx context.Context, o *diffOptions, args []string) error {
	if len(args) > 2 {
		return cli.Usagef("diff takes at most FROM and TO, got %d arguments", len(args))
	}
	if o.stat && o.patch {
		return cli.Usagef("--stat and --patch do not go together")
	}
	var a ctl.DiffArgs
	if len(args) > 0 {
		a.From = args[0]
	}
	if len(args) > 1 {
		a.To = args[1]
	}
	a.Patch = o.patch
	rep, err := callWithProgress(&o.mountFlag, o.stderr, o.json, func(c *workspace.Client) (ctl.DiffReply, error) { return c.Diff(a) })
	if err != nil {
		return err
	}
	switch {
	case o.json:
		return cli.PrintJSON(o.stdout, rep)
	case o.patch:
		_, err := io.WriteString(o.stdout, rep.Patch)
		return err
	case o.stat:
		return printDiffStat(o.stdout, rep.Changes)
	}
	return cli.PrintChanges(o.stdout, rep.Changes)
}

// printDiffStat prints each changed path with its kind and change in
// size, then the totals.
func printDiffStat(w io.Writer, changes []ctl.Change) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	counts := map[string]int{}
	var added, removed int64
	for _, c := range changes {
		counts[c.Kind]++
		if c.SizeDelta >= 0 {
			added += c.SizeDelta
		} else {
			removed -= c.SizeDelta
		}
		fmt.Fprintf(tw, " %s\t| %s\t%s\n", cli.ChangePath(c), c.Kind, signedBytes(c.SizeDelta))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, " %d changed: %d created, %d modified, %d deleted, %d mode-changed, %d type-changed; +%s -%s\n",
		len(changes), counts[ctl.Created], counts[ctl.Modified], counts[ctl.Deleted], counts[ctl.ModeChanged], counts[ctl.TypeChanged],
		cli.HumanBytes(added), cli.HumanBytes(removed))
	return err
}

// signedBytes shows a size change: "+1.0 KiB", "-12 B", "0".
func signedBytes(n int64) string {
	switch {
	case n > 0:
		return "+" + cli.HumanBytes(n)
	case n < 0:
		return "-" + cli.HumanBytes(-n)
	}
	return "0"
}
