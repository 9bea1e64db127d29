package integration

// The machinery of TestConformance (conformance_test.go): a small
// language of system calls (fsCall, fsStep, fsCase), a helper process
// per identity that performs them, and the observation and comparison
// of the trees they run on.
//
// # Helpers
//
// Every call, root's too, runs in a helper: this test binary
// re-executed with conformanceHelperEnv set (see init below) and, for
// other users, with their uid, gid and groups (harness.ExecAs), so that the
// kernel sees a real unprivileged process, as pjdfstest's fstest is.
// A helper serves one request a line: it sets the umask, changes into
// the case's directory (paths are relative, so that a path of PATH_MAX
// bytes is the same length on every tree), performs the calls in order
// until one fails, like fstest's "open ... : write ... : fstat", and
// answers with one result per call performed.
//
// # Observations
//
// After the setup and after every step, the test itself lstat(2)s
// every path the case names (fsCase.watched) and describes each in one
// line: type, permission bits with setuid/setgid/sticky, uid, gid,
// nlink, size (not of directories), rdev (devices), and for each of
// atime (not of symlinks), mtime and ctime whether it changed since the
// last observation of the inode, under whichever name ("same",
// "changed"; "now" for an inode not seen there before), and which
// inode it is (fsObserver). Times far from now (set with utimensat) are
// shown exactly, to the nanosecond.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

const conformanceHelperEnv = "AGENTFS_IT_CONFORMANCE_HELPER"

// init turns this test binary into a conformance helper when it is
// started as one; TestMain (main_test.go) knows nothing of it.
func init() {
	if os.Getenv(conformanceHelperEnv) == "1" {
		os.Exit(serveFsCalls(os.Stdin, os.Stdout))
	}
}

// fsCall is one system call. Paths are relative to the case's
// directory.
type fsCall struct {
	Op    string          `json:"op"`
	Path  string          `json:"path,omitempty"`
	Path2 string          `json:"path2,omitempty"` // link, rename: the new name
	Mode  uint32          `json:"mode,omitempty"`
	Flags int             `json:"flags,omitempty"` // open, rename, utimensat flags; fallocate mode
	UID   int             `json:"uid,omitempty"`
	GID   int             `json:"gid,omitempty"`
	Dev   uint64          `json:"dev,omitempty"`
	Off   int64           `json:"off,omitempty"`
	Len   int64           `json:"len,omitempty"`  // truncate, ftruncate: the size
	Data  string          `json:"data,omitempty"` // write: the bytes; symlink: the target
	Times []unix.Timespec `json:"times,omitempty"`
}

// syscalls builds fsCalls: sys.chmod("n0", 0o755).
type syscalls struct{}

var sys syscalls

// UTIME_NOW and UTIME_OMIT as times for sys.utimensat.
var (
	utimeNow  = unix.Timespec{Nsec: unix.UTIME_NOW}
	utimeOmit = unix.Timespec{Nsec: unix.UTIME_OMIT}
)

func (syscalls) mkdir(p string, mode uint32) fsCall { return fsCall{Op: "mkdir", Path: p, Mode: mode} }
func (syscalls) mkfifo(p string, mode uint32) fsCall {
	return fsCall{Op: "mkfifo", Path: p, Mode: mode}
}
func (syscalls) mknod(p string, mode uint32, dev uint64) fsCall {
	return fsCall{Op: "mknod", Path: p, Mode: mode, Dev: dev}
}
func (syscalls) symlink(target, p string) fsCall { return fsCall{Op: "symlink", Path: p, Data: target} }

// create is open(O_CREAT|O_EXCL|O_WRONLY) and close, as fstest's.
func (syscalls) create(p string, mode uint32) fsCall {
	return fsCall{Op: "create", Path: p, Mode: mode}
}

