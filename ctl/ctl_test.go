package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const owner = 1000

// pipeClient returns a client whose ioctls go straight to srv's
// HandleIoctl as caller c (NewLocalClient).
func pipeClient(srv *Server, c Caller) *Client {
	return NewLocalClient("/test", srv, c, nil)
}

func newTestServer(t *testing.T) *Server {
	t.Helper()
	s := NewServer(owner, nil)
	s.Handle(OpPing, func(Caller, json.RawMessage) (any, error) { return "pong", nil })
	return s
}

// rawCall sends a hand-made request and returns the parsed response.
func rawCall(t *testing.T, s *Server, c Caller, h Header, payload []byte) (Header, string) {
	t.Helper()
	in := make([]byte, BufSize)
	h.Length = uint32(len(payload))
	h.Put(in)
	copy(in[HeaderSize:], payload)
	out := make([]byte, BufSize)
	n, e := s.HandleIoctl(c, Cmd, in, out)
	if e != 0 {
		t.Fatalf("HandleIoctl errno = %v, want 0", e)
	}
	rh, err := ParseHeader(out[:n])
	if err != nil {
		t.Fatalf("response header: %v", err)
	}
	return rh, string(out[HeaderSize : HeaderSize+int(rh.Length)])
}

func TestCmdNumber(t *testing.T) {
	// _IOWR('A', 1, [8192]byte): dir 3, size 8192, type 'A', nr 1.
	if got, want := Cmd, uint32(0xE0004101); got != want {
		t.Errorf("Cmd = %#x, want %#x", got, want)
	}
	if size := Cmd >> 16 & 0x3fff; size != BufSize {
		t.Errorf("_IOC_SIZE(Cmd) = %d, want %d", size, BufSize)
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	want := Header{Magic: Magic, Version: Version, Op: OpStatus, Errno: 2, Token: 7, Offset: 9, Total: 11, Length: 3}
	b := make([]byte, HeaderSize+3)
	want.Put(b)
	got, err := ParseHeader(b)
	if err != nil {
		t.Fatalf("ParseHeader: %v", err)
	}
	if got != want {
		t.Errorf("ParseHeader = %+v, want %+v", got, want)
	}
}

func TestParseHeaderErrors(t *testing.T) {
	good := make([]byte, HeaderSize+4)
	(&Header{Magic: Magic, Version: Version, Length: 4}).Put(good)
	badMagic := append([]byte(nil), good...)
	badMagic[0] ^= 0xff
	overrun := append([]byte(nil), good...)
	(&Header{Magic: Magic, Version: Version, Length: 5}).Put(overrun)
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:HeaderSize-1], ErrShort},
		{"magic", badMagic, ErrBadMagic},
		{"overrun", overrun, ErrOverrun},
		{"good", good, nil},
	} {
		if _, err := ParseHeader(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: ParseHeader error = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestPing(t *testing.T) {
	c := pipeClient(newTestServer(t), Caller{Uid: owner})
	var got string
	if err := c.Do(OpPing, nil, &got); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if got != "pong" {
		t.Errorf("ping = %q, want %q", got, "pong")
	}
}

func TestArgsAndResult(t *testing.T) {
	s := newTestServer(t)
	type echo struct {
		Name string
		N    int
	}
	var gotCaller Caller
	s.Handle(OpStatus, func(c Caller, args json.RawMessage) (any, error) {
		gotCaller = c
		var e echo
		if err := json.Unmarshal(args, &e); err != nil {
			return nil, Errorf(syscall.EINVAL, "bad args: %v", err)
		}
		e.N++
		return e, nil
	})
	caller := Caller{Pid: 42, Uid: owner, Gid: 7}
	var got echo
	if err := pipeClient(s, caller).Do(OpStatus, echo{"x", 1}, &got); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if want := (echo{"x", 2}); got != want {
		t.Errorf("result = %+v, want %+v", got, want)
	}
	if gotCaller != caller {
		t.Errorf("handler caller = %+v, want %+v", gotCaller, caller)
	}
}

func TestChunkedResult(t *testing.T) {
	for _, size := range []int{MaxPayload - 2, MaxPayload - 1, MaxPayload, 3 * MaxPayload, 100_000} {
		s := newTestServer(t)
		// A JSON string of size bytes: size-2 characters and the quotes.
		want := strings.Repeat("0123456789", size/10+1)[:size-2]
		s.Handle(OpStatus, func(Caller, json.RawMessage) (any, error) { return want, nil })
		var got string
		if err := pipeClient(s, Caller{Uid: owner}).Do(OpStatus, nil, &got); err != nil {
			t.Fatalf("size %d: Do: %v", size, err)
		}
		if got != want {
			t.Errorf("size %d: got %d bytes, want %d", size, len(got), len(want))
		}
		if n := len(s.pending); n != 0 {
			t.Errorf("size %d: %d results still pending after the last chunk, want 0", size, n)
		}
	}
}

func TestChunkedError(t *testing.T) {
	s := newTestServer(t)
	msg := strings.Repeat("long message ", 2000)
	s.Handle(OpStatus, func(Caller, json.RawMessage) (any, error) { return nil, Errorf(syscall.ENOSPC, "%s", msg) })
	err := pipeClient(s, Caller{Uid: owner}).Do(OpStatus, nil, nil)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("error = %v, want ENOSPC", err)
	}
	if err.Error() != msg {
		t.Errorf("message has %d bytes, want %d", len(err.Error()), len(msg))
	}
}

func TestPermission(t *testing.T) {
	s := newTestServer(t)
	for _, tc := range []struct {
		uid  uint32
		want syscall.Errno
	}{{owner, 0}, {0, 0}, {owner + 1, syscall.EPERM}} {
		err := pipeClient(s, Caller{Uid: tc.uid}).Do(OpPing, nil, nil)
		if tc.want == 0 {
			if err != nil {
				t.Errorf("uid %d: ping: %v, want success", tc.uid, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("uid %d: ping error = %v, want %v", tc.uid, err, tc.want)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("owner of this mount (uid %d)", owner)) {
			t.Errorf("uid %d: message %q does not name the owner", tc.uid, err)
		}
	}
}

func TestVersionMismatch(t *testing.T) {
	s := newTestServer(t)
	h, msg := rawCall(t, s, Caller{Uid: owner}, Header{Magic: Magic, Version: Version + 1, Op: OpPing}, nil)
	if got, want := syscall.Errno(h.Errno), syscall.EPROTO; got != want {
		t.Errorf("errno = %v, want %v", got, want)
	}
	if h.Version != Version {
		t.Errorf("response version = %d, want the daemon's %d", h.Version, Version)
	}
	var er ErrorReply
	if err := json.Unmarshal([]byte(msg), &er); err != nil {
		t.Fatalf("error payload %q: %v", msg, err)
	}
	for _, want := range []string{fmt.Sprintf("version %d", Version), fmt.Sprintf("version %d", Version+1)} {
		if !strings.Contains(er.Error, want) {
			t.Errorf("message %q does not mention %q", er.Error, want)
		}
	}
}

func TestClientRejectsOtherVersionReply(t *testing.T) {
	c := &Client{root: "/test"}
	c.ioctl = func(buf []byte) error {
		(&Header{Magic: Magic, Version: Version + 1, Op: OpPing, Total: 2, Length: 2}).Put(buf)
		copy(buf[HeaderSize:], "{}")
		return nil
	}
	err := c.Do(OpPing, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("Do error = %v, want a protocol version error", err)
	}
}

func TestUnknownOp(t *testing.T) {
	err := pipeClient(newTestServer(t), Caller{Uid: owner}).Do(Op(999), nil, nil)
	if !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("error = %v, want ENOSYS", err)
	}
	if !strings.Contains(err.Error(), "op999") {
		t.Errorf("message %q does not name the operation", err)
	}
}

func TestHandlerErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		panic   bool
		want    syscall.Errno
		wantMsg string
	}{
		{"Errorf", Errorf(syscall.ENOENT, "snapshot %q not found", "x"), false, syscall.ENOENT, `snapshot "x" not found`},
		{"wrapped errno", fmt.Errorf("branch b: %w", syscall.EEXIST), false, syscall.EEXIST, "branch b: file exists"},
		{"plain", errors.New("disk on fire"), false, syscall.EIO, "disk on fire"},
		{"panic", nil, true, syscall.EIO, "internal error"},
	} {
		s := newTestServer(t)
		s.Handle(OpStatus, func(Caller, json.RawMessage) (any, error) {
			if tc.panic {
				panic("boom")
			}
			return nil, tc.err
		})
		err := pipeClient(s, Caller{Uid: owner}).Do(OpStatus, nil, nil)
		var ce *Error
		if !errors.As(err, &ce) {
			t.Errorf("%s: error = %#v, want *Error", tc.name, err)
			continue
		}
		if ce.Errno != tc.want || ce.Op != OpStatus {
			t.Errorf("%s: errno, op = %v, %v, want %v, %v", tc.name, ce.Errno, ce.Op, tc.want, OpStatus)
		}
		if !strings.Contains(ce.Msg, tc.wantMsg) {
			t.Errorf("%s: message = %q, want it to contain %q", tc.name, ce.Msg, tc.wantMsg)
		}
	}
}

