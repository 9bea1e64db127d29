package difftest

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// requireRoot skips without root (the lower trees have several owners
// and some ops run as another user), unless AGENTFS_REQUIRE_FUSE=1
// demands the privileged tests, as on CI (testenv.RequireRoot).
func requireRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "difftest (lower trees of several owners)")
}

func plainConfig(t *testing.T, second RootSpec) *Config {
	return &Config{
		Reference:  PlainSpec(),
		Roots:      []RootSpec{second},
		WorkDir:    t.TempDir(),
		CheckEvery: 25,
		Logf:       t.Logf,
	}
}

func secondPlain() RootSpec {
	s := PlainSpec()
	s.Name = "plain2"
	return s
}

// TestPlainDirectoriesNeverDiffer runs the harness against two plain
// directories: any difference is a bug of the harness (a
// nondeterministic op, a comparison of something that legitimately
// varies).
func TestPlainDirectoriesNeverDiffer(t *testing.T) {
	requireRoot(t)
	c := plainConfig(t, secondPlain())
	for seed := int64(1); seed <= 4; seed++ {
		f, err := c.Run(seed, 600)
		if err != nil {
			t.Fatal(err)
		}
		if f != nil {
			t.Fatalf("two plain directories differ:\n%s", f.Report)
		}
	}
}

// appendIgnoringExecutor is a deliberately broken root: it opens files
// without O_APPEND.
type appendIgnoringExecutor struct{ *DirExecutor }

func (e appendIgnoringExecutor) Exec(op *Op) Result {
	if op.Kind == OpOpen && op.Flags&unix.O_APPEND != 0 {
		o := *op
		o.Flags &^= unix.O_APPEND
		return e.DirExecutor.Exec(&o)
	}
	return e.DirExecutor.Exec(op)
}

// TestBrokenRootIsCaughtAndShrunk checks that a root that ignores
// O_APPEND is caught, and that the case is shrunk to a minimal one:
// the report names the seed, and removing any single op or lower entry
// makes the difference go away.
func TestBrokenRootIsCaughtAndShrunk(t *testing.T) {
	requireRoot(t)
	broken := secondPlain()
	broken.Name = "broken"
	broken.NewExecutor = func(root string) Executor { return appendIgnoringExecutor{NewDirExecutor(root)} }
	c := plainConfig(t, broken)
	const seed = 7
	f, err := c.Run(seed, 1500)
	if err != nil {
		t.Fatal(err)
	}
	if f == nil {
		t.Fatal("a root that ignores O_APPEND was not caught in 1500 ops")
	}
	t.Logf("report:\n%s", f.Report)
	if !strings.Contains(f.Report, "seed 7:") {
		t.Errorf("report does not name the seed:\n%s", f.Report)
	}
	if len(f.Ops) > 3 {
		t.Errorf("shrunk to %d ops, want at most 3 (open with O_APPEND, a write)", len(f.Ops))
	}
	appends := 0
	for _, op := range f.Ops {
		if op.Kind == OpOpen && op.Flags&unix.O_APPEND != 0 {
			appends++
		}
	}
	if appends != 1 {
		t.Errorf("minimal case has %d opens with O_APPEND, want 1: %v", appends, f.Ops)
	}
	sig := f.Diffs[0].Sig
	stillFails := func(tree *Tree, ops []Op) bool {
		diffs, _, err := c.Replay(tree, ops)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diffs {
			if d.Sig == sig {
				return true
			}
		}
		return false
	}
	if !stillFails(f.Tree, f.Ops) {
		t.Fatalf("the minimal case does not fail on replay")
	}
	for i := range f.Ops {
		ops := append(append([]Op{}, f.Ops[:i]...), f.Ops[i+1:]...)
		if stillFails(f.Tree, ops) {
			t.Errorf("the case still fails without op %d (%s): not minimal", i+1, f.Ops[i])
		}
	}
	for _, e := range f.Tree.Entries {
		if stillFails(f.Tree.Without(e.Path), f.Ops) {
			t.Errorf("the case still fails without lower entry %s: not minimal", e.Path)
		}
	}
}

// TestSeedIsDeterministic checks that a seed alone reproduces a run:
// the same lower tree and the same ops.
func TestSeedIsDeterministic(t *testing.T) {
	requireRoot(t)
	var runs [2][]string
	for i := range runs {
		c := plainConfig(t, secondPlain())
		c.Logf = nil
		rec := &recordingSpec{}
		c.Roots[0].NewExecutor = rec.executor
		if f, err := c.Run(3, 300); err != nil || f != nil {
			t.Fatalf("run: %v %v", err, f)
		}
		runs[i] = rec.ops
	}
	if got, want := strings.Join(runs[1], "\n"), strings.Join(runs[0], "\n"); got != want {
		t.Errorf("second run of seed 3 made other ops:\n%s\nwant:\n%s", got, want)
	}
}

