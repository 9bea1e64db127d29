package difftest

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentfs/agentfs/procfs"
)

// RootSpec describes one kind of root.
type RootSpec struct {
	Name    string
	Profile *Profile
	// A witness root takes part in every op and shows in reports.
	// Where the reference and another root both fail an op, but with
	// different errnos, that root may fail as a witness does
	// (overlayfs is the reference for errnos, the plain directory for
	// contents). A witness's own differences never fail a run: they
	// are logged and the witness is not consulted any more in that
	// session.
	Witness bool
	// Make creates a fresh root holding a copy of tree, using the
	// empty private directory dir for everything it needs.
	Make func(dir string, tree *Tree) (*Root, error)
	// NewExecutor replaces NewDirExecutor for this root (tests use it
	// to break a root on purpose).
	NewExecutor func(root string) Executor
}

// Root is one live root.
type Root struct {
	Dir string // where the ops run
	// Close tears the root down. An error is a finding, such as a
	// failed unmount or a lower tree that changed.
	Close func() error
	// Abort, if set, unblocks ops stuck in the root (a FUSE mount
	// whose daemon hangs: abort the connection) before Close, and
	// returns what it learned (where it saved the daemon's stacks).
	Abort func() string
}

// Config describes a differential test.
type Config struct {
	// Reference is the root every other root is compared with: a plain
	// directory on a native filesystem.
	Reference RootSpec
	Roots     []RootSpec
	// WorkDir holds one private directory per session.
	WorkDir string
	// CheckEvery is the number of ops between full-tree comparisons
	// (default 50); every run also compares at its end.
	CheckEvery int
	// ShrinkRuns caps the number of replays the shrinker may use
	// (default 400).
	ShrinkRuns int
	// OpTimeout is how long one op may take before the run fails as
	// hung (default one minute).
	OpTimeout time.Duration
	// Logf receives progress and notes (witness differences).
	Logf func(format string, args ...any)

	shrinkHung bool // a replay hung while shrinking
}

// Failure is a difference found by Run, shrunk.
type Failure struct {
	Seed   int64
	Tree   *Tree
	Ops    []Op
	Diffs  []Diff
	Report string // seed, minimal tree and ops with each root's results, differences
}

func (c *Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// Run generates a lower tree and nops ops from seed, runs them on fresh
// roots and compares every result and, periodically, the whole trees.
// On a difference it shrinks the case and returns it; the error is for
// failures of the harness itself (a root that cannot be made).
func (c *Config) Run(seed int64, nops int) (*Failure, error) {
	rng := rand.New(rand.NewSource(seed))
	tree := GenerateTree(rng)
	gen := NewGenerator(rng, tree)
	s, err := c.start(tree)
	if err != nil {
		return nil, err
	}
	every := c.CheckEvery
	if every <= 0 {
		every = 50
	}
	var ops []Op
	var diffs []Diff
	for i := 0; i < nops && len(diffs) == 0; i++ {
		op := gen.Next(ScanTree(s.roots[0].root.Dir))
		ops = append(ops, op)
		if diffs = s.step(&op, nil); len(diffs) == 0 && ((i+1)%every == 0 || i == nops-1) {
			ops = append(ops, Op{Kind: OpCheck})
			diffs = s.check()
		}
	}
	diffs = append(diffs, s.close()...)
	if len(diffs) == 0 {
		return nil, nil
	}
	c.logf("seed %d: %d ops: %s; shrinking", seed, len(ops), diffs[0])
	return c.shrink(seed, tree, ops, diffs), nil
}

// Replay runs ops over tree on fresh roots and returns the differences
// and a transcript of every op with each root's result.
func (c *Config) Replay(tree *Tree, ops []Op) ([]Diff, string, error) {
	var b strings.Builder
	diffs, err := c.replay(tree, ops, &b)
	return diffs, b.String(), err
}

func (c *Config) replay(tree *Tree, ops []Op, w *strings.Builder) ([]Diff, error) {
	s, err := c.start(tree)
	if err != nil {
		return nil, err
	}
	var diffs []Diff
	for i := range ops {
		if w != nil {
			fmt.Fprintf(w, "%4d  %s\n", i+1, ops[i].String())
		}
		if diffs = s.step(&ops[i], w); len(diffs) > 0 {
			break
		}
	}
	if len(diffs) == 0 && (len(ops) == 0 || ops[len(ops)-1].Kind != OpCheck) {
		if w != nil {
			w.WriteString("   -  check: compare the whole trees\n")
		}
		diffs = s.check()
	}
	return append(diffs, s.close()...), nil
}

// session is one set of live roots; roots[0] is the reference.
type session struct {
	c     *Config
	dir   string
	roots []*liveRoot
	hung  *liveRoot // the root whose op never returned
}

// execWatched runs op on r and gives up waiting after the op timeout:
// a filesystem that deadlocks fails the run with the seed instead of
// hanging the test until go test's own timeout.
func (s *session) execWatched(r *liveRoot, op *Op) (Result, bool) {
	done := make(chan Result, 1)
	go func() { done <- r.exec.Exec(op) }()
	t := time.NewTimer(s.c.opTimeout())
	defer t.Stop()
	select {
	case res := <-done:
		return res, true
	case <-t.C:
		return Result{}, false
	}
}

func (c *Config) opTimeout() time.Duration {
	d := time.Minute
	if c.OpTimeout > 0 {
		d = c.OpTimeout
	}
	if c.shrinkHung {
		// The shrinker has seen a replay hang: the next ones would wait
		// as long again, and ops take milliseconds.
		d = min(d, 5*time.Second)
	}
	return d
}

type liveRoot struct {
	spec     *RootSpec
	root     *Root
	exec     Executor
	diverged bool // a witness that differed
	// stale marks slots whose fd the harness invalidated by re-syncing
	// the root (a directory it re-created): not compared until reopened.
	stale [NumSlots]bool
}

func (c *Config) start(tree *Tree) (*session, error) {
	if err := os.MkdirAll(c.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("difftest: %w", err)
	}
	dir, err := os.MkdirTemp(c.WorkDir, "run-")
	if err != nil {
		return nil, fmt.Errorf("difftest: %w", err)
	}
	s := &session{c: c, dir: dir}
	specs := append([]*RootSpec{&c.Reference}, ptrs(c.Roots)...)
	for _, spec := range specs {
		rd := filepath.Join(dir, spec.Name)
		if err := os.Mkdir(rd, 0o755); err != nil {
			s.close()
			return nil, fmt.Errorf("difftest: %w", err)
		}
		r, err := spec.Make(rd, tree)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("difftest: make %s root: %w", spec.Name, err)
		}
		var e Executor
		if spec.NewExecutor != nil {
			e = spec.NewExecutor(r.Dir)
		} else {
			e = NewDirExecutor(r.Dir)
		}
		s.roots = append(s.roots, &liveRoot{spec: spec, root: r, exec: e})
	}
	return s, nil
}

