package activity

import (
	"context"
	"errors"
	"os"
	"slices"
	"time"
)

// # The exec log, read
//
// The exec log holds, per program, an "exec" entry when it started and
// an "exit" entry when it ended; the exit entry repeats what the exec
// said (argv, working directory, parent) and adds the exit code or
// signal and the duration, so it stands alone. ReadExecs turns the log
// into one entry per command; ExecIndex answers which command a
// process ran at a given time, so that a change of the activity log
// can be tied to it.

// Trace entries (op "trace") say whether commands were traced, and why
// not; the daemon writes one when it starts.
const OpTrace = "trace"

// Replaced is the Detail ReadExecs gives an exec entry whose process
// went on to start another program: that program replaced it (its
// DurationNs is how long it ran).
const Replaced = "replaced"

// started is when the command of e started.
func (e *Entry) started() time.Time {
	if e.Op == OpExit && !e.Start.IsZero() {
		return e.Start
	}
	return e.Time
}

// ReadExecs reads the exec log in the store dir as one line per
// command, in the order the commands started: its exit entry once it
// ended, its exec entry while it runs (or when its end was not
// recorded). Entries of op trace and dropped come among them, by their
// time. Only the commands that started or ended at or after s.Since
// are given, and of those the s.Tail last (0: all).
func ReadExecs(dir string, s Selection) ([]Line, error) {
	var p execPairs
	if err := Read(dir, Exec, p.add); err != nil {
		return nil, err
	}
	return p.selected(s), nil
}

// FollowExecs gives what ReadExecs gives, and then every entry
// appended later as it comes (exec and exit entries each), until ctx
// ends; idle is called whenever everything written so far was given.
func FollowExecs(ctx context.Context, dir string, poll time.Duration, s Selection, fn func(Line) error, idle func() error) error {
	p := &execPairs{}
	return Follow(ctx, dir, Exec, poll, func(l Line) error {
		if p != nil {
			return p.add(l)
		}
		return fn(l)
	}, func() error {
		if p != nil {
			for _, l := range p.selected(s) {
				if err := fn(l); err != nil {
					return err
				}
			}
			p = nil
		}
		return idle()
	})
}

// execPairs gathers the entries of the exec log, an exit in place of
// its exec.
type execPairs struct {
	out     []Line
	running map[int]int // pid → index in out of its exec entry
}

func (p *execPairs) add(l Line) error {
	if p.running == nil {
		p.running = map[int]int{}
	}
	switch l.Op {
	case OpExec:
		if i, ok := p.running[l.Pid]; ok {
			// The process started another program (sh -c 'exec
			// ...', env, a launcher script): the first ended there.
			prev := &p.out[i]
			prev.Detail, prev.DurationNs = Replaced, int64(l.Time.Sub(prev.Time))
		}
		p.running[l.Pid] = len(p.out)
	case OpExit:
		// Its exec is the pid's one that started when it did (an exec
		// record lost, the exit stands alone).
		if i, ok := p.running[l.Pid]; ok {
			if l.Start.IsZero() || p.out[i].Time.Equal(l.Start) {
				p.out[i] = l
				delete(p.running, l.Pid)
				return nil
			}
			// The pid's earlier program was replaced by the one that
			// ended, when that one started.
			prev := &p.out[i]
			prev.Detail, prev.DurationNs = Replaced, int64(l.Start.Sub(prev.Time))
			delete(p.running, l.Pid)
		}
	}
	p.out = append(p.out, l)
	return nil
}

// selected returns what s selects, in the order the commands started.
func (p *execPairs) selected(s Selection) []Line {
	out := slices.DeleteFunc(p.out, func(l Line) bool {
		return l.Time.Before(s.Since) && l.started().Before(s.Since)
	})
	slices.SortStableFunc(out, func(a, b Line) int { return a.started().Compare(b.started()) })
	if s.Tail > 0 && len(out) > s.Tail {
		out = out[len(out)-s.Tail:]
	}
	return out
}

// ExecIndex knows, per pid, the programs the exec log says it ran.
type ExecIndex struct {
	byPid map[int][]execStart
}

type execStart struct {
	at, end time.Time // end: zero while it runs
	argv    []string
}

// ReadExecIndex indexes the exec log in the store dir; with no exec
// log, the index is empty.
func ReadExecIndex(dir string) (*ExecIndex, error) {
	x := &ExecIndex{byPid: map[int][]execStart{}}
	err := Read(dir, Exec, func(l Line) error {
		switch {
		case l.Op == OpExec && len(l.Argv) > 0:
			x.byPid[l.Pid] = append(x.byPid[l.Pid], execStart{at: l.Time, argv: l.Argv})
		case l.Op == OpExit:
			if ss := x.byPid[l.Pid]; len(ss) > 0 && ss[len(ss)-1].end.IsZero() {
				ss[len(ss)-1].end = l.Time
			}
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return x, nil
	}
	return x, err
}

// Command returns the arguments of the program pid was running at at:
// the last one it started before then, if it had not ended (a pid is
// used again).
func (x *ExecIndex) Command(pid int, at time.Time) ([]string, bool) {
	var found *execStart
	for i, s := range x.byPid[pid] {
		if s.at.After(at) {
			break
		}
		found = &x.byPid[pid][i]
	}
	if found == nil || (!found.end.IsZero() && found.end.Before(at)) {
		return nil, false
	}
	return found.argv, true
}

// LastTrace returns what the last trace entry of the exec log in the
// store dir says ("on: ..." or "off: ..."), or "" when there is none.
func LastTrace(dir string) string {
	last := ""
	_ = Read(dir, Exec, func(l Line) error { // no log: nothing to say
		if l.Op == OpTrace {
			last = l.Detail
		}
		return nil
	})
	return last
}
