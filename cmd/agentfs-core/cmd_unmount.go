package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/daemon"
)

// unmountOptions are the flags of agentfs unmount.
type unmountOptions struct {
	timeout time.Duration
	stderr  io.Writer
}

func (o *unmountOptions) AddFlags(flags *pflag.FlagSet) {
	flags.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for the daemon to exit before saying what it still does\n(then it waits "+daemon.ExitWait.String()+" more), a `DURATION` such as 30s")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "unmount",
		Usage: "[--timeout DURATION] MOUNTPOINT",
		Help: fmt.Sprintf(`Unmount asks the mount's daemon to unmount and waits for it to exit.
Without a --store, the changes are discarded: the private store is moved
aside at once and deleted in the background, by a process at the lowest
priority that may outlive unmount. A mount that is still in use (a shell
or program inside it) is detached: those programs lose it.

A daemon that has not exited after --timeout is still closing the store
(its log, agentfs.log in the store, says what it does): unmount says so
and waits %v more, then fails with exit code 1, the store still in use
until the daemon exits. Killing it then (kill -9) leaves a kept store as
a crash would, which the next mount resumes (docs/semantics.md, Crash
safety); a private store is deleted by the next agentfs unmount.

If the daemon died, unmount clears the dead mount ("transport endpoint
is not connected") and deletes its private store.

Example:
  agentfs unmount /mnt/ws`, daemon.ExitWait),
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &unmountOptions{stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runUnmount(ctx, o, args) }
		},
	})
}

func runUnmount(ctx context.Context, o *unmountOptions, args []string) error {
	if len(args) != 1 {
		return cli.Usagef("unmount takes one MOUNTPOINT, got %d arguments", len(args))
	}
	mp, err := filepath.Abs(args[0])
	if err != nil {
		return fmt.Errorf("the mountpoint %s: %w", args[0], err)
	}
	// A dead mount cannot be resolved (see ctl.DaemonGone): keep
	// the path as given then.
	if r, err := filepath.EvalSymlinks(mp); err == nil {
		mp = r
	}
	return daemon.Unmount(mp, o.timeout, o.stderr)
}
