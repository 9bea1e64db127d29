package main

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
)

// versionOptions are the flags of agentfs version (none).
type versionOptions struct {
	stdout io.Writer
}

func (o *versionOptions) AddFlags(*pflag.FlagSet) {}

func init() {
	register(&command{
		name:    "version",
		summary: "print the version",
		usage:   "",
		help:    "Version prints the agentfs version, the Go version it was built with and\nthe control protocol version it speaks.\n\nExample:\n  agentfs version",
		setup: func(flags *pflag.FlagSet, out streams) runFunc {
			o := &versionOptions{stdout: out.stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runVersion(ctx, o, args) }
		},
	})
}

func runVersion(ctx context.Context, o *versionOptions, args []string) error {
	if len(args) != 0 {
		return usagef("version takes no arguments")
	}
	_, err := fmt.Fprintf(o.stdout, "agentfs %s (%s, control protocol %d)\n", version, runtime.Version(), ctl.Version)
	return err
}
