// Package tournament runs several attempts at one task side by side,
// each in a branch of its own made from one snapshot, tests each, and
// picks a winner: agentfs tournament.
//
// The rules: every candidate's branch starts from the same snapshot;
// each candidate, then the test, runs as a shell command bound to its
// branch (through agentfs exec, so that it and everything it starts
// see that branch at the mount's path); the first candidate, in the
// order given, whose test exits 0 wins; a snapshot of its branch is
// taken and tagged "winner"; with Merge, every candidate that passed
// (the winners), in the order given, is then merged into the branch the
// tournament was started from (workspace.Merge: three-way from the
// snapshot; a later winner's conflicts with an earlier one's are
// listed, with markers in text files); the other branches are kept
// unless Prune.
// A signal (Ctrl-C) stops every candidate and test: their process
// groups get SIGTERM, then SIGKILL.
package tournament

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

// Options describe a tournament.
type Options struct {
	// Client reaches the mount; Root is its root, Dir the directory
	// the commands start in (inside the mount).
	Client    *workspace.Client
	Root, Dir string
	// From is the snapshot every branch starts from (id, prefix or
	// tag); Test the shell command that tells whether a candidate
	// passed; Prefix names the branches (PREFIX-1, PREFIX-2, ...).
	From, Test, Prefix string
	Candidates         []string
	// Prune deletes the branches of the candidates that did not win
	// (nor, with Merge, pass).
	Prune bool
	// Merge merges the branch of every candidate that passed its test,
	// in order, into the caller's branch.
	Merge bool
	// Agentfs is the agentfs binary that runs each command in its
	// branch (agentfs exec -b).
	Agentfs string
	// Started, when set, is told the tournament's branches are made
	// and its candidates about to start.
	Started func(*Result)
}

// Candidate is one attempt.
type Candidate struct {
	N       int
	Cmd     string
	Branch  string
	Log     string        // its output and its test's
	Code    int           // exit code; -1 when it did not run
	Took    time.Duration // how long it ran
	Test    int           // the test's exit code; -1 when it did not run
	Changes []ctl.Change  // from the snapshot to its branch
	Err     error
}

// Result is a tournament's outcome.
type Result struct {
	Snapshot   string // the id of the snapshot every branch started from
	Logs       string // the directory of the candidates' logs
	Candidates []*Candidate
	// Winner is nil when no candidate passed; WinnerSnapshot is the
	// snapshot of its branch tagged "winner".
	Winner         *Candidate
	WinnerSnapshot string
	// Interrupted: a signal stopped it; the branches are kept.
	Interrupted bool
	// PruneErrors are the branches Prune could not delete.
	PruneErrors []error
	// Merges are the merges of the winners (Merge), in order.
	Merges []Merge
}

// Merge is the merge of one winner's branch.
type Merge struct {
	Candidate *Candidate
	Reply     ctl.MergeReply
	Err       error
}

// MergeConflicts counts the conflicts the winners' merges left.
func (r *Result) MergeConflicts() int {
	n := 0
	for _, m := range r.Merges {
		n += m.Reply.Unresolved
	}
	return n
}

// ErrNoWinner: no candidate passed its test.
var ErrNoWinner = errors.New("no candidate passed the test")

