package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/mcpserver"
)

// mcpOptions are the flags of agentfs mcp.
type mcpOptions struct {
	mountFlag
	allowApply bool
	stderr     io.Writer
}

func (o *mcpOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.BoolVar(&o.allowApply, "allow-apply", false, "also offer the apply tool, which writes the user's project")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "mcp",
		Usage: "[-C DIR | -s SESSION] [--allow-apply]",
		Help: `Mcp is a Model Context Protocol server over stdin and stdout, for an agent
host to start: it serves the mount that holds the current directory (or
DIR), or session SESSION, as tools a model can call: status, checkpoint,
list_checkpoints, changes, rewind, branch_create, branch_list,
run_in_branch, activity, and, with --allow-apply, apply (which writes the
user's project, with the same conflict checks as agentfs apply). Each
call runs the CLI's operations on the mount (status and rewind several,
each consistent but not atomic together); several servers may serve
one mount at once. Diagnostics go to stderr.

In an agent host's configuration (Claude Code's .mcp.json, for one):
  {"mcpServers": {"agentfs": {"command": "agentfs", "args": ["mcp"]}}}

Examples:
  agentfs run -- claude                 # claude starts agentfs mcp in the session
  agentfs mcp -s a3f9                   # a session, from outside it
  agentfs mcp -C /mnt/ws --allow-apply`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &mcpOptions{stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runMCP(ctx, o, args) }
		},
	})
}

func runMCP(ctx context.Context, o *mcpOptions, args []string) error {
	if len(args) != 0 {
		return cli.Usagef("mcp takes no arguments")
	}
	if o.Dir != "" && o.Session != "" {
		return cli.Usagef("-C DIR and -s SESSION both name what to serve: give one")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(o.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return mcpserver.Serve(ctx, mcpserver.Options{Dir: o.Dir, Session: o.Session, AllowApply: o.allowApply,
		Agentfs: self, Version: cli.Version, Logger: log})
}
