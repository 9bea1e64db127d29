package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/cli"
)

// logOptions are the flags of agentfs log.
type logOptions struct {
	mountFlag
	json   bool
	exec   bool
	follow bool
	since  string
	tail   int
	stdout io.Writer
	stderr io.Writer
}

func (o *logOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.BoolVar(&o.json, "json", false, "print each entry as one JSON object per line")
	flags.BoolVar(&o.exec, "exec", false, "show the commands the processes ran (the exec trace) instead of what they did in the mount")
	flags.BoolVarP(&o.follow, "follow", "f", false, "keep printing new entries as they come (until interrupted or unmounted)")
	flags.StringVar(&o.since, "since", "", "only entries from `WHEN` on: a duration back from now (10m, 2h) or a time\n(15:04, 2006-01-02 15:04:05, RFC 3339)")
	flags.IntVarP(&o.tail, "lines", "n", 0, "only the last `N` entries (before following)")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "log",
		Usage: "[-C DIR | -s SESSION] [--exec] [--json] [--follow] [--since WHEN] [-n N]",
		Help: `Log shows the mount's activity log: every operation that changed
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

Each line: time, pid, branch, operation, path(s), command line (the
one the exec trace recorded for the process, when /proc had none).
--json prints one object per line: time, pid, tid (when the caller is
not the main thread), uid, command, branch, op, path, path2 (the new
name of a rename or link, the destination of copy_file_range), attrs
(what a setattr changed), count (of a "dropped" line).

With --exec, log shows the exec trace instead: every program the
session's processes started (for a plain mount, the processes working
in the mount, and what they started), inside the project or not, one
line per command in the order they started: the start time, pid,
parent pid, how it ended (exit N, the signal, or exec'd: the process
went on to another program, on the next line), how long it ran, its
working directory and its arguments (the first 4096 bytes; "…" marks
a cut). A command still running shows "running". The first line says
whether commands are traced, and why not: tracing needs root and a
kernel with eBPF and BTF (agentfs status says the same). With
--follow, each command is shown as it ends. --json prints the entries
as objects: op "exit" (time is the end; start, exit or signal,
duration_ns, ppid, uid, argv, argv_cut, cwd), op "exec" for one that
runs (time is the start), op "trace" and "dropped"; with --follow an
"exec" object comes as each command starts, an "exit" one as it ends.

Examples:
  agentfs log
  agentfs log -C /mnt/ws --since 10m
  agentfs log --follow --json | jq -r 'select(.op=="unlink") | .path'
  agentfs log -s SESSION --exec
  agentfs log -s SESSION --exec --json | jq -r 'select(.exit != 0 and .op == "exit") | .argv | join(" ")'`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &logOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runLog(ctx, o, args) }
		},
	})
}

