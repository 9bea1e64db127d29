package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/difftest"
	"github.com/agentfs/agentfs/integration/harness"
)

// The randomized differential test (package difftest): the same seeded
// ops on agentfs and on a plain directory (the reference), with the
// kernel's overlayfs alongside as the witness for errnos. On a
// difference it prints the seed and a minimal failing sequence.
//
// Environment:
//
//	AGENTFS_DIFF_SEED    first seed (default: from the clock; always logged)
//	AGENTFS_DIFF_OPS     ops per round (default 3000)
//	AGENTFS_DIFF_ROUNDS  rounds, seed, seed+1, ... (default 1)
//	AGENTFS_DIFF_SHRINK  replays the shrinker may use (default 300)
//	AGENTFS_DIFF_DIR     where the roots live (default: the test's temp dir)
//
// agentfs may show only the allowed differences of dtAgentfsProfile
// (see the table in difftest's package documentation).

// dtEnvInt reads an integer from the environment.
func dtEnvInt(t *testing.T, name string, def int64) int64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want an integer", name, s)
	}
	return v
}

// dtConfig is the configuration shared by the differential tests.
func dtConfig(t *testing.T, roots ...difftest.RootSpec) *difftest.Config {
	work := os.Getenv("AGENTFS_DIFF_DIR")
	if work == "" {
		work = t.TempDir()
	}
	return &difftest.Config{
		Reference:  difftest.PlainSpec(),
		Roots:      roots,
		WorkDir:    work,
		ShrinkRuns: int(dtEnvInt(t, "AGENTFS_DIFF_SHRINK", 300)),
		Logf:       t.Logf,
	}
}

// dtRun runs the configured rounds and fails the test with the report
// of every failing round.
func dtRun(t *testing.T, c *difftest.Config, defaultOps int64) {
	seed := dtEnvInt(t, "AGENTFS_DIFF_SEED", time.Now().UnixNano()%1_000_000_000)
	ops := dtEnvInt(t, "AGENTFS_DIFF_OPS", defaultOps)
	rounds := dtEnvInt(t, "AGENTFS_DIFF_ROUNDS", 1)
	for r := int64(0); r < rounds; r++ {
		s := seed + r
		t.Logf("round %d: seed %d, %d ops (repeat with AGENTFS_DIFF_SEED=%d AGENTFS_DIFF_OPS=%d)", r+1, s, ops, s, ops)
		f, err := c.Run(s, int(ops))
		if err != nil {
			t.Fatalf("seed %d: %v", s, err)
		}
		if f != nil {
			t.Errorf("difference found; repeat with AGENTFS_DIFF_SEED=%d AGENTFS_DIFF_OPS=%d\n%s", s, ops, f.Report)
		}
	}
}

// TestDifferentialAgentfs compares agentfs with a plain directory, with
// overlayfs as the errno witness.
func TestDifferentialAgentfs(t *testing.T) {
	harness.RequireFUSE(t)
	c := dtConfig(t, dtAgentfsSpec(), difftest.OverlaySpec(true))
	dtRun(t, c, 3000)
}

// TestDifferentialOverlayfs checks the harness and its table of allowed
// differences: the kernel's overlayfs against a plain directory must
// show only the differences the overlayfs profile lists.
func TestDifferentialOverlayfs(t *testing.T) {
	harness.RequireFUSE(t) // root, to mount overlayfs
	c := dtConfig(t, difftest.OverlaySpec(false))
	dtRun(t, c, 1000)
}

// dtAgentfsProfile lists the differences from a plain directory agentfs
// may show: only those no FUSE filesystem can avoid.
var dtAgentfsProfile = &difftest.Profile{Name: "agentfs", Allow: map[string]bool{
	// The kernel's pipe code updates a fifo's mtime in the FUSE inode
	// without telling the daemon, and the next getattr replaces it
	// (go-fuse's loopback example shows the same).
	difftest.AllowFifoMtime: true,
}}

