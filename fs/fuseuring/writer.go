package fuseuring

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Writer writes messages to one descriptor through a ring of its own,
// many to a system call: each message is one IORING_OP_WRITE, as if
// written with write(2), and a batch of them is submitted with one
// io_uring_enter. It is for bursts of small messages that must each be
// one write, such as the notifications a FUSE daemon writes to
// /dev/fuse (the kernel reads one message per write): at 100,000 of
// them, the system calls are most of their cost.
//
// The kernel runs each write inline, at the submission, when the file
// says it would not block (/dev/fuse polls writable: it never waits to
// take a notification); writes to another file may go to the kernel's
// workers, still completed before Flush returns. Messages are written
// in the order given unless the kernel runs them on its workers.
//
// A Writer is used by one goroutine at a time, from any thread (its
// ring has no single issuer), and holds no lock.
type Writer struct {
	r  *ring
	fd int
	// arena holds the pending messages back to back, at offs; it is
	// never grown while a message in it is pending (the kernel reads
	// them from there).
	arena []byte
	offs  []int
	// failed is told of each message the kernel refused, with its
	// errno.
	failed func(msg []byte, err unix.Errno)
}

// writerEntries is a Writer's batch: the messages submitted by one
// io_uring_enter at most.
const writerEntries = 256

// writerArena is the size of a Writer's arena.
const writerArena = 64 << 10

// NewWriter makes a Writer of fd; failed (which may be nil) is told
// of each message the kernel refuses. It fails where io_uring is not
// available (kernel.io_uring_disabled, a seccomp filter, a kernel
// before 5.6).
func NewWriter(fd int, failed func(msg []byte, err unix.Errno)) (*Writer, error) {
	r, err := makeRing(writerEntries, setupSQE128)
	if err != nil {
		return nil, err
	}
	return &Writer{r: r, fd: fd, arena: make([]byte, 0, writerArena), offs: make([]int, 0, writerEntries), failed: failed}, nil
}

// Write queues msg (copied: the caller may reuse it), submitting the
// queue first when it is full.
func (w *Writer) Write(msg []byte) error {
	if len(w.offs) == writerEntries || len(w.arena)+len(msg) > cap(w.arena) {
		if err := w.Flush(); err != nil {
			return err
		}
		if len(msg) > cap(w.arena) {
			w.arena = make([]byte, 0, len(msg))
		}
	}
	s := w.r.sqe()
	if s == nil {
		return fmt.Errorf("io_uring: submission queue full with %d of %d messages queued", len(w.offs), writerEntries)
	}
	off := len(w.arena)
	w.arena = append(w.arena, msg...)
	w.offs = append(w.offs, off)
	s[sqeOffOpcode] = opWrite
	put32(s, sqeOffFd, uint32(w.fd))
	put64(s, sqeOffOff, 0) // /dev/fuse and pipes have no position
	put64(s, sqeOffAddr, uint64(uintptr(unsafe.Pointer(&w.arena[off]))))
	put32(s, sqeOffLen, uint32(len(msg)))
	put64(s, sqeOffUserData, uint64(len(w.offs)-1))
	return nil
}

// Flush submits the messages queued and returns once the kernel wrote
// (or refused) each of them. Its error is the ring's: a message the
// kernel refused goes to failed.
func (w *Writer) Flush() error {
	for done := 0; done < len(w.offs); {
		want := uint32(len(w.offs) - done)
		if err := w.r.submitWait(want); err != nil {
			return err
		}
		w.r.reap(func(ud uint64, res int32) {
			done++
			i := int(ud)
			if i >= len(w.offs) {
				return
			}
			end := len(w.arena)
			if i+1 < len(w.offs) {
				end = w.offs[i+1]
			}
			msg := w.arena[w.offs[i]:end]
			switch {
			case res < 0 && w.failed != nil:
				w.failed(msg, unix.Errno(-res))
			case res >= 0 && int(res) != len(msg) && w.failed != nil:
				w.failed(msg, unix.EIO) // a short write: cannot be, on /dev/fuse
			}
		})
	}
	w.arena, w.offs = w.arena[:0], w.offs[:0]
	return nil
}

// Close releases the ring (not fd): messages queued and not flushed
// are dropped.
func (w *Writer) Close() { w.r.close() }