// open opens p; the later fd calls of the step use the descriptor,
// which is closed at the end of the step.
func (syscalls) open(p string, flags int, mode uint32) fsCall {
	return fsCall{Op: "open", Path: p, Flags: flags, Mode: mode}
}
func (syscalls) write(data string) fsCall    { return fsCall{Op: "write", Data: data} }
func (syscalls) fstat() fsCall               { return fsCall{Op: "fstat"} }
func (syscalls) ftruncate(size int64) fsCall { return fsCall{Op: "ftruncate", Len: size} }
func (syscalls) fallocate(mode int, off, length int64) fsCall {
	return fsCall{Op: "fallocate", Flags: mode, Off: off, Len: length}
}
func (syscalls) chmod(p string, mode uint32) fsCall { return fsCall{Op: "chmod", Path: p, Mode: mode} }
func (syscalls) chown(p string, uid, gid int) fsCall {
	return fsCall{Op: "chown", Path: p, UID: uid, GID: gid}
}
func (syscalls) lchown(p string, uid, gid int) fsCall {
	return fsCall{Op: "lchown", Path: p, UID: uid, GID: gid}
}
func (syscalls) truncate(p string, size int64) fsCall {
	return fsCall{Op: "truncate", Path: p, Len: size}
}
func (syscalls) link(p, newname string) fsCall { return fsCall{Op: "link", Path: p, Path2: newname} }
func (syscalls) unlink(p string) fsCall        { return fsCall{Op: "unlink", Path: p} }
func (syscalls) rmdir(p string) fsCall         { return fsCall{Op: "rmdir", Path: p} }
func (syscalls) rename(p, newname string) fsCall {
	return fsCall{Op: "rename", Path: p, Path2: newname}
}
func (syscalls) renameat2(p, newname string, flags int) fsCall {
	return fsCall{Op: "rename", Path: p, Path2: newname, Flags: flags}
}

// utimensat sets [atime, mtime]; nil times is utimensat(p, NULL).
func (syscalls) utimensat(p string, times []unix.Timespec, flags int) fsCall {
	return fsCall{Op: "utimensat", Path: p, Times: times, Flags: flags}
}

// fileKind is a type of file the cases are run for, as pjdfstest's
// create_file types.
type fileKind string

const (
	kindReg     fileKind = "regular"
	kindDir     fileKind = "dir"
	kindFifo    fileKind = "fifo"
	kindChar    fileKind = "char"
	kindBlock   fileKind = "block"
	kindSocket  fileKind = "socket"
	kindSymlink fileKind = "symlink"
)

// make creates a file of kind k; a symlink points to "target".
func (syscalls) make(k fileKind, p string, mode uint32) fsCall {
	switch k {
	case kindDir:
		return sys.mkdir(p, mode)
	case kindFifo:
		return sys.mkfifo(p, mode)
	case kindChar:
		return sys.mknod(p, unix.S_IFCHR|mode, unix.Mkdev(1, 3))
	case kindBlock:
		return sys.mknod(p, unix.S_IFBLK|mode, unix.Mkdev(7, 250))
	case kindSocket:
		return sys.mknod(p, unix.S_IFSOCK|mode, 0)
	case kindSymlink:
		return sys.symlink("target", p)
	}
	return sys.create(p, mode)
}

// writeFile creates p with data (as root, in a setup).
func writeFileCalls(p string, mode uint32, data string) []fsCall {
	return []fsCall{sys.open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, mode), sys.write(data)}
}

// fsStep is what one process does between two observations.
type fsStep struct {
	as    harness.Cred // the zero cred is root
	umask uint32
	calls []fsCall
}

func asRoot(calls ...fsCall) fsStep                 { return fsStep{calls: calls} }
func asUser(c harness.Cred, calls ...fsCall) fsStep { return fsStep{as: c, calls: calls} }
func (s fsStep) withUmask(mask uint32) fsStep       { s.umask = mask; return s }

// fsCase is one scenario: a setup (as root, umask 0) and steps, each
// followed by an observation of every path the case names.
type fsCase struct {
	name  string
	setup []fsCall
	steps []fsStep
	// extraWatch names paths to observe that no call names.
	extraWatch []string
}

