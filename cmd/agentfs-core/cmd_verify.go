package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

// verifyOptions are the flags of agentfs verify.
type verifyOptions struct {
	mountFlag
	tree           string
	json           bool
	stdout, stderr io.Writer
}

func (o *verifyOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.StringVar(&o.tree, "tree", "", "check the directory `DIR` (an export) against the snapshot ID instead of the store")
	flags.BoolVar(&o.json, "json", false, "print JSON")
}

const verifyExitCodes = `Exit codes:
  0  everything checked is what was recorded
  1  something changed (listed: the objects, paths and snapshots), or an error
  2  usage error (unknown command or flag, wrong arguments)
`

func init() {
	cli.Register(&cli.Command{
		Name:  "verify",
		Usage: "[-C DIR] [REF...] [--json] | --tree DIR ID",
		Help: `Verify reads every file of the snapshots REF names (every snapshot
without REF) again, from the store and the project, and compares each
with the SHA-256 recorded when the snapshot's root was computed, and
each snapshot's Merkle root with the one recorded. A file of the store
changed behind agentfs's back (bit rot, an edit in the store) is
reported with its paths in each snapshot. A snapshot whose root was not
computed yet gets it first. See agentfs snapshot show for a root.

With --tree DIR ID it checks a directory (an export of the snapshot,
a copy of one) against the snapshot's root instead, and lists the paths
that differ.

Examples:
  agentfs verify
  agentfs verify 1a2b3c4d --json
  agentfs export 1a2b --to /tmp/t --manifest && agentfs verify --tree /tmp/t 1a2b`,
		ExitCodes: verifyExitCodes,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &verifyOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runVerify(ctx, o, args) }
		},
	})
}

func runVerify(ctx context.Context, o *verifyOptions, args []string) error {
	a := ctl.VerifyArgs{Refs: args}
	if o.tree != "" {
		if len(args) != 1 {
			return cli.Usagef("verify --tree DIR takes the one snapshot ID to check DIR against, got %d arguments", len(args))
		}
		tree, err := filepath.Abs(o.tree)
		if err != nil {
			return fmt.Errorf("the tree %s: %w", o.tree, err)
		}
		a.Tree = tree
	}
	rep, err := callWithProgress(&o.mountFlag, o.stderr, o.json, func(c *workspace.Client) (ctl.VerifyReply, error) {
		return c.Verify(a)
	})
	if err != nil {
		return err
	}
	if o.json {
		err = cli.PrintJSON(o.stdout, rep)
	} else {
		printVerify(o.stdout, rep)
	}
	if err == nil && !rep.OK {
		return errors.New("verify found changes (listed above)")
	}
	return err
}

// printVerify prints a verify reply as words.
func printVerify(w io.Writer, rep ctl.VerifyReply) {
	for _, s := range rep.Snapshots {
		state := "ok"
		if !s.OK {
			state = "CHANGED"
		}
		note := ""
		if s.ComputedNow {
			note = " (root computed now)"
		}
		if rep.Tree != "" {
			fmt.Fprintf(w, "%s  %s  snapshot %s root %s, tree root %s\n", state, cli.Printable(rep.Tree), s.ID, s.Root, s.Recomputed)
			continue
		}
		fmt.Fprintf(w, "%-7s snapshot %s root %s%s\n", state, s.ID, s.Root, note)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "%s: %s\n", p.Kind, cli.Printable(p.Detail))
		if p.Want != "" || p.Got != "" {
			fmt.Fprintf(w, "  recorded %s\n  found    %s\n", orDash(p.Want), orDash(p.Got))
		}
		for _, pl := range p.Where {
			fmt.Fprintf(w, "  in snapshot %s: %s\n", pl.Snapshot, cli.Printable(pl.Path))
		}
	}
	if rep.Tree == "" {
		fmt.Fprintf(w, "%d snapshots, %d objects (%s) read: ", len(rep.Snapshots), rep.Objects, cli.HumanBytes(rep.Bytes))
	}
	if rep.OK {
		fmt.Fprintln(w, "no changes")
	} else {
		fmt.Fprintf(w, "%d problems\n", len(rep.Problems))
	}
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
