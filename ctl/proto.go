package ctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
)

// Wire format.
//
// Every control request is one ioctl, Cmd = _IOWR('A', 1, [BufSize]byte),
// on an open file descriptor of the control file. FUSE passes restricted
// ioctls with the size encoded in the command number, so the buffer has
// a fixed size; the kernel copies it to the daemon and the daemon's
// answer back into the same buffer.
//
// The buffer starts with a header, all fields little-endian:
//
//	off size field    request                     response
//	 0   4   magic    "AGFS"                      "AGFS"
//	 4   2   version  protocol version spoken     protocol version spoken
//	 6   2   op       Op                          the Op answered
//	 8   4   errno    0                           0, or the error's errno
//	12   4   token    OpFetch: the result token   non-zero: more to fetch
//	16   4   offset   OpFetch: where to continue  offset of this chunk
//	20   4   total    0                           length of the whole result
//	24   4   length   payload bytes that follow   payload bytes that follow
//
// The payload is JSON: the request's arguments; the response's result,
// or, when errno is not 0, an ErrorReply. A result longer than one
// buffer is kept by the daemon under a token; the client fetches the rest
// with OpFetch requests carrying the token and the offset it has reached.
//
// magic and version stay at the same offsets in every protocol version,
// so that a daemon and a client of different versions can always tell
// each other so clearly instead of misreading the rest.
const (
	// BufSize is the size of the ioctl buffer (at most 16 KiB - 1: the
	// size field of an ioctl number has 14 bits).
	BufSize = 8192
	// HeaderSize is the size of the fixed header.
	HeaderSize = 28
	// MaxPayload is the largest payload of one buffer; a request must
	// fit in it.
	MaxPayload = BufSize - HeaderSize
	// Magic starts every control message ("AGFS" in little-endian).
	Magic = 0x53464741
	// Version is the protocol version this build speaks.
	Version = 1
)

// Cmd is the one ioctl command of the control file.
var Cmd = iocWR('A', 1, BufSize)

// iocWR is the kernel's _IOWR(type, nr, size).
func iocWR(typ, nr, size uint32) uint32 {
	const dirRead, dirWrite = 2, 1
	return (dirRead|dirWrite)<<30 | size<<16 | typ<<8 | nr
}

// Header is the fixed start of every control message.
type Header struct {
	Magic   uint32
	Version uint16
	Op      Op
	Errno   uint32
	Token   uint32
	Offset  uint32
	Total   uint32
	Length  uint32
}

// Put writes h to the start of b, which must hold HeaderSize bytes.
func (h *Header) Put(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], h.Magic)
	le.PutUint16(b[4:], h.Version)
	le.PutUint16(b[6:], uint16(h.Op))
	le.PutUint32(b[8:], h.Errno)
	le.PutUint32(b[12:], h.Token)
	le.PutUint32(b[16:], h.Offset)
	le.PutUint32(b[20:], h.Total)
	le.PutUint32(b[24:], h.Length)
}

// Errors of ParseHeader.
var (
	ErrShort    = errors.New("control message shorter than its header")
	ErrBadMagic = errors.New("not an agentfs control message (bad magic)")
	ErrOverrun  = errors.New("control message length exceeds its buffer")
)

// ParseHeader reads the header at the start of b and checks that its
// payload fits in b. It does not check the version: the caller decides
// what to do with a version it does not speak.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrShort
	}
	le := binary.LittleEndian
	h := Header{
		Magic:   le.Uint32(b[0:]),
		Version: le.Uint16(b[4:]),
		Op:      Op(le.Uint16(b[6:])),
		Errno:   le.Uint32(b[8:]),
		Token:   le.Uint32(b[12:]),
		Offset:  le.Uint32(b[16:]),
		Total:   le.Uint32(b[20:]),
		Length:  le.Uint32(b[24:]),
	}
	if h.Magic != Magic {
		return h, ErrBadMagic
	}
	if uint64(h.Length) > uint64(len(b)-HeaderSize) {
		return h, ErrOverrun
	}
	return h, nil
}

// ErrorReply is the payload of a response whose errno is not 0.
type ErrorReply struct {
	Error string `json:"error"`
}

// Error is an error the daemon reported: an errno and a message meant
// for the user.
type Error struct {
	Op    Op
	Errno syscall.Errno
	Msg   string
}

func (e *Error) Error() string {
	if e.Msg != "" {
		return e.Msg
	}
	return fmt.Sprintf("%s: %v", e.Op, e.Errno)
}

// Unwrap lets callers test the errno with errors.Is.
func (e *Error) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// Errorf makes an error that reaches the client with errno and the
// formatted message. Operations use it for errors the user must see
// with a particular errno (ENOENT for an unknown snapshot, ...).
func Errorf(errno syscall.Errno, format string, a ...any) error {
	return &Error{Errno: errno, Msg: fmt.Sprintf(format, a...)}
}
