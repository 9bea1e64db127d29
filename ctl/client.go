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

// ErrNotMounted means no agentfs mount was found.
var ErrNotMounted = errors.New("not inside an agentfs mount (cd into one, or use -C DIR)")

// FindMount returns the root of the agentfs mount that holds dir, found
// by walking up to the first directory that has the control file, as
// git finds its repository.
func FindMount(dir string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			return "", err
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, ControlName), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			return dir, nil
		} else if err == unix.ENOTCONN {
			return "", fmt.Errorf("%s: the agentfs daemon is gone (transport endpoint is not connected): run agentfs unmount %s", dir, dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNotMounted
		}
		dir = parent
	}
}

// Client talks to the daemon of one mount.
type Client struct {
	f *os.File
}

// Dial opens the control file of the mount rooted at root.
func Dial(root string) (*Client, error) {
	f, err := os.OpenFile(filepath.Join(root, ControlName), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("%s is not an agentfs mount (or its daemon is gone): %w", root, err)
	}
	return &Client{f: f}, nil
}

// Close closes the control file.
func (c *Client) Close() error { return c.f.Close() }

// Do runs op with args and decodes its result into result (if not nil).
func (c *Client) Do(op string, args, result any) error {
	req := request{Op: op}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return err
		}
		req.Args = b
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if len(body) > BufSize-headerSize {
		return fmt.Errorf("control request %s is too large (%d bytes)", op, len(body))
	}
	buf := make([]byte, BufSize)
	h := header{Magic: magic, Version: Version, Length: uint32(len(body))}
	h.put(buf)
	copy(buf[headerSize:], body)
	if err := c.ioctl(buf); err != nil {
		return err
	}
	rh, err := parseHeader(buf)
	if err != nil {
		return err
	}
	full := append([]byte{}, buf[headerSize:headerSize+int(rh.Length)]...)
	for rh.Token != 0 && len(full) < int(rh.Offset) {
		clear(buf)
		h := header{Magic: magic, Version: Version, Token: rh.Token, Offset: uint32(len(full))}
		h.put(buf)
		if err := c.ioctl(buf); err != nil {
			return err
		}
		if rh, err = parseHeader(buf); err != nil {
			return err
		}
		if rh.Length == 0 {
			return errors.New("control result ended early")
		}
		full = append(full, buf[headerSize:headerSize+int(rh.Length)]...)
	}
	var rep reply
	if err := json.Unmarshal(full, &rep); err != nil {
		return fmt.Errorf("bad control reply: %w", err)
	}
	if rep.Error != "" {
		return &Error{Msg: rep.Error, Errno: syscall.Errno(rep.Errno)}
	}
	if result != nil && rep.Result != nil {
		return json.Unmarshal(rep.Result, result)
	}
	return nil
}

func (c *Client) ioctl(buf []byte) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, c.f.Fd(), uintptr(Cmd), uintptr(unsafe.Pointer(&buf[0])))
	if e == unix.EPERM {
		return fmt.Errorf("permission denied: only the mount's owner and root may use its control file: %w", e)
	}
	if e != 0 {
		return fmt.Errorf("control request: %w", e)
	}
	return nil
}