// watched returns the paths observed after every step: ".", every path
// a call names and the directories on the way, except paths too long
// to lstat from outside the case's directory.
func (c fsCase) watched() []string {
	set := map[string]bool{".": true}
	add := func(p string) {
		if p == "" || len(p) > 300 {
			return
		}
		for _, comp := range strings.Split(p, "/") {
			if len(comp) > 255 {
				return
			}
		}
		for p = filepath.Clean(p); p != "." && p != "/" && !strings.HasPrefix(p, ".."); p = filepath.Dir(p) {
			set[p] = true
		}
	}
	calls := append([]fsCall(nil), c.setup...)
	for _, s := range c.steps {
		calls = append(calls, s.calls...)
	}
	for _, call := range calls {
		add(call.Path)
		add(call.Path2)
	}
	for _, p := range c.extraWatch {
		add(p)
	}
	var out []string
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// ---------------------------------------------------------------------
// Describing calls, for failure messages

// openFlagString names open(2) flags: "O_WRONLY|O_CREAT|O_TRUNC".
func openFlagString(flags int) string {
	parts := []string{[]string{"O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE"}[flags&unix.O_ACCMODE]}
	rest := flags &^ unix.O_ACCMODE
	for _, f := range []struct {
		bit  int
		name string
	}{
		{unix.O_CREAT, "O_CREAT"}, {unix.O_EXCL, "O_EXCL"}, {unix.O_TRUNC, "O_TRUNC"}, {unix.O_APPEND, "O_APPEND"},
		{unix.O_DIRECTORY, "O_DIRECTORY"}, {unix.O_NOFOLLOW, "O_NOFOLLOW"}, {unix.O_NONBLOCK, "O_NONBLOCK"},
		{unix.O_NOATIME, "O_NOATIME"},
	} {
		if rest&f.bit != 0 {
			parts, rest = append(parts, f.name), rest&^f.bit
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", rest))
	}
	return strings.Join(parts, "|")
}

func timeString(t unix.Timespec) string {
	switch t.Nsec {
	case unix.UTIME_NOW:
		return "UTIME_NOW"
	case unix.UTIME_OMIT:
		return "UTIME_OMIT"
	}
	return fmt.Sprintf("%d.%09d", t.Sec, t.Nsec)
}

func (c fsCall) String() string {
	switch c.Op {
	case "mkdir", "mkfifo", "create", "chmod":
		return fmt.Sprintf("%s %s %#o", c.Op, c.Path, c.Mode)
	case "mknod":
		return fmt.Sprintf("mknod %s %#o %d:%d", c.Path, c.Mode, unix.Major(c.Dev), unix.Minor(c.Dev))
	case "symlink":
		return fmt.Sprintf("symlink %s -> %s", c.Path, c.Data)
	case "open":
		if c.Flags&unix.O_CREAT != 0 {
			return fmt.Sprintf("open %s %s %#o", c.Path, openFlagString(c.Flags), c.Mode)
		}
		return fmt.Sprintf("open %s %s", c.Path, openFlagString(c.Flags))
	case "write":
		if len(c.Data) > 16 {
			return fmt.Sprintf("write (%d bytes)", len(c.Data))
		}
		return fmt.Sprintf("write %q", c.Data)
	case "ftruncate":
		return fmt.Sprintf("ftruncate %d", c.Len)
	case "fallocate":
		return fmt.Sprintf("fallocate mode=%d off=%d len=%d", c.Flags, c.Off, c.Len)
	case "chown", "lchown":
		return fmt.Sprintf("%s %s %d %d", c.Op, c.Path, c.UID, c.GID)
	case "truncate":
		return fmt.Sprintf("truncate %s %d", c.Path, c.Len)
	case "link":
		return fmt.Sprintf("link %s %s", c.Path, c.Path2)
	case "rename":
		switch c.Flags {
		case 0:
			return fmt.Sprintf("rename %s %s", c.Path, c.Path2)
		case unix.RENAME_NOREPLACE:
			return fmt.Sprintf("rename(NOREPLACE) %s %s", c.Path, c.Path2)
		case unix.RENAME_EXCHANGE:
			return fmt.Sprintf("rename(EXCHANGE) %s %s", c.Path, c.Path2)
		}
		return fmt.Sprintf("renameat2(%#x) %s %s", c.Flags, c.Path, c.Path2)
	case "utimensat":
		times := "NULL"
		if c.Times != nil {
			times = timeString(c.Times[0]) + " " + timeString(c.Times[1])
		}
		flags := ""
		if c.Flags&unix.AT_SYMLINK_NOFOLLOW != 0 {
			flags = " AT_SYMLINK_NOFOLLOW"
		}
		return fmt.Sprintf("utimensat %s %s%s", c.Path, times, flags)
	case "fstat":
		return "fstat"
	}
	return c.Op + " " + c.Path
}

func (s fsStep) String() string {
	var who string
	if s.as.Uid == 0 && s.as.Gid == 0 && s.as.Groups == nil {
		who = "root"
	} else {
		who = fmt.Sprintf("uid %d gid %d", s.as.Uid, s.as.Gid)
		if len(s.as.Groups) > 0 {
			who += fmt.Sprintf(" groups %v", s.as.Groups)
		}
	}
	if s.umask != 0 {
		who += fmt.Sprintf(" umask %#o", s.umask)
	}
	return who + ": " + callsString(s.calls)
}

func callsString(calls []fsCall) string {
	var parts []string
	for _, c := range calls {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, " : ")
}

// ---------------------------------------------------------------------
// The helper side

// fsRequest is one request to a helper.
type fsRequest struct {
	Dir   string   `json:"dir"`
	Umask uint32   `json:"umask"`
	Calls []fsCall `json:"calls"`
}

// serveFsCalls is the helper's main: one request a line, one JSON
// list of results a line.
func serveFsCalls(in io.Reader, out io.Writer) int {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		var req fsRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "conformance helper:", err)
			return 1
		}
		unix.Umask(int(req.Umask))
		var results []string
		if err := unix.Chdir(req.Dir); err != nil {
			results = []string{"chdir " + harness.ErrName(err)}
		} else {
			results = doFsCalls(req.Calls)
		}
		// Leave the mount, so that it can be unmounted.
		if err := unix.Chdir("/"); err != nil {
			fmt.Fprintln(os.Stderr, "conformance helper: chdir /:", err)
			return 1
		}
		if err := enc.Encode(results); err != nil {
			return 1
		}
	}
	return 0
}

