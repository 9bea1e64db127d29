// Package integration holds black-box tests of agentfs: they build the
// agentfs binary, mount real FUSE the way a user does (`agentfs mount`),
// work on the mount with plain system calls and check the results from
// outside.
//
// # The harness
//
// newMount makes a lower tree from a spec (lowerFile, lowerDir,
// lowerSymlink, ...), mounts it and registers a cleanup that unmounts it
// and asserts that the lower tree is byte-for-byte unchanged: every test
// that mounts checks that agentfs never wrote to the lower directory.
// Changed access times are not failures (reading may update them) but are
// listed at the end of the run.
//
// # Environment
//
//   - AGENTFS_BIN: the binary to test (default: built from ../cmd/agentfs
//     once per run).
//   - AGENTFS_REQUIRE_FUSE=1: tests that need root and /dev/fuse fail
//     instead of skipping (CI).
//
// Tests that change users run a helper: this test binary re-executed
// with another uid (see helper_test.go).
package integration

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// agentfsBin is the binary under test.
var agentfsBin string

// harnessDir holds what the whole run shares (the built binary, the
// helper copy of the test binary). It is world-searchable so that
// helpers running as other users can execute from it.
var harnessDir string

func TestMain(m *testing.M) {
	if isHelperProcess() {
		os.Exit(runHelper())
	}
	if isIsolationWorker() {
		os.Exit(runIsolationWorker())
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	harnessDir, err = os.MkdirTemp("", "agentfs-it-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		return 1
	}
	defer os.RemoveAll(harnessDir)
	os.Chmod(harnessDir, 0o755)
	// No user configuration of the machine's (agentfs mount reads
	// ${XDG_CONFIG_HOME}/agentfs/config).
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(harnessDir, "config"))
	agentfsBin = os.Getenv("AGENTFS_BIN")
	if agentfsBin == "" {
		agentfsBin = filepath.Join(harnessDir, "agentfs")
		build := exec.Command("go", "build", "-o", agentfsBin, "./cmd/agentfs")
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "integration: building agentfs (go build ./cmd/agentfs): %v\n%s", err, out)
			return 1
		}
	} else if abs, err := filepath.Abs(agentfsBin); err == nil {
		agentfsBin = abs
	}
	return m.Run()
}

// requireFUSE skips a test that needs root and /dev/fuse where they are
// missing, except when AGENTFS_REQUIRE_FUSE=1 (CI): there it fails.
func requireFUSE(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not running as root"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "/dev/fuse is missing"
	}
	if why == "" {
		return
	}
	if os.Getenv("AGENTFS_REQUIRE_FUSE") == "1" {
		t.Fatalf("AGENTFS_REQUIRE_FUSE=1 but FUSE tests cannot run: %s", why)
	}
	t.Skipf("needs root and /dev/fuse (%s); set AGENTFS_REQUIRE_FUSE=1 to make this a failure", why)
}

// cliResult is one run of the agentfs binary.
type cliResult struct {
	args   []string
	stdout string
	stderr string
	code   int
}

func (r cliResult) String() string {
	return fmt.Sprintf("agentfs %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// output is what the user sees: stdout and stderr.
func (r cliResult) output() string { return r.stdout + r.stderr }

// runAgentfs runs the binary and returns its output and exit code.
func runAgentfs(t testing.TB, args ...string) cliResult {
	t.Helper()
	return runCommand(t, exec.Command(agentfsBin, args...), args)
}

func runCommand(t testing.TB, cmd *exec.Cmd, args []string) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running %v: %v", cmd.Args, err)
	}
	return r
}

// ---------------------------------------------------------------------
// Mounts

// mount is a mounted agentfs.
type mount struct {
	t      *testing.T
	lower  string // the lower directory
	dir    string // the mountpoint
	store  string // --store, or "" for a private store
	args   []string
	before tree

	// From `agentfs status --json` right after mounting.
	status mountStatus
}

// mountStatus is the part of `agentfs status --json` the tests use.
type mountStatus struct {
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
	Objects     int64  `json:"objects"`
	Bytes       int64  `json:"bytes"`
	FsFree      int64  `json:"backstore_free"`
}

// mountOption configures newMount.
type mountOption func(*mountConfig)

type mountConfig struct {
	entries  []lowerEntry
	lower    string
	store    string
	args     []string
	noVerify bool
}