func ptrs(specs []RootSpec) []*RootSpec {
	out := make([]*RootSpec, len(specs))
	for i := range specs {
		out[i] = &specs[i]
	}
	return out
}

// step runs op on every root and compares the results with the
// reference's; w, if set, receives each root's result.
func (s *session) step(op *Op, w *strings.Builder) []Diff {
	if op.Kind == OpCheck {
		diffs := s.check()
		if w != nil {
			for _, d := range diffs {
				fmt.Fprintf(w, "        %s\n", d.Text)
			}
		}
		return diffs
	}
	res := make([]Result, len(s.roots))
	for i, r := range s.roots {
		var ok bool
		if res[i], ok = s.execWatched(r, op); !ok {
			s.hung = r
			return []Diff{{Sig: "hang", Text: fmt.Sprintf("%s did not return within %s on %s", op, s.c.opTimeout(), r.spec.Name)}}
		}
	}
	ref := res[0]
	var diffs []Diff
	notes := make([]string, len(s.roots))
	for i, r := range s.roots[1:] {
		i++
		got := res[i]
		if isFdOp(op.Kind) && op.Slot >= 0 && op.Slot < NumSlots && r.stale[op.Slot] {
			notes[i] = "not compared: the fd predates a re-sync"
			continue
		}
		if op.Kind == OpOpen && got.Errno == 0 && op.Slot >= 0 && op.Slot < NumSlots {
			r.stale[op.Slot] = false
		}
		ok, allowed := compareResults(op, ref, got, r.spec.Profile)
		if ok && allowed != "" {
			notes[i] = "allowed: " + allowed
		}
		if ok && allowed == AllowRenameDirEXDEV && ref.Errno == 0 {
			if err := emulateRename(r.root.Dir, op); err != nil {
				ok = false
				notes[i] = "re-sync failed: " + err.Error()
			} else {
				notes[i] += ", re-synced by moving as mv(1) does"
				for k := range r.stale {
					r.stale[k] = true
				}
			}
		}
		if op.Kind == OpRename && ref.Errno != 0 && got.Errno != 0 && r.spec.Profile.allows(AllowFailedRenameMtime) {
			if fixed := restoreParentMtimes(s.roots[0].root.Dir, r.root.Dir, op); fixed != "" {
				notes[i] = "allowed: " + AllowFailedRenameMtime + ": mtime of " + fixed + " changed, restored"
			}
		}
		if !ok && !r.spec.Witness && ref.Errno != 0 && got.Errno != 0 {
			for j, wr := range s.roots[1:] {
				if wr.spec.Witness && !wr.diverged && res[j+1].Errno == got.Errno {
					ok = true
					notes[i] = "fails as " + wr.spec.Name + " does"
				}
			}
		}
		if ok {
			continue
		}
		if r.spec.Witness {
			if !r.diverged {
				s.c.logf("note: witness %s differs from %s at %s: %s, reference %s (not compared any more in this session)",
					r.spec.Name, s.roots[0].spec.Name, op, got, ref)
			}
			r.diverged = true
			notes[i] = "differs (witness)"
			continue
		}
		if strings.HasPrefix(notes[i], "re-sync failed") {
			notes[i] = "<-- DIFFERS: " + notes[i]
		} else {
			notes[i] = "<-- DIFFERS"
		}
		diffs = append(diffs, Diff{
			Sig:  fmt.Sprintf("op:%s:%s/%s", op.Kind, resultClass(ref), resultClass(got)),
			Text: shortName(fmt.Sprintf("%s: %s on %s, %s on %s", op, got, r.spec.Name, ref, s.roots[0].spec.Name)),
		})
	}
	if w != nil {
		for i, r := range s.roots {
			fmt.Fprintf(w, "        %-10s %s", r.spec.Name+":", res[i])
			if notes[i] != "" {
				fmt.Fprintf(w, "   (%s)", notes[i])
			}
			w.WriteByte('\n')
		}
	}
	return diffs
}