// doFsCalls performs calls until one fails; each result is "ok" or the
// errno's name, and what the call returned (fstat: the mode).
func doFsCalls(calls []fsCall) []string {
	fd := -1
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}()
	var results []string
	for _, c := range calls {
		out, err := doFsCall(c, &fd)
		r := harness.ErrName(err)
		if out != "" {
			r += " " + out
		}
		results = append(results, r)
		if err != nil {
			break
		}
	}
	return results
}

func doFsCall(c fsCall, fd *int) (string, error) {
	p := c.Path
	switch c.Op {
	case "mkdir":
		return "", unix.Mkdir(p, c.Mode)
	case "mkfifo":
		return "", unix.Mkfifo(p, c.Mode)
	case "mknod":
		return "", unix.Mknod(p, c.Mode, int(c.Dev))
	case "symlink":
		return "", unix.Symlink(c.Data, p)
	case "create":
		nfd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, c.Mode)
		if err == nil {
			unix.Close(nfd)
		}
		return "", err
	case "open":
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
		nfd, err := unix.Open(p, c.Flags|unix.O_CLOEXEC, c.Mode)
		if err == nil {
			*fd = nfd
		}
		return "", err
	case "write":
		n, err := unix.Write(*fd, []byte(c.Data))
		if err == nil && n != len(c.Data) {
			return fmt.Sprintf("short write %d", n), nil
		}
		return "", err
	case "fstat":
		var st unix.Stat_t
		if err := unix.Fstat(*fd, &st); err != nil {
			return "", err
		}
		return fmt.Sprintf("mode=%#o", st.Mode), nil
	case "ftruncate":
		return "", unix.Ftruncate(*fd, c.Len)
	case "fallocate":
		return "", unix.Fallocate(*fd, uint32(c.Flags), c.Off, c.Len)
	case "chmod":
		return "", unix.Chmod(p, c.Mode)
	case "chown":
		return "", unix.Chown(p, c.UID, c.GID)
	case "lchown":
		return "", unix.Lchown(p, c.UID, c.GID)
	case "truncate":
		return "", unix.Truncate(p, c.Len)
	case "link":
		return "", unix.Link(p, c.Path2)
	case "unlink":
		return "", unix.Unlink(p)
	case "rmdir":
		return "", unix.Rmdir(p)
	case "rename":
		return "", unix.Renameat2(unix.AT_FDCWD, p, unix.AT_FDCWD, c.Path2, uint(c.Flags))
	case "utimensat":
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, p, c.Times, c.Flags)
	}
	return "", fmt.Errorf("unknown call %q", c.Op)
}