func runLog(ctx context.Context, o *logOptions, args []string) (err error) {
	if len(args) != 0 {
		return cli.Usagef("log takes no arguments")
	}
	if o.tail < 0 {
		return cli.Usagef("-n %d: give a count of 0 or more", o.tail)
	}
	since, err := activity.ParseSince(o.since, time.Now())
	if err != nil {
		return cli.Usagef("--since %s: %v", o.since, err)
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
	sel := activity.Selection{Since: since, Tail: o.tail}
	if o.exec {
		return runLogExec(ctx, o, dir, sel, w)
	}
	// The exec trace knows the command of a process /proc no longer had.
	execs, err := activity.ReadExecIndex(dir)
	if err != nil {
		fmt.Fprintf(o.stderr, "agentfs log: the exec log: %v (commands are shown as /proc had them)\n", err)
		execs = nil
	}
	print := func(l activity.Line) error {
		filled := false
		if l.Command == "" && l.Pid != 0 && execs != nil {
			if argv, ok := execs.Command(l.Pid, l.Time); ok {
				l.Command, filled = activity.CommandLine(argv, 4096), true
			}
		}
		if o.json {
			raw := l.Raw
			if filled {
				// As the log writes it: no HTML escaping.
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(l.Entry); err != nil {
					return err
				}
				raw = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
			}
			if _, err := w.Write(raw); err != nil {
				return err
			}
			return w.WriteByte('\n')
		}
		_, err := fmt.Fprintln(w, formatEntry(l.Entry))
		return err
	}
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

// runLogExec is agentfs log --exec.
func runLogExec(ctx context.Context, o *logOptions, dir string, sel activity.Selection, w *bufio.Writer) error {
	live := false // following: commands come as they end
	print := func(l activity.Line) error {
		if o.json {
			if _, err := w.Write(l.Raw); err != nil {
				return err
			}
			return w.WriteByte('\n')
		}
		if live && l.Op == activity.OpExec {
			return nil // shown when it ends
		}
		_, err := fmt.Fprintln(w, formatExec(l.Entry))
		return err
	}
	if !o.follow {
		lines, err := activity.ReadExecs(dir, sel)
		if err != nil {
			return execLogError(err)
		}
		for _, l := range lines {
			if err := print(l); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := activity.FollowExecs(ctx, dir, 200*time.Millisecond, sel, print, func() error {
		live = true
		return w.Flush()
	})
	if errors.Is(err, activity.ErrGone) {
		if err := w.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(o.stderr, "agentfs log: %v\n", err)
		return nil
	}
	return execLogError(err)
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

// execLogError explains an error of reading the exec log.
func execLogError(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%v: commands were not traced: the mount's daemon is older than the exec trace (unmount and mount it again)", err)
	}
	return err
}

// formatExec is one command of the exec log as a line of text: start,
// pid, parent, how it ended, how long it ran, directory, arguments.
func formatExec(e activity.Entry) string {
	switch e.Op {
	case activity.OpDropped:
		return fmt.Sprintf("%s  (%d commands dropped: they started faster than they could be recorded)", e.Time.Local().Format("2006-01-02 15:04:05.000"), e.Count)
	case activity.OpTrace:
		what := "commands are traced"
		if strings.HasPrefix(e.Detail, "off") {
			what = "commands are NOT traced"
		}
		return fmt.Sprintf("%s  %s (%s)", e.Time.Local().Format("2006-01-02 15:04:05.000"), what, cli.Printable(e.Detail))
	}
	start, status, took := e.Time, "running", "-"
	if e.Op == activity.OpExec && e.Detail == activity.Replaced {
		status, took = "exec'd", formatTook(time.Duration(e.DurationNs)) // replaced by its next program
	}
	if e.Op == activity.OpExit {
		if !e.Start.IsZero() {
			start = e.Start
		}
		switch {
		case e.Exit != nil:
			status = fmt.Sprintf("exit %d", *e.Exit)
		case e.Signal != 0:
			status = unix.SignalName(syscall.Signal(e.Signal))
			if status == "" {
				status = fmt.Sprintf("signal %d", e.Signal)
			}
		default:
			status = "ended"
		}
		took = formatTook(time.Duration(e.DurationNs))
	}
	cmd := activity.CommandLine(e.Argv, 1<<16)
	if e.ArgvCut {
		cmd += "…"
	}
	return fmt.Sprintf("%s %7d %7d  %-9s %8s  %s  %s", start.Local().Format("2006-01-02 15:04:05.000"), e.Pid, e.Ppid, status, took,
		cli.Printable(e.Cwd), cli.Printable(cmd))
}

// formatTook writes a duration in a column: 3ms, 1.25s, 2m03s.
func formatTook(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

// formatEntry is one entry as a line of text.
func formatEntry(e activity.Entry) string {
	t := e.Time.Local().Format("2006-01-02 15:04:05.000")
	if e.Op == activity.OpDropped {
		return fmt.Sprintf("%s  (%d entries dropped: programs changed files faster than the log could be written)", t, e.Count)
	}
	if e.Op == activity.OpRewind {
		return fmt.Sprintf("%s %7s  %-8s %-12s %s", t, "-", cli.Printable(e.Branch), e.Op, e.Detail)
	}
	paths := cli.Printable(e.Path)
	if e.Path2 != "" {
		paths += " -> " + cli.Printable(e.Path2)
	}
	op := e.Op
	if e.Attrs != "" {
		op += "(" + e.Attrs + ")"
	}
	pid := fmt.Sprint(e.Pid)
	if e.Pid == 0 {
		pid = "-"
	}
	return fmt.Sprintf("%s %7s  %-8s %-12s %s  %s", t, pid, cli.Printable(e.Branch), op, paths, cli.Printable(e.Command))
}