func TestBadIoctls(t *testing.T) {
	s := newTestServer(t)
	out := make([]byte, BufSize)
	in := make([]byte, BufSize)
	(&Header{Magic: Magic, Version: Version, Op: OpPing}).Put(in)
	if _, e := s.HandleIoctl(Caller{Uid: owner}, Cmd+1, in, out); e != syscall.ENOTTY {
		t.Errorf("wrong command: errno = %v, want ENOTTY", e)
	}
	if _, e := s.HandleIoctl(Caller{Uid: owner}, Cmd, in, out[:HeaderSize-1]); e != syscall.EINVAL {
		t.Errorf("short output buffer: errno = %v, want EINVAL", e)
	}
	garbage := make([]byte, BufSize)
	n, e := s.HandleIoctl(Caller{Uid: owner}, Cmd, garbage, out)
	if e != 0 {
		t.Fatalf("garbage: errno = %v, want 0 with the error in the header", e)
	}
	h, err := ParseHeader(out[:n])
	if err != nil || syscall.Errno(h.Errno) != syscall.EINVAL {
		t.Errorf("garbage: header %+v, %v; want errno EINVAL", h, err)
	}
}

func TestFetchErrors(t *testing.T) {
	s := newTestServer(t)
	big := strings.Repeat("x", 3*BufSize)
	s.Handle(OpStatus, func(Caller, json.RawMessage) (any, error) { return big, nil })
	h, _ := rawCall(t, s, Caller{Uid: owner}, Header{Magic: Magic, Version: Version, Op: OpStatus}, nil)
	if h.Token == 0 || h.Total != uint32(len(big)+2) {
		t.Fatalf("first chunk: token %d, total %d; want a token and total %d", h.Token, h.Total, len(big)+2)
	}
	// Another user cannot fetch it, nor can anyone fetch a made-up token.
	for _, tc := range []struct {
		uid   uint32
		token uint32
		want  syscall.Errno
	}{
		{0, h.Token, syscall.ESTALE},
		{owner, h.Token + 100, syscall.ESTALE},
		{owner, h.Token, 0},
	} {
		fh, _ := rawCall(t, s, Caller{Uid: tc.uid}, Header{Magic: Magic, Version: Version, Op: OpFetch, Token: tc.token, Offset: h.Length}, nil)
		if got := syscall.Errno(fh.Errno); got != tc.want {
			t.Errorf("fetch token %d as uid %d: errno %v, want %v", tc.token, tc.uid, got, tc.want)
		}
	}
	fh, _ := rawCall(t, s, Caller{Uid: owner}, Header{Magic: Magic, Version: Version, Op: OpFetch, Token: h.Token, Offset: 1 << 30}, nil)
	if got := syscall.Errno(fh.Errno); got != syscall.EINVAL {
		t.Errorf("fetch beyond the end: errno %v, want EINVAL", got)
	}
}