// dtAgentfsSpec mounts the built binary over a copy of the lower tree;
// closing the root unmounts it and checks that the lower tree is
// unchanged.
func dtAgentfsSpec() difftest.RootSpec {
	return difftest.RootSpec{
		Name:    "agentfs",
		Profile: dtAgentfsProfile,
		Make: func(dir string, tr *difftest.Tree) (*difftest.Root, error) {
			lower := filepath.Join(dir, "lower")
			if err := os.Mkdir(lower, 0o755); err != nil {
				return nil, err
			}
			if err := tr.Materialize(lower); err != nil {
				return nil, err
			}
			mnt, err := difftest.RootDir(dir)
			if err != nil {
				return nil, err
			}
			if err := os.Mkdir(mnt, 0o755); err != nil {
				return nil, err
			}
			before, err := difftest.TakeFingerprint(lower)
			if err != nil {
				return nil, err
			}
			if out, err := dtCommand(harness.Bin(), append(append([]string{"mount", "--lower", lower}, harness.ModeFlags()...), mnt)...); err != nil {
				return nil, fmt.Errorf("agentfs mount: %v: %s", err, out)
			}
			return &difftest.Root{Dir: mnt, Abort: func() string { return dtAbort(mnt) }, Close: func() error {
				var errs []string
				if out, err := dtCommand(harness.Bin(), "unmount", mnt); err != nil {
					errs = append(errs, fmt.Sprintf("agentfs unmount: %v: %s", err, out))
				}
				if len(difftest.MountsBelow(mnt)) > 0 {
					errs = append(errs, "still mounted after agentfs unmount")
				}
				if after, err := difftest.TakeFingerprint(lower); err != nil {
					errs = append(errs, err.Error())
				} else {
					for _, c := range before.Changes(after) {
						errs = append(errs, "lower tree: "+c)
					}
				}
				if len(errs) > 0 {
					return fmt.Errorf("%s", strings.Join(errs, "; "))
				}
				return nil
			}}, nil
		},
	}
}

// dtCommand runs a command with a generous limit, so that a hung
// mount or unmount ends the test with a message instead of a timeout.
func dtCommand(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// dtAbort gets ops unstuck from a hung agentfs mount: it makes the
// daemon serving mnt (found by its command line) dump its goroutines
// (SIGQUIT; it logs to agentfs.log in its store), saves the dump for
// the report, and kills it if it is still there, which fails every
// pending request.
func dtAbort(mnt string) string {
	pid, store := dtFindDaemon(mnt)
	if pid == 0 {
		if err := difftest.AbortFUSE(mnt); err != nil {
			return fmt.Sprintf("no daemon found for %s, and %v", mnt, err)
		}
		return "no daemon found; aborted the FUSE connection"
	}
	quit := "after SIGQUIT"
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		quit = fmt.Sprintf("after a failed SIGQUIT (%v)", err)
	}
	for i := 0; i < 50 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL) // ESRCH when the SIGQUIT dump ended it already
	log, err := os.ReadFile(filepath.Join(store, "agentfs.log"))
	if err != nil {
		return fmt.Sprintf("killed daemon pid %d %s; its log: %v", pid, quit, err)
	}
	// One file per test process: the shrinker's replays overwrite it,
	// the last (the minimal case's) stays.
	dump := filepath.Join(os.TempDir(), fmt.Sprintf("agentfs-difftest-hang-%d.log", os.Getpid()))
	if err := os.WriteFile(dump, log, 0o644); err != nil {
		return fmt.Sprintf("killed daemon pid %d %s; saving its log: %v", pid, quit, err)
	}
	return fmt.Sprintf("killed daemon pid %d %s; its log with the goroutine dump is %s", pid, quit, dump)
}

// dtFindDaemon finds the agentfs daemon serving mnt and its store.
func dtFindDaemon(mnt string) (int, string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || filepath.Base(args[0]) != filepath.Base(harness.Bin()) || args[len(args)-1] != mnt {
			continue
		}
		store := ""
		for i, a := range args[:len(args)-1] {
			if a == "--store" {
				store = args[i+1]
			}
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			return pid, store
		}
	}
	return 0, ""
}
