package integration

// A helper is this test binary re-executed (AGENTFS_IT_HELPER=1) with
// another uid, gid and groups. It reads a JSON list of operations on
// stdin, performs them with plain system calls and prints one JSON
// result per operation, so that tests can see exactly which errno
// another user gets.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const helperEnv = "AGENTFS_IT_HELPER"

func isHelperProcess() bool { return os.Getenv(helperEnv) == "1" }

// helperOp is one operation a helper performs.
type helperOp struct {
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

// helperResult is the outcome of one helperOp: "ok" or an errno name,
// and what the operation returned (file content, a stat line, ...).
type helperResult struct {
	Op    string `json:"op"`
	Errno string `json:"errno"`
	Out   string `json:"out,omitempty"`
}

func (r helperResult) String() string {
	if r.Out == "" {
		return r.Errno
	}
	return r.Errno + " " + r.Out
}

// Operations. Paths are absolute.
func opUmask(mask uint32) helperOp { return helperOp{Op: "umask", Mode: mask} }
func opCreate(p string, mode uint32) helperOp {
	return helperOp{Op: "create", Path: p, Mode: mode}
}
func opMkdir(p string, mode uint32) helperOp { return helperOp{Op: "mkdir", Path: p, Mode: mode} }
func opRead(p string) helperOp               { return helperOp{Op: "read", Path: p} }

// opWrite opens p with O_WRONLY|flags, writes data and closes it.
func opWrite(p string, flags int, data string) helperOp {
	return helperOp{Op: "write", Path: p, Flags: flags, Data: data}
}
func opOpen(p string, flags int) helperOp { return helperOp{Op: "open", Path: p, Flags: flags} }

// opWriteKeep opens p with O_WRONLY|flags and writes data, keeping the
// file open until the helper ends.
func opWriteKeep(p string, flags int, data string) helperOp {
	return helperOp{Op: "write-keep", Path: p, Flags: flags, Data: data}
}
func opUnlink(p string) helperOp             { return helperOp{Op: "unlink", Path: p} }
func opRmdir(p string) helperOp              { return helperOp{Op: "rmdir", Path: p} }
func opRename(from, to string) helperOp      { return helperOp{Op: "rename", Path: from, Path2: to} }
func opLink(from, to string) helperOp        { return helperOp{Op: "link", Path: from, Path2: to} }
func opSymlink(target, p string) helperOp    { return helperOp{Op: "symlink", Path: target, Path2: p} }
func opChmod(p string, mode uint32) helperOp { return helperOp{Op: "chmod", Path: p, Mode: mode} }
func opChown(p string, uid, gid int) helperOp {
	return helperOp{Op: "chown", Path: p, Uid: uid, Gid: gid}
}
func opUtimesNow(p string) helperOp         { return helperOp{Op: "utimes-now", Path: p} }
func opUtimes(p string, sec int64) helperOp { return helperOp{Op: "utimes", Path: p, Off: sec} }
func opTruncate(p string, size int64) helperOp {
	return helperOp{Op: "truncate", Path: p, Len: size}
}
func opMkfifo(p string, mode uint32) helperOp { return helperOp{Op: "mkfifo", Path: p, Mode: mode} }
func opStat(p string) helperOp                { return helperOp{Op: "stat", Path: p} }
func opList(p string) helperOp                { return helperOp{Op: "list", Path: p} }
func opAccess(p string, mode uint32) helperOp { return helperOp{Op: "access", Path: p, Mode: mode} }
func opSetxattr(p, name, value string) helperOp {
	return helperOp{Op: "setxattr", Path: p, Path2: name, Data: value}
}

// opPosixLock takes a POSIX (fcntl) write lock on [off, off+len) of p,
// keeping the file open.
func opPosixLock(p string, off, length int64) helperOp {
	return helperOp{Op: "posix-lock", Path: p, Off: off, Len: length}
}

// opHold reports "held" and waits until the test releases the helper.
func opHold() helperOp { return helperOp{Op: "hold"} }

// cred is the identity a helper runs with.
type cred struct {
	uid, gid uint32
	groups   []uint32
}

var helperBin struct {
	once sync.Once
	path string
	err  error
}

// helperPath copies the test binary where any user can execute it.
func helperPath(t testing.TB) string {
	t.Helper()
	helperBin.once.Do(func() {
		self, err := os.Executable()
		if err != nil {
			helperBin.err = err
			return
		}
		dst := filepath.Join(harnessDir, "helper")
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

// helperProc is a running helper.
type helperProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	result []helperResult
}

// startHelper starts a helper as c and feeds it ops. It returns once the
// helper reached an opHold or finished.
func startHelper(t testing.TB, c cred, ops ...helperOp) *helperProc {
	t.Helper()
	return startHelperCmd(t, execAs(c, helperPath(t)), ops...)
}

// startHelperCmd is startHelper with the command that runs the helper
// (helperPath) made by the caller: as another user, bound to a branch.
func startHelperCmd(t testing.TB, cmd *exec.Cmd, ops ...helperOp) *helperProc {
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
	h := &helperProc{t: t, cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	h.out.Buffer(make([]byte, 1<<20), 64<<20)
	b, _ := json.Marshal(ops)
	if _, err := stdin.Write(append(b, '\n')); err != nil {
		t.Fatalf("helper: %v", err)
	}
	for h.out.Scan() {
		var r helperResult
		if err := json.Unmarshal(h.out.Bytes(), &r); err != nil {
			t.Fatalf("helper said %q: %v", h.out.Text(), err)
		}
		h.result = append(h.result, r)
		if r.Op == "hold" {
			break
		}
	}
	return h
}

// release lets a holding helper finish and returns all results.
func (h *helperProc) release() []helperResult {
	h.t.Helper()
	h.stdin.Close()
	for h.out.Scan() {
		var r helperResult
		if err := json.Unmarshal(h.out.Bytes(), &r); err == nil {
			h.result = append(h.result, r)
		}
	}
	if err := h.cmd.Wait(); err != nil {
		h.t.Errorf("helper: %v", err)
	}
	return h.result
}

// runAs performs ops as c and returns one result per op.
func runAs(t testing.TB, c cred, ops ...helperOp) []helperResult {
	t.Helper()
	res := startHelper(t, c, ops...).release()
	if len(res) != len(ops) {
		t.Fatalf("helper returned %d results for %d ops: %v", len(res), len(ops), res)
	}
	return res
}

// runHelper is the helper process's main.
func runHelper() int {
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil && err != io.EOF {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	var ops []helperOp
	if err := json.Unmarshal(line, &ops); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	enc := json.NewEncoder(os.Stdout)
	var keep []*os.File
	for _, op := range ops {
		r := helperResult{Op: op.Op}
		out, err := doHelperOp(op, &keep)
		r.Out, r.Errno = out, errName(err)
		enc.Encode(r)
		if op.Op == "hold" {
			io.Copy(io.Discard, in) // until the test closes stdin
		}
	}
	for _, f := range keep {
		f.Close()
	}
	return 0
}

func doHelperOp(op helperOp, keep *[]*os.File) (string, error) {
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
	}
	return "", fmt.Errorf("unknown helper op %q", op.Op)
}

// execAs prepares a command that runs as c.
func execAs(c cred, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	groups := c.groups
	if groups == nil {
		groups = []uint32{}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: groups}}
	cmd.Dir = "/"
	return cmd
}

// worldSearchable reports whether every directory above p lets other
// users through.
func worldSearchable(p string) bool {
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