// withLower adds entries to the lower tree newMount builds.
func withLower(entries ...lowerEntry) mountOption {
	return func(c *mountConfig) { c.entries = append(c.entries, entries...) }
}

// withExistingLower mounts a lower directory the test built itself
// (the unchanged-check still applies).
func withExistingLower(dir string) mountOption {
	return func(c *mountConfig) { c.lower = dir }
}

// withStore keeps the state in dir (--store).
func withStore(dir string) mountOption {
	return func(c *mountConfig) { c.store = dir; c.args = append(c.args, "--store", dir) }
}

// withRamdisk uses a ramdisk backstore of the given size (e.g. "8M").
func withRamdisk(size string) mountOption {
	return func(c *mountConfig) { c.args = append(c.args, "--backstore", "ramdisk", "--ramdisk-size", size) }
}

// withArgs passes more flags to agentfs mount.
func withArgs(args ...string) mountOption {
	return func(c *mountConfig) { c.args = append(c.args, args...) }
}

// newMount builds the lower tree, mounts it on a fresh directory and
// registers the cleanup: dump the daemon log if the test failed,
// unmount, and assert the lower tree is unchanged.
func newMount(t *testing.T, opts ...mountOption) *mount {
	t.Helper()
	requireFUSE(t)
	var c mountConfig
	for _, o := range opts {
		o(&c)
	}
	if c.lower == "" {
		c.lower = newLowerDir(t, c.entries...)
	} else if len(c.entries) > 0 {
		buildLower(t, c.lower, c.entries)
	}
	m := &mount{t: t, lower: c.lower, dir: newMountpoint(t), store: c.store, args: c.args}
	m.before = snapshotTree(m.lower)
	if m.before.err != nil {
		t.Fatalf("recording the lower tree: %v", m.before.err)
	}
	m.mount()
	t.Cleanup(func() {
		if t.Failed() {
			m.dumpLog()
		}
		m.unmount()
		assertUnchanged(t, m.before, snapshotTree(m.lower))
	})
	return m
}

// modeFlags are the mount flags every test mount gets: with
// AGENTFS_TEST_NO_PASSTHROUGH=1 (the suite's second pass in make test)
// file I/O goes through the page cache instead of passthrough; with
// AGENTFS_TEST_NO_IO_URING=1 (its third pass) FUSE requests come over
// /dev/fuse instead of io_uring.
func modeFlags() []string {
	var flags []string
	if os.Getenv("AGENTFS_TEST_NO_PASSTHROUGH") == "1" {
		flags = append(flags, "--no-passthrough")
	}
	if os.Getenv("AGENTFS_TEST_NO_IO_URING") == "1" {
		flags = append(flags, "--no-io-uring")
	}
	return flags
}

