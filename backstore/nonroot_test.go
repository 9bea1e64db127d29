package backstore

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentfs/agentfs/internal/testenv"
)

// childEnv marks the run of this test binary that TestAsNonRoot starts.
const childEnv = "AGENTFS_BACKSTORE_NONROOT_CHILD"

// nobody is the uid and gid the non-root run uses.
const nobody = 65534

// TestAsNonRoot runs this package's tests again as an unprivileged user
// (as a daemon started by a user runs): owners are not set, only user.*
// xattrs are copied, the ramdisk falls back to /dev/shm, and root-only
// tests skip.
func TestAsNonRoot(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		testenv.SkipByDesign(t, "already the non-root run")
	}
	needRoot(t, "switching to an unprivileged user")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary lives in a root-only build directory: give the
	// child its own copy and a TMPDIR it owns, both outside t.TempDir
	// (whose parent is root-only too).
	dir, err := os.MkdirTemp("", "agentfs-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	tmp := filepath.Join(dir, "tmp")
	bin := filepath.Join(dir, "backstore.test")
	if err := copyExecutable(exe, bin); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(tmp, 0700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, tmp} {
		if err := os.Chmod(p, 0755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(tmp, nobody, nobody); err != nil {
		t.Fatal(err)
	}

	args := []string{"-test.count=1", "-test.timeout=5m"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = tmp
	cmd.Env = []string{childEnv + "=1", "TMPDIR=" + tmp, "HOME=" + tmp, "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tests as uid %d: %v\n%s", nobody, err, out)
	}
	if testing.Verbose() {
		t.Logf("tests as uid %d:\n%s", nobody, out)
	} else if !strings.Contains(string(out), "PASS") {
		t.Errorf("tests as uid %d did not report PASS:\n%s", nobody, out)
	}
}

func copyExecutable(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
