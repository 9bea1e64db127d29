package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
	"github.com/hanwen/go-fuse/v2/posixtest"
	"golang.org/x/sys/unix"
)

// go-fuse's posixtest suite (posixtest.All, which on Linux includes
// FallocateKeepSize and Tmpfile) against agentfs, in two passes:
//
//   - TestPosix: each test gets a fresh mount of an empty lower tree and
//     runs in the mount's root, as the suite expects (an empty directory).
//   - TestPosixOverLower: each test runs in a directory that comes from
//     the lower tree (so that every create first copies the directory
//     up), and where it makes sense the lower tree already holds the
//     files the test writes, so that the test's writes, truncates,
//     renames, links and xattr calls hit lower files that must be copied
//     up (posixLowerFiles).

// posixSkip lists the tests that are not run, each with its reason.
// The goal is an empty list: a reason must be a real limitation (of the
// kernel's FUSE, say) or a broken test, never a bug of agentfs.
var posixSkip = map[string]string{
	"FcntlFlockLocksFile": "the test is wrong: it expects a second F_SETLK of the same process to conflict, " +
		"but POSIX record locks of one process never conflict with each other; it fails on ext4 too, " +
		"and go-fuse's own TestAll skips it",
}

// posixMountArgs are the mount flags of the tests that need more than
// the default mount.
var posixMountArgs = map[string][]string{
	// agentfs keeps xattrs on its backstore files, so it can store an
	// 8 KiB one only where the backstore's filesystem can: ext4 without
	// the ea_inode feature (the usual /var/tmp) cannot, tmpfs can.
	"XAttrLarge": {"--backstore", "ramdisk", "--ramdisk-size", "64M"},
}

// posixSelfSkipOK decides whether a test that skipped itself had a
// reason outside agentfs, and names the condition the machine lacks
// (testenv.Accepted: on CI, a failure unless expected). A test that
// skips itself otherwise fails: a self-skip is how posixtest says "this
// filesystem lacks a feature".
var posixSelfSkipOK = map[string]func(m *harness.Mount) (string, bool){
	// XAttrLarge skips when setting an 8 KiB xattr fails with ENOSPC:
	// the backstore's filesystem must refuse it too.
	"XAttrLarge": func(m *harness.Mount) (string, bool) {
		if m.Status.BackingRoot == "" {
			return "agentfs status did not name the backstore", false
		}
		// The directory that holds the stores, on the backstore's
		// filesystem but inside no store.
		return posixProbeLargeXattr(m.T, filepath.Dir(filepath.Dir(m.Status.BackingRoot)))
	},
}

// posixProbeLargeXattr reports whether dir's filesystem refuses an
// 8 KiB user xattr (the size XAttrLarge sets).
func posixProbeLargeXattr(t testing.TB, dir string) (string, bool) {
	f, err := os.CreateTemp(dir, ".posix-xattr-probe-")
	if err != nil {
		return fmt.Sprintf("cannot probe the backstore's filesystem: %v", err), false
	}
	defer func() {
		if err := os.Remove(f.Name()); err != nil {
			t.Errorf("removing the xattr probe: %v", err)
		}
	}()
	defer f.Close()
	err = unix.Fsetxattr(int(f.Fd()), "user.large", make([]byte, 8<<10+123), 0)
	if err == nil {
		return fmt.Sprintf("the backstore's filesystem (%s) stores an 8 KiB xattr, agentfs does not", dir), false
	}
	return fmt.Sprintf("the backstore's filesystem (%s) refuses an 8 KiB xattr too: %v", dir, err), true
}

// posixRun runs one posixtest in dir of m, failing the test if it
// skips itself without a reason posixSelfSkipOK accepts.
func posixRun(t *testing.T, name string, m *harness.Mount, dir string) {
	t.Cleanup(func() {
		if !t.Skipped() || t.Failed() {
			return
		}
		if ok := posixSelfSkipOK[name]; ok != nil {
			why, fine := ok(m)
			if fine {
				testenv.Accepted(t, testenv.LargeXattrs, "%s skipped itself: %s", name, why)
			} else {
				t.Errorf("%s skipped itself: %s", name, why)
			}
			return
		}
		t.Errorf("%s skipped itself (see the skip message above): agentfs lacks what it tests; "+
			"if that is a real limitation, list it in posixSkip with the reason", name)
	})
	posixtest.All[name](t, dir)
}

// posixLowerFiles are the lower files per test for TestPosixOverLower:
// names the test creates by truncating them (os.WriteFile, os.Create,
// O_TRUNC), so that a lower file with other content and mode must
// behave as a new one would. Tests not listed run in an empty lower
// directory; tests that create with O_EXCL, mkdir or link to their
// names, check a new file's mode or list the directory cannot have
// them in the lower tree.
var posixLowerFiles = map[string][]string{
	"DirectIO":                   {"file.txt"},
	"Fallocate":                  {"file"},
	"FallocateKeepSize":          {"file"},
	"FcntlFlockLocksFile":        {"test"},
	"FcntlFlockSetLk":            {"file0", "file1"},
	"FdLeak":                     {"file"},
	"FileLarge":                  {"file"},
	"FstatDeleted":               {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"},
	"Link":                       {"target"},
	"LseekEnxioCheck":            {"file.bin"},
	"LseekHoleSeeksToEOF":        {"file.bin"},
	"NlinkZero":                  {"src", "dst"},
	"ParallelFileOpen":           {"file"},
	"RenameOverwriteDestExist":   {"file"},
	"RenameOverwriteDestNoExist": {"file"},
	"TruncateFile":               {"file"},
	"TruncateNoFile":             {"file"},
	"XAttr":                      {"file"},
	"XAttrLarge":                 {"file"},
}

func posixTestNames() []string {
	var names []string
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// TestPosix runs every posixtest on a fresh mount of an empty lower.
func TestPosix(t *testing.T) {
	posixSuite(t, func(name string) ([]harness.Entry, string) { return nil, "" })
}

// TestPosixOverLower runs every posixtest in a lower directory of a
// fresh mount, over the lower files of posixLowerFiles.
func TestPosixOverLower(t *testing.T) {
	posixSuite(t, func(name string) ([]harness.Entry, string) {
		entries := []harness.Entry{harness.LowerDir("work")}
		for _, f := range posixLowerFiles[name] {
			entries = append(entries, harness.LowerFile("work/"+f, "lower content of "+f+"\n", harness.WithMode(0o640)))
		}
		return entries, "work"
	})
}

// posixSuite runs every posixtest on its own mount; setup gives each
// test's lower tree and the directory (in the mount) it runs in.
func posixSuite(t *testing.T, setup func(name string) (lower []harness.Entry, dir string)) {
	harness.RequireFUSE(t)
	for _, name := range posixTestNames() {
		t.Run(name, func(t *testing.T) {
			if reason, ok := posixSkip[name]; ok {
				testenv.SkipByDesign(t, "listed in posixSkip: "+reason)
			}
			lower, dir := setup(name)
			m := harness.NewMount(t, harness.WithLower(lower...), harness.WithArgs(posixMountArgs[name]...))
			posixRun(t, name, m, m.Path(dir))
		})
	}
}
