// Package s3test starts a real S3-compatible server for the tests of
// agentfs's remotes: Versity's gateway (versitygw, Apache-2.0) serving a
// temporary directory with its posix backend, on 127.0.0.1 at a free
// port, for the life of one test. It is no fake in the process: the
// client under test speaks HTTP and SigV4 to another program, as it
// does to AWS S3, MinIO or Ceph.
//
// # Finding the server
//
// The binary is AGENTFS_VERSITYGW (the Makefile sets it), else the
// pinned build that `make deps` installs into bin/tools of the module
// (bin/tools/versitygw-v1.8.0), else versitygw on PATH. A test that
// finds none skips through testenv (Skip with the condition "the
// program versitygw"), which fails it on CI (AGENTFS_REQUIRE_FUSE=1):
// CI cannot silently leave the remote tests out.
//
// # What a test sees from the server's side
//
// The posix backend keeps bucket B's object K as the file Root/B/K, so
// a test can count, read or corrupt what the server holds (ObjectFile,
// Objects). The gateway writes an access log, one line per request
// (Requests counts them by operation), so that a test can tell what a
// client sent, not what the client says it sent.
package s3test

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/internal/testenv"
)

// Version is the versitygw release the Makefile installs.
const Version = "v1.8.0"

// BinEnv names the environment variable that gives the path of the
// versitygw binary.
const BinEnv = "AGENTFS_VERSITYGW"

// The root credentials of every server started here.
const (
	AccessKey = "agentfs-test-access"
	SecretKey = "agentfs-test-secret-key"
)

// Server is one running gateway.
type Server struct {
	// Endpoint is the URL to give a client: http://127.0.0.1:PORT.
	Endpoint string
	// Root is the directory served: each subdirectory is a bucket.
	Root string
	// AccessLog is the access log of the gateway running (Restart starts another).
	AccessLog string

	bin  string
	dir  string
	logs []string // the access logs of every start, AccessLog last
	cmd  *exec.Cmd
	done chan struct{} // closed when the gateway has exited
}