// newMountpoint makes an empty directory that other users can reach.
func newMountpoint(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// mount runs agentfs mount and records the mount's status.
func (m *mount) mount() {
	m.t.Helper()
	args := append([]string{"mount", "--lower", m.lower}, modeFlags()...)
	args = append(append(args, m.args...), m.dir)
	if r := runAgentfs(m.t, args...); r.code != 0 {
		m.t.Fatalf("mount failed:\n%s", r)
	}
	if !isMounted(m.dir) {
		m.t.Fatalf("agentfs mount returned 0 but %s is not in /proc/self/mountinfo", m.dir)
	}
	st, err := m.fetchStatus()
	if err != nil {
		m.t.Errorf("agentfs status after mount: %v", err)
	}
	m.status = st
}

// fetchStatus runs agentfs status --json on the mount.
func (m *mount) fetchStatus() (mountStatus, error) {
	var st mountStatus
	r := runAgentfs(m.t, "status", "-C", m.dir, "--json")
	if r.code != 0 {
		return st, fmt.Errorf("%s", r)
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		return st, fmt.Errorf("parsing status --json: %v\n%s", err, r.stdout)
	}
	return st, nil
}

// unmount runs agentfs unmount if the directory is mounted and checks
// that the mount is gone.
func (m *mount) unmount() {
	m.t.Helper()
	if !isMounted(m.dir) {
		return
	}
	r := runAgentfs(m.t, "unmount", m.dir)
	if r.code != 0 {
		m.t.Errorf("unmount failed:\n%s", r)
	}
	if isMounted(m.dir) {
		m.t.Errorf("%s is still mounted after agentfs unmount; detaching it", m.dir)
		unix.Unmount(m.dir, unix.MNT_DETACH)
	}
}

// remount unmounts and mounts the same lower (and store) again.
func (m *mount) remount() {
	m.t.Helper()
	m.unmount()
	m.mount()
}

// logPath is the daemon's log in its store.
func (m *mount) logPath() string {
	store := m.status.Store
	if store == "" {
		store = m.store
	}
	if store == "" {
		return ""
	}
	return filepath.Join(store, "agentfs.log")
}

// dumpLog prints the tail of the daemon's log into the test output.
func (m *mount) dumpLog() {
	p := m.logPath()
	if p == "" {
		m.t.Logf("no daemon log (the store is unknown)")
		return
	}
	b, err := os.ReadFile(p)
	if err != nil {
		m.t.Logf("daemon log %s: %v", p, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 150 {
		lines = lines[len(lines)-150:]
	}
	m.t.Logf("daemon log %s (last %d lines):\n%s", p, len(lines), strings.Join(lines, "\n"))
}

// path returns the path of rel inside the mount.
func (m *mount) path(rel string) string { return filepath.Join(m.dir, rel) }

// lowerPath returns the path of rel inside the lower directory.
func (m *mount) lowerPath(rel string) string { return filepath.Join(m.lower, rel) }

// backstoreUsage counts the objects under the backstore root and the
// bytes they occupy (st_blocks). The bytes come from the files
// themselves; the count from agentfs status, since some of the files
// in the shards are idle (empty, made ahead or kept for reuse, which
// only the daemon knows) and no objects. Each is also checked against
// the other: a count above the files', or bytes above the status's
// (whose walk came before the files'), fails the test.
func (m *mount) backstoreUsage() (objects int, bytes int64) {
	m.t.Helper()
	root := m.status.BackingRoot
	if root == "" {
		m.t.Fatalf("status --json gave no backstore_root")
	}
	st, err := m.fetchStatus()
	if err != nil {
		m.t.Fatalf("agentfs status: %v", err)
	}
	files := 0
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			files++
			bytes += st.Blocks * 512
		}
		return nil
	})
	if int(st.Objects) > files {
		m.t.Errorf("agentfs status counts %d objects, the backstore holds %d regular files", st.Objects, files)
	}
	return int(st.Objects), bytes
}

// mountinfoEntry is one line of /proc/self/mountinfo.
type mountinfoEntry struct {
	mountpoint, fstype, source, options string
}

func readMountinfo() []mountinfoEntry {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mountinfoEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 > len(fields) || len(fields) < 6 {
			continue
		}
		out = append(out, mountinfoEntry{
			mountpoint: unescapeMountinfo(fields[4]),
			fstype:     fields[sep+1],
			source:     unescapeMountinfo(fields[sep+2]),
			options:    fields[sep+3],
		})
	}
	return out
}

func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMounted reports whether something is mounted on dir.
func isMounted(dir string) bool {
	for _, e := range readMountinfo() {
		if e.mountpoint == dir {
			return true
		}
	}
	return false
}

// mountsUnder lists the mountpoints at or below dir.
func mountsUnder(dir string) []string {
	var out []string
	for _, e := range readMountinfo() {
		if e.mountpoint == dir || strings.HasPrefix(e.mountpoint, dir+"/") {
			out = append(out, e.mountpoint+" ("+e.fstype+")")
		}
	}
	return out
}

// processAlive reports whether pid exists with a thread that is not a
// zombie.
func processAlive(pid int) bool {
	// A process is gone when every thread is: its first thread turns
	// zombie as soon as it exits, while others may still be exiting and
	// holding its files (a thread leaving io_uring takes a moment).
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue
		}
		// pid (comm) state ...: the state follows the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) || s[i+2] != 'Z' {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds or a generous deadline passes (a
