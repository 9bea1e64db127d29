package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/remote"
)

func init() {
	cli.Register(&cli.Command{
		Name:  "remote",
		Usage: "add|ls|rm [FLAGS] [ARGS]",
		Help: `A remote is a bucket and a prefix in S3-compatible object storage (AWS
S3, MinIO, Ceph RGW, SeaweedFS, Cloudflare R2, Versity's gateway) where
agentfs push puts sessions and snapshots, and agentfs pull takes them
from, on any machine. Credentials are the AWS ones: AWS_ACCESS_KEY_ID
and AWS_SECRET_ACCESS_KEY, or a profile of ~/.aws/credentials
(--profile, AWS_PROFILE); agentfs never stores them.

Examples:
  agentfs remote add team s3://agent-runs/acme --endpoint http://127.0.0.1:7070
  agentfs remote ls
  agentfs remote ls team
  agentfs remote rm team`,
	})
	cli.Register(&cli.Command{
		Name:    "remote add",
		Summary: "add a remote",
		Usage:   "NAME s3://BUCKET[/PREFIX] [--endpoint URL] [--region R] [--profile P]",
		Help: `Add records the remote NAME, at the bucket and key prefix of the URL,
in the user's remotes file (${XDG_CONFIG_HOME:-~/.config}/agentfs/remotes.json).
Without --endpoint the store is AWS S3 (or AWS_ENDPOINT_URL_S3,
AWS_ENDPOINT_URL); with it, an S3-compatible store addressed
path-style. Nothing is sent: agentfs remote ls NAME checks that the
bucket and the credentials work.

Examples:
  agentfs remote add team s3://agent-runs/acme --endpoint http://127.0.0.1:7070
  agentfs remote add aws s3://my-bucket/agentfs --region eu-west-1 --profile ci`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &remoteAddOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runRemoteAdd(ctx, o, args) }
		},
	})
	cli.Register(&cli.Command{
		Name:    "remote ls",
		Summary: "list the remotes, or what one holds",
		Usage:   "[NAME] [--json]",
		Help: `Without NAME, ls lists the remotes added. With NAME, it lists what that
remote holds: its sessions (id, state, snapshots, size) and snapshots
(id, session, when, branch, size, label).

Examples:
  agentfs remote ls
  agentfs remote ls team --json`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &remoteLsOptions{stdout: out.Stdout}
			flags.BoolVar(&o.json, "json", false, "print JSON")
			return func(ctx context.Context, args []string) error { return runRemoteLs(ctx, o, args) }
		},
	})
	cli.Register(&cli.Command{
		Name:    "remote rm",
		Summary: "remove a remote (what it holds stays in the bucket)",
		Usage:   "NAME",
		Help: `Rm forgets the remote NAME. Nothing in the bucket is deleted.

Example:
  agentfs remote rm team`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return cli.Usagef("remote rm takes one remote NAME, got %d arguments", len(args))
				}
				c, err := remote.Remove(args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(out.Stdout, "removed remote %s (%s)\n", c.Name, c.URL)
				return nil
			}
		},
	})
}

// remoteAddOptions are the flags of agentfs remote add.
type remoteAddOptions struct {
	endpoint, region, profile string
	stdout                    io.Writer
}

func (o *remoteAddOptions) AddFlags(flags *pflag.FlagSet) {
	flags.StringVar(&o.endpoint, "endpoint", "", "the `URL` of an S3-compatible store (http://HOST:PORT); default: AWS S3")
	flags.StringVar(&o.region, "region", "", "the `REGION` of the bucket (default: AWS_REGION, else asked of the bucket)")
	flags.StringVar(&o.profile, "profile", "", "the `PROFILE` of ~/.aws/credentials to sign with (default: the AWS_* variables, then AWS_PROFILE)")
}

func runRemoteAdd(_ context.Context, o *remoteAddOptions, args []string) error {
	if len(args) != 2 {
		return cli.Usagef("remote add takes a NAME and a URL (s3://BUCKET/PREFIX), got %d arguments", len(args))
	}
	cfg := remote.Config{Name: args[0], URL: args[1], Endpoint: o.endpoint, Region: o.region, Profile: o.profile}
	if err := remote.Add(cfg); err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "added remote %s (%s)\n", cfg.Name, cfg.URL)
	return nil
}

// remoteLsOptions are the flags of agentfs remote ls.
type remoteLsOptions struct {
	json   bool
	stdout io.Writer
}

func runRemoteLs(ctx context.Context, o *remoteLsOptions, args []string) error {
	switch len(args) {
	case 0:
		all, err := remote.Remotes()
		if err != nil {
			return err
		}
		if o.json {
			if all == nil {
				all = []remote.Config{}
			}
			return cli.PrintJSON(o.stdout, all)
		}
		w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
		for _, c := range all {
			fmt.Fprintf(w, "%s\t%s\t%s\n", c.Name, c.URL, cli.Printable(c.Endpoint))
		}
		return w.Flush()
	case 1:
	default:
		return cli.Usagef("remote ls takes at most one remote NAME, got %d arguments", len(args))
	}
	cfg, err := remote.Find(args[0])
	if err != nil {
		return err
	}
	r, err := remote.Open(cfg)
	if err != nil {
		return err
	}
	l, err := r.List(ctx)
	if err != nil {
		return err
	}
	if o.json {
		return cli.PrintJSON(o.stdout, l)
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "sessions of %s (%s):\n", l.Remote, l.URL)
	for _, s := range l.Sessions {
		fmt.Fprintf(w, "  %s\t%s\t%d snapshots\t%s\t%s\n", s.ID, s.State, len(s.Snapshots), cli.HumanBytes(s.Bytes), cli.Printable(s.Project))
	}
	fmt.Fprintf(w, "snapshots:\n")
	for _, s := range l.Snapshots {
		if s.Kind == "branch" {
			continue // a session's branch: the session's line stands for it
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\n", s.ID, cli.Printable(s.Session), cli.TimeString(s.Created), cli.Printable(s.Branch), cli.HumanBytes(s.Bytes), cli.Printable(s.Label))
	}
	return w.Flush()
}
