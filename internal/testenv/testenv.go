// Package testenv decides, in one place, what a test of agentfs does
// when the machine lacks something it needs, and gives randomized tests
// their seeds. Every test of the module skips through it: a t.Skip
// anywhere else fails TestSkipsGoThroughTestenv.
//
// # Skips and CI
//
// On a developer's machine a test that cannot run here (not root, no
// /dev/fuse, no user xattrs on the temporary directory, a kernel without
// FUSE over io_uring, git missing, ...) skips and says why: Skip, and
// the helpers built on it (RequireRoot, RequireFUSE, RequireProgram).
// CI sets AGENTFS_REQUIRE_FUSE=1 (.ci/run; make test as root with
// CI=true): there each of these skips is a failure, unless the test and
// its condition are in expectedOnCI, the commented list of what the CI
// machine is known to lack. A test that goes on without something
// (another path through it, a part left out) says so with Reduced, which
// CI treats as a skip.
//
// Some skips are no gap in the machine: a test scaled out of -short or
// the race detector, the half of a test that runs in another process
// (as another user), a case listed as a known limitation with its
// reason. They go through SkipByDesign and are skips everywhere.
//
// # Seeds
//
// A randomized test takes its seed from Seed (fresh from the clock,
// replayed from an environment variable, logged either way), or runs
// fixed seeds and, on demand, fresh ones beside them (Seeds).
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RequireEnv is the environment variable of CI's switch: with
// AGENTFS_REQUIRE_FUSE=1 a test that cannot run fails instead of
// skipping.
const RequireEnv = "AGENTFS_REQUIRE_FUSE"

// Required reports whether CI's switch is set.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// A Condition is something a test needs from the machine.
type Condition string

// The conditions tests skip for.
const (
	Root            Condition = "root"
	FUSEDevice      Condition = "/dev/fuse"
	FUSEOverIOURing Condition = "FUSE over io_uring"    // the fuse module's enable_uring
	IOURingSysctl   Condition = "io_uring_disabled"     // the sysctl kernel.io_uring_disabled
	UserXattrs      Condition = "user xattrs"           // on the temporary directory's filesystem
	LargeXattrs     Condition = "8 KiB xattrs"          // on the backstore's filesystem
	InodeFlags      Condition = "inode flags"           // FS_IOC_GETFLAGS on the temporary directory
	ImmutableFlag   Condition = "the immutable flag"    // FS_IMMUTABLE_FL on the temporary directory
	Cachestat       Condition = "cachestat"             // Linux 6.5
	DiskBacked      Condition = "a disk-backed tempdir" // not tmpfs: reads that reach a disk
	DevShmTmpfs     Condition = "tmpfs at /dev/shm"
	TwoCPUs         Condition = "two CPUs" // allowed to the test
	Cgroups         Condition = "cgroups"  // a cgroup the test may make
	LoopDevices     Condition = "loop devices"
	UserNamespaces  Condition = "user namespaces for unprivileged users"
	EBPF            Condition = "eBPF tracing" // root, a kernel of 5.17 or later with BTF, no lockdown
	CgroupKill      Condition = "cgroup.kill"  // Linux 5.14
	Pty             Condition = "a pseudo-terminal"
)

// Program is the condition that program name is installed.
func Program(name string) Condition { return Condition("the program " + name) }

// expectedSkip is a skip that CI's machine is known to take: the test
// (a name as t.Name() gives it, or a parent of it) and the condition.
type expectedSkip struct {
	test string
	cond Condition
	why  string
}

// expectedOnCI lists the skips that are expected on CI, each with why:
// under AGENTFS_REQUIRE_FUSE=1 these skip, every other one fails. CI
// runs as root with /dev/fuse, on ext4, with a kernel that has FUSE over
// io_uring, cachestat, user namespaces and user xattrs on tmpfs, and
// with the programs make deps installs: no test skips there, and the
// list is empty. An entry names the test (t.Name(), or a parent of it)
// and the condition, and says why CI's machine cannot have it:
//
//	{test: "TestX/sub", cond: UserXattrs, why: "CI's /tmp is a filesystem without them"},
var expectedOnCI = []expectedSkip{}

// expected returns why CI's machine lacks cond for the test named name,
// or "" if it does not.
func expected(list []expectedSkip, name string, cond Condition) string {
	for _, e := range list {
		if e.cond == cond && (name == e.test || strings.HasPrefix(name, e.test+"/")) {
			return e.why
		}
	}
	return ""
}

// mustRun reports whether a test named name that lacks cond must fail
// rather than skip, and if not, why CI expects the skip ("" when the
// switch is off).
func mustRun(list []expectedSkip, required bool, name string, cond Condition) (fail bool, why string) {
	if !required {
		return false, ""
	}
	why = expected(list, name, cond)
	return why == "", why
}

// Skip skips t, which cannot run here for want of cond (the message says
// more), or fails it when CI's switch is set and the skip is not in the
// expected list.
func Skip(t testing.TB, cond Condition, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	fail, why := mustRun(expectedOnCI, Required(), t.Name(), cond)
	if fail {
		t.Fatalf("%s (no %s): %s=1 makes this a failure; if CI's machine cannot have it, list the test in testenv's expectedOnCI with why",
			msg, cond, RequireEnv)
	}
	if why != "" {
		msg += " (expected on CI: " + why + ")"
	}
	t.Skipf("%s (no %s)", msg, cond)
}