func isFdOp(k Kind) bool {
	switch k {
	case OpClose, OpPwrite, OpWrite, OpPread, OpLseek, OpFtruncate, OpFstat, OpFsync:
		return true
	}
	return false
}

func resultClass(r Result) string {
	if r.Errno != 0 {
		return errnoName(r.Errno)
	}
	return "ok"
}

// check compares every root's whole tree with the reference's.
func (s *session) check() []Diff {
	ref, err := TakeSnapshot(s.roots[0].root.Dir)
	if err != nil {
		return []Diff{{Sig: "harness", Text: fmt.Sprintf("snapshot of the reference: %v", err)}}
	}
	var diffs []Diff
	for _, r := range s.roots[1:] {
		if r.diverged {
			continue
		}
		got, err := TakeSnapshot(r.root.Dir)
		var d []Diff
		if err != nil {
			d = []Diff{{Sig: "tree:walk", Text: fmt.Sprintf("%s: %v", r.spec.Name, err)}}
		} else {
			d = CompareSnapshots(ref, got, r.spec.Profile, r.spec.Name)
		}
		if r.spec.Witness && len(d) > 0 {
			s.c.logf("note: witness %s tree differs (not compared any more in this session): %s", r.spec.Name, d[0])
			r.diverged = true
			continue
		}
		diffs = append(diffs, d...)
	}
	return diffs
}

// close tears all roots down and removes the session's directory
// unless something is still mounted below it.
func (s *session) close() []Diff {
	var diffs []Diff
	if s.hung != nil && s.hung.root.Abort != nil {
		if info := s.hung.root.Abort(); info != "" {
			diffs = append(diffs, Diff{Sig: "hang-info", Text: fmt.Sprintf("%s hung: %s", s.hung.spec.Name, info)})
		}
	}
	for _, r := range s.roots {
		if r == s.hung && r.root.Abort == nil {
			// Its executor may still be blocked in the op: leave it.
			diffs = append(diffs, Diff{Sig: "teardown", Text: fmt.Sprintf("%s hung: not torn down, %s kept", r.spec.Name, s.dir)})
			return diffs
		}
		r.exec.Close()
		if err := r.root.Close(); err != nil {
			sig := "teardown"
			if r.spec.Witness {
				s.c.logf("note: witness %s teardown: %v", r.spec.Name, err)
				continue
			}
			diffs = append(diffs, Diff{Sig: sig, Text: fmt.Sprintf("%s: %v", r.spec.Name, err)})
		}
	}
	if m := MountsBelow(s.dir); len(m) > 0 {
		diffs = append(diffs, Diff{Sig: "teardown", Text: fmt.Sprintf("still mounted after teardown, %s kept: %v", s.dir, m)})
		return diffs
	}
	if err := os.RemoveAll(s.dir); err != nil {
		diffs = append(diffs, Diff{Sig: "teardown", Text: fmt.Sprintf("removing %s: %v", s.dir, err)})
	}
	return diffs
}

// MountsBelow lists the mount points at or below dir.
func MountsBelow(dir string) []string {
	mounts, err := procfs.Mounts(procfs.MountinfoPath)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range mounts {
		if m.Mountpoint == dir || strings.HasPrefix(m.Mountpoint, dir+"/") {
			out = append(out, m.Mountpoint)
		}
	}
	return out
}
