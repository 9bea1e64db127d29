package harness

// Mounts: agentfs mount run as a user runs it, on a fresh mountpoint,
// with a cleanup that checks the lower tree.

import (
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/procfs"
	"golang.org/x/sys/unix"
)

// Mount is a mounted agentfs.
type Mount struct {
	T      *testing.T // the test that mounted it
	Lower  string     // the lower directory
	Dir    string     // the mountpoint
	Store  string     // --store, or "" for a private store
	args   []string
	before Tree

	// From `agentfs status --json` right after mounting.
	Status MountStatus
}

// MountStatus is the part of `agentfs status --json` the tests use.
type MountStatus struct {
	Version     string `json:"version"`
	Pid         int    `json:"pid"`
	Lower       string `json:"lower"`
	Mountpoint  string `json:"mountpoint"`
	Store       string `json:"store"`
	Ephemeral   bool   `json:"ephemeral"`
	Backstore   string `json:"backstore"`
	BackingMode string `json:"backstore_mode"`
	BackingRoot string `json:"backstore_root"`
	SizeLimit   int64  `json:"ramdisk_size"`
	Reflink     bool   `json:"reflink"`
	Passthrough bool   `json:"passthrough"`
	IOMode      string `json:"io_mode"`
	Writeback   bool   `json:"writeback_cache"`
	Transport   string `json:"transport"`
	Objects     int64  `json:"objects"`
	Bytes       int64  `json:"bytes"`
	FsFree      int64  `json:"backstore_free"`
	// OpenForWriting counts the files the daemon holds open for
	// writing (a snapshot clones them).
	OpenForWriting int `json:"open_for_writing"`
}

// MountOption configures NewMount.
type MountOption func(*mountConfig)

type mountConfig struct {
	entries []Entry
	lower   string
	store   string
	args    []string
}

// WithLower adds entries to the lower tree NewMount builds.
func WithLower(entries ...Entry) MountOption {
	return func(c *mountConfig) { c.entries = append(c.entries, entries...) }
}

// WithExistingLower mounts a lower directory the test built itself
// (the unchanged-check still applies).
func WithExistingLower(dir string) MountOption {
	return func(c *mountConfig) { c.lower = dir }
}

// WithStore keeps the state in dir (--store).
func WithStore(dir string) MountOption {
	return func(c *mountConfig) { c.store = dir; c.args = append(c.args, "--store", dir) }
}

// WithRamdisk uses a ramdisk backstore of the given size (e.g. "8M").
func WithRamdisk(size string) MountOption {
	return func(c *mountConfig) { c.args = append(c.args, "--backstore", "ramdisk", "--ramdisk-size", size) }
}

// WithArgs passes more flags to agentfs mount.
func WithArgs(args ...string) MountOption {
	return func(c *mountConfig) { c.args = append(c.args, args...) }
}

// NewMount builds the lower tree, mounts it on a fresh directory and
// registers the cleanup: dump the daemon log if the test failed,
// unmount, and assert the lower tree is unchanged.
func NewMount(t *testing.T, opts ...MountOption) *Mount {
	t.Helper()
	RequireFUSE(t)
	var c mountConfig
	for _, o := range opts {
		o(&c)
	}
	if c.lower == "" {
		c.lower = NewLowerDir(t, c.entries...)
	} else if len(c.entries) > 0 {
		BuildLower(t, c.lower, c.entries)
	}
	m := &Mount{T: t, Lower: c.lower, Dir: NewMountpoint(t), Store: c.store, args: c.args}
	m.before = SnapshotTree(m.Lower)
	if m.before.Err != nil {
		t.Fatalf("recording the lower tree: %v", m.before.Err)
	}
	m.Mount()
	t.Cleanup(func() {
		if t.Failed() {
			m.DumpLog()
		}
		m.Unmount()
		AssertUnchanged(t, m.before, SnapshotTree(m.Lower))
	})
	return m
}

// ModeFlags are the mount flags every test mount gets: with
// AGENTFS_TEST_NO_PASSTHROUGH=1 (the suite's second pass in make test)
// file I/O goes through the page cache instead of passthrough; with
// AGENTFS_TEST_NO_IO_URING=1 (its third pass) FUSE requests come over
// /dev/fuse instead of io_uring.
func ModeFlags() []string {
	var flags []string
	if os.Getenv("AGENTFS_TEST_NO_PASSTHROUGH") == "1" {
		flags = append(flags, "--no-passthrough")
	}
	if os.Getenv("AGENTFS_TEST_NO_IO_URING") == "1" {
		flags = append(flags, "--no-io-uring")
	}
	return flags
}

