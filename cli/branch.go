package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
)

func init() {
	Register(&Command{
		Name:  "branch",
		Usage: "create|list|delete|switch|bind|unbind|current [FLAGS] [ARGS]",
		Help: `A branch is a line of changes over the project. Every store has main;
more start from a snapshot, so that several attempts can go on side by
side and be compared (agentfs diff main try2). The mount shows one
branch to unbound processes (agentfs branch switch changes which); a
process bound to a branch (agentfs branch bind, agentfs exec -b), and
everything it starts, sees that branch at the same path instead.

Examples:
  agentfs branch create try2
  agentfs branch bind try2            # this shell sees try2
  agentfs branch switch try2          # every unbound process sees try2
  agentfs branch list
  agentfs branch delete try2`,
	})
	Register(&Command{
		Name:    "branch create",
		Summary: "create a branch from a snapshot (default: the current state)",
		Usage:   "[-C DIR] [--from ID] NAME",
		Help: `Create makes the branch NAME, starting from the snapshot ID, or without
--from from a snapshot of the current branch taken for it (kind auto).
The mount keeps showing the current branch: switch to the new one with
agentfs branch switch NAME.

Names: 1 to 100 bytes, no "/" or control characters, not starting with
"-", not "." or "..", and not 4 to 8 hex digits (those read as ids).

Examples:
  agentfs branch create try2
  agentfs branch create --from 1a2b3c4d before-refactor`,
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &branchCreateOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runBranchCreate(ctx, o, args) }
		},
	})
	Register(&Command{
		Name:    "branch list",
		Summary: "list the branches; * marks the one this process sees",
		Usage:   "[-C DIR] [--json]",
		Help: `List shows every branch: its name (* marks the one this process sees),
the snapshot it was created from, when, and who sees it: the mount
(unbound processes) and how many bound processes.

Examples:
  agentfs branch list
  agentfs branch list -C /mnt/ws --json`,
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &listOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runBranchList(ctx, o, args) }
		},
	})
	Register(&Command{
		Name:    "branch delete",
		Summary: "delete a branch (not main, not the current one)",
		Usage:   "[-C DIR] NAME",
		Help: `Delete deletes the branch NAME and its changes. Snapshots taken of it
stay. main and the branch the mount shows cannot be deleted (switch to
another first). The space comes back at the next agentfs gc.

Example:
  agentfs branch delete try2`,
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &branchNameOptions{stdout: out.Stdout, op: ctl.OpBranchDelete}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runBranchName(ctx, o, args) }
		},
	})
	Register(&Command{
		Name:    "branch switch",
		Summary: "show another branch in the mount, to every unbound process",
		Usage:   "[-C DIR] NAME",
		Help: `Switch makes the mount show the branch NAME to every unbound process at
once (bound processes keep their branch: agentfs branch bind). The
branch shown before keeps its changes. A program that holds a file
open keeps that file, in its branch; a shell whose working directory is
inside the mount keeps that directory of the branch it was in until it
changes directory through the mount (cd "$PWD"), as after a chroot. A
kept store remembers the branch: mounting it again shows NAME.

Example:
  agentfs branch switch try2`,
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &branchNameOptions{stdout: out.Stdout, op: ctl.OpBranchSwitch}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runBranchName(ctx, o, args) }
		},
	})
}

// branchCreateOptions are the flags of agentfs branch create.
type branchCreateOptions struct {
	MountFlag
	from   string
	stdout io.Writer
}

func (o *branchCreateOptions) AddFlags(flags *pflag.FlagSet) {
	o.MountFlag.AddFlags(flags)
	flags.StringVar(&o.from, "from", "", "start from the snapshot `ID` (default: a snapshot of the current state)")
}

func runBranchCreate(ctx context.Context, o *branchCreateOptions, args []string) error {
	if len(args) != 1 {
		return Usagef("branch create takes one branch NAME, got %d arguments", len(args))
	}
	info, err := call[ctl.BranchInfo](&o.MountFlag, ctl.OpBranchCreate, ctl.BranchCreateArgs{Name: args[0], From: o.from})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "created branch %s from snapshot %s (switch to it with: agentfs branch switch %s)\n", Printable(info.Name), info.Origin, Printable(info.Name))
	return nil
}

func runBranchList(ctx context.Context, o *listOptions, args []string) error {
	if len(args) != 0 {
		return Usagef("branch list takes no arguments")
	}
	list, err := call[ctl.BranchList](&o.MountFlag, ctl.OpBranchList, nil)
	if err != nil {
		return err
	}
	if o.json {
		return PrintJSON(o.stdout, list)
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  BRANCH\tORIGIN\tCREATED\tSEEN BY")
	for _, b := range list.Branches {
		mark := " "
		if b.Current {
			mark = "*"
		}
		var seen []string
		if b.Default {
			seen = append(seen, "the mount")
		}
		if b.Bound > 0 {
			seen = append(seen, fmt.Sprintf("%d bound process(es)", b.Bound))
		}
		fmt.Fprintf(w, "%s %s\t%s\t%s\t%s\n", mark, Printable(b.Name), Printable(b.Origin), TimeString(b.Created), Printable(strings.Join(seen, ", ")))
	}
	return w.Flush()
}

// branchNameOptions are the flags of agentfs branch delete and switch,
// which take a branch name and run op on it.
type branchNameOptions struct {
	MountFlag
	op     ctl.Op
	stdout io.Writer
}

func runBranchName(ctx context.Context, o *branchNameOptions, args []string) error {
	if len(args) != 1 {
		return Usagef("%s takes one branch NAME, got %d arguments", o.op, len(args))
	}
	info, err := call[ctl.BranchInfo](&o.MountFlag, o.op, ctl.BranchArgs{Name: args[0]})
	if err != nil {
		return err
	}
	switch o.op {
	case ctl.OpBranchDelete:
		fmt.Fprintf(o.stdout, "deleted branch %s\n", Printable(info.Name))
	case ctl.OpBranchSwitch:
		fmt.Fprintf(o.stdout, "the mount shows branch %s\n", Printable(info.Name))
	}
	return nil
}
