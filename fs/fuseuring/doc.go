// Package fuseuring serves FUSE requests over io_uring (Linux 6.14 and
// later, with the fuse module's enable_uring parameter on) instead of
// read(2) and write(2) on /dev/fuse.
//
// Why: over /dev/fuse, the kernel queues a request and wakes whichever
// daemon thread reads next, usually on another CPU; on a virtual machine
// that wakeup alone costs several times the work of a small request.
// Over io_uring the kernel keeps one queue per CPU and puts a request on
// the queue of the CPU that made it. This package serves each queue with
// one OS thread pinned to that CPU, so a LOOKUP or GETATTR is answered
// on the CPU where the caller sleeps, by a thread that wakes there. The
// thread is SCHED_BATCH, so that a request the caller does not wait for
// (RELEASE) does not preempt it (batchPolicy). A caller that does not
// wait is also one that reads ahead: while a thread serves bulk data
// (READ replies, WRITE data) it moves to the other CPUs, and it hands
// each bulk reply to the kernel at once (queue.place).
//
// What it owns: the rings (one per queue, made and used by the queue's
// thread only: IORING_SETUP_SINGLE_ISSUER), the entries' buffers (a
// header area and a payload of the connection's largest request each,
// in memory the Go collector neither moves nor frees), and the queue
// threads. It knows the FUSE wire format only as far as the ring needs:
// the in and out headers, and the size of each operation's in struct. A
// Handler answers the requests.
//
// Requests a Handler marks as async (those that may block for long: a
// flush to disk, a copy, a control command) are served on a goroutine of
// their own, and their replies are committed by the queue's thread when
// an eventfd wakes it; the rest are answered inline, on the queue's
// thread, in the order they arrive.
//
// FORGET, INTERRUPT and notifications are not carried by the rings: the
// kernel keeps sending the first two over /dev/fuse, where go-fuse still
// reads, and notifications are written there as before. A burst of
// notifications (the names a restore expires) is written there through
// a Writer: a ring of its own, not a queue's, whose IORING_OP_WRITEs
// each carry one message, a batch of them to an io_uring_enter, where
// write(2) takes a system call each.
//
// Lifetime: Start registers every entry and returns once the kernel
// accepted them; the kernel switches the connection to the rings when
// every queue has an entry. At unmount the kernel completes every entry
// with ENOTCONN and each thread closes its ring and exits; Wait returns
// then.
//
// Locking: a queue's ring, entries and buffers belong to its thread; a
// Writer belongs to the goroutine using it.
// Only queue.mu (the list of async replies waiting to be committed) is
// shared with the goroutines serving async requests.
package fuseuring