// ---------------------------------------------------------------------
// The test side: helpers per identity

// fsHelper is a running helper.
type fsHelper struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan []string
}

// fsHelpers starts one helper per identity, on first use.
type fsHelpers struct {
	byCred map[string]*fsHelper
}

func newFsHelpers(t *testing.T) *fsHelpers {
	h := &fsHelpers{byCred: map[string]*fsHelper{}}
	t.Cleanup(func() { h.close(t) })
	return h
}

func credKey(c harness.Cred) string { return fmt.Sprintf("%d:%d:%v", c.Uid, c.Gid, c.Groups) }

func (h *fsHelpers) helper(t testing.TB, c harness.Cred) *fsHelper {
	t.Helper()
	if hp := h.byCred[credKey(c)]; hp != nil {
		return hp
	}
	var cmd *exec.Cmd
	if c.Uid == 0 && c.Gid == 0 && c.Groups == nil {
		cmd = exec.Command(harness.HelperPath(t))
		cmd.Dir = "/"
	} else {
		cmd = harness.ExecAs(c, harness.HelperPath(t))
	}
	cmd.Env = append(os.Environ(), conformanceHelperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, inErr := cmd.StdinPipe()
	stdout, outErr := cmd.StdoutPipe()
	if err := errors.Join(inErr, outErr); err != nil {
		t.Fatal(err)
	} else if err := cmd.Start(); err != nil {
		t.Fatalf("starting a helper as uid %d gid %d: %v", c.Uid, c.Gid, err)
	}
	hp := &fsHelper{cmd: cmd, stdin: stdin, replies: make(chan []string)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var r []string
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				r = []string{"bad reply: " + sc.Text()}
			}
			hp.replies <- r
		}
		close(hp.replies)
	}()
	h.byCred[credKey(c)] = hp
	return hp
}

// run performs calls as c in dir and returns one result per call
// performed. A helper that does not answer within a generous deadline
// (agentfs hung) is killed and fails the test.
func (h *fsHelpers) run(t testing.TB, c harness.Cred, dir string, umask uint32, calls []fsCall) []string {
	t.Helper()
	hp := h.helper(t, c)
	b, _ := json.Marshal(fsRequest{Dir: dir, Umask: umask, Calls: calls})
	if _, err := hp.stdin.Write(append(b, '\n')); err != nil {
		t.Fatalf("helper as uid %d: %v", c.Uid, err)
	}
	select {
	case r, ok := <-hp.replies:
		if !ok {
			t.Fatalf("helper as uid %d exited during %s in %s", c.Uid, callsString(calls), dir)
		}
		return r
	case <-time.After(30 * time.Second):
		_ = hp.cmd.Process.Kill() // it may have exited just now; the test fails here either way
		delete(h.byCred, credKey(c))
		t.Fatalf("no answer within 30s to %s in %s (uid %d): hung", callsString(calls), dir, c.Uid)
	}
	return nil
}

// close ends the helpers: each exits when its stdin closes.
func (h *fsHelpers) close(t testing.TB) {
	for k, hp := range h.byCred {
		if err := hp.stdin.Close(); err != nil {
			t.Errorf("closing the stdin of the helper %s: %v", k, err)
		}
		done := make(chan error, 1)
		go func() { done <- hp.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the helper %s: %v", k, err)
			}
		case <-time.After(10 * time.Second):
			_ = hp.cmd.Process.Kill() // it may have exited just now
			t.Errorf("the helper %s did not exit within 10s of its stdin closing: killed (%v)", k, <-done)
		}
		delete(h.byCred, k)
	}
}

