package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
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
	cli.Register(&cli.Command{
		Name:  "export",
		Usage: "[-C DIR | -s SESSION] REF --to DIR [--manifest] [PATH...]",
		Help: `Export writes REF as a plain directory tree at DIR, as cp -a of the
mount would: contents (holes kept, cloned where the filesystem can),
modes, times, xattrs, hard links, and as root owners and device nodes.
REF is a snapshot (an id, a prefix of at least 4 digits, or a tag), a
branch, or "lower" (the project). DIR must not exist or be empty, and
must be outside the project and the mount. With PATHs, only these are
written (each whole, at its path below DIR, the directories above it
made with their attributes and nothing else).

A system session's (agentfs run --system) REF is the whole system: DIR
may be anywhere outside the mount (what the view shows of DIR itself is
left out), and PATHs keep the export to what is wanted
(agentfs export -s ID main --to DIR /usr/local /etc).

A branch the mount shows is read as it is while programs may write it;
for an exact copy of a moment, snapshot it and export the snapshot.

With --manifest, DIR.manifest.json (beside the tree, not in it) gets
every path's type, mode and SHA-256 and the tree's Merkle root, as
docs/store-format.md defines them; agentfs verify --tree DIR ID checks
the tree against the snapshot later.

Examples:
  agentfs export 1a2b3c4d --to /tmp/before
  agentfs export try2 --to ../try2-tree
  agentfs export 1a2b --to /tmp/t --manifest
  agentfs export 1a2b3c4d --to /tmp/src-only src`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &exportOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runExport(ctx, o, args) }
		},
	})
}

func runExport(ctx context.Context, o *exportOptions, args []string) error {
	if len(args) == 0 {
		return cli.Usagef("export takes a REF (a snapshot or a branch), and PATHs to export only those")
	}
	if o.to == "" {
		return cli.Usagef("--to DIR is required (where to write the tree)")
	}
	to, err := filepath.Abs(o.to)
	if err != nil {
		return fmt.Errorf("the export target %s: %w", o.to, err)
	}
	rep, err := callWithProgress(&o.mountFlag, o.stderr, false, func(c *workspace.Client) (ctl.ExportReply, error) {
		paths, err := mountPaths(c, args[1:])
		if err != nil {
			return ctl.ExportReply{}, err
		}
		return c.Export(ctl.ExportArgs{Ref: args[0], To: to, Paths: paths, Manifest: o.manifest})
	})
	if err != nil {
		return err
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(o.stderr, "agentfs export: skipped %s\n", cli.Printable(s))
	}
	fmt.Fprintf(o.stdout, "exported %s to %s\n", rep.What, rep.To)
	if rep.Manifest != "" {
		fmt.Fprintf(o.stdout, "manifest %s, root %s\n", rep.Manifest, rep.Root)
	}
	return nil
}
