package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"syscall"
)

// OpFunc serves one control operation.
type OpFunc func(c Caller, args json.RawMessage) (any, error)

// Server dispatches control requests to registered operations. Only
// the mount owner and root may use it.
type Server struct {
	owner uint32

	mu      sync.Mutex
	ops     map[string]OpFunc
	results map[uint32][]byte
	next    uint32
}

// NewServer returns a server for a mount owned by uid owner.
func NewServer(owner uint32) *Server {
	return &Server{owner: owner, ops: map[string]OpFunc{}, results: map[uint32][]byte{}}
}

// Handle registers op.
func (s *Server) Handle(op string, fn OpFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops[op] = fn
}

// HandleIoctl implements Handler.
func (s *Server) HandleIoctl(c Caller, cmd uint32, in, out []byte) (int, syscall.Errno) {
	if cmd != Cmd {
		return 0, syscall.ENOTTY
	}
	if c.Uid != 0 && c.Uid != s.owner {
		return 0, syscall.EPERM
	}
	if len(out) < headerSize {
		return 0, syscall.EINVAL
	}
	h, err := parseHeader(in)
	if err != nil {
		return s.respond(out, 0, mustJSON(reply{Error: err.Error(), Errno: int(syscall.EINVAL)}), 0)
	}
	if h.Version != Version {
		msg := fmt.Sprintf("control protocol version %d is not spoken by this daemon (version %d): use the agentfs binary that mounted it", h.Version, Version)
		return s.respond(out, 0, mustJSON(reply{Error: msg, Errno: int(syscall.EPROTO)}), 0)
	}
	if h.Token != 0 {
		s.mu.Lock()
		full := s.results[h.Token]
		s.mu.Unlock()
		if full == nil || int(h.Offset) > len(full) {
			return s.respond(out, 0, mustJSON(reply{Error: "unknown control result", Errno: int(syscall.EINVAL)}), 0)
		}
		return s.respond(out, h.Token, full, int(h.Offset))
	}
	var req request
	if err := json.Unmarshal(in[headerSize:headerSize+int(h.Length)], &req); err != nil {
		return s.respond(out, 0, mustJSON(reply{Error: "bad control request: " + err.Error(), Errno: int(syscall.EINVAL)}), 0)
	}
	s.mu.Lock()
	fn := s.ops[req.Op]
	s.mu.Unlock()
	var rep reply
	if fn == nil {
		rep = reply{Error: fmt.Sprintf("unknown control operation %q (is the daemon older than this agentfs?)", req.Op), Errno: int(syscall.ENOSYS)}
	} else if res, err := fn(c, req.Args); err != nil {
		rep.Error = err.Error()
		var ce *Error
		var en syscall.Errno
		switch {
		case errors.As(err, &ce):
			rep.Errno = int(ce.Errno)
		case errors.As(err, &en):
			rep.Errno = int(en)
		default:
			rep.Errno = int(syscall.EIO)
		}
	} else if rep.Result, err = json.Marshal(res); err != nil {
		rep = reply{Error: err.Error(), Errno: int(syscall.EIO)}
	}
	return s.respond(out, 0, mustJSON(rep), 0)
}

// respond writes full[off:] (as much as fits) after a header; a result
// that does not fit is kept for the follow-up requests.
func (s *Server) respond(out []byte, token uint32, full []byte, off int) (int, syscall.Errno) {
	room := len(out) - headerSize
	chunk := full[off:]
	if len(chunk) > room {
		chunk = chunk[:room]
		if token == 0 {
			s.mu.Lock()
			s.next++
			token = s.next
			s.results[token] = full
			s.mu.Unlock()
		}
	}
	if token != 0 && off+len(chunk) == len(full) {
		s.mu.Lock()
		delete(s.results, token)
		s.mu.Unlock()
	}
	h := header{Magic: magic, Version: Version, Token: token, Offset: uint32(len(full)), Length: uint32(len(chunk))}
	h.put(out)
	copy(out[headerSize:], chunk)
	return headerSize + len(chunk), 0
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{"error":"encoding the reply failed","errno":5}`)
	}
	return b
}