// ---------------------------------------------------------------------
// Observing a tree

// fsObserver describes the watched paths of one case in one tree. It
// names inodes by the order in which it first saw them ("#1", "#2"),
// so that traces of different trees compare which names share an inode
// and which inode a name holds after a rename, and it remembers each
// inode's times from the last observation, to tell which changed
// (under whichever name the inode is now). An inode not seen in the
// last observation is forgotten: a native filesystem reuses the
// numbers of deleted inodes.
type fsObserver struct {
	root   string
	paths  []string
	prev   map[[2]uint64]unix.Stat_t
	labels map[[2]uint64]int
	next   int
}

func newFsObserver(root string, paths []string) *fsObserver {
	return &fsObserver{root: root, paths: paths, prev: map[[2]uint64]unix.Stat_t{}, labels: map[[2]uint64]int{}}
}

// observe returns one line per watched path.
func (o *fsObserver) observe() []string {
	now := time.Now()
	cur := map[[2]uint64]unix.Stat_t{}
	labels := map[[2]uint64]int{}
	var lines []string
	for _, p := range o.paths {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(o.root, p), &st); err != nil {
			lines = append(lines, p+": "+harness.ErrName(err))
			continue
		}
		k := [2]uint64{st.Dev, st.Ino}
		label, ok := o.labels[k]
		if !ok {
			o.next++
			label = o.next
		}
		labels[k] = label
		cur[k] = st
		prev, had := o.prev[k]
		lines = append(lines, fmt.Sprintf("%s: #%d %s", p, label, describeStat(st, prev, had, now)))
	}
	o.prev, o.labels = cur, labels
	return lines
}

var fileTypeNames = map[uint32]string{
	unix.S_IFREG: "regular", unix.S_IFDIR: "dir", unix.S_IFLNK: "symlink", unix.S_IFIFO: "fifo",
	unix.S_IFCHR: "char", unix.S_IFBLK: "block", unix.S_IFSOCK: "socket",
}