type recordingSpec struct{ ops []string }

func (r *recordingSpec) executor(root string) Executor {
	return recordingExecutor{NewDirExecutor(root), r}
}

type recordingExecutor struct {
	*DirExecutor
	rec *recordingSpec
}

func (e recordingExecutor) Exec(op *Op) Result {
	e.rec.ops = append(e.rec.ops, op.String())
	return e.DirExecutor.Exec(op)
}

func TestRelTargetStaysInside(t *testing.T) {
	for _, tc := range []struct{ link, target, want string }{
		{"l", "f", "f"},
		{"d/l", "f", "../f"},
		{"d/e/l", "d/f", "../../d/f"},
		{"d/l", "", ".."},
		{"l", "", "."},
	} {
		if got := RelTarget(tc.link, tc.target); got != tc.want {
			t.Errorf("RelTarget(%q, %q) = %q, want %q", tc.link, tc.target, got, tc.want)
		}
	}
}

// hangingExecutor blocks in its first rename until release is closed.
type hangingExecutor struct {
	*DirExecutor
	release chan struct{}
}

func (e hangingExecutor) Exec(op *Op) Result {
	if op.Kind == OpRename {
		<-e.release
	}
	return e.DirExecutor.Exec(op)
}

// TestHangIsReported checks that an op that never returns fails the
// run with the seed and the last ops, instead of hanging the test.
func TestHangIsReported(t *testing.T) {
	requireRoot(t)
	release := make(chan struct{})
	defer close(release)
	hanging := secondPlain()
	hanging.Name = "hanging"
	hanging.NewExecutor = func(root string) Executor { return hangingExecutor{NewDirExecutor(root), release} }
	c := plainConfig(t, hanging)
	c.OpTimeout = 100 * time.Millisecond
	c.ShrinkRuns = 40
	f, err := c.Run(5, 500)
	if err != nil {
		t.Fatal(err)
	}
	if f == nil {
		t.Fatal("a root that hangs in rename was not reported")
	}
	if got := f.Diffs[0].Sig; got != "hang" {
		t.Errorf("difference %q, want a hang", got)
	}
	last := f.Ops[len(f.Ops)-1]
	if last.Kind != OpRename {
		t.Errorf("last op %s, want the rename that hung", last)
	}
	for _, want := range []string{"seed 5:", "did not return within 100ms on hanging", last.String()} {
		if !strings.Contains(f.Report, want) {
			t.Errorf("report lacks %q:\n%s", want, f.Report)
		}
	}
}

// TestEmulateRenameThroughMovedSymlink re-syncs a rename whose
// destination leads through a symlink inside the directory being
// moved: the emulation must not go on using a path that the move has
// broken (CI failure with seed 64114620).
func TestEmulateRenameThroughMovedSymlink(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"d0", "d0/d4", "d2"} {
		if err := os.Mkdir(root+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../d0/d4", root+"/d2/l1"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(root+"/d2", "user.dir", []byte("d2"), 0); err != nil && err != unix.ENOTSUP {
		t.Fatal(err)
	}
	// Refuse directories as overlayfs does, so that the move re-creates
	// d2 and then moves its entries one by one.
	defer func(r func(string, string) error) { rename = r }(rename)
	rename = func(src, dst string) error {
		var st unix.Stat_t
		if unix.Lstat(src, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return unix.EXDEV
		}
		return unix.Rename(src, dst)
	}
	op := &Op{Kind: OpRename, Path: "d2", Path2: "d2/l1/n0"}
	if err := emulateRename(root, op); err != nil {
		t.Fatalf("emulateRename: %v", err)
	}
	if _, err := os.Lstat(root + "/d2"); !os.IsNotExist(err) {
		t.Errorf("d2 still there after the move: %v", err)
	}
	if target, err := os.Readlink(root + "/d0/d4/n0/l1"); err != nil || target != "../d0/d4" {
		t.Errorf("d0/d4/n0/l1: %q, %v; want the moved symlink", target, err)
	}
}

// TestResolveParentKeepsTrailingSlashName checks that "n3/" still
// names n3 (seed 1154 renamed "d0" -> "n3/").
func TestResolveParentKeepsTrailingSlashName(t *testing.T) {
	root := t.TempDir()
	got, err := resolveParent(root + "/n3/")
	if err != nil || got != root+"/n3" {
		t.Errorf("resolveParent(%q) = %q, %v; want %q", root+"/n3/", got, err, root+"/n3")
	}
}