// guard against hangs, not a timing assertion).
func waitFor(cond func() bool) bool {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// ---------------------------------------------------------------------
// Lower trees

// lowerEntry is one thing in a lower tree spec.
type lowerEntry struct {
	path    string
	kind    byte   // 'f' file, 'd' dir, 'l' symlink, 'h' hard link, 's' sparse, 'p' fifo, 'c' char device
	content string // files
	target  string // symlinks: the target; hard links: the existing path
	size    int64  // sparse files
	extents map[int64]string
	rdev    uint64
	attrs   entryAttrs
}

type entryAttrs struct {
	mode         *uint32 // permission bits incl. setuid/setgid/sticky
	uid, gid     int     // -1: unchanged
	atime, mtime *unix.Timespec
	xattrs       [][2]string
}

// entryAttr sets an attribute of a lower entry.
type entryAttr func(*entryAttrs)

// withMode sets the permission bits (incl. setuid, setgid, sticky).
func withMode(perm uint32) entryAttr { return func(a *entryAttrs) { a.mode = &perm } }

// withOwner sets the owner.
func withOwner(uid, gid int) entryAttr { return func(a *entryAttrs) { a.uid, a.gid = uid, gid } }

// withTimes sets atime and mtime (set last, after the whole tree is built).
func withTimes(atime, mtime unix.Timespec) entryAttr {
	return func(a *entryAttrs) { a.atime, a.mtime = &atime, &mtime }
}

// withXattr sets an extended attribute.
func withXattr(name, value string) entryAttr {
	return func(a *entryAttrs) { a.xattrs = append(a.xattrs, [2]string{name, value}) }
}

func newEntry(path string, kind byte, attrs []entryAttr) lowerEntry {
	e := lowerEntry{path: path, kind: kind, attrs: entryAttrs{uid: -1, gid: -1}}
	for _, a := range attrs {
		a(&e.attrs)
	}
	return e
}

// lowerFile is a regular file (mode 0644 unless withMode).
func lowerFile(path, content string, attrs ...entryAttr) lowerEntry {
	e := newEntry(path, 'f', attrs)
	e.content = content
	return e
}

// lowerDir is a directory (mode 0755 unless withMode).
func lowerDir(path string, attrs ...entryAttr) lowerEntry { return newEntry(path, 'd', attrs) }

// lowerSymlink is a symbolic link to target.
func lowerSymlink(path, target string, attrs ...entryAttr) lowerEntry {
	e := newEntry(path, 'l', attrs)
	e.target = target
	return e
}

// lowerHardlink is another name for the existing entry at existing.
func lowerHardlink(path, existing string) lowerEntry {
	e := newEntry(path, 'h', nil)
	e.target = existing
	return e
}

// lowerSparse is a file of the given size with data only at the given
// offsets; the rest is holes.
func lowerSparse(path string, size int64, extents map[int64]string, attrs ...entryAttr) lowerEntry {
	e := newEntry(path, 's', attrs)
	e.size, e.extents = size, extents
	return e
}

// lowerFifo is a named pipe.
func lowerFifo(path string, attrs ...entryAttr) lowerEntry { return newEntry(path, 'p', attrs) }

// lowerCharDevice is a character device node.
func lowerCharDevice(path string, major, minor uint32, attrs ...entryAttr) lowerEntry {
	e := newEntry(path, 'c', attrs)
	e.rdev = unix.Mkdev(major, minor)
	return e
}

// newLowerDir makes a lower tree in a fresh temporary directory.
func newLowerDir(t testing.TB, entries ...lowerEntry) string {
	t.Helper()
	dir := t.TempDir()
	buildLower(t, dir, entries)
	return dir
}

// buildLower creates entries under root: first every entry, then owners,
// modes and xattrs, then times (deepest first, so that creating children
// does not move a directory's times afterwards).
func buildLower(t testing.TB, root string, entries []lowerEntry) {
	t.Helper()
	for _, e := range entries {
		p := filepath.Join(root, e.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatalf("lower %s: %v", e.path, err)
		}
		var err error
		switch e.kind {
		case 'f':
			err = os.WriteFile(p, []byte(e.content), 0o644)
		case 'd':
			err = os.MkdirAll(p, 0o755)
		case 'l':
			err = os.Symlink(e.target, p)
		case 'h':
			err = os.Link(filepath.Join(root, e.target), p)
		case 's':
			err = writeSparse(p, e.size, e.extents)
		case 'p':
			err = unix.Mkfifo(p, 0o644)
		case 'c':
			err = unix.Mknod(p, unix.S_IFCHR|0o644, int(e.rdev))
		default:
			err = fmt.Errorf("unknown kind %q", e.kind)
		}
		if err != nil {
			t.Fatalf("lower %s: %v", e.path, err)
		}
	}
	for _, e := range entries {
		p := filepath.Join(root, e.path)
		a := e.attrs
		if a.uid >= 0 || a.gid >= 0 {
			if err := os.Lchown(p, a.uid, a.gid); err != nil {
				t.Fatalf("lower %s: %v", e.path, err)
			}
		}
		if a.mode != nil {
			// chmod(2) after chown(2): chown clears setuid/setgid.
			if err := unix.Chmod(p, *a.mode); err != nil {
				t.Fatalf("lower %s: chmod: %v", e.path, err)
			}
		}
		for _, x := range a.xattrs {
			if err := unix.Lsetxattr(p, x[0], []byte(x[1]), 0); err != nil {
				t.Fatalf("lower %s: setxattr %s: %v", e.path, x[0], err)
			}
		}
	}
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if e.attrs.mtime == nil {
			continue
		}
		ts := []unix.Timespec{*e.attrs.atime, *e.attrs.mtime}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(root, e.path), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatalf("lower %s: utimes: %v", e.path, err)
		}
	}
}