// Run runs the tournament. It returns the result with ErrNoWinner when
// no candidate passed; other errors stop it before a winner is chosen.
func Run(o Options) (*Result, error) {
	logs, err := os.MkdirTemp("", "agentfs-"+o.Prefix+"-")
	if err != nil {
		return nil, fmt.Errorf("making a directory for the candidates' logs: %w", err)
	}
	r := &Result{Logs: logs}
	for i, cmd := range o.Candidates {
		cd := &Candidate{N: i + 1, Cmd: cmd, Branch: fmt.Sprintf("%s-%d", o.Prefix, i+1), Code: -1, Test: -1}
		cd.Log = filepath.Join(logs, cd.Branch+".log")
		info, err := o.Client.CreateBranch(ctl.BranchCreateArgs{Name: cd.Branch, From: o.From})
		if err != nil {
			return r, fmt.Errorf("creating the branch of candidate %d: %w", cd.N, err)
		}
		r.Snapshot = info.Origin
		r.Candidates = append(r.Candidates, cd)
	}
	if o.Started != nil {
		o.Started(r)
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
	for _, cd := range r.Candidates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cd.Err = o.runCandidate(run, cd)
		}()
	}
	wg.Wait()
	if run.stopped() {
		r.Interrupted = true
		return r, nil
	}
	for _, cd := range r.Candidates {
		if d, err := o.Client.Diff(ctl.DiffArgs{From: r.Snapshot, To: cd.Branch}); err == nil {
			cd.Changes = d.Changes
		}
		if r.Winner == nil && cd.passed() {
			r.Winner = cd
		}
	}
	if r.Winner == nil {
		return r, ErrNoWinner
	}
	tagged, err := o.Client.CreateSnapshot(ctl.SnapshotCreateArgs{Branch: r.Winner.Branch, Label: "tournament winner: " + r.Winner.Cmd})
	if err != nil {
		return r, fmt.Errorf("taking the winner's snapshot: %w", err)
	}
	if _, err := o.Client.SetTag("winner", tagged.ID); err != nil {
		return r, fmt.Errorf("tagging the winner's snapshot %s: %w", tagged.ID, err)
	}
	r.WinnerSnapshot = tagged.ID
	if o.Merge {
		for _, cd := range r.Candidates {
			if !cd.passed() {
				continue
			}
			rep, err := o.Client.Merge(ctl.MergeArgs{Branch: cd.Branch})
			r.Merges = append(r.Merges, Merge{Candidate: cd, Reply: rep, Err: err})
		}
	}
	if o.Prune {
		for _, cd := range r.Candidates {
			if cd == r.Winner || o.Merge && cd.passed() {
				continue
			}
			if _, err := o.Client.DeleteBranch(cd.Branch); err != nil {
				r.PruneErrors = append(r.PruneErrors, fmt.Errorf("deleting branch %s: %w", cd.Branch, err))
			}
		}
	}
	return r, nil
}

// passed reports whether cd ran and passed its test.
func (cd *Candidate) passed() bool { return cd.Err == nil && cd.Test == 0 }

// runCandidate runs candidate cd, then the test, in its branch, with
// their output in its log.
func (o Options) runCandidate(run *groupRunner, cd *Candidate) error {
	f, err := os.Create(cd.Log)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "== candidate %d in branch %s: %s\n", cd.N, cd.Branch, cd.Cmd)
	start := time.Now()
	cd.Code, err = run.run(o.Agentfs, o.Root, o.Dir, cd.Branch, cd.Cmd, f)
	cd.Took = time.Since(start)
	if err != nil || run.stopped() {
		return err
	}
	fmt.Fprintf(f, "== test in branch %s: %s\n", cd.Branch, o.Test)
	cd.Test, err = run.run(o.Agentfs, o.Root, o.Dir, cd.Branch, o.Test, f)
	return err
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
func (g *groupRunner) run(agentfs, root, dir, branch, cmd string, out io.Writer) (int, error) {
	c := exec.Command(agentfs, "exec", "-b", branch, "-C", root, "--", "sh", "-c", cmd)
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
// SIGKILL for those still there after a grace period. A group that has
// exited meanwhile is no error.
func (g *groupRunner) stopAll() {
	g.mu.Lock()
	g.halted = true
	var pids []int
	for c := range g.procs {
		pids = append(pids, c.Process.Pid)
	}
	g.mu.Unlock()
	for _, pid := range pids {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
	}
	time.AfterFunc(2*time.Second, func() {
		for _, pid := range pids {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
}

func (g *groupRunner) stopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.halted
}
