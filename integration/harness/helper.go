package harness

// A helper is this test binary re-executed (AGENTFS_IT_HELPER=1) with
// another uid, gid and groups. It reads a JSON list of operations on
// stdin, performs them with plain system calls and prints one JSON
// result per operation, so that tests can see exactly which errno
// another user gets.

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const helperEnv = "AGENTFS_IT_HELPER"

// IsHelperProcess reports whether this process is a helper: TestMain
// then runs RunHelper instead of the tests.
func IsHelperProcess() bool { return os.Getenv(helperEnv) == "1" }

// Op is one operation a helper performs.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path,omitempty"`
	Path2 string `json:"path2,omitempty"`
	Flags int    `json:"flags,omitempty"`
	Mode  uint32 `json:"mode,omitempty"`
	Data  string `json:"data,omitempty"`
	Uid   int    `json:"uid,omitempty"`
	Gid   int    `json:"gid,omitempty"`
	Off   int64  `json:"off,omitempty"`
	Len   int64  `json:"len,omitempty"`
}

// OpResult is the outcome of one Op: "ok" or an errno name,
// and what the operation returned (file content, a stat line, ...).
type OpResult struct {
	Op    string `json:"op"`
	Errno string `json:"errno"`
	Out   string `json:"out,omitempty"`
}

func (r OpResult) String() string {
	if r.Out == "" {
		return r.Errno
	}
	return r.Errno + " " + r.Out
}

// Operations. Paths are absolute.
func OpUmask(mask uint32) Op { return Op{Op: "umask", Mode: mask} }
func OpCreate(p string, mode uint32) Op {
	return Op{Op: "create", Path: p, Mode: mode}
}
func OpMkdir(p string, mode uint32) Op { return Op{Op: "mkdir", Path: p, Mode: mode} }
func OpRead(p string) Op               { return Op{Op: "read", Path: p} }

// OpWrite opens p with O_WRONLY|flags, writes data and closes it.
func OpWrite(p string, flags int, data string) Op {
	return Op{Op: "write", Path: p, Flags: flags, Data: data}
}
func OpOpen(p string, flags int) Op { return Op{Op: "open", Path: p, Flags: flags} }

// OpWriteKeep opens p with O_WRONLY|flags and writes data, keeping the
// file open until the helper ends.
func OpWriteKeep(p string, flags int, data string) Op {
	return Op{Op: "write-keep", Path: p, Flags: flags, Data: data}
}
func OpUnlink(p string) Op             { return Op{Op: "unlink", Path: p} }
func OpRmdir(p string) Op              { return Op{Op: "rmdir", Path: p} }
func OpRename(from, to string) Op      { return Op{Op: "rename", Path: from, Path2: to} }
func OpLink(from, to string) Op        { return Op{Op: "link", Path: from, Path2: to} }
func OpSymlink(target, p string) Op    { return Op{Op: "symlink", Path: target, Path2: p} }
func OpChmod(p string, mode uint32) Op { return Op{Op: "chmod", Path: p, Mode: mode} }
func OpChown(p string, uid, gid int) Op {
	return Op{Op: "chown", Path: p, Uid: uid, Gid: gid}
}
func OpUtimesNow(p string) Op         { return Op{Op: "utimes-now", Path: p} }
func OpUtimes(p string, sec int64) Op { return Op{Op: "utimes", Path: p, Off: sec} }
func OpTruncate(p string, size int64) Op {
	return Op{Op: "truncate", Path: p, Len: size}
}
func OpMkfifo(p string, mode uint32) Op { return Op{Op: "mkfifo", Path: p, Mode: mode} }
func OpStat(p string) Op                { return Op{Op: "stat", Path: p} }
func OpList(p string) Op                { return Op{Op: "list", Path: p} }
func OpAccess(p string, mode uint32) Op { return Op{Op: "access", Path: p, Mode: mode} }
func OpSetxattr(p, name, value string) Op {
	return Op{Op: "setxattr", Path: p, Path2: name, Data: value}
}

// OpPosixLock takes a POSIX (fcntl) write lock on [off, off+len) of p,
// keeping the file open.
func OpPosixLock(p string, off, length int64) Op {
	return Op{Op: "posix-lock", Path: p, Off: off, Len: length}
}

// OpHold reports "held" and waits until the test releases the helper.
func OpHold() Op { return Op{Op: "hold"} }

// OpNames lists directory p: its names, sorted, one a line.
func OpNames(p string) Op { return Op{Op: "names", Path: p} }

// OpReadlink reads symlink p (a /proc magic link too).
func OpReadlink(p string) Op { return Op{Op: "readlink", Path: p} }

// OpGetxattr reads xattr name of p; OpListxattr lists p's xattrs.
func OpGetxattr(p, name string) Op { return Op{Op: "getxattr", Path: p, Path2: name} }
func OpListxattr(p string) Op      { return Op{Op: "listxattr", Path: p} }