func writeSparse(p string, size int64, extents map[int64]string) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	for off, data := range extents {
		if _, err := f.WriteAt([]byte(data), off); err != nil {
			return err
		}
	}
	return f.Truncate(size)
}

// ---------------------------------------------------------------------
// Recording and comparing the lower tree

// nodeState is what the unchanged-check compares for one path.
type nodeState struct {
	mode     uint32
	uid, gid uint32
	size     int64
	nlink    uint64
	ino      uint64
	rdev     uint64
	mtime    unix.Timespec
	ctime    unix.Timespec
	hash     string // regular files: sha256 of the content
	target   string // symlinks
	xattrs   string // every name=value, sorted
}

// tree is a recording of a directory tree.
type tree struct {
	root  string
	nodes map[string]nodeState
	atime map[string]unix.Timespec // compared apart: see assertUnchanged
	err   error
}

// snapshotTree records every name under dir: content hash, mode, owner,
// size, mtime and ctime (ns), nlink, inode number, rdev, symlink target
// and xattrs of every namespace root can read. It opens files and
// directories with O_NOATIME so that recording changes nothing.
func snapshotTree(dir string) tree {
	tr := tree{root: dir, nodes: map[string]nodeState{}, atime: map[string]unix.Timespec{}}
	tr.err = tr.walk(dir, ".")
	return tr
}

