package fuseuring

import (
	"bytes"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// TestWriterOneWriteEach: every message reaches the descriptor as one
// write of its own, whole and in order, across several batches (a
// SOCK_SEQPACKET socket keeps each write's bounds, as /dev/fuse needs).
func TestWriterOneWriteEach(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	// Room for every message in the socket, so that no write waits.
	for _, fd := range fds {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 8<<20)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	}
	var refused []unix.Errno
	w, err := NewWriter(fds[0], func(msg []byte, err unix.Errno) { refused = append(refused, err) })
	if err != nil {
		testenv.Skip(t, testenv.IOURingSysctl, "no io_uring: %v", err)
	}
	defer w.Close()
	const n = 3*writerEntries + 17 // more than one batch, the last one partial
	var want [][]byte
	for i := range n {
		msg := []byte(fmt.Sprintf("message %d %s", i, bytes.Repeat([]byte{'x'}, i%300)))
		want = append(want, msg)
		if err := w.Write(msg); err != nil {
			t.Fatalf("Write %d: %v", i, err)
		}
		msg[0] = '!' // the Writer copied it
		if i == 100 {
			if err := w.Flush(); err != nil { // a flush in the middle of a batch
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(refused) != 0 {
		t.Errorf("the kernel refused %d messages: %v", len(refused), refused)
	}
	buf := make([]byte, 4096)
	for i := range n {
		m, _, err := unix.Recvfrom(fds[1], buf, unix.MSG_DONTWAIT)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		want[i][0] = 'm'
		if !bytes.Equal(buf[:m], want[i]) {
			t.Fatalf("write %d = %q, want %q", i, buf[:m], want[i])
		}
	}
	if m, _, err := unix.Recvfrom(fds[1], buf, unix.MSG_DONTWAIT); err == nil {
		t.Errorf("a write more than the messages: %q", buf[:m])
	}
}

// TestWriterRefused: a message the kernel refuses goes to failed with
// its errno, the others are written.
func TestWriterRefused(t *testing.T) {
	var refused []string
	w, err := NewWriter(-1, func(msg []byte, err unix.Errno) {
		refused = append(refused, fmt.Sprintf("%s: %v", msg, err))
	})
	if err != nil {
		testenv.Skip(t, testenv.IOURingSysctl, "no io_uring: %v", err)
	}
	defer w.Close()
	for _, m := range []string{"a", "bb"} {
		if err := w.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a: " + unix.EBADF.Error(), "bb: " + unix.EBADF.Error()}; fmt.Sprint(refused) != fmt.Sprint(want) {
		t.Errorf("refused %q, want %q", refused, want)
	}
}