// OpHandleScan opens files by handle (open_by_handle_at, which needs
// CAP_DAC_READ_SEARCH) on the filesystem of directory mnt: the handle
// of p (name_to_handle_at) first, whose failure is the op's errno, then
// the handles of every node id within span of p's, with its generation
// and with 0. Out is the contents of every regular file opened so, one
// a line.
func OpHandleScan(p, mnt string, span int64) Op {
	return Op{Op: "handle-scan", Path: p, Path2: mnt, Len: span}
}

// Cred is the identity a helper runs with.
type Cred struct {
	Uid, Gid uint32
	Groups   []uint32
}

var helperBin struct {
	once sync.Once
	path string
	err  error
}

// HelperPath copies the test binary where any user can execute it.
func HelperPath(t testing.TB) string {
	t.Helper()
	helperBin.once.Do(func() {
		self, err := os.Executable()
		if err != nil {
			helperBin.err = err
			return
		}
		dst := filepath.Join(sharedDir, "helper")
		in, err := os.Open(self)
		if err != nil {
			helperBin.err = err
			return
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			helperBin.err = err
			return
		}
		if _, err := io.Copy(out, in); err != nil {
			helperBin.err = err
		}
		if err := out.Close(); err != nil && helperBin.err == nil {
			helperBin.err = err
		}
		helperBin.path = dst
	})
	if helperBin.err != nil {
		t.Fatalf("preparing the helper binary: %v", helperBin.err)
	}
	return helperBin.path
}

// Helper is a running helper.
type Helper struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	// Results are the helper's results read so far (up to its OpHold,
	// after StartHelper; all of them, after Release).
	Results []OpResult
}

// StartHelper starts a helper as c and feeds it ops. It returns once the
// helper reached an OpHold or finished.
func StartHelper(t testing.TB, c Cred, ops ...Op) *Helper {
	t.Helper()
	return StartHelperCmd(t, ExecAs(c, HelperPath(t)), ops...)
}

// StartHelperCmd is StartHelper with the command that runs the helper
// (HelperPath) made by the caller: as another user, bound to a branch.
func StartHelperCmd(t testing.TB, cmd *exec.Cmd, ops ...Op) *Helper {
	t.Helper()
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a helper (%s): %v", cmd, err)
	}
	h := &Helper{t: t, cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	h.out.Buffer(make([]byte, 1<<20), 64<<20)
	b, _ := json.Marshal(ops)
	if _, err := stdin.Write(append(b, '\n')); err != nil {
		t.Fatalf("helper: %v", err)
	}
	for h.out.Scan() {
		var r OpResult
		if err := json.Unmarshal(h.out.Bytes(), &r); err != nil {
			t.Fatalf("helper said %q: %v", h.out.Text(), err)
		}
		h.Results = append(h.Results, r)
		if r.Op == "hold" {
			break
		}
	}
	return h
}

// Release lets a holding helper finish and returns all results.
func (h *Helper) Release() []OpResult {
	h.t.Helper()
	if err := h.stdin.Close(); err != nil {
		h.t.Errorf("helper: closing its stdin: %v", err)
	}
	for h.out.Scan() {
		var r OpResult
		if err := json.Unmarshal(h.out.Bytes(), &r); err == nil {
			h.Results = append(h.Results, r)
		}
	}
	if err := h.cmd.Wait(); err != nil {
		h.t.Errorf("helper: %v", err)
	}
	return h.Results
}

// RunAs performs ops as c and returns one result per op.
func RunAs(t testing.TB, c Cred, ops ...Op) []OpResult {
	t.Helper()
	res := StartHelper(t, c, ops...).Release()
	if len(res) != len(ops) {
		t.Fatalf("helper returned %d results for %d ops: %v", len(res), len(ops), res)
	}
	return res
}

// RunHelper is the helper process's main; TestMain runs it when
// IsHelperProcess.
func RunHelper() int {
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil && err != io.EOF {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	var ops []Op
	if err := json.Unmarshal(line, &ops); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	enc := json.NewEncoder(os.Stdout)
	var keep []*os.File
	for _, op := range ops {
		r := OpResult{Op: op.Op}
		out, err := doHelperOp(op, &keep)
		r.Out, r.Errno = out, ErrName(err)
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, "helper: writing a result:", err)
			return 1
		}
		if op.Op == "hold" {
			// Until the test closes stdin.
			if _, err := io.Copy(io.Discard, in); err != nil {
				fmt.Fprintln(os.Stderr, "helper: reading stdin:", err)
				return 1
			}
		}
	}
	for _, f := range keep {
		f.Close()
	}
	return 0
}

