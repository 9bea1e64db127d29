package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/tournament"
	"github.com/agentfs/agentfs/workspace"
)

func init() {
	cli.Register(&cli.Command{
		Name:  "tournament",
		Usage: "--from REF --test CMD [-C DIR] [--name PREFIX] [--merge] [--prune] -- CANDIDATE...",
		Help: `Tournament runs several candidate commands at once at the same path, each
in a branch of its own made from the snapshot REF, then runs the test
command in each branch and reports, per candidate: its exit code, how
long it ran, the test's exit code and what it changed (files created,
modified, deleted; bytes). The first candidate, in the order given, whose
test passes wins: a snapshot of its branch is tagged "winner" and the
report names it. The other branches are kept to look at (agentfs diff
REF BRANCH) unless --prune deletes them.

With --merge, every candidate that passed (the winners), in the order
given, is merged into the branch this process sees, as agentfs merge
does: three-way from REF, so that the good parts of several attempts
end up in one branch. Each merge prints its changes, its conflicts and
its undo; a later winner's changes to the same lines as an earlier
one's leave conflict markers. --prune then keeps every winner's branch.

Each candidate and each test is a shell command (sh -c), started in the
current directory (or the mount root when the current directory is not
inside the mount), with output to a log file named in the report.
Ctrl-C stops every candidate and test.

Example:
  agentfs tournament --from before-refactor --test "make test" -- \
      "agent --seed 1" "agent --seed 2" "agent --seed 3"
  agentfs tournament --from start --test "make test" --merge -- "agent --part a" "agent --part b"`,
		ExitCodes: `Exit codes:
  0  a candidate won (with --merge: and the merges left no conflict)
  1  no candidate passed its test, the merges left conflicts (--merge),
     or an error (the message says which)
  2  usage error
  130 interrupted (Ctrl-C)
`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &tournamentOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runTournament(ctx, o, args) }
		},
	})
}

// tournamentOptions are the flags of agentfs tournament.
type tournamentOptions struct {
	mountFlag
	from, test, name string
	prune, merge     bool
	stdout, stderr   io.Writer
}

func (o *tournamentOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.StringVar(&o.from, "from", "", "the snapshot `REF` every branch starts from (id, prefix or tag)")
	flags.StringVar(&o.test, "test", "", "the test `CMD` run in each branch after its candidate (sh -c)")
	flags.StringVar(&o.name, "name", "", "the `PREFIX` of the branch names (default: tour-TIME); branch i is PREFIX-i")
	flags.BoolVar(&o.prune, "prune", false, "delete the branches of the candidates that did not win")
	flags.BoolVar(&o.merge, "merge", false, "merge every candidate that passed into the current branch (as agentfs merge)")
}

// errInterrupted ends a tournament stopped by a signal (exit 130).
var errInterrupted = cli.ExitCodeError{Code: 130, Msg: "tournament interrupted: every candidate was stopped"}

