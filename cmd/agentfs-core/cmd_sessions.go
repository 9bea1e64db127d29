package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/session"
)

// sessionsOptions are the flags of agentfs sessions.
type sessionsOptions struct {
	json, all      bool
	stdout, stderr io.Writer
}

func (o *sessionsOptions) AddFlags(flags *pflag.FlagSet) {
	flags.BoolVar(&o.json, "json", false, "print JSON")
	flags.BoolVar(&o.all, "all", false, "list the discarded sessions too")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "sessions",
		Usage: "[--all] [--json]",
		Help: `Sessions lists the sessions of agentfs run, oldest first: the id, the
kind (project, or system for agentfs run --system), the
state (running, ended, applied, discarded), the command's exit code,
when it started and ended, how many snapshots the session holds, how
many paths it created, modified and deleted in the project's view,
the project and the command. A running session's numbers come from its
daemon, an ended one's from its store. Discarded sessions show with
--all.

Name a session in other commands with -s and its id, or the id's start
or its last part (the 4 hex digits).

Examples:
  agentfs sessions
  agentfs sessions --json
  agentfs diff -s a3f9`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &sessionsOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runSessions(ctx, o, args) }
		},
	})
}

// sessionInfo is one session in agentfs sessions --json: its record,
// with the state as its processes show it.
type sessionInfo struct {
	session.Record
	State string `json:"state"`
	// Kind is the session's kind (project or system), for records made
	// before kinds too.
	Kind string `json:"kind"`
	// Snapshots and Changes are read now (nil when the store is gone
	// or could not be read: Problem says why).
	Snapshots *int             `json:"snapshots,omitempty"`
	Changes   *session.Summary `json:"changes,omitempty"`
	Problem   string           `json:"problem,omitempty"`
}

// sessionList is the output of agentfs sessions --json.
type sessionList struct {
	Sessions []sessionInfo `json:"sessions"`
}

func runSessions(ctx context.Context, o *sessionsOptions, args []string) error {
	if len(args) != 0 {
		return cli.Usagef("sessions takes no arguments")
	}
	recs, err := session.List()
	if err != nil {
		return err
	}
	list := sessionList{Sessions: []sessionInfo{}}
	for _, r := range recs {
		state := r.Live()
		if state == session.StateDiscarded && !o.all {
			continue
		}
		info := sessionInfo{Record: *r, State: state, Kind: r.KindOf()}
		if state != session.StateDiscarded && state != session.StateStarting {
			if err := readSessionNumbers(r, &info); err != nil {
				info.Problem = err.Error()
			}
		}
		list.Sessions = append(list.Sessions, info)
	}
	if o.json {
		return cli.PrintJSON(o.stdout, list)
	}
	if len(list.Sessions) == 0 {
		fmt.Fprintln(o.stderr, "no sessions: start one with agentfs run -- COMMAND")
		return nil
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tKIND\tSTATE\tEXIT\tSTARTED\tENDED\tSNAPSHOTS\tCREATED\tMODIFIED\tDELETED\tPROJECT\tCOMMAND")
	for _, s := range list.Sessions {
		exit, ended, snaps := "-", "-", "-"
		created, modified, deleted := "-", "-", "-"
		if s.ExitCode != nil {
			exit = strconv.Itoa(*s.ExitCode)
		}
		if s.Ended != nil {
			ended = cli.TimeString(*s.Ended)
		}
		if s.Snapshots != nil {
			snaps = strconv.Itoa(*s.Snapshots)
		}
		if c := s.Changes; c != nil {
			created, modified, deleted = strconv.Itoa(c.Created), strconv.Itoa(c.Modified), strconv.Itoa(c.Deleted)
		}
		state := s.State
		if s.Supervised {
			// A supervised run says so, with its relaunches.
			state += fmt.Sprintf(" (supervised, %d relaunches)", len(s.Relaunches))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.KindOf(), state, exit, cli.TimeString(s.Started), ended,
			snaps, created, modified, deleted, cli.Printable(s.Project), cli.Printable(session.ShellQuote(s.Command)))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, s := range list.Sessions {
		if s.Problem != "" {
			fmt.Fprintf(o.stderr, "agentfs sessions: %s: %s\n", s.ID, s.Problem)
		}
	}
	return nil
}

// readSessionNumbers fills in the snapshots and changes of session r,
// from its daemon or its store.
func readSessionNumbers(r *session.Record, info *sessionInfo) error {
	n, sum, err := r.Numbers(cli.Version)
	if n > 0 || err == nil {
		info.Snapshots = &n
	}
	if err != nil {
		return err
	}
	info.Changes = &sum
	return nil
}
