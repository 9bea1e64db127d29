// Package integration holds black-box tests: they build the agentfs
// binary and drive it as a user does, checking the results from outside
// through the mount.
package integration

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

var agentfsBin string

func TestMain(m *testing.M) {
	agentfsBin = os.Getenv("AGENTFS_BIN")
	if agentfsBin == "" {
		dir, err := os.MkdirTemp("", "agentfs-bin-")
		if err != nil {
			panic(err)
		}
		agentfsBin = filepath.Join(dir, "agentfs")
		out, err := exec.Command("go", "build", "-o", agentfsBin, "../cmd/agentfs").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "building agentfs: %v\n%s", err, out)
			os.Exit(1)
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// requireFUSE skips a test that needs root and /dev/fuse on a machine
// without them, unless AGENTFS_REQUIRE_FUSE=1 (CI), where it fails.
func requireFUSE(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "no /dev/fuse"
	}
	if why == "" {
		return
	}
	if os.Getenv("AGENTFS_REQUIRE_FUSE") == "1" {
		t.Fatalf("FUSE tests are required here (AGENTFS_REQUIRE_FUSE=1) but: %s", why)
	}
	t.Skipf("needs root and /dev/fuse: %s", why)
}

// agentfs runs the binary and returns its combined output and exit code.
func agentfs(t testing.TB, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(agentfsBin, args...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running agentfs %v: %v", args, err)
	}
	return string(out), code
}

// mnt is a mounted agentfs.
type mnt struct {
	t     *testing.T
	lower string
	dir   string
	store string
	args  []string
	before tree
}

// mountOpt adjusts a mount.
type mountOpt func(*mnt)

func withStore(store string) mountOpt {
	return func(m *mnt) { m.store = store; m.args = append(m.args, "--store", store) }
}

func withArgs(a ...string) mountOpt { return func(m *mnt) { m.args = append(m.args, a...) } }

// mount mounts lower (built by the caller) and registers an unmount and
// a check that the lower tree is byte-for-byte unchanged.
func mount(t *testing.T, lower string, opts ...mountOpt) *mnt {
	t.Helper()
	requireFUSE(t)
	m := &mnt{t: t, lower: lower, dir: t.TempDir()}
	for _, o := range opts {
		o(m)
	}
	m.before = snapshotTree(t, lower)
	m.mount()
	t.Cleanup(func() {
		m.unmount()
		assertUnchanged(t, m.before, snapshotTree(t, lower))
	})
	return m
}

func (m *mnt) mount() {
	m.t.Helper()
	args := append([]string{"mount", "--lower", m.lower}, m.args...)
	if out, code := agentfs(m.t, append(args, m.dir)...); code != 0 {
		m.t.Fatalf("agentfs mount: exit %d: %s", code, out)
	}
}

func (m *mnt) unmount() {
	m.t.Helper()
	if !isMounted(m.dir) {
		return
	}
	if out, code := agentfs(m.t, "unmount", m.dir); code != 0 {
		m.t.Errorf("agentfs unmount: exit %d: %s", code, out)
	}
}

func (m *mnt) path(p string) string { return filepath.Join(m.dir, p) }

func isMounted(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// mkTree creates files under root from a spec: "path" → content;
// a path ending in "/" is a directory, content "->target" a symlink.
func mkTree(t testing.TB, root string, spec map[string]string) {
	t.Helper()
	var paths []string
	for p := range spec {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, p)
		c := spec[p]
		if err := os.MkdirAll(filepath.Dir(full), 0755); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(p, "/"):
			err := os.MkdirAll(full, 0755)
			if err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(c, "->"):
			if err := os.Symlink(c[2:], full); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(full, []byte(c), 0644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func newLower(t testing.TB, spec map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	mkTree(t, dir, spec)
	return dir
}

// node is what the unchanged-check compares for one path.
type node struct {
	mode       uint32
	uid, gid   uint32
	size       int64
	nlink      uint64
	ino        uint64
	mtime      unix.Timespec
	ctime      unix.Timespec
	hash       string
	link       string
	xattrs     string
}

type tree map[string]node

// snapshotTree records every inode under root: content hash, mode,
// owner, size, times, nlink, inode number, symlink target and xattrs.
func snapshotTree(t testing.TB, root string) tree {
	t.Helper()
	out := tree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := node{mode: st.Mode, uid: st.Uid, gid: st.Gid, size: st.Size, nlink: st.Nlink, ino: st.Ino, mtime: st.Mtim, ctime: st.Ctim}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := readNoatime(p)
			if err != nil {
				return err
			}
			n.hash = fmt.Sprintf("%x", sha256.Sum256(b))
		case unix.S_IFLNK:
			n.link, _ = os.Readlink(p)
		}
		n.xattrs = xattrString(p)
		rel, _ := filepath.Rel(root, p)
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	return out
}

// readNoatime reads a file without updating its atime, so that checking
// the lower tree does not change it.
func readNoatime(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

func xattrString(p string) string {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return ""
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	sort.Strings(names)
	var b bytes.Buffer
	for _, name := range names {
		v := make([]byte, 64<<10)
		k, _ := unix.Lgetxattr(p, name, v)
		if k < 0 {
			k = 0
		}
		fmt.Fprintf(&b, "%s=%x;", name, v[:k])
	}
	return b.String()
}

// assertUnchanged fails the test for every difference between two
// snapshots of the lower tree.
func assertUnchanged(t testing.TB, before, after tree) {
	t.Helper()
	for p, b := range before {
		a, ok := after[p]
		if !ok {
			t.Errorf("lower tree: %s disappeared", p)
			continue
		}
		if a != b {
			t.Errorf("lower tree: %s changed:\n before %+v\n after  %+v", p, b, a)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("lower tree: %s appeared", p)
		}
	}
}

func readString(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func lstat(t testing.TB, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

// countObjects counts the files in a store's backstore.
func countObjects(t testing.TB, store string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(filepath.Join(store, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() || (d != nil && d.IsDir() && len(d.Name()) == 16) {
			n++
		}
		return nil
	})
	return n
}

// asUser runs a shell command as uid:gid and returns its output and error.
func asUser(uid, gid uint32, script string) (string, error) {
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = syscallCred{uid: uid, gid: gid}.attr()
	out, err := cmd.CombinedOutput()
	return string(out), err
}