func runTournament(ctx context.Context, o *tournamentOptions, args []string) (err error) {
	switch {
	case o.from == "":
		return cli.Usagef("tournament needs --from REF: the snapshot every candidate starts from (agentfs snapshot list)")
	case o.test == "":
		return cli.Usagef("tournament needs --test CMD: the command that tells whether a candidate passed")
	case len(args) == 0:
		return cli.Usagef("tournament needs candidates: agentfs tournament --from REF --test CMD -- \"cmd 1\" \"cmd 2\"")
	}
	root, err := ctl.FindMount(o.Dir)
	if err != nil {
		return err
	}
	dir := root
	if wd, err := os.Getwd(); err == nil && o.Dir == "" {
		if r, err := ctl.FindMount(wd); err == nil && r == root {
			dir = wd
		}
	}
	c, err := workspace.Dial(root)
	if err != nil {
		return err
	}
	defer closeClient(c)
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the agentfs binary: %w", err)
	}
	prefix := o.name
	if prefix == "" {
		prefix = "tour-" + time.Now().Format("20060102-150405")
	}
	r, err := tournament.Run(tournament.Options{Client: c, Root: root, Dir: dir, From: o.from, Test: o.test, Prefix: prefix,
		Candidates: args, Prune: o.prune, Merge: o.merge, Agentfs: self, Started: func(r *tournament.Result) {
			fmt.Fprintf(o.stdout, "tournament: %d candidates from snapshot %s, in branches %s-1..%d; logs in %s\n", len(r.Candidates), r.Snapshot, prefix, len(r.Candidates), r.Logs)
		}})
	switch {
	case r != nil && r.Interrupted:
		fmt.Fprintf(o.stderr, "agentfs: interrupted: the candidates were stopped; their branches are kept (%s-1..%d)\n", prefix, len(r.Candidates))
		return errInterrupted
	case errors.Is(err, tournament.ErrNoWinner):
		printTournament(o.stdout, r)
		fmt.Fprintf(o.stdout, "no winner: no candidate passed the test %q; the branches are kept\n", o.test)
		return cli.ExitCodeError{Code: 1, Msg: "no candidate passed the test"}
	case err != nil && (r == nil || r.Winner == nil):
		return err
	}
	printTournament(o.stdout, r)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "winner: candidate %d, branch %s (snapshot %s, tagged winner): %s\n", r.Winner.N, r.Winner.Branch, r.WinnerSnapshot, r.Winner.Cmd)
	var mergeErr error
	for _, m := range r.Merges {
		if m.Err != nil {
			fmt.Fprintf(o.stderr, "agentfs: merging branch %s: %v\n", m.Candidate.Branch, m.Err)
			mergeErr = cli.ExitCodeError{Code: 1}
			continue
		}
		if err := printMerge(o.stdout, m.Reply, false); err != nil {
			return err
		}
	}
	if len(r.Merges) > 1 && r.Merges[0].Reply.Safety != nil {
		fmt.Fprintf(o.stdout, "to undo every merge: agentfs restore %s\n", r.Merges[0].Reply.Safety.ID)
	}
	if o.prune {
		for _, err := range r.PruneErrors {
			fmt.Fprintf(o.stderr, "agentfs: %v\n", err)
		}
		fmt.Fprintf(o.stdout, "pruned the other %d branches\n", len(r.Candidates)-max(1, len(r.Merges)))
	}
	if mergeErr != nil {
		return mergeErr
	}
	if n := r.MergeConflicts(); n > 0 {
		return cli.ExitCodeError{Code: 1, Msg: fmt.Sprintf("the winners' merges left conflicts (%d): resolve them in this branch", n)}
	}
	return nil
}

// printTournament prints the table of the candidates.
func printTournament(out io.Writer, r *tournament.Result) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "#\tBRANCH\tEXIT\tTIME\tTEST\tCREATED\tMODIFIED\tDELETED\tBYTES\tCOMMAND")
	for _, cd := range r.Candidates {
		cr, mo, de, bytes := changeStat(cd.Changes)
		test := exitString(cd.Test)
		if cd.Err != nil {
			test = "error: " + cd.Err.Error()
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", cd.N, cd.Branch, exitString(cd.Code),
			cd.Took.Round(time.Millisecond), test, cr, mo, de, signedBytes(bytes), cli.Printable(cd.Cmd))
	}
	_ = w.Flush() // printing to the terminal, like the lines before (see .golangci.yml)
}

// changeStat counts the kinds of changes and the bytes they add.
func changeStat(cs []ctl.Change) (created, modified, deleted int, bytes int64) {
	for _, ch := range cs {
		switch ch.Kind {
		case ctl.Created:
			created++
		case ctl.Deleted:
			deleted++
		default:
			modified++
		}
		bytes += ch.SizeDelta
	}
	return
}

func exitString(code int) string {
	if code < 0 {
		return "-"
	}
	return fmt.Sprint(code)
}
