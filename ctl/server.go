package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"syscall"
)

// OpFunc serves one control operation: it gets the caller and the
// request's JSON arguments (empty when there are none) and returns a
// value that is sent back as JSON, or an error. An error made with
// Errorf, or wrapping a syscall.Errno, reaches the client with that
// errno; any other error with EIO. The error's text is what the user
// sees: make it name the problem and the fix.
type OpFunc func(c Caller, args json.RawMessage) (any, error)

// maxPending bounds the results kept for OpFetch; the oldest is dropped
// first (a client that stops fetching half-way must not leak memory).
const maxPending = 16

// Server dispatches control requests to registered operations. It
// implements Handler. Only the mount owner and root may use it.
type Server struct {
	owner uint32
	log   *slog.Logger

	mu      sync.Mutex
	ops     map[Op]OpFunc
	after   func() error
	pending map[uint32]*pendingResult // by token
	next    uint32
}

// pendingResult is a result larger than one buffer, fetched in chunks.
type pendingResult struct {
	op    Op
	errno uint32
	uid   uint32 // only the caller that asked may fetch it
	data  []byte
}

var _ Handler = (*Server)(nil)

// NewServer returns a server for a mount owned by uid owner. log may be
// nil.
func NewServer(owner uint32, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{owner: owner, log: log, ops: map[Op]OpFunc{}, pending: map[uint32]*pendingResult{}}
}

// Handle registers fn for op, replacing any earlier one.
func (s *Server) Handle(op Op, fn OpFunc) {
	if op == OpFetch {
		panic("ctl: OpFetch is served by the Server itself")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops[op] = fn
}

// After sets fn to run after every operation that succeeded, before
// its reply; an error from it fails the operation.
func (s *Server) After(fn func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after = fn
}

// HandleIoctl implements Handler. Protocol errors, permission errors and
// the operations' errors are answered in the response header (errno)
// with a message, so that the user sees why; only a wrong ioctl command
// or a buffer too small for a header fail the ioctl itself.
func (s *Server) HandleIoctl(c Caller, cmd uint32, in, out []byte) (int, syscall.Errno) {
	if cmd != Cmd {
		return 0, syscall.ENOTTY
	}
	if len(out) < HeaderSize {
		return 0, syscall.EINVAL
	}
	h, err := ParseHeader(in)
	if err != nil {
		return s.fail(out, c, h.Op, syscall.EINVAL, "bad control request: %v", err)
	}
	if c.Uid != 0 && c.Uid != s.owner {
		return s.fail(out, c, h.Op, syscall.EPERM,
			"permission denied: only the owner of this mount (uid %d) and root may control it (you are uid %d)", s.owner, c.Uid)
	}
	if h.Version != Version {
		return s.fail(out, c, h.Op, syscall.EPROTO,
			"the agentfs daemon of this mount speaks control protocol version %d, this agentfs speaks version %d: use the agentfs binary that mounted it, or unmount and mount again with this one",
			Version, h.Version)
	}
	if h.Op == OpFetch {
		return s.fetch(c, h, out)
	}
	s.log.Debug("control request", "op", h.Op.String(), "pid", c.Pid, "uid", c.Uid)
	s.mu.Lock()
	fn, after := s.ops[h.Op], s.after
	s.mu.Unlock()
	if fn == nil {
		return s.fail(out, c, h.Op, syscall.ENOSYS,
			"the agentfs daemon of this mount does not know the control operation %s: it is older than this agentfs; unmount and mount again to use it", h.Op)
	}
	res, err := s.call(fn, c, h.Op, json.RawMessage(in[HeaderSize:HeaderSize+int(h.Length)]))
	if err != nil {
		return s.fail(out, c, h.Op, errnoOf(err), "%s", err.Error())
	}
	if after != nil {
		if err := after(); err != nil {
			return s.fail(out, c, h.Op, errnoOf(err), "%s was done, but: %s", h.Op, err.Error())
		}
	}
	data, err := json.Marshal(res)
	if err != nil {
		return s.fail(out, c, h.Op, syscall.EIO, "encoding the %s reply: %v", h.Op, err)
	}
	return s.respond(out, c, h.Op, 0, data)
}

// DecodeArgs decodes the JSON arguments of op into v, for an OpFunc;
// empty arguments leave v as it is. Malformed arguments are EINVAL
// (a client bug, or a client of another version). Unknown fields are
// ignored, so that a newer client's optional arguments do not break an
// older daemon.
func DecodeArgs(op Op, args json.RawMessage, v any) error {
	if len(args) == 0 {
		return nil
	}
	if err := json.Unmarshal(args, v); err != nil {
		return Errorf(syscall.EINVAL, "bad arguments for the control operation %s: %v", op, err)
	}
	return nil
}

// call runs fn, turning a panic into EIO: a bug in one operation must
// not take the mount down.
func (s *Server) call(fn OpFunc, c Caller, op Op, args json.RawMessage) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("control operation panicked", "op", op.String(), "panic", r)
			res, err = nil, Errorf(syscall.EIO, "internal error in the agentfs daemon during %s (see its log)", op)
		}
	}()
	return fn(c, args)
}