func (tr *tree) walk(p, rel string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	n := nodeState{mode: st.Mode, uid: st.Uid, gid: st.Gid, size: st.Size, nlink: st.Nlink, ino: st.Ino,
		rdev: st.Rdev, mtime: st.Mtim, ctime: st.Ctim}
	var names []string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		h, err := hashFile(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		n.hash = h
	case unix.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		n.target = target
	case unix.S_IFDIR:
		var err error
		if names, err = readDirNoatime(p); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	x, err := xattrString(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	n.xattrs = x
	tr.nodes[rel] = n
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		tr.atime[rel] = st.Atim
	}
	for _, name := range names {
		if err := tr.walk(filepath.Join(p, name), filepath.Join(rel, name)); err != nil {
			return err
		}
	}
	return nil
}

func openNoatime(p string, flags int) (*os.File, error) {
	fd, err := unix.Open(p, flags|unix.O_RDONLY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

// hashFile hashes a file's data segments with their offsets (holes are
// skipped, so that a sparse gigabyte costs nothing), without updating
// its atime.
func hashFile(p string) (string, error) {
	f, err := openNoatime(p, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	fd := int(f.Fd())
	var off int64
	for {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data after off
		}
		if err != nil {
			return "", fmt.Errorf("SEEK_DATA: %w", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return "", fmt.Errorf("SEEK_HOLE: %w", err)
		}
		fmt.Fprintf(h, "@%d:", data)
		if _, err := io.Copy(h, io.NewSectionReader(f, data, hole-data)); err != nil {
			return "", err
		}
		off = hole
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

// readNoatime reads a file without updating its atime.
func readNoatime(p string) ([]byte, error) {
	f, err := openNoatime(p, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// readDirNoatime lists a directory, sorted, without updating its atime.
func readDirNoatime(p string) ([]string, error) {
	f, err := openNoatime(p, unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// xattrString lists every xattr of p (without following a symlink) as
// sorted name=hex(value) pairs.
func xattrString(p string) (string, error) {
	names, err := listXattrs(p)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, name := range names {
		v, err := getXattr(p, name)
		if err != nil {
			return "", fmt.Errorf("getxattr %s: %w", name, err)
		}
		fmt.Fprintf(&b, "%s=%x;", name, v)
	}
	return b.String(), nil
}

// listXattrs returns the sorted xattr names of p (lstat semantics).
func listXattrs(p string) ([]string, error) {
	n, err := unix.Llistxattr(p, nil)
	if err != nil || n == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, n)
	n, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// getXattr returns the value of one xattr of p (lstat semantics).
func getXattr(p, name string) (string, error) {
	n, err := unix.Lgetxattr(p, name, nil)
	if err != nil {
		return "", err
	}
	buf := make([]byte, n)
	n, err = unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func (n nodeState) String() string {
	return fmt.Sprintf("mode=%o uid=%d gid=%d size=%d nlink=%d ino=%d rdev=%d mtime=%d.%09d ctime=%d.%09d sha256=%.12s target=%q xattrs=%q",
		n.mode, n.uid, n.gid, n.size, n.nlink, n.ino, n.rdev, n.mtime.Sec, n.mtime.Nsec, n.ctime.Sec, n.ctime.Nsec, n.hash, n.target, n.xattrs)
}

// assertUnchanged fails the test for every difference between two
// recordings of the lower tree, access times included: agentfs reads
// the lower tree with O_NOATIME.
func assertUnchanged(t testing.TB, before, after tree) {
	t.Helper()
	for _, d := range diffTrees(before, after) {
		t.Errorf("LOWER TREE CHANGED: %s", d)
	}
	for p, ta := range after.atime {
		if tb, ok := before.atime[p]; ok && ta != tb {
			t.Errorf("LOWER ATIME CHANGED: %s (agentfs read it without O_NOATIME)", p)
		}
	}
}

// diffTrees describes every difference between two recordings (except
// access times).
func diffTrees(before, after tree) []string {
	if before.err != nil || after.err != nil {
		return []string{fmt.Sprintf("%s: recording failed: before: %v, after: %v", before.root, before.err, after.err)}
	}
	var out []string
	for _, p := range sortedKeys(before.nodes) {
		b := before.nodes[p]
		a, ok := after.nodes[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s disappeared from %s", p, before.root))
		case a != b:
			out = append(out, fmt.Sprintf("%s in %s:\n before %v\n after  %v", p, before.root, b, a))
		}
	}
	for _, p := range sortedKeys(after.nodes) {
		if _, ok := before.nodes[p]; !ok {
			out = append(out, fmt.Sprintf("%s appeared in %s: %v", p, after.root, after.nodes[p]))
		}
	}
	return out
}

// diffMountTrees is diffTrees for recordings of a mount: a directory's
// st_nlink may be 2 + its subdirectories or 1 (unknown, as overlayfs
// says for merged directories); a valid value is not compared, a wrong
// one is.
func diffMountTrees(before, after tree) []string {
	return diffTrees(normalizeDirNlink(before), normalizeDirNlink(after))
}

// normalizeDirNlink returns tr with the valid st_nlink of directories
// set to 0.
func normalizeDirNlink(tr tree) tree {
	subdirs := map[string]uint64{}
	for p, n := range tr.nodes {
		if p != "." && n.mode&unix.S_IFMT == unix.S_IFDIR {
			subdirs[filepath.Dir(p)]++
		}
	}
	out := tr
	out.nodes = map[string]nodeState{}
	for p, n := range tr.nodes {
		if n.mode&unix.S_IFMT == unix.S_IFDIR && (n.nlink == 1 || n.nlink == 2+subdirs[p]) {
			n.nlink = 0
		}
		out.nodes[p] = n
	}
	return out
}

// ---------------------------------------------------------------------
// Small helpers for the tests

func lstat(t testing.TB, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func writeFile(t testing.TB, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
}

// listDir returns the sorted names in dir, without . and ..
func listDir(t testing.TB, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	sort.Strings(names)
	return names
}

// errnoOf returns the errno in err, 0 for nil, or EIO-less -1 when err is
// not an errno.
func errnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var en unix.Errno
	if errors.As(err, &en) {
		return en
	}
	return unix.Errno(^uintptr(0))
}

// errName names an errno for messages: "ENOENT", or "ok".
func errName(err error) string {
	e := errnoOf(err)
	switch {
	case e == 0:
		return "ok"
	case e == unix.Errno(^uintptr(0)):
		return err.Error()
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return e.Error()
}

func ts(sec, nsec int64) unix.Timespec { return unix.Timespec{Sec: sec, Nsec: nsec} }

func joinNames(names []string) string { return "[" + strings.Join(names, " ") + "]" }
