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
		Name:  "snapshot",
		Usage: "create|list|show|delete|prune [FLAGS] [ARGS]",
		Help: `A snapshot is an immutable point in time of the branch the mount shows:
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
	Register(&Command{
		Name:    "snapshot create",
		Summary: "take a snapshot of the current branch; print its id",
		Usage:   "[-C DIR] [-m LABEL]",
		Help: `Create takes a snapshot of the branch the mount shows, as it is now. A
file that a program holds open for writing goes into the snapshot as it
is at this moment; what the program writes afterwards does not. When
the command returns, the snapshot is on disk (it survives a crash of
the daemon). The new id is printed alone on the last line of stdout.

Examples:
  agentfs snapshot create -m "before refactor"
  id=$(agentfs snapshot create -C /mnt/ws | tail -n 1)`,
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &snapshotCreateOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runSnapshotCreate(ctx, o, args) }
		},
	})
	Register(&Command{
		Name:    "snapshot list",
		Summary: "list the snapshots",
		Usage:   "[-C DIR] [--json]",
		Help: `List shows every snapshot, oldest first: its id, when it was taken, its
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
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &listOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runSnapshotList(ctx, o, args) }
		},
	})
	Register(&Command{
		Name:    "snapshot show",
		Summary: "describe a snapshot, with its Merkle root",
		Usage:   "[-C DIR] ID [--json]",
		Help: `Show describes one snapshot: its id, kind, branch, time, tags and label,
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
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &listOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runSnapshotShow(ctx, o, args) }
		},
	})
	Register(&Command{
		Name:    "snapshot delete",
		Summary: "delete a snapshot",
		Usage:   "[-C DIR] ID",
		Help: `Delete deletes a snapshot. Branches made from it stay as they are. A
tagged snapshot is kept until its tags are deleted (agentfs tag
--delete NAME). The space its files took comes back at the next
agentfs gc.

Example:
  agentfs snapshot delete 1a2b`,
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &snapshotDeleteOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runSnapshotDelete(ctx, o, args) }
		},
	})
}

// snapshotCreateOptions are the flags of agentfs snapshot create.
type snapshotCreateOptions struct {
	MountFlag
	label  string
	branch string
	stdout io.Writer
}

func (o *snapshotCreateOptions) AddFlags(flags *pflag.FlagSet) {
	o.MountFlag.AddFlags(flags)
	flags.StringVarP(&o.label, "message", "m", "", "a `LABEL` that says what the snapshot holds")
	flags.StringVar(&o.branch, "branch", "", "snapshot `BRANCH` (default: the branch this process sees)")
}

func runSnapshotCreate(ctx context.Context, o *snapshotCreateOptions, args []string) error {
	if len(args) != 0 {
		return Usagef("snapshot create takes no arguments (a label goes with -m LABEL)")
	}
	info, err := call[ctl.SnapshotInfo](&o.MountFlag, ctl.OpSnapshotCreate, ctl.SnapshotCreateArgs{Label: o.label, Branch: o.branch})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "took snapshot %s of branch %s\n%s\n", info.ID, info.Branch, info.ID)
	return nil
}

func runSnapshotList(ctx context.Context, o *listOptions, args []string) error {
	if len(args) != 0 {
		return Usagef("snapshot list takes no arguments")
	}
	list, err := call[ctl.SnapshotList](&o.MountFlag, ctl.OpSnapshotList, nil)
	if err != nil {
		return err
	}
	if o.json {
		return PrintJSON(o.stdout, list)
	}
	if len(list.Snapshots) == 0 {
		fmt.Fprintln(o.stderr, "no snapshots yet: take one with agentfs snapshot create -m LABEL")
		return nil
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tCREATED\tKIND\tBRANCH\tADDED\tTAGS\tLABEL")
	for _, s := range list.Snapshots {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, TimeString(s.Created), s.Kind, Printable(s.Branch),
			HumanBytes(s.SizeAdded), Printable(strings.Join(s.Tags, ",")), Printable(s.Label))
	}
	return w.Flush()
}

func runSnapshotShow(ctx context.Context, o *listOptions, args []string) error {
	if len(args) != 1 {
		return Usagef("snapshot show takes one snapshot ID, got %d arguments", len(args))
	}
	info, err := call[ctl.SnapshotInfo](&o.MountFlag, ctl.OpSnapshotShow, ctl.SnapshotRef{Ref: args[0]})
	if err != nil {
		return err
	}
	if o.json {
		return PrintJSON(o.stdout, info)
	}
	root := info.Root
	switch info.RootStatus {
	case "pending":
		root = "pending (being computed in the background; agentfs verify " + info.ID + " computes it now)"
	case "computed":
		root += fmt.Sprintf(" (%d paths, %s of files)", info.Files, HumanBytes(info.Bytes))
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "id:\t%s\nbranch:\t%s\ncreated:\t%s\nkind:\t%s\ntags:\t%s\nlabel:\t%s\nroot:\t%s\n",
		info.ID, Printable(info.Branch), TimeString(info.Created), info.Kind, Printable(strings.Join(info.Tags, ",")), Printable(info.Label), root)
	return w.Flush()
}

// snapshotDeleteOptions are the flags of agentfs snapshot delete.
type snapshotDeleteOptions struct {
	MountFlag
	stdout io.Writer
}

func runSnapshotDelete(ctx context.Context, o *snapshotDeleteOptions, args []string) error {
	if len(args) != 1 {
		return Usagef("snapshot delete takes one snapshot ID, got %d arguments", len(args))
	}
	info, err := call[ctl.SnapshotInfo](&o.MountFlag, ctl.OpSnapshotDelete, ctl.SnapshotRef{Ref: args[0]})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "deleted snapshot %s\n", info.ID)
	return nil
}
