package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/procfs"
	"github.com/agentfs/agentfs/workspace"
)

func init() {
	cli.Register(&cli.Command{
		Name:    "branch bind",
		Summary: "make this shell (and what it starts) see a branch at the mount",
		Usage:   "[-C DIR] [--pid PID] NAME",
		Help: `Bind makes a process and all its descendants see the branch NAME at the
mount, while every other process keeps seeing the mount's branch: several
shells or agents can work at the same path, each in its own branch, at
once. The process is the one that ran agentfs (your shell), or --pid.
The nearest bound ancestor decides: a process bound inside a bound shell
sees its own branch. A binding ends when its process exits, or with
agentfs branch unbind.

A process whose working directory is inside the mount keeps that
directory, in the branch it was in, until it changes directory: cd to a
path through the mount (cd "$PWD") to see the new branch there, as
after a chroot.

Only the mount's owner and root may bind, and only root may bind
another user's processes.

Examples:
  agentfs branch bind try2          # this shell now sees try2
  agentfs branch bind --pid 4242 try3`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &bindOptions{stdout: out.Stdout, op: ctl.OpBranchBind}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runBind(ctx, o, args) }
		},
	})
	cli.Register(&cli.Command{
		Name:    "branch unbind",
		Summary: "make this shell see the mount's branch again",
		Usage:   "[-C DIR] [--pid PID]",
		Help: `Unbind ends the binding of a process (your shell, or --pid): it and its
descendants see the mount's branch again (see agentfs branch bind).

Example:
  agentfs branch unbind`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &bindOptions{stdout: out.Stdout, op: ctl.OpBranchUnbind}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runBind(ctx, o, args) }
		},
	})
	cli.Register(&cli.Command{
		Name:    "branch current",
		Summary: "say which branch this process sees at the mount",
		Usage:   "[-C DIR] [--pid PID] [--json]",
		Help: `Current prints the branch a process sees at the mount (default: this
one, that is, your shell's), and which bound process decides it.

Examples:
  agentfs branch current
  agentfs branch current --pid 4242 --json`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &bindOptions{stdout: out.Stdout, op: ctl.OpBranchCurrent}
			o.AddFlags(flags)
			flags.BoolVar(&o.json, "json", false, "print JSON")
			return func(ctx context.Context, args []string) error { return runBind(ctx, o, args) }
		},
	})
}

// bindOptions are the flags of agentfs branch bind, unbind and current.
type bindOptions struct {
	mountFlag
	op     ctl.Op
	pid    int
	json   bool
	stdout io.Writer
}

func (o *bindOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.IntVar(&o.pid, "pid", 0, "the process `PID` (default: the shell that runs agentfs)")
}

func runBind(ctx context.Context, o *bindOptions, args []string) error {
	args0 := ctl.BindArgs{Pid: o.pid}
	switch o.op {
	case ctl.OpBranchBind:
		if len(args) != 1 {
			return cli.Usagef("branch bind takes one branch NAME, got %d arguments", len(args))
		}
		args0.Branch = args[0]
	default:
		if len(args) != 0 {
			return cli.Usagef("%s takes no arguments (a process goes with --pid PID)", o.op)
		}
	}
	if o.pid < 0 {
		return cli.Usagef("--pid %d: give the pid of a running process", o.pid)
	}
	if o.pid == 0 && o.op != ctl.OpBranchCurrent {
		// agentfs itself is about to exit: bind the shell that ran it.
		args0.Pid = os.Getppid()
	}
	var info ctl.BindInfo
	err := o.with(func(c *workspace.Client) (err error) {
		switch o.op {
		case ctl.OpBranchBind:
			info, err = c.Bind(args0)
		case ctl.OpBranchUnbind:
			info, err = c.Unbind(args0.Pid)
		default:
			info, err = c.Current(args0.Pid)
		}
		return err
	})
	if err != nil {
		return err
	}
	who := fmt.Sprintf("process %d", info.Pid)
	if info.Command != "" {
		who += " (" + cli.ShortCommand(info.Command) + ")"
	}
	switch o.op {
	case ctl.OpBranchBind:
		fmt.Fprintf(o.stdout, "%s and the processes it starts now see branch %s (agentfs branch unbind ends it)\n", who, cli.Printable(info.Branch))
	case ctl.OpBranchUnbind:
		fmt.Fprintf(o.stdout, "%s is unbound: it sees branch %s, the mount's\n", who, cli.Printable(info.Branch))
	case ctl.OpBranchCurrent:
		if o.json {
			return cli.PrintJSON(o.stdout, info)
		}
		switch info.BoundBy {
		case 0:
			fmt.Fprintf(o.stdout, "%s (the mount's branch: not bound)\n", cli.Printable(info.Branch))
		default:
			fmt.Fprintf(o.stdout, "%s (bound: process %d %s)\n", cli.Printable(info.Branch), info.BoundBy, cli.ShortCommand(procfs.CommandLine(info.BoundBy)))
		}
	}
	return nil
}