func TestPendingBounded(t *testing.T) {
	s := newTestServer(t)
	big := strings.Repeat("x", 2*BufSize)
	s.Handle(OpStatus, func(Caller, json.RawMessage) (any, error) { return big, nil })
	var first uint32
	for i := 0; i < 3*maxPending; i++ {
		h, _ := rawCall(t, s, Caller{Uid: owner}, Header{Magic: Magic, Version: Version, Op: OpStatus}, nil)
		if i == 0 {
			first = h.Token
		}
	}
	if n := len(s.pending); n != maxPending {
		t.Errorf("pending results = %d, want %d", n, maxPending)
	}
	if s.pending[first] != nil {
		t.Errorf("the oldest result (token %d) is still kept", first)
	}
}

func TestRequestTooLarge(t *testing.T) {
	c := pipeClient(newTestServer(t), Caller{Uid: owner})
	err := c.Do(OpPing, strings.Repeat("x", MaxPayload), nil)
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("Do error = %v, want a too-large error", err)
	}
}

func TestFindMount(t *testing.T) {
	root := t.TempDir()
	mnt := filepath.Join(root, "mnt")
	deep := filepath.Join(mnt, "a", "b", "c")
	if err := os.MkdirAll(deep, 0755); err != nil {
		t.Fatal(err)
	}
	// A directory with the control name does not count.
	if err := os.Mkdir(filepath.Join(mnt, "a", ControlName), 0755); err != nil {
		t.Fatal(err)
	}
	if _, err := FindMount(deep); !errors.Is(err, ErrNotMounted) {
		t.Errorf("FindMount without a control file: error = %v, want ErrNotMounted", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, ControlName), nil, 0600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{deep, mnt, filepath.Join(mnt, "a")} {
		got, err := FindMount(dir)
		if err != nil || got != mnt {
			t.Errorf("FindMount(%s) = %q, %v; want %q", dir, got, err, mnt)
		}
	}
	t.Chdir(deep)
	if got, err := FindMount(""); err != nil || got != mnt {
		t.Errorf("FindMount(\"\") in %s = %q, %v; want %q", deep, got, err, mnt)
	}
	if err := ErrNotMounted.Error(); err != "not inside an agentfs mount (use -C DIR)" {
		t.Errorf("ErrNotMounted = %q", err)
	}
}

func TestDialNotAMount(t *testing.T) {
	dir := t.TempDir()
	_, err := Dial(dir)
	if err == nil || !strings.Contains(err.Error(), "is not an agentfs mount") {
		t.Errorf("Dial(%s) error = %v, want 'is not an agentfs mount'", dir, err)
	}
}

// TestLocalClientClose: a local client's Close runs its closeFn once.
func TestLocalClientClose(t *testing.T) {
	closed := 0
	c := NewLocalClient("session x", newTestServer(t), Caller{Uid: owner}, func() error { closed++; return nil })
	var got string
	if err := c.Do(OpPing, nil, &got); err != nil || got != "pong" {
		t.Fatalf("ping = %q, %v", got, err)
	}
	for i := range 2 {
		if err := c.Close(); err != nil {
			t.Errorf("Close #%d = %v", i+1, err)
		}
	}
	if closed != 1 {
		t.Errorf("closeFn ran %d times, want 1", closed)
	}
	if c.Root() != "session x" {
		t.Errorf("Root() = %q", c.Root())
	}
}

// TestAfter: the After hook runs after each operation that succeeded,
// before the reply, and its error fails the operation.
func TestAfter(t *testing.T) {
	s := newTestServer(t)
	s.Handle(OpStatus, func(Caller, json.RawMessage) (any, error) { return nil, Errorf(syscall.ENOENT, "no such thing") })
	calls := 0
	var fail error
	s.After(func() error { calls++; return fail })
	c := pipeClient(s, Caller{Uid: owner})
	var got string
	if err := c.Do(OpPing, nil, &got); err != nil || got != "pong" || calls != 1 {
		t.Fatalf("ping: %q, %v, after called %d times; want pong, nil, once", got, err, calls)
	}
	if err := c.Do(OpStatus, nil, nil); err == nil || calls != 1 {
		t.Fatalf("failing op: %v, after called %d times; want its error, and no call", err, calls)
	}
	fail = Errorf(syscall.EIO, "not written")
	err := c.Do(OpPing, nil, &got)
	if err == nil || !strings.Contains(err.Error(), "was done, but: not written") {
		t.Fatalf("ping with a failing After = %v, want the hook's error", err)
	}
}

// TestDaemonGone: the errnos a request gets when the daemon of its
// mount died (whatever wraps them) mean gone; others do not.
func TestDaemonGone(t *testing.T) {
	for _, c := range []struct {
		err  error
		gone bool
	}{
		{syscall.ENOTCONN, true},
		{syscall.ECONNABORTED, true},
		{fmt.Errorf("open ctl: %w", syscall.ECANCELED), true}, // handed to a dead io_uring queue thread
		{syscall.ENOENT, false},
		{syscall.EINTR, false},
		{nil, false},
	} {
		if got := DaemonGone(c.err); got != c.gone {
			t.Errorf("DaemonGone(%v) = %v, want %v", c.err, got, c.gone)
		}
	}
}
