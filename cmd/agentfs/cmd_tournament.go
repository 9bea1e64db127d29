package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
)

func init() {
	register(&command{
		name:    "tournament",
		summary: "run several attempts side by side, each in its own branch, and pick a winner",
		usage:   "--from REF --test CMD [-C DIR] [--name PREFIX] [--prune] -- CANDIDATE...",
		help: `Tournament runs several candidate commands at once at the same path, each
in a branch of its own made from the snapshot REF, then runs the test
command in each branch and reports, per candidate: its exit code, how
long it ran, the test's exit code and what it changed (files created,
modified, deleted; bytes). The first candidate, in the order given, whose
test passes wins: a snapshot of its branch is tagged "winner" and the
report names it. The other branches are kept to look at (agentfs diff
REF BRANCH) unless --prune deletes them.

Each candidate and each test is a shell command (sh -c), started in the
current directory (or the mount root when the current directory is not
inside the mount), with output to a log file named in the report.
Ctrl-C stops every candidate and test.

Example:
  agentfs tournament --from before-refactor --test "make test" -- \
      "agent --seed 1" "agent --seed 2" "agent --seed 3"`,
		exitCodes: `Exit codes:
  0  a candidate won
  1  no candidate passed its test, or an error (the message says which)
  2  usage error
  130 interrupted (Ctrl-C)
`,
		setup: func(fs *pflag.FlagSet, out streams) runFunc {
			o := &tournamentOptions{stdout: out.stdout, stderr: out.stderr}
			o.AddFlags(fs)
			return func(ctx context.Context, args []string) error { return runTournament(ctx, o, args) }
		},
	})
}

// tournamentOptions are the flags of agentfs tournament.
type tournamentOptions struct {
	mountFlag
	from, test, name string
	prune            bool
	stdout, stderr   io.Writer
}

func (o *tournamentOptions) AddFlags(fs *pflag.FlagSet) {
	o.mountFlag.AddFlags(fs)
	fs.StringVar(&o.from, "from", "", "the snapshot `REF` every branch starts from (id, prefix or tag)")
	fs.StringVar(&o.test, "test", "", "the test `CMD` run in each branch after its candidate (sh -c)")
	fs.StringVar(&o.name, "name", "", "the `PREFIX` of the branch names (default: tour-TIME); branch i is PREFIX-i")
	fs.BoolVar(&o.prune, "prune", false, "delete the branches of the candidates that did not win")
}

// candidate is one attempt of a tournament.
type candidate struct {
	n       int
	cmd     string
	branch  string
	log     string
	code    int // exit code; -1 when it did not run
	took    time.Duration
	test    int // the test's exit code; -1 when it did not run
	changes []ctl.Change
	err     error
}

// errInterrupted ends a tournament stopped by a signal (exit 130).
var errInterrupted = exitCodeError{code: 130, msg: "tournament interrupted: every candidate was stopped"}