// Reduced says that t goes on without cond, along another path or with a
// part left out (the message says which), or fails it as Skip would.
func Reduced(t testing.TB, cond Condition, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if fail, _ := mustRun(expectedOnCI, Required(), t.Name(), cond); fail {
		t.Fatalf("%s (no %s): %s=1 makes this a failure; if CI's machine cannot have it, list the test in testenv's expectedOnCI with why",
			msg, cond, RequireEnv)
	}
	t.Logf("reduced: %s (no %s)", msg, cond)
}

// Accepted is for a test that skipped itself (a suite of another module,
// go-fuse's posixtest) for want of cond, once the caller has checked
// that the machine lacks it: it fails t when CI's switch is set and the
// skip is not in the expected list, and logs it otherwise.
func Accepted(t testing.TB, cond Condition, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if fail, _ := mustRun(expectedOnCI, Required(), t.Name(), cond); fail {
		t.Errorf("%s (no %s): %s=1 makes this skip a failure; if CI's machine cannot have it, list the test in testenv's expectedOnCI with why",
			msg, cond, RequireEnv)
		return
	}
	t.Logf("skip accepted: %s (no %s)", msg, cond)
}

// SkipByDesign skips t for a reason that is no gap in the machine (see
// the package doc): a skip everywhere, CI included.
func SkipByDesign(t testing.TB, why string) {
	t.Helper()
	t.Skip(why)
}

// RequireRoot skips t (Skip: fails on CI) unless it runs as root; what
// says what needs root.
func RequireRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, Root, "%s needs root", what)
	}
}

// RequireFUSE skips t (Skip: fails on CI) unless it runs as root with
// /dev/fuse, as the tests that mount need.
func RequireFUSE(t testing.TB) {
	t.Helper()
	RequireRoot(t, "mounting FUSE")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		Skip(t, FUSEDevice, "mounting FUSE needs /dev/fuse: %v", err)
	}
}

// RequireProgram skips t (Skip: fails on CI) unless program name is
// installed, and returns its path.
func RequireProgram(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Skip(t, Program(name), "%s is not installed", name)
	}
	return p
}

// RequireTwoCPUs skips t (Skip: fails on CI) unless the test may run on
// at least two CPUs (its affinity mask).
func RequireTwoCPUs(t testing.TB, why string) {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatalf("sched_getaffinity: %v", err)
	}
	if set.Count() < 2 {
		Skip(t, TwoCPUs, "%d CPU allowed: %s", set.Count(), why)
	}
}

// DiskDir returns a fresh directory, removed after the test, on a
// filesystem that keeps its files on a disk (not tmpfs or ramfs): where
// the page cache can let go of a file and a read must reach the disk.
// It tries the test's temporary directory, then /var/tmp, and skips
// (Skip: fails on CI) when neither is.
func DiskDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if onDisk(dir) {
		return dir
	}
	tried := []string{dir}
	if onDisk("/var/tmp") {
		d, err := os.MkdirTemp("/var/tmp", "agentfs-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.RemoveAll(d); err != nil {
				t.Errorf("removing %s: %v", d, err)
			}
		})
		return d
	}
	tried = append(tried, "/var/tmp")
	Skip(t, DiskBacked, "%s: every one is on tmpfs or ramfs", strings.Join(tried, " and "))
	return ""
}

// onDisk reports whether dir's filesystem is neither tmpfs nor ramfs.
func onDisk(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type != unix.TMPFS_MAGIC && st.Type != unix.RAMFS_MAGIC
}

// Seed returns the seed of a randomized test: the value of the
// environment variable env if it is set (a replay), else a fresh one
// from the clock. It logs the seed and, if the test fails, how to run it
// again.
func Seed(t testing.TB, env string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(env); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a seed (an unsigned integer)", env, s)
		}
		seed = v
	}
	t.Logf("seed %d (%s=%d replays it)", seed, env, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d: %s=%d go test -run '^%s$' replays it", seed, env, seed, t.Name())
		}
	})
	return seed
}

// Seeds returns the seeds of a randomized test that runs fixed ones:
// 0 to n-1, then those the environment variable env asks for, a
// comma-separated list in which a number is a seed to run (a replay)
// and "fresh:N" is N fresh seeds from the clock. Each is meant to be a
// subtest named after its seed, so that a failure names it.
func Seeds(t testing.TB, n int, env string) []uint64 {
	t.Helper()
	seeds := make([]uint64, 0, n)
	for i := range n {
		seeds = append(seeds, uint64(i))
	}
	s := os.Getenv(env)
	if s == "" {
		return seeds
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if c, ok := strings.CutPrefix(f, "fresh:"); ok {
			k, err := strconv.Atoi(c)
			if err != nil || k < 0 {
				t.Fatalf("%s=%q: %q is no count of fresh seeds", env, s, f)
			}
			base := uint64(time.Now().UnixNano())
			for i := range k {
				seeds = append(seeds, base+uint64(i)*0x9e3779b97f4a7c15)
			}
			continue
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %q is neither a seed nor fresh:N", env, s, f)
		}
		seeds = append(seeds, v)
	}
	t.Logf("seeds 0 to %d and %d more (%s=%q), each a subtest named by its seed", n-1, len(seeds)-n, env, s)
	return seeds
}