// Binary returns the path of the versitygw binary, or "" if none is
// installed.
func Binary() string {
	if p := os.Getenv(BinEnv); p != "" {
		return p
	}
	if root := moduleRoot(); root != "" {
		p := filepath.Join(root, "bin", "tools", "versitygw-"+Version)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	return ""
}

// moduleRoot returns the directory of the go.mod above the current
// directory, or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Require returns the path of the versitygw binary, or skips t (a
// failure on CI) when it is not installed.
func Require(t testing.TB) string {
	t.Helper()
	p := Binary()
	if p == "" {
		testenv.Skip(t, testenv.Program("versitygw"),
			"the S3 server of the remote tests is not installed: make deps installs it into bin/tools (or set %s)", BinEnv)
	}
	return p
}

// Start starts a gateway serving a fresh directory, with the buckets
// named (made as directories before it starts), and stops it at the end
// of the test.
func Start(t testing.TB, buckets ...string) *Server {
	t.Helper()
	bin := Require(t)
	dir := t.TempDir()
	s := &Server{Root: filepath.Join(dir, "root"), bin: bin, dir: dir}
	if err := os.Mkdir(s.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range buckets {
		if err := os.Mkdir(filepath.Join(s.Root, b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.launch(t)
	t.Cleanup(s.Stop)
	return s
}

// launch starts the gateway on a free port, with an access log of its
// own. The free port is found by listening and closing: another program
// may take it in between, so a start that fails is tried again.
func (s *Server) launch(t testing.TB) {
	t.Helper()
	var lastErr error
	for range 3 {
		s.AccessLog = filepath.Join(s.dir, fmt.Sprintf("access.%d.log", len(s.logs)))
		if lastErr = s.start(s.bin, filepath.Join(s.dir, "versitygw.out")); lastErr == nil {
			s.logs = append(s.logs, s.AccessLog)
			return
		}
	}
	t.Fatalf("starting versitygw: %v", lastErr)
}

// Restart starts the gateway again, serving the same directory (it must
// have been stopped), on another port: Endpoint changes.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.cmd != nil {
		t.Fatal("s3test: Restart of a running server")
	}
	s.launch(t)
}

// Pause stops the gateway's process (SIGSTOP): requests wait, and a
// request in flight stays unanswered, until Resume continues it or
// Stop kills it.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Resume continues a gateway Pause stopped (SIGCONT): the requests
// that waited are answered.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// Throttle lets the gateway run in short bursts (run, then paused)
// until cond holds, which it checks while the gateway is paused, and
// leaves it paused then: a test stops a transfer at a point it knows,
// however fast the transfer. It reports whether cond held within a
// minute.
func (s *Server) Throttle(t testing.TB, burst time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		s.Resume(t)
		time.Sleep(burst)
		s.Pause(t)
		if cond() {
			return true
		}
	}
	return false
}

func (s *Server) start(bin, out string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return err
	}
	logf, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(bin,
		"--access", AccessKey, "--secret", SecretKey,
		"--port", addr, "--quiet", "--access-log", s.AccessLog,
		"posix", s.Root)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	// Ready once it accepts connections; a gateway that exits first
	// (the port was taken) is an error with its output.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			b, _ := os.ReadFile(out)
			return fmt.Errorf("versitygw exited (%v): %s", waitErr, b)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done // killed: its error says only that
			return fmt.Errorf("versitygw did not listen on %s within a minute", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Endpoint = "http://" + addr
	s.cmd, s.done = cmd, done
	return nil
}

// Stop ends the gateway (Start registers it as a cleanup; calling it
// again does nothing).
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done // killed: its error says only that
	s.cmd = nil
}

// ObjectFile returns the file in which the server keeps bucket's object
// key.
func (s *Server) ObjectFile(bucket, key string) string {
	return filepath.Join(s.Root, bucket, filepath.FromSlash(key))
}

// Objects returns the keys of the objects the server holds in bucket
// under prefix (a key prefix ending in "/" or ""), sorted.
func (s *Server) Objects(t testing.TB, bucket, prefix string) []string {
	t.Helper()
	base := filepath.Join(s.Root, bucket)
	var keys []string
	err := filepath.WalkDir(filepath.Join(base, filepath.FromSlash(prefix)), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(base, p)
			if err != nil {
				return err
			}
			// The posix backend keeps multipart uploads in progress
			// under a hidden directory of the bucket.
			if !strings.HasPrefix(rel, ".") {
				keys = append(keys, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// PartsHeld returns the sizes of the parts of unfinished multipart
// uploads the server holds in bucket (the posix backend keeps them as
// files BUCKET/.sgwtmp/multipart/KEY-HASH/UPLOAD-ID/PART), whatever
// its access log says: the gateway writes that log behind its answers,
// and a gateway killed loses the lines not written yet.
func (s *Server) PartsHeld(t testing.TB, bucket string) []int64 {
	t.Helper()
	ms, err := filepath.Glob(filepath.Join(s.Root, bucket, ".sgwtmp", "multipart", "*", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, m := range ms {
		if _, err := strconv.Atoi(filepath.Base(m)); err != nil {
			continue
		}
		if st, err := os.Stat(m); err == nil && st.Mode().IsRegular() {
			out = append(out, st.Size())
		}
	}
	return out
}

// Requests counts, over every start of the server, the requests of operation op (the gateway's name
// without its "s3_" prefix: PutObject, CreateMultipartUpload,
// UploadPart, GetObject, HeadObject, ListObjectsV2, ...) that the server
// answered with a status below 300, and whose key starts with
// keyPrefix.
func (s *Server) Requests(t testing.TB, op, keyPrefix string) int {
	t.Helper()
	n := 0
	for _, p := range s.logs {
		n += countRequests(t, p, op, keyPrefix)
	}
	return n
}

// BytesWritten returns what the gateway running has written so far
// (wchar of /proc/PID/io): the bodies and headers of its answers, and
// its access log's lines. The gateway does not log the bytes of a
// GetObject's body (it writes 0), so a test that must know how much of
// an object was sent measures it here, from the server's side.
func (s *Server) BytesWritten(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", s.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("the gateway's I/O counts: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("the gateway's I/O counts: %q", line)
			}
			return n
		}
	}
	t.Fatalf("the gateway's I/O counts have no wchar: %s", b)
	return 0
}

// countRequests counts Requests in one access log.
func countRequests(t testing.TB, log, op, keyPrefix string) int {
	t.Helper()
	n := 0
	scanRequests(t, log, op, keyPrefix, func(accessEntry) { n++ })
	return n
}

// scanRequests calls fn with each entry of the access log log that
// Requests counts.
func scanRequests(t testing.TB, log, op, keyPrefix string, fn func(accessEntry)) {
	t.Helper()
	f, err := os.Open(log)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if e, ok := parseAccessLine(sc.Text()); ok && e.op == op && e.status < 300 && strings.HasPrefix(e.key, keyPrefix) {
			fn(e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// accessEntry is what Requests reads of one line of the access log.
type accessEntry struct {
	op     string
	key    string
	status int
}

// parseAccessLine reads a line of the gateway's access log, in the
// format of S3 server access logs: "owner bucket [time] ip requester id
// s3_OP key URI status ...", where the time has a space and the URI
// is "METHOD path proto" or "-".
func parseAccessLine(line string) (accessEntry, bool) {
	_, rest, ok := strings.Cut(line, "] ")
	if !ok {
		return accessEntry{}, false
	}
	f := strings.Fields(rest)
	// ip requester request-id operation key ...
	if len(f) < 6 || !strings.HasPrefix(f[3], "s3_") {
		return accessEntry{}, false
	}
	e := accessEntry{op: strings.TrimPrefix(f[3], "s3_"), key: f[4]}
	// The status follows the URI, which is either "-" or three fields
	// in quotes.
	i := 5
	if strings.HasPrefix(f[i], `"`) {
		for i < len(f) && !strings.HasSuffix(f[i], `"`) {
			i++
		}
	}
	i++
	if i >= len(f) {
		return accessEntry{}, false
	}
	st, err := strconv.Atoi(f[i])
	if err != nil {
		return accessEntry{}, false
	}
	e.status = st
	if e.key == "-" {
		e.key = ""
	}
	return e, true
}
