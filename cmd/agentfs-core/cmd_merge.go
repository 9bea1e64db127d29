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

// mergeOptions are the flags of agentfs merge.
type mergeOptions struct {
	mountFlag
	into, base   string
	dryRun, json bool
	ours, theirs []string
	stdout       io.Writer
}

func (o *mergeOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.StringVar(&o.into, "into", "", "merge into `BRANCH` (default: the branch this process sees)")
	flags.BoolVarP(&o.dryRun, "dry-run", "n", false, "list what the merge would do, and do nothing")
	flags.StringArrayVar(&o.ours, "ours", nil, "resolve the conflicts at or below `PATH` by keeping the target's version (repeatable; . is everything)")
	flags.StringArrayVar(&o.theirs, "theirs", nil, "resolve the conflicts at or below `PATH` by taking BRANCH's version (repeatable; . is everything)")
	flags.StringVar(&o.base, "base", "", "merge from snapshot `ID` (or lower) instead of the one both branches come from")
	flags.BoolVar(&o.json, "json", false, "print JSON")
}

// exitMergeConflicts is merge's exit code when conflicts remain.
const exitMergeConflicts = 1

func init() {
	cli.Register(&cli.Command{
		Name:  "merge",
		Usage: "[-C DIR] [--into B] [--dry-run] [--ours PATH]... [--theirs PATH]... [--json] BRANCH",
		Help: `Merge takes the changes of BRANCH into the branch this process sees (or
--into B), three-way from the snapshot both come from (as a tournament's
or agentfs branch create's branches do; --base names another):

  - a path only BRANCH changed is taken (created, replaced, deleted);
  - a path only the target changed stays;
  - a text file both changed is merged line by line (diff3), and where
    both changed the same lines it gets conflict markers:
      <<<<<<< TARGET / ||||||| BASE / ======= / >>>>>>> BRANCH
  - a binary file both changed, a type changed against a change, a
    deletion against a change, and renames that collide are conflicts:
    the target's version stays.

--ours PATH keeps the target's version for the conflicts at or below
PATH, --theirs PATH takes BRANCH's (. is everything). Conflicts are
listed either way. The merge is one change of the target, whole or not
at all: it takes a safety snapshot first and prints how to undo it,
"to undo: agentfs restore SAFETY-ID". Processes bound to the target see
the merge at once. With --dry-run it lists what it would do.

Examples:
  agentfs merge try1                    # try1 into the current branch
  agentfs merge --dry-run try2
  agentfs merge try2 --into main --theirs src/parser.go
  agentfs merge try1 --json`,
		ExitCodes: `Exit codes:
  0  merged, no conflict remains
  1  conflicts remain (listed; the merge was made with markers), or an
     error (the message says what went wrong and how to fix it)
  2  usage error (unknown command or flag, wrong arguments)
`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &mergeOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runMerge(ctx, o, args) }
		},
	})
}

func runMerge(_ context.Context, o *mergeOptions, args []string) error {
	if len(args) != 1 {
		return cli.Usagef("merge takes one BRANCH, got %d arguments", len(args))
	}
	rep, err := call(&o.mountFlag, func(c *workspace.Client) (ctl.MergeReply, error) {
		return c.Merge(ctl.MergeArgs{Branch: args[0], Into: o.into, Base: o.base, DryRun: o.dryRun, Ours: o.ours, Theirs: o.theirs})
	})
	if err != nil {
		return err
	}
	if o.json {
		if err := cli.PrintJSON(o.stdout, rep); err != nil {
			return err
		}
	} else if err := printMerge(o.stdout, rep, o.dryRun); err != nil {
		return err
	}
	if rep.Unresolved > 0 {
		return cli.ExitCodeError{Code: exitMergeConflicts}
	}
	return nil
}

// printMerge prints a merge's outcome.
func printMerge(w io.Writer, rep ctl.MergeReply, dryRun bool) error {
	base := "the project (lower)"
	if rep.BaseSnapshot != nil {
		base = "snapshot " + rep.BaseSnapshot.ID
	}
	verb, none := "merged", "changed nothing"
	if dryRun {
		verb, none = "merging", "would change nothing"
	}
	fmt.Fprintf(w, "%s branch %s into %s (from %s)", verb, cli.Printable(rep.Branch), cli.Printable(rep.Into), base)
	switch {
	case len(rep.Changes) == 0:
		fmt.Fprintf(w, ": %s\n", none)
	case dryRun:
		fmt.Fprintf(w, " would make these changes (none made):\n")
	default:
		fmt.Fprintf(w, ":\n")
	}
	for _, c := range rep.Changes {
		fmt.Fprintf(w, "  %-8s %s\n", c.Action, cli.Printable(c.Path))
	}
	if len(rep.Conflicts) > 0 {
		fmt.Fprintf(w, "conflicts (%d remain):\n", rep.Unresolved)
		for _, c := range rep.Conflicts {
			how := ""
			switch {
			case c.Resolved != "":
				how = " (resolved: " + c.Resolved + ")"
			case c.Markers:
				how = " (conflict markers in the file)"
			default:
				how = " (" + cli.Printable(rep.Into) + "'s version kept)"
			}
			fmt.Fprintf(w, "  %-8s %s: %s%s\n", c.Kind, cli.Printable(c.Path), cli.Printable(c.Detail), how)
		}
	}
	if rep.Safety != nil {
		fmt.Fprintf(w, "to undo: agentfs restore %s\n", rep.Safety.ID)
	}
	if rep.Merged != nil {
		fmt.Fprintf(w, "to merge %s again later (only what it changes from now on): agentfs merge --base %s %s\n", cli.Printable(rep.Branch), rep.Merged.ID, cli.Printable(rep.Branch))
	}
	if rep.Unresolved > 0 && !dryRun {
		fmt.Fprintf(w, "resolve the conflicts in branch %s (edit the files, or merge again with --ours or --theirs after the undo)\n", cli.Printable(rep.Into))
	}
	return nil
}
