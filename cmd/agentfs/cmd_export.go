package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

// exportOptions are the flags of agentfs export.
type exportOptions struct {
	mountFlag
	to             string
	manifest       bool
	stdout, stderr io.Writer
}

func (o *exportOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.StringVar(&o.to, "to", "", "the `DIR` to write (it must not exist, or be empty)")
	flags.BoolVar(&o.manifest, "manifest", false, "also write the tree's SHA-256 hashes and Merkle root to DIR.manifest.json, beside the tree")
}

func init() {
	register(&command{
		name:    "export",
		summary: "write a snapshot or a branch out as a plain directory",
		usage:   "[-C DIR] REF --to DIR [--manifest]",
		help: `Export writes REF as a plain directory tree at DIR, as cp -a of the
mount would: contents (holes kept, cloned where the filesystem can),
modes, times, xattrs, hard links, and as root owners and device nodes.
REF is a snapshot (an id, a prefix of at least 4 digits, or a tag), a
branch, or "lower" (the project). DIR must not exist or be empty, and
must be outside the project and the mount.

A branch the mount shows is read as it is while programs may write it;
for an exact copy of a moment, snapshot it and export the snapshot.

With --manifest, DIR.manifest.json (beside the tree, not in it) gets
every path's type, mode and SHA-256 and the tree's Merkle root, as
docs/store-format.md defines them; agentfs verify --tree DIR ID checks
the tree against the snapshot later.

Examples:
  agentfs export 1a2b3c4d --to /tmp/before
  agentfs export try2 --to ../try2-tree
  agentfs export 1a2b --to /tmp/t --manifest`,
		setup: func(flags *pflag.FlagSet, out streams) runFunc {
			o := &exportOptions{stdout: out.stdout, stderr: out.stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runExport(ctx, o, args) }
		},
	})
}

func runExport(ctx context.Context, o *exportOptions, args []string) error {
	if len(args) != 1 {
		return usagef("export takes one REF (a snapshot or a branch), got %d arguments", len(args))
	}
	if o.to == "" {
		return usagef("--to DIR is required (where to write the tree)")
	}
	to, err := filepath.Abs(o.to)
	if err != nil {
		return fmt.Errorf("the export target %s: %w", o.to, err)
	}
	rep, err := callWithProgress(&o.mountFlag, o.stderr, false, func(c *workspace.Client) (ctl.ExportReply, error) {
		return c.Export(ctl.ExportArgs{Ref: args[0], To: to, Manifest: o.manifest})
	})
	if err != nil {
		return err
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(o.stderr, "agentfs export: skipped %s\n", printable(s))
	}
	fmt.Fprintf(o.stdout, "exported %s to %s\n", rep.What, rep.To)
	if rep.Manifest != "" {
		fmt.Fprintf(o.stdout, "manifest %s, root %s\n", rep.Manifest, rep.Root)
	}
	return nil
}