func runTournament(ctx context.Context, o *tournamentOptions, args []string) error {
	switch {
	case o.from == "":
		return usagef("tournament needs --from REF: the snapshot every candidate starts from (agentfs snapshot list)")
	case o.test == "":
		return usagef("tournament needs --test CMD: the command that tells whether a candidate passed")
	case len(args) == 0:
		return usagef("tournament needs candidates: agentfs tournament --from REF --test CMD -- \"cmd 1\" \"cmd 2\"")
	}
	root, err := ctl.FindMount(o.dir)
	if err != nil {
		return err
	}
	dir := root
	if wd, err := os.Getwd(); err == nil && o.dir == "" {
		if r, err := ctl.FindMount(wd); err == nil && r == root {
			dir = wd
		}
	}
	c, err := ctl.Dial(root)
	if err != nil {
		return err
	}
	defer c.Close()
	var snap ctl.SnapshotInfo
	prefix := o.name
	if prefix == "" {
		prefix = "tour-" + time.Now().Format("20060102-150405")
	}
	logs, err := os.MkdirTemp("", "agentfs-"+prefix+"-")
	if err != nil {
		return fmt.Errorf("making a directory for the candidates' logs: %w", err)
	}
	cands := make([]*candidate, len(args))
	for i, cmd := range args {
		cd := &candidate{n: i + 1, cmd: cmd, branch: fmt.Sprintf("%s-%d", prefix, i+1), code: -1, test: -1}
		cd.log = filepath.Join(logs, cd.branch+".log")
		var info ctl.BranchInfo
		if err := c.Do(ctl.OpBranchCreate, ctl.BranchCreateArgs{Name: cd.branch, From: o.from}, &info); err != nil {
			return fmt.Errorf("creating the branch of candidate %d: %w", cd.n, err)
		}
		snap.ID = info.Origin
		cands[i] = cd
	}
	fmt.Fprintf(o.stdout, "tournament: %d candidates from snapshot %s, in branches %s-1..%d; logs in %s\n", len(cands), snap.ID, prefix, len(cands), logs)

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the agentfs binary: %w", err)
	}
	run := &groupRunner{procs: map[*exec.Cmd]bool{}}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			run.stopAll()
		}
	}()

	var wg sync.WaitGroup
	for _, cd := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Create(cd.log)
			if err != nil {
				cd.err = err
				return
			}
			defer f.Close()
			fmt.Fprintf(f, "== candidate %d in branch %s: %s\n", cd.n, cd.branch, cd.cmd)
			start := time.Now()
			cd.code, cd.err = run.run(self, root, dir, cd.branch, cd.cmd, f)
			cd.took = time.Since(start)
			if cd.err != nil || run.stopped() {
				return
			}
			fmt.Fprintf(f, "== test in branch %s: %s\n", cd.branch, o.test)
			cd.test, cd.err = run.run(self, root, dir, cd.branch, o.test, f)
		}()
	}
	wg.Wait()
	if run.stopped() {
		fmt.Fprintf(o.stderr, "agentfs: interrupted: the candidates were stopped; their branches are kept (%s-1..%d)\n", prefix, len(cands))
		return errInterrupted
	}
	var winner *candidate
	for _, cd := range cands {
		var d ctl.DiffReply
		if err := c.Do(ctl.OpDiff, ctl.DiffArgs{From: snap.ID, To: cd.branch}, &d); err == nil {
			cd.changes = d.Changes
		}
		if winner == nil && cd.err == nil && cd.test == 0 {
			winner = cd
		}
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "#\tBRANCH\tEXIT\tTIME\tTEST\tCREATED\tMODIFIED\tDELETED\tBYTES\tCOMMAND")
	for _, cd := range cands {
		cr, mo, de, bytes := changeStat(cd.changes)
		test := exitString(cd.test)
		if cd.err != nil {
			test = "error: " + cd.err.Error()
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", cd.n, cd.branch, exitString(cd.code),
			cd.took.Round(time.Millisecond), test, cr, mo, de, signedBytes(bytes), printable(cd.cmd))
	}
	w.Flush()
	if winner == nil {
		fmt.Fprintf(o.stdout, "no winner: no candidate passed the test %q; the branches are kept\n", o.test)
		return exitCodeError{code: 1, msg: "no candidate passed the test"}
	}
	var tagged ctl.SnapshotInfo
	if err := c.Do(ctl.OpSnapshotCreate, ctl.SnapshotCreateArgs{Branch: winner.branch, Label: fmt.Sprintf("tournament winner: %s", winner.cmd)}, &tagged); err != nil {
		return fmt.Errorf("taking the winner's snapshot: %w", err)
	}
	if err := c.Do(ctl.OpTagSet, ctl.TagArgs{Name: "winner", Ref: tagged.ID}, nil); err != nil {
		return fmt.Errorf("tagging the winner's snapshot %s: %w", tagged.ID, err)
	}
	fmt.Fprintf(o.stdout, "winner: candidate %d, branch %s (snapshot %s, tagged winner): %s\n", winner.n, winner.branch, tagged.ID, winner.cmd)
	if o.prune {
		for _, cd := range cands {
			if cd == winner {
				continue
			}
			if err := c.Do(ctl.OpBranchDelete, ctl.BranchArgs{Name: cd.branch}, nil); err != nil {
				fmt.Fprintf(o.stderr, "agentfs: deleting branch %s: %v\n", cd.branch, err)
			}
		}
		fmt.Fprintf(o.stdout, "pruned the other %d branches\n", len(cands)-1)
	}
	return nil
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

// groupRunner runs commands in process groups of their own and stops
// them all on request.
type groupRunner struct {
	mu     sync.Mutex
	procs  map[*exec.Cmd]bool
	halted bool
}

// run runs shell command cmd bound to branch, in dir, through
// agentfs exec, with its output to out; it returns the exit code
// (128+signal when killed).
func (g *groupRunner) run(self, root, dir, branch, cmd string, out io.Writer) (int, error) {
	c := exec.Command(self, "exec", "-b", branch, "-C", root, "--", "sh", "-c", cmd)
	c.Dir, c.Stdout, c.Stderr = dir, out, out
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g.mu.Lock()
	if g.halted {
		g.mu.Unlock()
		return -1, errors.New("stopped")
	}
	if err := c.Start(); err != nil {
		g.mu.Unlock()
		return -1, err
	}
	g.procs[c] = true
	g.mu.Unlock()
	err := c.Wait()
	g.mu.Lock()
	delete(g.procs, c)
	g.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return -1, err
}

// stopAll stops every running command's process group: SIGTERM, then
// SIGKILL for those still there after a grace period.
func (g *groupRunner) stopAll() {
	g.mu.Lock()
	g.halted = true
	var pids []int
	for c := range g.procs {
		pids = append(pids, c.Process.Pid)
	}
	g.mu.Unlock()
	for _, pid := range pids {
		syscall.Kill(-pid, syscall.SIGTERM)
	}
	time.AfterFunc(2*time.Second, func() {
		for _, pid := range pids {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
}

func (g *groupRunner) stopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.halted
}
