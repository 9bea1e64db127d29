package ctl

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
)

// The protocol: one ioctl command, _IOWR('A', 1, [BufSize]byte). The
// buffer starts with a header; a JSON document follows it.
//
//	request:  magic u32 | version u16 | flags u16 | token u32 | offset u32 | length u32 | JSON {"op":..., "args":...}
//	response: magic u32 | version u16 | flags u16 | token u32 | total u32  | length u32 | JSON chunk
//
// A response longer than one buffer is kept by the server under token;
// the client fetches the rest with requests that carry the token and
// the offset (and no JSON). Version mismatches are refused with a clear
// error rather than misread.
const (
	BufSize    = 8192
	headerSize = 20
	magic      = 0x41474653 // "AGFS"
	// Version is the protocol version this build speaks.
	Version = 1
)

// Cmd is the ioctl request number.
var Cmd = iocWR('A', 1, BufSize)

func iocWR(typ, nr, size uint32) uint32 {
	const read, write = 2, 1
	return (read|write)<<30 | size<<16 | typ<<8 | nr
}

type header struct {
	Magic   uint32
	Version uint16
	Flags   uint16
	Token   uint32
	Offset  uint32 // request: offset to fetch; response: total length
	Length  uint32
}

func (h *header) put(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], h.Magic)
	binary.LittleEndian.PutUint16(b[4:], h.Version)
	binary.LittleEndian.PutUint16(b[6:], h.Flags)
	binary.LittleEndian.PutUint32(b[8:], h.Token)
	binary.LittleEndian.PutUint32(b[12:], h.Offset)
	binary.LittleEndian.PutUint32(b[16:], h.Length)
}

func parseHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, errors.New("control message too short")
	}
	h := header{
		Magic:   binary.LittleEndian.Uint32(b[0:]),
		Version: binary.LittleEndian.Uint16(b[4:]),
		Flags:   binary.LittleEndian.Uint16(b[6:]),
		Token:   binary.LittleEndian.Uint32(b[8:]),
		Offset:  binary.LittleEndian.Uint32(b[12:]),
		Length:  binary.LittleEndian.Uint32(b[16:]),
	}
	if h.Magic != magic {
		return h, errors.New("not an agentfs control message")
	}
	if int(h.Length) > len(b)-headerSize {
		return h, errors.New("control message length exceeds its buffer")
	}
	return h, nil
}

// request is the JSON of a request.
type request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// reply is the JSON of a response.
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Errno  int             `json:"errno,omitempty"`
}

// Error is an error the daemon reported.
type Error struct {
	Msg   string
	Errno syscall.Errno
}

func (e *Error) Error() string { return e.Msg }

// Unwrap lets callers test errno values with errors.Is.
func (e *Error) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// Errorf makes an error with an errno that reaches the client.
func Errorf(errno syscall.Errno, format string, a ...any) error {
	return &Error{Msg: fmt.Sprintf(format, a...), Errno: errno}
}
