// Package autosnap decides when a mount takes automatic snapshots, what
// they are called, and which of them to delete as they age.
//
// # When
//
// Scheduler is a debouncer over the changes programs make, per branch:
// a snapshot is due once no change came for the quiet period after the
// last one. A change of a git ref inside the mount (a commit, a tag, a
// checkout: see git.go) makes a snapshot due sooner, after GitQuiet,
// labelled with the commit (kind git). Paths the ignore patterns match neither
// start nor delay a snapshot and never appear in a label; other changes
// inside a .git directory delay a due snapshot (git is still writing)
// but do not start one. Scheduler is a state machine driven by the
// times it is given, so tests run it with a fake clock; Runner drives
// it with the real one.
//
// # Which to keep
//
// Retention (retention.go) thins automatic snapshots with age and
// bounds their number; every other kind (manual, pre-run, safety) and
// every tagged snapshot is kept.
package autosnap

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Defaults.
const (
	DefaultQuiet    = 2 * time.Second
	DefaultGitQuiet = 300 * time.Millisecond
	// maxPaths is the number of changed paths a pending snapshot keeps
	// for its label; the others are counted.
	maxPaths = 64
)

// Change is one change a program made.
type Change struct {
	Time   time.Time
	Branch string
	// Paths are the paths changed (relative to the mount root); Dir says
	// whether they are directories.
	Paths []string
	Dir   bool
	// Lost counts changes that were dropped before they were seen (the
	// queue was full): they start a snapshot with unknown paths.
	Lost int
}

// Due is a snapshot to take now.
type Due struct {
	// Branch is the branch to snapshot; "" is the mount's default
	// branch (an idle period in which only commands ran).
	Branch string
	// Kind is KindAuto, KindGit (Refs changed), KindBuild or KindIdle.
	Kind string
	// Paths are the changed paths in the order first changed (at most
	// maxPaths); More counts the others.
	Paths []string
	More  int
	// Refs are the git refs that changed (git.go), each once, in the
	// order last changed.
	Refs []GitRef
	// Command is the build that succeeded, the last command before an
	// idle period, or the git command a ref change came from.
	Command string
	// Took is how long the build ran, or the mount has been idle.
	Took time.Duration
}

// Label is the snapshot's label: the commit for a git change (and the
// command, when the trace saw it), the command of a build or of an
// idle period, else the changed paths.
func (d Due) Label(read ReadFunc) string {
	switch d.Kind {
	case KindBuild:
		l := fmt.Sprintf("%s: succeeded in %s", d.Command, roundDuration(d.Took))
		if d.More > 0 {
			l += " (and " + plural(d.More, "more build") + ")"
		}
		return l
	case KindIdle:
		if d.Command == "" {
			return fmt.Sprintf("idle for %s", roundDuration(d.Took))
		}
		return fmt.Sprintf("idle for %s after %s", roundDuration(d.Took), d.Command)
	}
	if len(d.Refs) > 0 {
		l := GitLabel(read, d.Refs[len(d.Refs)-1])
		if n := len(d.Refs) - 1; n > 0 {
			l += " (and " + plural(n, "more ref") + ")"
		}
		if d.Command != "" {
			l += " (by " + d.Command + ")"
		}
		return l
	}
	return ChangeLabel(d.Paths, d.More)
}

// roundDuration rounds d for a label: 850ms, 2.1s, 1m30s.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// Scheduler decides when automatic snapshots are due.
type Scheduler struct {
	Quiet    time.Duration // DefaultQuiet when 0
	GitQuiet time.Duration // DefaultGitQuiet when 0 (never longer than Quiet)
	Ignore   *Ignore       // nil: nothing is ignored
	// NoGit turns the git trigger off: a ref that moves is then one
	// more change inside .git (it delays a snapshot, starts none).
	NoGit bool

	pending map[string]*pending // by branch
}

type pending struct {
	last  time.Time
	paths []string
	seen  map[string]bool
	more  int
	refs  []GitRef
}

func (s *Scheduler) quiet() time.Duration {
	if s.Quiet <= 0 {
		return DefaultQuiet
	}
	return s.Quiet
}

func (s *Scheduler) gitQuiet() time.Duration {
	q := s.GitQuiet
	if q <= 0 {
		q = DefaultGitQuiet
	}
	return min(q, s.quiet())
}

// Add records a change.
func (s *Scheduler) Add(c Change) {
	if s.pending == nil {
		s.pending = map[string]*pending{}
	}
	p := s.pending[c.Branch]
	// touch starts (or delays) the branch's snapshot.
	touch := func() *pending {
		if p == nil {
			p = &pending{seen: map[string]bool{}}
			s.pending[c.Branch] = p
		}
		p.last = c.Time
		return p
	}
	if c.Lost > 0 {
		touch().more += c.Lost
	}
	for _, path := range c.Paths {
		s.Ignore.Changed(c.Branch, path) // an ignore file is read again
		if ref, ok := ParseGitRef(path); ok && !s.NoGit {
			// A ref counts once, as changed last: git's rename of
			// the .lock file and the close of the file it renamed
			// (which may be seen after the rename) are one change.
			touch()
			p.refs = append(slices.DeleteFunc(p.refs, func(r GitRef) bool { return r == ref }), ref)
			continue
		}
		if inGitDir(path) {
			if p != nil {
				p.last = c.Time // git is at work: wait for it
			}
			continue
		}
		if s.Ignore.Ignored(c.Branch, path, c.Dir) {
			continue
		}
		touch()
		switch {
		case p.seen[path]:
		case len(p.paths) < maxPaths:
			p.seen[path] = true
			p.paths = append(p.paths, path)
		default:
			p.seen[path] = true // counted once
			p.more++
		}
	}
}

// dueAt is when p's snapshot is due.
func (s *Scheduler) dueAt(p *pending) time.Time {
	if len(p.refs) > 0 {
		return p.last.Add(s.gitQuiet())
	}
	return p.last.Add(s.quiet())
}

// Next returns when the next snapshot is due; false when none is
// pending.
func (s *Scheduler) Next() (time.Time, bool) {
	var next time.Time
	found := false
	for _, p := range s.pending {
		if t := s.dueAt(p); !found || t.Before(next) {
			next, found = t, true
		}
	}
	return next, found
}

// Take returns the snapshots due at now and forgets their changes.
func (s *Scheduler) Take(now time.Time) []Due {
	var due []Due
	for b, p := range s.pending {
		if now.Before(s.dueAt(p)) {
			continue
		}
		kind := KindAuto
		if len(p.refs) > 0 {
			kind = KindGit
		}
		due = append(due, Due{Branch: b, Kind: kind, Paths: p.paths, More: p.more, Refs: p.refs})
		delete(s.pending, b)
	}
	return due
}

// Forget drops what is pending for branch (a restore replaced it).
func (s *Scheduler) Forget(branch string) {
	delete(s.pending, branch)
	s.Ignore.ForgetBranch(branch)
}

// Supersede drops what is pending for branch when a snapshot of it
// taken now (a build's, an idle period's) holds it: the changes, unless
// a git ref moved (that snapshot is still taken, labelled with the
// commit).
func (s *Scheduler) Supersede(branch string) {
	if p := s.pending[branch]; p != nil && len(p.refs) == 0 {
		delete(s.pending, branch)
	}
}

// inGitDir reports whether p is inside a .git directory.
func inGitDir(p string) bool {
	return strings.HasPrefix(p, ".git/") || strings.Contains(p, "/.git/") || p == ".git" || strings.HasSuffix(p, "/.git")
}
