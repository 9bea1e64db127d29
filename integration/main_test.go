// Package integration holds black-box tests of agentfs: they build the
// agentfs binary, mount real FUSE the way a user does (`agentfs mount`),
// work on the mount with plain system calls and check the results from
// outside.
//
// # The harness
//
// What the tests share is package harness: harness.NewMount makes a
// lower tree from a spec (harness.LowerFile, harness.LowerDir,
// harness.LowerSymlink, ...), mounts it and registers a cleanup that
// unmounts it and asserts that the lower tree is byte-for-byte
// unchanged: every test that mounts checks that agentfs never wrote to
// the lower directory.
//
// # Environment
//
//   - AGENTFS_BIN: the binary to test (default: built from ../cmd/agentfs
//     once per run).
//   - AGENTFS_REQUIRE_FUSE=1: tests that cannot run here (no root, no
//     /dev/fuse, a program missing, ...) fail instead of skipping (CI;
//     package internal/testenv decides, and lists the skips CI expects).
//   - AGENTFS_TEST_NO_PASSTHROUGH=1, AGENTFS_TEST_NO_IO_URING=1: every
//     mount without FUSE passthrough, or with FUSE requests over
//     /dev/fuse instead of io_uring (the repeated passes of make test).
//
// Tests that change users run a helper: this test binary re-executed
// with another uid (harness.StartHelper, harness.RunAs).
package integration

import (
	"fmt"
	"os"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
)

func TestMain(m *testing.M) {
	if harness.IsHelperProcess() {
		os.Exit(harness.RunHelper())
	}
	if isIsolationWorker() {
		os.Exit(runIsolationWorker())
	}
	if isMCPRewinder() {
		os.Exit(runMCPRewinder())
	}
	if isTTYAgent() {
		os.Exit(runTTYAgent())
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	cleanup, err := harness.Setup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		return 1
	}
	defer cleanup()
	return m.Run()
}

// must fails the test now if err is not nil. It is for errors that name
// what failed themselves, as those of package os do ("remove /mnt/f:
// no such file or directory"); mustf is for the others.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mustf fails the test now if err is not nil, with a message that names
// the step: mustf(t, unix.Chmod(p, 0o600), "chmod %s", p).
func mustf(t testing.TB, err error, format string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}
