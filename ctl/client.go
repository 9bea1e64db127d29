package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DaemonGone reports whether err means the daemon of a FUSE mount is
// gone. The kernel answers ENOTCONN once it has aborted the connection,
// and ECONNABORTED to a request that was queued for, or read by, the
// daemon before the abort: after kill -9 the abort waits for the last
// reference to /dev/fuse, which io_uring drops asynchronously. A
// request already handed to an io_uring queue whose thread died before
// taking it ends with ECANCELED (the daemon itself never answers that).
func DaemonGone(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ECANCELED)
}

// ErrNotMounted means FindMount found no agentfs mount.
var ErrNotMounted = errors.New("not inside an agentfs mount (use -C DIR)")

// FindMount returns the root of the agentfs mount that holds dir (the
// current directory when dir is ""), found by walking up to the first
// directory that has the control file, as git finds its repository.
// The control file is hidden from readdir but answers lookups.
func FindMount(dir string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			if DaemonGone(err) {
				return "", fmt.Errorf("the current directory is in an agentfs mount whose daemon is gone (%w): cd out and run agentfs unmount MOUNTPOINT", err)
			}
			return "", fmt.Errorf("finding the mount: %w", err)
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("finding the mount: %w", err)
	}
	for {
		var st unix.Stat_t
		err := unix.Lstat(filepath.Join(dir, ControlName), &st)
		switch {
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG:
			return dir, nil
		case DaemonGone(err):
			return "", fmt.Errorf("%s is in an agentfs mount whose daemon is gone (%w): run agentfs unmount on its mountpoint", dir, err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNotMounted
		}
		dir = parent
	}
}

// Client talks to the daemon of one mount over its control file.
type Client struct {
	root string
	f    *os.File
	// ioctl issues one control ioctl on buf (BufSize bytes, request in,
	// response out); tests replace it to talk to a Server directly.
	ioctl func(buf []byte) error
	// closeFn, for a local client, releases what serves it.
	closeFn func() error
}

// NewLocalClient returns a client whose requests h serves in this
// process, as if caller c had issued them on a control file: for a
// store opened without a mount (an ended session), so that every
// operation runs the same code as through a daemon. name stands for
// the mount root in messages; closeFn (may be nil) runs at Close.
func NewLocalClient(name string, h Handler, c Caller, closeFn func() error) *Client {
	cl := &Client{root: name, closeFn: closeFn}
	cl.ioctl = func(buf []byte) error {
		if len(buf) != BufSize {
			return fmt.Errorf("control buffer has %d bytes, want %d", len(buf), BufSize)
		}
		// As the kernel does: the handler reads the request and writes
		// its answer in buffers of its own; what it answered is copied
		// back.
		in := append([]byte(nil), buf...)
		out := make([]byte, len(buf))
		n, errno := h.HandleIoctl(c, Cmd, in, out)
		if errno != 0 {
			return fmt.Errorf("control request to %s: %w", name, errno)
		}
		clear(buf)
		copy(buf, out[:n])
		return nil
	}
	return cl
}

// Dial opens the control file of the mount rooted at root (see
// FindMount).
func Dial(root string) (*Client, error) {
	f, err := os.OpenFile(filepath.Join(root, ControlName), os.O_RDONLY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%s is not an agentfs mount (it has no %s)", root, ControlName)
	case DaemonGone(err):
		return nil, fmt.Errorf("the agentfs daemon of %s is gone: run agentfs unmount %s: %w", root, root, err)
	case errors.Is(err, os.ErrPermission):
		return nil, fmt.Errorf("permission denied: only the owner of the mount %s and root may control it: %w", root, err)
	case err != nil:
		return nil, fmt.Errorf("opening the control file of %s: %w", root, err)
	}
	c := &Client{root: root, f: f}
	c.ioctl = c.fileIoctl
	return c, nil
}

// Root is the mount root the client talks to.
func (c *Client) Root() string { return c.root }

