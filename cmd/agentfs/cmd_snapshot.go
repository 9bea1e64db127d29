package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

func init() {
	register(&command{
		name:    "snapshot",
		summary: "take, list and delete snapshots of the mount",
		usage:   "create|list|show|delete|prune [FLAGS] [ARGS]",
		help: `A snapshot is an immutable point in time of the branch the mount shows:
nothing done in the mount afterwards changes it. Taking one costs the
same whatever the size of the files (they are shared until changed).
'agentfs restore ID' brings the mount back to it, 'agentfs diff ID'
shows what changed since, 'agentfs export ID --to DIR' copies it out.

A snapshot is named by its id (8 hex digits), by an unambiguous prefix
of at least 4 of them, or by a tag (agentfs tag).

Examples:
  agentfs snapshot create -m "tests pass"
  agentfs snapshot list
  agentfs snapshot delete 1a2b3c4d`,
	})
	register(&command{
		name:    "snapshot create",
		summary: "take a snapshot of the current branch; print its id",
		usage:   "[-C DIR] [-m LABEL]",
		help: `Create takes a snapshot of the branch the mount shows, as it is now. A
file that a program holds open for writing goes into the snapshot as it
is at this moment; what the program writes afterwards does not. When
the command returns, the snapshot is on disk (it survives a crash of
the daemon). The new id is printed alone on the last line of stdout.

Examples:
  agentfs snapshot create -m "before refactor"
  id=$(agentfs snapshot create -C /mnt/ws | tail -n 1)`,
		setup: func(flags *pflag.FlagSet, out streams) runFunc {
			o := &snapshotCreateOptions{stdout: out.stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runSnapshotCreate(ctx, o, args) }
		},
	})
	register(&command{
		name:    "snapshot list",
		summary: "list the snapshots",
		usage:   "[-C DIR] [--json]",
		help: `List shows every snapshot, oldest first: its id, when it was taken, its
kind (manual: agentfs snapshot create; auto: taken after changes
settled, see agentfs mount --auto-snapshot; git: after a git commit,
tag or checkout; build: after a build or test command succeeded;
idle: when the mount went idle; safety: taken by restore, to undo it;
pre-run: before agentfs run's command ran; post-run: after it ended),
the branch it was taken of, the size it added (the files whose
contents it holds and the snapshot before it of the same branch does
not), its tags and its label.

Examples:
  agentfs snapshot list
  agentfs snapshot list -C /mnt/ws --json`,
		setup: func(flags *pflag.FlagSet, out streams) runFunc {
			o := &listOptions{stdout: out.stdout, stderr: out.stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runSnapshotList(ctx, o, args) }
		},
	})
	register(&command{
		name:    "snapshot show",
		summary: "describe a snapshot, with its Merkle root",
		usage:   "[-C DIR] ID [--json]",
		help: `Show describes one snapshot: its id, kind, branch, time, tags and label,
and its Merkle root, the SHA-256 that commits to every path, type, mode,
symlink target and file contents of the snapshot (docs/store-format.md
defines it, so that other programs can compute it from an export).
Roots are computed after the snapshot is taken, in the background:
while the mount's worker has not got to it, the root shows as pending.
Where no worker runs (an ended session, a mount with --hash=false),
show computes it.

Examples:
  agentfs snapshot show 1a2b
  agentfs snapshot show -s 07c5 1a2b3c4d --json`,
		setup: func(flags *pflag.FlagSet, out streams) runFunc {
			o := &listOptions{stdout: out.stdout, stderr: out.stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runSnapshotShow(ctx, o, args) }
		},
	})
	register(&command{
		name:    "snapshot delete",
		summary: "delete a snapshot",
		usage:   "[-C DIR] ID",
		help: `Delete deletes a snapshot. Branches made from it stay as they are. A
tagged snapshot is kept until its tags are deleted (agentfs tag
--delete NAME). The space its files took comes back at the next
agentfs gc.

Example:
  agentfs snapshot delete 1a2b`,
		setup: func(flags *pflag.FlagSet, out streams) runFunc {
			o := &snapshotDeleteOptions{stdout: out.stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runSnapshotDelete(ctx, o, args) }
		},
	})
}

// snapshotCreateOptions are the flags of agentfs snapshot create.
type snapshotCreateOptions struct {
	mountFlag
	label  string
	branch string
	stdout io.Writer
}

func (o *snapshotCreateOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.StringVarP(&o.label, "message", "m", "", "a `LABEL` that says what the snapshot holds")
	flags.StringVar(&o.branch, "branch", "", "snapshot `BRANCH` (default: the branch this process sees)")
}

func runSnapshotCreate(ctx context.Context, o *snapshotCreateOptions, args []string) error {
	if len(args) != 0 {
		return usagef("snapshot create takes no arguments (a label goes with -m LABEL)")
	}
	info, err := call(&o.mountFlag, func(c *workspace.Client) (ctl.SnapshotInfo, error) {
		return c.CreateSnapshot(ctl.SnapshotCreateArgs{Label: o.label, Branch: o.branch})
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "took snapshot %s of branch %s\n%s\n", info.ID, info.Branch, info.ID)
	return nil
}

func runSnapshotList(ctx context.Context, o *listOptions, args []string) error {
	if len(args) != 0 {
		return usagef("snapshot list takes no arguments")
	}
	list, err := call(&o.mountFlag, func(c *workspace.Client) (ctl.SnapshotList, error) { return c.Snapshots() })
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(o.stdout, list)
	}
	if len(list.Snapshots) == 0 {
		fmt.Fprintln(o.stderr, "no snapshots yet: take one with agentfs snapshot create -m LABEL")
		return nil
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tCREATED\tKIND\tBRANCH\tADDED\tTAGS\tLABEL")
	for _, s := range list.Snapshots {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, timeString(s.Created), s.Kind, printable(s.Branch),
			humanBytes(s.SizeAdded), printable(strings.Join(s.Tags, ",")), printable(s.Label))
	}
	return w.Flush()
}

func runSnapshotShow(ctx context.Context, o *listOptions, args []string) error {
	if len(args) != 1 {
		return usagef("snapshot show takes one snapshot ID, got %d arguments", len(args))
	}
	info, err := call(&o.mountFlag, func(c *workspace.Client) (ctl.SnapshotInfo, error) { return c.ShowSnapshot(args[0]) })
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(o.stdout, info)
	}
	root := info.Root
	switch info.RootStatus {
	case "pending":
		root = "pending (being computed in the background; agentfs verify " + info.ID + " computes it now)"
	case "computed":
		root += fmt.Sprintf(" (%d paths, %s of files)", info.Files, humanBytes(info.Bytes))
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "id:\t%s\nbranch:\t%s\ncreated:\t%s\nkind:\t%s\ntags:\t%s\nlabel:\t%s\nroot:\t%s\n",
		info.ID, printable(info.Branch), timeString(info.Created), info.Kind, printable(strings.Join(info.Tags, ",")), printable(info.Label), root)
	return w.Flush()
}

// snapshotDeleteOptions are the flags of agentfs snapshot delete.
type snapshotDeleteOptions struct {
	mountFlag
	stdout io.Writer
}

func runSnapshotDelete(ctx context.Context, o *snapshotDeleteOptions, args []string) error {
	if len(args) != 1 {
		return usagef("snapshot delete takes one snapshot ID, got %d arguments", len(args))
	}
	info, err := call(&o.mountFlag, func(c *workspace.Client) (ctl.SnapshotInfo, error) { return c.DeleteSnapshot(args[0]) })
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "deleted snapshot %s\n", info.ID)
	return nil
}
