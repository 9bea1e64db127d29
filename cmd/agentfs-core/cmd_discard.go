package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/session"
)

// discardOptions are the flags of agentfs discard.
type discardOptions struct {
	session string
	stdout  io.Writer
}

func (o *discardOptions) AddFlags(flags *pflag.FlagSet) {
	flags.StringVarP(&o.session, "session", "s", "", "the `SESSION` to discard (an id, or its start or end)")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "discard",
		Usage: "-s SESSION",
		Help: `Discard deletes the store of an agentfs run session: its changes, its
snapshots and branches are gone; the project is not touched (it never
was). The session stays listed by agentfs sessions --all, as discarded.
A running session cannot be discarded: end its command first.

Example:
  agentfs discard -s 20261121-140305-a3f9`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &discardOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runDiscard(ctx, o, args) }
		},
	})
}

func runDiscard(ctx context.Context, o *discardOptions, args []string) error {
	if len(args) != 0 {
		return cli.Usagef("discard takes no arguments: name the session with -s SESSION")
	}
	if o.session == "" {
		return cli.Usagef("which session? name it with -s SESSION (agentfs sessions lists them)")
	}
	r, err := session.Find(o.session)
	if err != nil {
		return err
	}
	size, err := r.Discard()
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "discarded session %s (%s freed); the project %s was not touched\n", r.ID, cli.HumanBytes(size), r.Project)
	return nil
}