// Close closes the control file (for a local client: releases what
// serves it).
func (c *Client) Close() error {
	if c.closeFn != nil {
		fn := c.closeFn
		c.closeFn = nil
		return fn()
	}
	if c.f == nil {
		return nil
	}
	return c.f.Close()
}

// Do runs op with args (nil for none) and decodes its result into result
// (nil to ignore it). An error the daemon reports is an *Error with its
// errno and message.
func (c *Client) Do(op Op, args, result any) error {
	var payload []byte
	if args != nil {
		var err error
		if payload, err = json.Marshal(args); err != nil {
			return fmt.Errorf("control request %s: %w", op, err)
		}
	}
	if len(payload) > MaxPayload {
		return fmt.Errorf("control request %s is too large (%d bytes, at most %d)", op, len(payload), MaxPayload)
	}
	buf := make([]byte, BufSize)
	h := Header{Magic: Magic, Version: Version, Op: op, Length: uint32(len(payload))}
	h.Put(buf)
	copy(buf[HeaderSize:], payload)
	rh, data, err := c.roundTrip(op, buf)
	if err != nil {
		return err
	}
	full := make([]byte, 0, rh.Total)
	full = append(full, data...)
	for rh.Token != 0 {
		clear(buf)
		h := Header{Magic: Magic, Version: Version, Op: OpFetch, Token: rh.Token, Offset: uint32(len(full))}
		h.Put(buf)
		if rh, data, err = c.roundTrip(op, buf); err != nil {
			return err
		}
		if int(rh.Offset) != len(full) || len(data) == 0 && rh.Token != 0 {
			return fmt.Errorf("control reply to %s: chunk at offset %d, want %d", op, rh.Offset, len(full))
		}
		full = append(full, data...)
	}
	if len(full) != int(rh.Total) {
		return fmt.Errorf("control reply to %s: got %d of %d bytes", op, len(full), rh.Total)
	}
	if rh.Errno != 0 {
		var er ErrorReply
		if err := json.Unmarshal(full, &er); err != nil || er.Error == "" {
			er.Error = fmt.Sprintf("%s: %v", op, syscall.Errno(rh.Errno))
		}
		return &Error{Op: op, Errno: syscall.Errno(rh.Errno), Msg: er.Error}
	}
	if result != nil {
		if err := json.Unmarshal(full, result); err != nil {
			return fmt.Errorf("control reply to %s: %w", op, err)
		}
	}
	return nil
}

// roundTrip sends buf and parses the response in it.
func (c *Client) roundTrip(op Op, buf []byte) (Header, []byte, error) {
	if err := c.ioctl(buf); err != nil {
		return Header{}, nil, err
	}
	rh, err := ParseHeader(buf)
	if err != nil {
		return rh, nil, fmt.Errorf("control reply to %s: %w", op, err)
	}
	if rh.Version != Version && rh.Errno == 0 {
		return rh, nil, fmt.Errorf("control reply to %s: the daemon speaks protocol version %d, this agentfs version %d: use the agentfs binary that mounted it", op, rh.Version, Version)
	}
	return rh, buf[HeaderSize : HeaderSize+int(rh.Length)], nil
}

// fileIoctl issues the control ioctl on the open control file.
func (c *Client) fileIoctl(buf []byte) error {
	if len(buf) != BufSize {
		return fmt.Errorf("control buffer has %d bytes, want %d", len(buf), BufSize)
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, c.f.Fd(), uintptr(Cmd), uintptr(unsafe.Pointer(&buf[0])))
	switch e {
	case 0:
		return nil
	case unix.EPERM, unix.EACCES:
		return fmt.Errorf("permission denied: only the owner of the mount %s and root may control it: %w", c.root, e)
	case unix.ENOTCONN, unix.ECONNABORTED:
		return fmt.Errorf("the agentfs daemon of %s is gone: run agentfs unmount %s: %w", c.root, c.root, e)
	case unix.ENOTTY:
		return fmt.Errorf("the agentfs daemon of %s does not answer control requests: %w", c.root, e)
	}
	return fmt.Errorf("control request to %s: %w", c.root, e)
}
