package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/activity"
)

// logOptions are the flags of agentfs log.
type logOptions struct {
	mountFlag
	json   bool
	follow bool
	since  string
	tail   int
	stdout io.Writer
	stderr io.Writer
}

func (o *logOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.BoolVar(&o.json, "json", false, "print each entry as one JSON object per line")
	flags.BoolVarP(&o.follow, "follow", "f", false, "keep printing new entries as they come (until interrupted or unmounted)")
	flags.StringVar(&o.since, "since", "", "only entries from `WHEN` on: a duration back from now (10m, 2h) or a time\n(15:04, 2006-01-02 15:04:05, RFC 3339)")
	flags.IntVarP(&o.tail, "lines", "n", 0, "only the last `N` entries (before following)")
}

func init() {
	register(&command{
		name:    "log",
		summary: "show what programs did in the mount (the activity log)",
		usage:   "[-C DIR] [--json] [--follow] [--since WHEN] [-n N]",
		help: `Log shows the mount's activity log: every operation that changed
something in the mount (create, write, rename, unlink, chmod, ...), with
its time, the process and its command line, the branch and the paths.
With 'agentfs mount --log-reads' lookups, opens for reading and
listings are logged too.

A write is logged once per open file: at its first write, or, where the
kernel writes through to the file directly (FUSE passthrough), when the
file is opened for writing. The log lives in the store and is bounded
(agentfs mount --log-size, default 16M): the oldest entries go first.
When programs change files faster than the log can be written, the
entries that did not fit are counted in a "dropped" line.

Each line: time, pid, branch, operation, path(s), command line.
--json prints one object per line: time, pid, tid (when the caller is
not the main thread), uid, command, branch, op, path, path2 (the new
name of a rename or link, the destination of copy_file_range), attrs
(what a setattr changed), count (of a "dropped" line).

Examples:
  agentfs log
  agentfs log -C /mnt/ws --since 10m
  agentfs log --follow --json | jq -r 'select(.op=="unlink") | .path'`,
		setup: func(flags *pflag.FlagSet, out streams) runFunc {
			o := &logOptions{stdout: out.stdout, stderr: out.stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runLog(ctx, o, args) }
		},
	})
}

func runLog(ctx context.Context, o *logOptions, args []string) (err error) {
	if len(args) != 0 {
		return usagef("log takes no arguments")
	}
	if o.tail < 0 {
		return usagef("-n %d: give a count of 0 or more", o.tail)
	}
	since, err := activity.ParseSince(o.since, time.Now())
	if err != nil {
		return usagef("--since %s: %v", o.since, err)
	}
	dir, err := o.storeDir()
	if err != nil {
		return err
	}
	w := bufio.NewWriter(o.stdout)
	defer func() {
		if ferr := w.Flush(); err == nil {
			err = ferr
		}
	}()
	print := func(l activity.Line) error {
		if o.json {
			if _, err := w.Write(l.Raw); err != nil {
				return err
			}
			return w.WriteByte('\n')
		}
		_, err := fmt.Fprintln(w, formatEntry(l.Entry))
		return err
	}
	sel := activity.Selection{Since: since, Tail: o.tail}
	if !o.follow {
		return logError(activity.ReadSelected(dir, activity.Activity, sel, print))
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = activity.FollowSelected(ctx, dir, activity.Activity, 200*time.Millisecond, sel, print, w.Flush)
	if errors.Is(err, activity.ErrGone) {
		if err := w.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(o.stderr, "agentfs log: %v\n", err)
		return nil
	}
	return logError(err)
}

// logError explains an error of reading the log.
func logError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%v: the mount has logged nothing yet, or its daemon is older than the activity log (unmount and mount it again)", err)
	}
	return err
}

// formatEntry is one entry as a line of text.
func formatEntry(e activity.Entry) string {
	t := e.Time.Local().Format("2006-01-02 15:04:05.000")
	if e.Op == activity.OpDropped {
		return fmt.Sprintf("%s  (%d entries dropped: programs changed files faster than the log could be written)", t, e.Count)
	}
	if e.Op == activity.OpRewind {
		return fmt.Sprintf("%s %7s  %-8s %-12s %s", t, "-", printable(e.Branch), e.Op, e.Detail)
	}
	paths := printable(e.Path)
	if e.Path2 != "" {
		paths += " -> " + printable(e.Path2)
	}
	op := e.Op
	if e.Attrs != "" {
		op += "(" + e.Attrs + ")"
	}
	pid := fmt.Sprint(e.Pid)
	if e.Pid == 0 {
		pid = "-"
	}
	return fmt.Sprintf("%s %7s  %-8s %-12s %s  %s", t, pid, printable(e.Branch), op, paths, printable(e.Command))
}