// NewMountpoint makes an empty directory that other users can reach.
func NewMountpoint(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// RingKnob is the fuse module's parameter that a kernel with FUSE over
// io_uring has (agentfs mount turns it on as root).
const RingKnob = "/sys/module/fuse/parameters/enable_uring"

// RingOffered reports whether the kernel offers FUSE over io_uring.
func RingOffered() bool {
	_, err := os.Stat(RingKnob)
	return err == nil
}

// RingRequested reports whether agentfs mount with these flags (and
// the pass's, ModeFlags) asks for FUSE over io_uring: as root, without
// --no-io-uring.
func RingRequested(args []string) bool {
	return os.Geteuid() == 0 && !slices.Contains(ModeFlags(), "--no-io-uring") && !slices.Contains(args, "--no-io-uring")
}

// checkTransport fails the test if the mount's requests do not come the
// way its flags and the kernel say they must: over io_uring where the
// kernel offers it and nothing turned it off (a mount that fell back to
// /dev/fuse would leave the io_uring transport untested by the whole
// pass), over /dev/fuse with --no-io-uring.
func (m *Mount) checkTransport(st MountStatus) {
	m.T.Helper()
	switch {
	case !RingRequested(m.args):
		if !strings.HasPrefix(st.Transport, "/dev/fuse") {
			m.T.Errorf("agentfs status: transport %q with --no-io-uring or not as root, want /dev/fuse", st.Transport)
		}
	case RingOffered():
		if !strings.HasPrefix(st.Transport, "io_uring (") {
			m.T.Errorf("agentfs status: transport %q, want io_uring: the kernel offers FUSE over io_uring (%s) and nothing turned it off", st.Transport, RingKnob)
		}
	}
}

// Mount runs agentfs mount, records the mount's status and checks its
// transport (checkTransport).
func (m *Mount) Mount() {
	m.T.Helper()
	args := append([]string{"mount", "--lower", m.Lower}, ModeFlags()...)
	args = append(append(args, m.args...), m.Dir)
	if r := Run(m.T, args...); r.Code != 0 {
		m.T.Fatalf("mount failed:\n%s", r)
	}
	if !IsMounted(m.Dir) {
		m.T.Fatalf("agentfs mount returned 0 but %s is not in /proc/self/mountinfo", m.Dir)
	}
	st, err := m.FetchStatus()
	if err != nil {
		m.T.Errorf("agentfs status after mount: %v", err)
	} else {
		m.checkTransport(st)
	}
	m.Status = st
}

// FetchStatus runs agentfs status --json on the mount.
func (m *Mount) FetchStatus() (MountStatus, error) {
	var st MountStatus
	r := Run(m.T, "status", "-C", m.Dir, "--json")
	if r.Code != 0 {
		return st, fmt.Errorf("%s", r)
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		return st, fmt.Errorf("parsing status --json: %v\n%s", err, r.Stdout)
	}
	return st, nil
}

// WaitClosed waits until the daemon has been told of every close of a
// file opened for writing (the kernel's RELEASE comes after close(2)
// returns), so that a snapshot taken next shares the files' objects
// instead of cloning them.
func (m *Mount) WaitClosed() {
	m.T.Helper()
	var last MountStatus
	var err error
	if !WaitFor(func() bool {
		last, err = m.FetchStatus()
		return err == nil && last.OpenForWriting == 0
	}) {
		m.T.Fatalf("agentfs status: %d files still open for writing after every close (%v)", last.OpenForWriting, err)
	}
}

// Unmount runs agentfs unmount if the directory is mounted and checks
// that the mount is gone.
func (m *Mount) Unmount() {
	m.T.Helper()
	if !IsMounted(m.Dir) {
		return
	}
	r := Run(m.T, "unmount", m.Dir)
	if r.Code != 0 {
		m.T.Errorf("unmount failed:\n%s", r)
	}
	if IsMounted(m.Dir) {
		m.T.Errorf("%s is still mounted after agentfs unmount; detaching it", m.Dir)
		if err := unix.Unmount(m.Dir, unix.MNT_DETACH); err != nil {
			m.T.Errorf("detaching %s: %v", m.Dir, err)
		}
	}
}

// Remount unmounts and mounts the same lower (and store) again.
func (m *Mount) Remount() {
	m.T.Helper()
	m.Unmount()
	m.Mount()
}

// AcceptLower takes the lower tree as it is now for the check at
// unmount that agentfs did not write to it, for tests that write to it
// on purpose (apply, an edit of the project under the mount): each
// checks the lower tree itself, then calls this, so that anything
// written to it afterwards (by the unmount) still fails.
func (m *Mount) AcceptLower() { m.before = SnapshotTree(m.Lower) }

// AssertLowerUnchanged checks now what the cleanup checks at unmount:
// the lower tree is as it was recorded (at mounting, or by AcceptLower).
func (m *Mount) AssertLowerUnchanged() {
	m.T.Helper()
	AssertUnchanged(m.T, m.before, SnapshotTree(m.Lower))
}

// LogPath is the daemon's log in its store.
func (m *Mount) LogPath() string {
	store := m.Status.Store
	if store == "" {
		store = m.Store
	}
	if store == "" {
		return ""
	}
	return filepath.Join(store, "agentfs.log")
}

// DumpLog prints the tail of the daemon's log into the test output.
func (m *Mount) DumpLog() {
	p := m.LogPath()
	if p == "" {
		m.T.Logf("no daemon log (the store is unknown)")
		return
	}
	b, err := os.ReadFile(p)
	if err != nil {
		m.T.Logf("daemon log %s: %v", p, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 150 {
		lines = lines[len(lines)-150:]
	}
	m.T.Logf("daemon log %s (last %d lines):\n%s", p, len(lines), strings.Join(lines, "\n"))
}

// Path returns the path of rel inside the mount.
func (m *Mount) Path(rel string) string { return filepath.Join(m.Dir, rel) }

// LowerPath returns the path of rel inside the lower directory.
func (m *Mount) LowerPath(rel string) string { return filepath.Join(m.Lower, rel) }

// BackstoreUsage counts the objects under the backstore root and the
// bytes they occupy (st_blocks). The bytes come from the files
// themselves; the count from agentfs status, since some of the files
// in the shards are idle (empty, made ahead or kept for reuse, which
// only the daemon knows) and no objects. Each is also checked against
// the other: a count above the files', or bytes above the status's
// (whose walk came before the files'), fails the test.
func (m *Mount) BackstoreUsage() (objects int, bytes int64) {
	m.T.Helper()
	root := m.Status.BackingRoot
	if root == "" {
		m.T.Fatalf("status --json gave no backstore_root")
	}
	st, err := m.FetchStatus()
	if err != nil {
		m.T.Fatalf("agentfs status: %v", err)
	}
	files := 0
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		// The daemon runs: an object it removes meanwhile is no
		// longer there to count (ENOENT); any other error is one.
		if errors.Is(err, iofs.ErrNotExist) && p != root {
			return nil
		}
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		var st unix.Stat_t
		switch err := unix.Lstat(p, &st); {
		case err == nil:
			files++
			bytes += st.Blocks * 512
		case err != unix.ENOENT:
			return fmt.Errorf("lstat %s: %v", p, err)
		}
		return nil
	})
	if err != nil {
		m.T.Fatalf("walking the backstore %s: %v", root, err)
	}
	if int(st.Objects) > files {
		m.T.Errorf("agentfs status counts %d objects, the backstore holds %d regular files", st.Objects, files)
	}
	return int(st.Objects), bytes
}

// IsMounted reports whether something is mounted on dir (an absolute,
// clean path) in this process's mount table.
func IsMounted(dir string) bool {
	_, ok, _ := procfs.MountAt(procfs.MountinfoPath, dir)
	return ok
}

// MountsUnder lists the mountpoints at or below dir, each with its
// filesystem type: "/tmp/x/mnt (fuse.agentfs)".
func MountsUnder(dir string) []string {
	mounts, _ := procfs.Mounts(procfs.MountinfoPath)
	var out []string
	for _, e := range mounts {
		if e.Mountpoint == dir || strings.HasPrefix(e.Mountpoint, dir+"/") {
			out = append(out, e.Mountpoint+" ("+e.FsType+")")
		}
	}
	return out
}
