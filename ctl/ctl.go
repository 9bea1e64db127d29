// Package ctl is the control protocol of agentfs: the request and
// response types, the ioctl numbers, the client the CLI uses and the
// server side that the fs package calls for ioctls on the control file.
//
// The control file is ControlName in the root of every agentfs mount.
// It is hidden from readdir, cannot be created, removed or renamed by
// users, and answers ioctls only from the mount owner and root.
//
// ctl knows nothing of go-fuse: fs hands it the caller and the raw
// ioctl buffers through Handler.
//
// # Protocol
//
// One ioctl command (Cmd) carries every request: a fixed header (magic,
// protocol version, operation, payload length) and JSON arguments. The
// response has a header (errno, total length, a token when more is to
// come) and JSON: the result, or an ErrorReply when errno is not 0.
// Results larger than the buffer are fetched in chunks with OpFetch.
// proto.go documents the bytes.
//
// # Operations
//
// Op numbers are grouped by area (types.go); the daemon registers one
// OpFunc per operation with Server.Handle. A daemon that does not know an
// operation answers ENOSYS with a message saying so, and a request in
// another protocol version is answered EPROTO, so that a CLI and a
// daemon of different versions fail clearly instead of misreading.
//
// # Clients
//
// The CLI finds the mount from a directory with FindMount, opens it with
// Dial and calls Client.Do. Errors the daemon reports come back as
// *Error, carrying the errno (errors.Is works) and the daemon's message.
package ctl

import "syscall"

// ControlName is the name of the control file in the mount root.
const ControlName = ".agentfs.ctl"

// Caller identifies the process that issued a control request, as the
// kernel reported it in the FUSE request header.
type Caller struct {
	Pid, Uid, Gid uint32
}

// Handler serves ioctls on the control file. in holds the ioctl's input
// bytes (its _IOC_SIZE for _IOC_WRITE commands); the reply is written to
// out (len(out) is the _IOC_SIZE for _IOC_READ commands) and its length
// returned.
type Handler interface {
	HandleIoctl(c Caller, cmd uint32, in []byte, out []byte) (int, syscall.Errno)
}