// errnoOf is the errno a client gets for err.
func errnoOf(err error) syscall.Errno {
	var ce *Error
	var en syscall.Errno
	switch {
	case errors.As(err, &ce) && ce.Errno != 0:
		return ce.Errno
	case errors.As(err, &en) && en != 0:
		return en
	}
	return syscall.EIO
}

// fail answers errno with a message.
func (s *Server) fail(out []byte, c Caller, op Op, errno syscall.Errno, format string, a ...any) (int, syscall.Errno) {
	data, _ := json.Marshal(ErrorReply{Error: fmt.Sprintf(format, a...)})
	return s.respond(out, c, op, errno, data)
}

// respond writes the first chunk of data after a header; what does not
// fit is kept for OpFetch.
func (s *Server) respond(out []byte, c Caller, op Op, errno syscall.Errno, data []byte) (int, syscall.Errno) {
	var token uint32
	if len(data) > len(out)-HeaderSize {
		token = s.keep(&pendingResult{op: op, errno: uint32(errno), uid: c.Uid, data: data})
	}
	return s.writeChunk(out, op, uint32(errno), token, data, 0), 0
}

// keep stores p for OpFetch and returns its token.
func (s *Server) keep(p *pendingResult) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) >= maxPending {
		// Tokens grow: the smallest is the oldest (until the counter
		// wraps, which only makes an old result live a little longer).
		tokens := make([]uint32, 0, len(s.pending))
		for t := range s.pending {
			tokens = append(tokens, t)
		}
		sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
		delete(s.pending, tokens[0])
	}
	for {
		s.next++
		if s.next != 0 && s.pending[s.next] == nil {
			break
		}
	}
	s.pending[s.next] = p
	return s.next
}

// fetch answers OpFetch: the chunk of a kept result at h.Offset.
func (s *Server) fetch(c Caller, h Header, out []byte) (int, syscall.Errno) {
	s.mu.Lock()
	p := s.pending[h.Token]
	s.mu.Unlock()
	if p == nil || p.uid != c.Uid {
		return s.fail(out, c, OpFetch, syscall.ESTALE,
			"the rest of a control reply is gone (token %d): it was fetched already or dropped; run the command again", h.Token)
	}
	if int64(h.Offset) > int64(len(p.data)) {
		return s.fail(out, c, OpFetch, syscall.EINVAL, "fetch offset %d beyond the reply's %d bytes", h.Offset, len(p.data))
	}
	token := h.Token
	if int(h.Offset)+len(out)-HeaderSize >= len(p.data) {
		s.mu.Lock()
		delete(s.pending, h.Token)
		s.mu.Unlock()
		token = 0
	}
	return s.writeChunk(out, p.op, p.errno, token, p.data, int(h.Offset)), 0
}

// writeChunk writes a header and data[off:] (as much as fits) to out.
// token is non-zero when more remains to be fetched.
func (s *Server) writeChunk(out []byte, op Op, errno, token uint32, data []byte, off int) int {
	chunk := data[off:]
	if room := len(out) - HeaderSize; len(chunk) > room {
		chunk = chunk[:room]
	}
	h := Header{Magic: Magic, Version: Version, Op: op, Errno: errno, Token: token,
		Offset: uint32(off), Total: uint32(len(data)), Length: uint32(len(chunk))}
	h.Put(out)
	copy(out[HeaderSize:], chunk)
	return HeaderSize + len(chunk)
}
