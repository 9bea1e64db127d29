// Command agentfs-bench runs the same developer workloads on a native
// directory, the kernel's overlayfs, fuse-overlayfs and agentfs, and
// reports every figure as a ratio to native, measured in the same run.
//
// # Method
//
// The tree is a copy of the Go distribution's src directory, made a git
// repository with one commit, plus one large file (1 GiB; 64 MiB with
// --quick) and a small Go module. It is built once in the work directory
// and reused while the Go version and the sizes stay the same. Native
// runs on its own copy of that tree; the overlays all use it as their
// lower directory, with uppers in the same work directory, so that every
// filesystem stores its bytes on the same disk.
//
// For each workload, for each run (warm-ups first), each filesystem runs
// in turn, so that drift (other load, writeback, thermal) touches them
// all alike; the order rotates by one filesystem each run. Before each
// timed run the program calls sync(2), so that no earlier writeback is
// charged to the run. Workloads that change the tree get a fresh view
// for each run (a new mount with an empty upper; for native, a fresh
// copy of what the workload touches), made and removed outside the
// timed region. The others share one mount per filesystem for all their
// runs.
//
// agentfs-untraced is agentfs mounted with --trace=false: beside agentfs,
// it shows what the exec trace costs each workload (a line under the
// first table; spawn, a shell loop of programs, is the workload the
// trace records most of).
//
// Every agentfs mount takes a snapshot once it is up, before the timed
// runs, as agentfs run takes its pre-run snapshot: its hash worker then
// hashes the whole tree in the background while the workloads run.
// agentfs-nohash is agentfs mounted with --hash=false: beside agentfs,
// it shows what that costs the workloads (a line under the first
// table).
//
// With --baseline, a second agentfs binary runs as one more filesystem,
// agentfs-baseline, mounted as agentfs is, so that two builds are
// compared in one interleaved run (the first table only).
//
// A second table times agentfs's snapshot, branch and restore commands
// (agentfs alone has them) as a user runs them, each beside cp -a of the
// same changed set on the native filesystem, measured in the same run:
// each run gets a fresh mount, its changes made just before the timed
// command (see snapshots.go).
//
// # Output
//
// The markdown tables on stdout and in OUT/results.md, the raw numbers
// with the machine's description in OUT/results.json, and a bar chart
// of the first table's ratios in OUT/results.png.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a mistake in how the program was called (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

const usageText = `agentfs-bench runs developer workloads (git status, find, grep, small
files, large sequential I/O, copy-up, rm -rf, untar, go vet, a shell loop
of 5,000 programs) on a native directory, overlayfs, fuse-overlayfs,
agentfs, agentfs-untraced (--trace=false: what the exec trace
costs) and agentfs-nohash (--hash=false: what hashing the snapshot
taken at mount costs), interleaved, and reports medians and ratios to native. A second table times agentfs's
snapshot, branch and restore commands (agentfs only) beside cp -a of the
same changed set on native. With --baseline, a second agentfs binary
runs beside the first as agentfs-baseline, for an A/B comparison.

Usage:
  agentfs-bench [FLAGS]

Examples:
  agentfs-bench --agentfs bin/agentfs                 # everything, as make bench does
  agentfs-bench --quick --only find,grep --fs native,agentfs
  agentfs-bench --only snapshots                      # the snapshot table alone
  agentfs-bench --only snapshot-5k,restore-5k --runs 3
  agentfs-bench --baseline /tmp/agentfs-main          # A/B: agentfs beside another build
  agentfs-bench --quick --only find --fs native,agentfs,agentfs-baseline --baseline /tmp/agentfs-main
  agentfs-bench --only spawn --fs native,agentfs,agentfs-untraced --runs 10   # the exec trace's cost
  agentfs-bench --only write-small,untar --fs native,agentfs,agentfs-nohash   # the hash worker's cost

Overlayfs and cold reads need root; fuse-overlayfs needs the
fuse-overlayfs program. A filesystem that cannot run is left out with a
note, not an error.

Exit codes:
  0  success (a workload that failed on one filesystem is reported in the table)
  1  error (the message says what went wrong and how to fix it)
  2  usage error (unknown or bad flag)

Flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// newFlagSet makes the flag set of o, silent on errors (run reports them).
func newFlagSet(o *options) *pflag.FlagSet {
	flags := pflag.NewFlagSet("agentfs-bench", pflag.ContinueOnError)
	flags.SetOutput(io.Discard)
	o.AddFlags(flags)
	return flags
}

func run(args []string, stdout, stderr io.Writer) int {
	o := &options{}
	flags := newFlagSet(o)
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			flags.SetOutput(stdout)
			flags.PrintDefaults()
			return exitOK
		}
		fmt.Fprintf(stderr, "agentfs-bench: %v (see agentfs-bench --help)\n", err)
		return exitUsage
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "agentfs-bench: unexpected arguments %q: everything is set with flags (see agentfs-bench --help)\n", flags.Args())
		return exitUsage
	}
	cfg, err := o.config(flags)
	if err != nil {
		fmt.Fprintf(stderr, "agentfs-bench: %v\n", err)
		var u usageError
		if errors.As(err, &u) {
			return exitUsage
		}
		return exitError
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for range sigs {
			fmt.Fprintln(stderr, "agentfs-bench: interrupted: stopping and unmounting everything (this can take a few seconds)")
			cancel()
		}
	}()

	if err := runBench(ctx, cfg, stdout, stderr); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "agentfs-bench: interrupted; everything mounted was unmounted")
		} else {
			fmt.Fprintf(stderr, "agentfs-bench: %v\n", err)
		}
		return exitError
	}
	return exitOK
}
