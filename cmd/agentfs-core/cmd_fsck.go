package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

// fsckOptions are the flags of agentfs fsck.
type fsckOptions struct {
	mountFlag
	repair         bool
	json           bool
	stdout, stderr io.Writer
}

func (o *fsckOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.BoolVar(&o.repair, "repair", false, "repair what can be repaired without guessing, and remove garbage")
	flags.BoolVar(&o.json, "json", false, "print JSON")
}

const fsckExitCodes = `Exit codes:
  0  the store is clean (or --repair repaired everything)
  1  problems remain (listed), or an error (the message says what went wrong)
  2  usage error (unknown command or flag, wrong arguments)
`

func init() {
	cli.Register(&cli.Command{
		Name:  "fsck",
		Usage: "[-C DIR] [--repair] [--json]",
		Help: `Fsck checks that every entry of every branch and snapshot names a file
of the right type in the backstore, that the project files copied-up
files came from are still there, and that no file in the backstore is
left that nothing uses (garbage; files changed in the last minute are
only noted, a change may be using them).

With --repair it repairs what it can without guessing: an entry of a
branch whose file is lost is deleted (or, where the project has a file
at that path, turned into a deletion), a directory gets a new empty
one so that the changes below it stay; garbage is removed. Snapshots
never change: their problems are only reported. The mount then shows
the repaired branch to every process.

Examples:
  agentfs fsck
  agentfs fsck --repair -C /mnt/ws`,
		ExitCodes: fsckExitCodes,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &fsckOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runFsck(ctx, o, args) }
		},
	})
}

func runFsck(ctx context.Context, o *fsckOptions, args []string) error {
	if len(args) != 0 {
		return cli.Usagef("fsck takes no arguments")
	}
	rep, err := callWithProgress(&o.mountFlag, o.stderr, o.json, func(c *workspace.Client) (ctl.FsckReply, error) {
		return c.Fsck(ctl.FsckArgs{Repair: o.repair})
	})
	if err != nil {
		return err
	}
	if o.json {
		err = cli.PrintJSON(o.stdout, rep)
	} else {
		_, err = io.WriteString(o.stdout, rep.Report)
	}
	if err == nil && rep.Failed() {
		hint := "run agentfs fsck --repair"
		if o.repair {
			hint = "what is left cannot be repaired without guessing"
		}
		return errors.New("the store has problems (listed above): " + hint)
	}
	return err
}
