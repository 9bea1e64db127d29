package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
)

// tagOptions are the flags of agentfs tag.
type tagOptions struct {
	MountFlag
	delete bool
	stdout io.Writer
}

func (o *tagOptions) AddFlags(flags *pflag.FlagSet) {
	o.MountFlag.AddFlags(flags)
	flags.BoolVarP(&o.delete, "delete", "d", false, "delete the tag NAME (its snapshot stays)")
}

func init() {
	Register(&Command{
		Name:  "tag",
		Usage: "[-C DIR] NAME ID | --delete NAME",
		Help: `Tag gives the snapshot ID the name NAME, which every command then
accepts in place of the id; an existing tag moves to ID. A tagged
snapshot cannot be deleted until its tags are. Without arguments, tag
lists the tags.

Names: 1 to 100 bytes, no "/" or control characters, not starting with
"-", not "." or "..", and not 4 to 8 hex digits (those read as ids).

Examples:
  agentfs tag good 1a2b3c4d
  agentfs restore good
  agentfs tag --delete good`,
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &tagOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runTag(ctx, o, args) }
		},
	})
}

func runTag(ctx context.Context, o *tagOptions, args []string) error {
	switch {
	case o.delete && len(args) != 1:
		return Usagef("tag --delete takes one tag NAME, got %d arguments", len(args))
	case o.delete:
		deleted, err := call[ctl.TagArgs](&o.MountFlag, ctl.OpTagDelete, ctl.TagArgs{Name: args[0]})
		if err != nil {
			return err
		}
		fmt.Fprintf(o.stdout, "deleted tag %s (of snapshot %s)\n", Printable(deleted.Name), deleted.Ref)
		return nil
	case len(args) == 0:
		return o.list()
	case len(args) != 2:
		return Usagef("tag takes a NAME and a snapshot ID, got %d arguments", len(args))
	}
	info, err := call[ctl.SnapshotInfo](&o.MountFlag, ctl.OpTagSet, ctl.TagArgs{Name: args[0], Ref: args[1]})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "tagged snapshot %s %s\n", info.ID, Printable(args[0]))
	return nil
}

// list prints every tag and its snapshot.
func (o *tagOptions) list() error {
	list, err := call[ctl.SnapshotList](&o.MountFlag, ctl.OpSnapshotList, nil)
	if err != nil {
		return err
	}
	type row struct{ tag, id, label string }
	var rows []row
	for _, s := range list.Snapshots {
		for _, t := range s.Tags {
			rows = append(rows, row{t, s.ID, s.Label})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].tag < rows[j].tag })
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\n", Printable(r.tag), r.id, Printable(r.label))
	}
	return w.Flush()
}
