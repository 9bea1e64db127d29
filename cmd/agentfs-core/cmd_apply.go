package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

// applyOptions are the flags of agentfs apply.
type applyOptions struct {
	mountFlag
	branch              string
	dryRun, force, json bool
	stdout, stderr      io.Writer
}

func (o *applyOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.StringVar(&o.branch, "branch", "", "apply this `BRANCH` (default: the one the mount shows)")
	flags.BoolVarP(&o.dryRun, "dry-run", "n", false, "list what would be written, and write nothing")
	flags.BoolVar(&o.force, "force", false, "also write the paths that changed in the project since the branch changed them")
	flags.BoolVar(&o.json, "json", false, "print JSON")
}

const applyExitCodes = `Exit codes:
  0  every change selected was applied (or, with --dry-run, would be)
  1  an error, or changes left unapplied: conflicts (the project changed
     there; --force overwrites them) or changes that depend on them
  2  usage error (unknown command or flag, wrong arguments)
`

func init() {
	cli.Register(&cli.Command{
		Name:  "apply",
		Usage: "[-C DIR | -s SESSION] [--branch B] [PATH...] [--dry-run] [--force] [--json]",
		Help: `Apply writes what the mount changed (what agentfs diff lists) into the
project: created and modified files (each written whole under a
temporary name, then renamed over, with its mode, times, xattrs and, as
root, owner), directories, symlinks, removals, renames and mode changes.
Applied paths then show the project's files again: they no longer
appear in agentfs diff. It is the only command that writes to the
project.

With PATHs (files or directories, in the mount or in the project) only
the changes at and below them are applied, with the directories they
need. A path without changes is an error.

A change is a conflict when the project's file at that path changed
since the mount first changed it (edited from outside, deleted, made):
it is not applied, and is listed; --force writes it anyway. A change
that needs another one not applied (a file in a directory that is not
made, the removal of a directory with something left in it) is skipped.

Each file is replaced atomically, but an apply as a whole is not: if it
stops half way (a full disk), what it wrote stays applied and the rest
stays in agentfs diff; run it again.

Examples:
  agentfs apply --dry-run          # what would be written
  agentfs apply                    # everything
  agentfs apply src/main.go docs   # only these
  agentfs apply --branch try2`,
		ExitCodes: applyExitCodes,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &applyOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runApply(ctx, o, args) }
		},
	})
}

func runApply(ctx context.Context, o *applyOptions, args []string) (err error) {
	c, err := o.dial()
	if err != nil {
		return err
	}
	defer closeClient(c)
	paths, err := mountPaths(c, args)
	if err != nil {
		return err
	}
	req := ctl.ApplyArgs{Branch: o.branch, Paths: paths, DryRun: o.dryRun, Force: o.force}
	stop := watchProgress(c, o.stderr, o.json)
	rep, err := c.Apply(req)
	stop()
	if err != nil {
		return err
	}
	if o.json {
		if err := cli.PrintJSON(o.stdout, rep); err != nil {
			return err
		}
	} else {
		printApply(o.stdout, rep)
	}
	if n := len(rep.Conflicts) + len(rep.Skipped); n > 0 {
		what := "were"
		if rep.DryRun {
			what = "would be"
		}
		hint := ""
		changed, hidden := splitHideConflicts(rep.Conflicts)
		if len(changed) > 0 {
			hint = fmt.Sprintf(": %d changed in the project since the branch changed them; look at them, then run agentfs apply --force to overwrite them", len(changed))
		}
		if len(hidden) > 0 {
			hint += fmt.Sprintf("; %d at hidden paths (--force writes the branch's own files there, never over a hidden project file)", len(hidden))
			if len(changed) == 0 {
				hint = ":" + hint[1:]
			}
		}
		return fmt.Errorf("%d changes %s not applied%s", n, what, hint)
	}
	if !rep.DryRun && len(paths) == 0 {
		// Everything was applied: a session is done.
		return o.markApplied()
	}
	return nil
}

// mountPaths turns PATH arguments into paths relative to the mount
// root (mountRelative).
func mountPaths(c *workspace.Client, args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	st, err := c.Status()
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, a := range args {
		p, err := mountRelative(a, c.Root(), st.Lower)
		if err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// mountRelative turns a PATH argument (relative to the current
// directory, or absolute) into a path relative to the mount root: it
// must lie in the mount or in the project.
func mountRelative(arg, root, lower string) (string, error) {
	abs, err := filepath.Abs(arg)
	if err != nil {
		return "", fmt.Errorf("%s: %w", arg, err)
	}
	for _, base := range []string{root, lower} {
		if base == "" {
			continue
		}
		if rel, err := filepath.Rel(base, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return filepath.ToSlash(rel), nil
		}
	}
	return "", cli.Usagef("%s is neither in the mount %s nor in the project %s", arg, root, lower)
}

// applyLetters mark the lines of agentfs apply.
var applyLetters = map[string]string{
	ctl.Created: "A", ctl.Deleted: "D", ctl.Modified: "M", ctl.ModeChanged: "P", ctl.TypeChanged: "T",
}

// printApply lists what an apply did, then what it left.
func printApply(w io.Writer, rep ctl.ApplyReply) {
	line := func(it ctl.ApplyItem, note string) {
		p := cli.Printable(it.Path)
		if it.Path == "" {
			p = "."
		}
		if it.Type == "dir" {
			p += "/"
		}
		letter := applyLetters[it.Kind]
		if letter == "" {
			letter = "?"
		}
		fmt.Fprintf(w, "%s  %s%s\n", letter, p, note)
	}
	verb := "applied"
	if rep.DryRun {
		verb = "would apply"
	}
	for _, it := range rep.Applied {
		line(it, "")
	}
	fmt.Fprintf(w, "%s %d changes of branch %s to %s (%s written)\n", verb, len(rep.Applied), cli.Printable(rep.Branch), rep.Lower, cli.HumanBytes(rep.Bytes))
	changed, hidden := splitHideConflicts(rep.Conflicts)
	if len(changed) > 0 {
		fmt.Fprintf(w, "conflicts, not applied (the project changed there since; --force overwrites them):\n")
		for _, it := range changed {
			line(it, "  ("+it.Reason+")")
		}
	}
	if len(hidden) > 0 {
		fmt.Fprintf(w, "hidden paths, not applied (agentfs status lists the hide patterns):\n")
		for _, it := range hidden {
			line(it, "  ("+it.Reason+")")
		}
	}
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(w, "skipped:\n")
		for _, it := range rep.Skipped {
			line(it, "  ("+it.Reason+")")
		}
	}
}

// splitHideConflicts separates the conflicts of the hide patterns from
// the others.
func splitHideConflicts(items []ctl.ApplyItem) (changed, hidden []ctl.ApplyItem) {
	for _, it := range items {
		if it.Hide {
			hidden = append(hidden, it)
		} else {
			changed = append(changed, it)
		}
	}
	return changed, hidden
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