// describeStat is the observation line of one path: the fields
// pjdfstest looks at, and whether each time changed since prev.
func describeStat(st, prev unix.Stat_t, hadPrev bool, now time.Time) string {
	typ := st.Mode & unix.S_IFMT
	s := fmt.Sprintf("%s %04o uid=%d gid=%d nlink=%d", fileTypeNames[typ], st.Mode&0o7777, st.Uid, st.Gid, st.Nlink)
	if typ != unix.S_IFDIR {
		s += fmt.Sprintf(" size=%d", st.Size)
	}
	if typ == unix.S_IFCHR || typ == unix.S_IFBLK {
		s += fmt.Sprintf(" rdev=%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	// Following a symlink updates its atime on a native filesystem
	// and not through an overlay; pjdfstest does not look at it.
	if typ != unix.S_IFLNK {
		s += " atime=" + timeChange(st.Atim, prev.Atim, hadPrev, now)
	}
	s += " mtime=" + timeChange(st.Mtim, prev.Mtim, hadPrev, now)
	s += " ctime=" + timeChange(st.Ctim, prev.Ctim, hadPrev, now)
	return s
}

// timeChange says how a time compares with the previous observation; a
// time far from now was set explicitly and is shown as it is.
func timeChange(cur, prev unix.Timespec, hadPrev bool, now time.Time) string {
	if d := time.Unix(cur.Sec, cur.Nsec).Sub(now); d < -time.Hour || d > time.Hour {
		return timeString(cur)
	}
	switch {
	case !hadPrev:
		return "now"
	case cur == prev:
		return "same"
	}
	return "changed"
}

// ---------------------------------------------------------------------
// Running a case on several trees and comparing them

// fsTrace is what one tree showed for one case: per step (the setup is
// step 0) the results of the calls and the observation lines.
type fsTrace [][]string

// fsTreeRun is one case's directory in one tree.
type fsTreeRun struct {
	dir      string // the case's directory
	setUp    bool   // the setup ran before the mount (the lower tree)
	observer *fsObserver
	trace    fsTrace
}

// runCaseOn runs c on every tree in lock step: the setup where it is
// still to do, an observation, then per step a pause (nextClockTick: so
// that a time the step sets differs from the last one observed), the
// step on every tree and an observation.
func runCaseOn(t *testing.T, h *fsHelpers, c fsCase, trees []*fsTreeRun) {
	watched := c.watched()
	for _, tr := range trees {
		tr.observer = newFsObserver(tr.dir, watched)
		result := []string{"setup ok"}
		if !tr.setUp {
			if r := h.run(t, harness.Cred{}, tr.dir, 0, c.setup); !allOK(r, len(c.setup)) {
				result = []string{"setup failed: " + strings.Join(r, " ")}
			}
		}
		tr.trace = fsTrace{append(result, tr.observer.observe()...)}
	}
	for _, s := range c.steps {
		nextClockTick(t)
		for _, tr := range trees {
			r := h.run(t, s.as, tr.dir, s.umask, s.calls)
			tr.trace = append(tr.trace, append([]string{strings.Join(r, " ")}, tr.observer.observe()...))
		}
	}
}

// allOK reports whether results says that all n calls succeeded.
func allOK(results []string, n int) bool {
	return len(results) == n && (n == 0 || results[n-1] == "ok")
}

// nextClockTick waits until the kernel's coarse clock, with which it
// stamps files, has moved on from where it is now, so that a time set
// after it returns differs from every time set before it: a file
// stamped before was stamped with the coarse clock of then (at most
// now's) or with the fine clock (less than now's coarse time plus a
// tick), and the coarse clock moves a whole tick at a time. That is at
// most one tick: 10 ms at HZ=100, 4 ms at HZ=250, 1 ms at HZ=1000. (A
// fixed pause shorter than a tick, as 6 ms at HZ=100, would let times
// set before and after it be equal.)
func nextClockTick(t *testing.T) {
	t.Helper()
	coarse := func() unix.Timespec {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
			t.Fatalf("clock_gettime(CLOCK_REALTIME_COARSE): %v", err)
		}
		return ts
	}
	start := coarse()
	for deadline := time.Now().Add(time.Second); coarse() == start; time.Sleep(200 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the coarse clock stayed at %v for a second", start)
		}
	}
}

// fsDifference is one place where a tree differs from the reference.
type fsDifference struct {
	step, line int
}

// diffTraces lists where got differs from want.
func diffTraces(want, got fsTrace) []fsDifference {
	var out []fsDifference
	for i := range want {
		for j := range want[i] {
			if i >= len(got) || j >= len(got[i]) || got[i][j] != want[i][j] {
				out = append(out, fsDifference{i, j})
			}
		}
	}
	return out
}

// traceLine returns a line of a trace, or "(missing)".
func traceLine(tr fsTrace, d fsDifference) string {
	if d.step < len(tr) && d.line < len(tr[d.step]) {
		return tr[d.step][d.line]
	}
	return "(missing)"
}

// reportCase describes a case and where the trees differ: the setup,
// every step, and under each step the differing lines as native,
// overlayfs and agentfs saw them. tag marks each difference.
func reportCase(c fsCase, native, ovl, afs fsTrace, diffs []fsDifference, tag func(fsDifference) string) string {
	var b strings.Builder
	byStep := map[int][]fsDifference{}
	for _, d := range diffs {
		byStep[d.step] = append(byStep[d.step], d)
	}
	for i := 0; i <= len(c.steps); i++ {
		if i == 0 {
			fmt.Fprintf(&b, "  setup (root, umask 0): %s\n", callsString(c.setup))
		} else {
			fmt.Fprintf(&b, "  step %d as %s\n", i, c.steps[i-1])
		}
		for _, d := range byStep[i] {
			n, o, a := traceLine(native, d), traceLine(ovl, d), traceLine(afs, d)
			if n == o && n == a {
				fmt.Fprintf(&b, "      all:       %s\n", n)
				continue
			}
			fmt.Fprintf(&b, "    %s\n      native:    %s\n      overlayfs: %s\n      agentfs:   %s\n", tag(d), n, o, a)
		}
	}
	return b.String()
}
