// Package harness is what the integration tests of agentfs share
// (package integration and its helpers): the test harness. It owns
//
//   - the binary under test: AGENTFS_BIN, or built once per run from
//     ../cmd/agentfs and ../cmd/agentfs-core (Setup, Bin), and running it
//     as a user does (Run,
//     RunCmd, Result);
//   - mounting through the CLI as a user does: NewMount runs `agentfs
//     mount` on a fresh mountpoint with the options of the run
//     (ModeFlags: AGENTFS_TEST_NO_PASSTHROUGH, AGENTFS_TEST_NO_IO_URING)
//     and registers a cleanup that unmounts and asserts that the lower
//     tree is byte-for-byte unchanged, so that every test that mounts
//     checks that agentfs never wrote to the lower directory;
//   - lower-tree builders: LowerFile, LowerDir, LowerSymlink, ... with
//     attributes (WithMode, WithOwner, WithTimes, WithXattr), built by
//     NewLowerDir and BuildLower;
//   - tree snapshots and comparisons: SnapshotTree records a tree
//     without changing it (O_NOATIME), AssertUnchanged, DiffTrees and
//     DiffMountTrees compare two recordings;
//   - the FUSE-required switch: RequireFUSE skips a test without root
//     and /dev/fuse, or fails it when AGENTFS_REQUIRE_FUSE=1 (CI);
//   - the helper-process protocol: tests that change users run this test
//     binary again with another uid (StartHelper, RunAs, Op..., and
//     RunHelper, the helper's main, which TestMain calls when
//     IsHelperProcess);
//   - small helpers of every test: Lstat, ReadFile, WriteFile, ListDir,
//     ErrnoOf, ErrName, WaitFor, IsMounted, ...
//
// It is a package of the test binary: its functions take the test's
// testing.TB, and it runs in the directory of package integration, as
// go test runs a package's tests.
package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/internal/testenv"
)

// bin is the binary under test.
var bin string

// sharedDir holds what the whole run shares (the built binary, the
// helper copy of the test binary). It is world-searchable so that
// helpers running as other users can execute from it.
var sharedDir string

// Setup prepares a run of the tests; TestMain calls it before m.Run and
// the function it returns after. It makes the shared directory, gives
// the run a configuration directory of its own (XDG_CONFIG_HOME: no user
// configuration of the machine's, which agentfs mount reads from
// ${XDG_CONFIG_HOME}/agentfs/config) and finds the binary under test:
// AGENTFS_BIN (agentfs-core beside it), or built from ../cmd/agentfs and
// ../cmd/agentfs-core into the shared directory.
// The function returned removes the shared directory.
func Setup() (cleanup func(), err error) {
	sharedDir, err = os.MkdirTemp("", "agentfs-it-")
	if err != nil {
		return nil, err
	}
	cleanup = func() {
		if err := os.RemoveAll(sharedDir); err != nil {
			fmt.Fprintf(os.Stderr, "integration: removing the shared directory: %v\n", err)
		}
	}
	if err := os.Chmod(sharedDir, 0o755); err != nil {
		cleanup()
		return nil, fmt.Errorf("making the shared directory world-searchable: %v", err)
	}
	if err := os.Setenv("XDG_CONFIG_HOME", filepath.Join(sharedDir, "config")); err != nil {
		cleanup()
		return nil, fmt.Errorf("setting XDG_CONFIG_HOME: %v", err)
	}
	bin = os.Getenv("AGENTFS_BIN")
	if bin == "" {
		// The front and, beside it, the full program it runs most
		// commands in (as make build builds them).
		bin = filepath.Join(sharedDir, "agentfs")
		for _, b := range []struct{ out, pkg string }{{bin, "./cmd/agentfs"}, {filepath.Join(sharedDir, "agentfs-core"), "./cmd/agentfs-core"}} {
			build := exec.Command("go", "build", "-o", b.out, b.pkg)
			build.Dir = ".."
			build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build links it
			if out, err := build.CombinedOutput(); err != nil {
				cleanup()
				return nil, fmt.Errorf("building agentfs (go build %s): %v\n%s", b.pkg, err, out)
			}
		}
	} else if abs, err := filepath.Abs(bin); err == nil {
		bin = abs
	}
	return cleanup, nil
}

// Bin is the path of the binary under test (after Setup).
func Bin() string { return bin }

// SharedDir is the directory the whole run shares (after Setup): the
// built binary, the helper copy of the test binary. Every user can reach
// it.
func SharedDir() string { return sharedDir }

// RequireFUSE skips a test that needs root and /dev/fuse where they are
// missing, except when AGENTFS_REQUIRE_FUSE=1 (CI): there it fails
// (testenv.RequireFUSE).
func RequireFUSE(t testing.TB) {
	t.Helper()
	testenv.RequireFUSE(t)
}

// Result is one run of the agentfs binary.
type Result struct {
	Args   []string
	Stdout string
	Stderr string
	Code   int
}

func (r Result) String() string {
	return fmt.Sprintf("agentfs %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.Args, " "), r.Code, r.Stdout, r.Stderr)
}

// Output is what the user sees: stdout and stderr.
func (r Result) Output() string { return r.Stdout + r.Stderr }

// Run runs the binary under test with args and returns its output and
// exit code.
func Run(t testing.TB, args ...string) Result {
	t.Helper()
	return RunCmd(t, exec.Command(bin, args...), args)
}

// RunCmd runs cmd (a command of the binary under test that the caller
// prepared: another directory, environment or user) and returns its
// output and exit code; args are what Result reports.
func RunCmd(t testing.TB, cmd *exec.Cmd, args []string) Result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running %v: %v", cmd.Args, err)
	}
	return r
}

// WaitFor polls cond until it holds or a generous deadline passes (a
// guard against hangs, not a timing assertion).
func WaitFor(cond func() bool) bool {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
