package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

func init() {
	cli.Register(&cli.Command{
		Name:    "snapshot prune",
		Summary: "delete old automatic snapshots",
		Usage:   "[-C DIR] [--keep N] [--dry-run] [--json]",
		Help: `Prune deletes automatic snapshots (kind auto: taken after changes
settled, after a git commit, or when a branch was created). Manual,
pre-run and safety snapshots, tagged snapshots of any kind, and the
snapshots that branches were created from are never deleted.

With --keep N the N newest automatic snapshots stay and the others go.
Without it, the mount's retention policy decides, as it does after each
automatic snapshot: every automatic snapshot of the last hour stays,
then the newest of each hour for a day, then the newest of each day,
and at most the mount's count (agentfs mount --auto-snapshot-keep,
default 100). The space the deleted snapshots' files took comes back at
the next agentfs gc.

Examples:
  agentfs snapshot prune --keep 10 --dry-run
  agentfs snapshot prune --keep 10
  agentfs snapshot prune -C /mnt/ws`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &pruneOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error {
				return runSnapshotPrune(ctx, o, args, flags.Changed("keep"))
			}
		},
	})
}

// pruneOptions are the flags of agentfs snapshot prune.
type pruneOptions struct {
	mountFlag
	keep   int
	dryRun bool
	json   bool
	stdout io.Writer
}

func (o *pruneOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.IntVar(&o.keep, "keep", 0, "keep the `N` newest automatic snapshots, delete the other automatic ones")
	flags.BoolVar(&o.dryRun, "dry-run", false, "say what would be deleted; delete nothing")
	flags.BoolVar(&o.json, "json", false, "print JSON")
}

func runSnapshotPrune(ctx context.Context, o *pruneOptions, args []string, keepSet bool) error {
	if len(args) != 0 {
		return cli.Usagef("snapshot prune takes no arguments (the count goes with --keep N)")
	}
	var a ctl.PruneArgs
	if keepSet {
		if o.keep < 0 {
			return cli.Usagef("--keep %d: give a count of 0 or more", o.keep)
		}
		a.Keep = &o.keep
	}
	a.DryRun = o.dryRun
	r, err := call(&o.mountFlag, func(c *workspace.Client) (ctl.PruneReply, error) { return c.Prune(a) })
	if err != nil {
		return err
	}
	if o.json {
		return cli.PrintJSON(o.stdout, r)
	}
	verb := "deleted"
	if r.DryRun {
		verb = "would delete"
	}
	for _, s := range r.Deleted {
		fmt.Fprintf(o.stdout, "%s %s  %s  %s\n", verb, s.ID, cli.TimeString(s.Created), cli.Printable(s.Label))
	}
	fmt.Fprintf(o.stdout, "%s %d automatic snapshots, %d kept (%s)\n", verb, len(r.Deleted), r.Kept, r.Policy)
	return nil
}