func doHelperOp(op Op, keep *[]*os.File) (string, error) {
	p := op.Path
	switch op.Op {
	case "umask":
		unix.Umask(int(op.Mode))
		return "", nil
	case "create":
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, op.Mode)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "mkdir":
		return "", unix.Mkdir(p, op.Mode)
	case "read":
		b, err := os.ReadFile(p)
		return string(b), err
	case "write":
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC|op.Flags, 0o644)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte(op.Data))
		return "", err
	case "write-keep":
		f, err := os.OpenFile(p, os.O_WRONLY|op.Flags, 0o644)
		if err != nil {
			return "", err
		}
		*keep = append(*keep, f)
		_, err = f.Write([]byte(op.Data))
		return "", err
	case "open":
		fd, err := unix.Open(p, unix.O_CLOEXEC|op.Flags, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "unlink":
		return "", unix.Unlink(p)
	case "rmdir":
		return "", unix.Rmdir(p)
	case "rename":
		return "", unix.Rename(p, op.Path2)
	case "link":
		return "", unix.Link(p, op.Path2)
	case "symlink":
		return "", unix.Symlink(p, op.Path2)
	case "chmod":
		return "", unix.Chmod(p, op.Mode)
	case "chown":
		return "", unix.Lchown(p, op.Uid, op.Gid)
	case "utimes-now":
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, p, nil, 0)
	case "utimes":
		t := unix.Timespec{Sec: op.Off}
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{t, t}, 0)
	case "truncate":
		return "", unix.Truncate(p, op.Len)
	case "mkfifo":
		return "", unix.Mkfifo(p, op.Mode)
	case "mknod-chr":
		return "", unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
	case "stat":
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return "", err
		}
		out := fmt.Sprintf("mode=%o uid=%d gid=%d", st.Mode, st.Uid, st.Gid)
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			out += fmt.Sprintf(" size=%d", st.Size)
		}
		return out, nil
	case "list":
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		defer f.Close()
		names, err := f.Readdirnames(-1)
		return fmt.Sprint(len(names)), err
	case "access":
		return "", unix.Access(p, op.Mode)
	case "setxattr":
		return "", unix.Lsetxattr(p, op.Path2, []byte(op.Data), 0)
	case "posix-lock":
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return "", err
		}
		*keep = append(*keep, f)
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: op.Off, Len: op.Len}
		return fmt.Sprint(os.Getpid()), unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
	case "hold":
		return "held", nil
	case "names":
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		defer f.Close()
		names, err := f.Readdirnames(-1)
		slices.Sort(names)
		return strings.Join(names, "\n"), err
	case "readlink":
		return os.Readlink(p)
	case "getxattr":
		buf := make([]byte, 64<<10)
		n, err := unix.Lgetxattr(p, op.Path2, buf)
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case "listxattr":
		buf := make([]byte, 64<<10)
		n, err := unix.Llistxattr(p, buf)
		if err != nil {
			return "", err
		}
		return strings.ReplaceAll(strings.TrimRight(string(buf[:n]), "\x00"), "\x00", "\n"), nil
	case "handle-scan":
		return handleScan(p, op.Path2, op.Len)
	}
	return "", fmt.Errorf("unknown helper op %q", op.Op)
}

// handleScan is OpHandleScan.
func handleScan(p, mnt string, span int64) (string, error) {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p, 0)
	if err != nil {
		return "", err
	}
	mfd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(mfd)
	read := func(h unix.FileHandle) (string, error) {
		fd, err := unix.OpenByHandleAt(mfd, h, unix.O_RDONLY|unix.O_CLOEXEC)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return "", err
		}
		buf := make([]byte, 4096)
		n, _ := unix.Read(fd, buf)
		return string(buf[:max(n, 0)]), nil
	}
	own, err := read(h)
	if err != nil {
		return "", err
	}
	out := []string{own}
	b := h.Bytes()
	if len(b) < 12 {
		return "", fmt.Errorf("a file handle of %d bytes: want a FUSE handle (node id, generation)", len(b))
	}
	id := uint64(binary.NativeEndian.Uint32(b[0:4]))<<32 | uint64(binary.NativeEndian.Uint32(b[4:8]))
	gen := binary.NativeEndian.Uint32(b[8:12])
	for d := -span; d <= span; d++ {
		if d == 0 || int64(id)+d <= 0 {
			continue
		}
		n := uint64(int64(id) + d)
		for _, g := range []uint32{gen, 0} {
			nb := slices.Clone(b)
			binary.NativeEndian.PutUint32(nb[0:4], uint32(n>>32))
			binary.NativeEndian.PutUint32(nb[4:8], uint32(n))
			binary.NativeEndian.PutUint32(nb[8:12], g)
			if s, err := read(unix.NewFileHandle(h.Type(), nb)); err == nil && s != "" {
				out = append(out, s)
			}
		}
	}
	return strings.Join(out, "\n"), nil
}

// ExecAs prepares a command that runs as c.
func ExecAs(c Cred, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	groups := c.Groups
	if groups == nil {
		groups = []uint32{}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.Uid, Gid: c.Gid, Groups: groups}}
	cmd.Dir = "/"
	return cmd
}

// WorldSearchable reports whether every directory above p lets other
// users through.
func WorldSearchable(p string) bool {
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode()&0o001 == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}
