package fs

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// releaseLinger is how long the releaser keeps looking for more work
// before it sleeps. Waking it costs a futex wake and, when its CPU
// idles, an interrupt to that CPU: about 3 µs of the closing program's
// time on a virtual machine, where a program that walks a tree (grep
// -r) closes a file every 10 µs or so. Measured with agentfs-bench
// (grep, small files): 10 µs was no better than a goroutine per
// RELEASE; 20 to 80 µs all did best; 150 µs began to lose again.
//
// With one CPU there is no other CPU to keep busy, and lingering only
// takes the CPU from the program that closes the files: daemon and
// program on one CPU (taskset -c 0), an open and close of a project
// file took 19–21 µs against 12 µs with a goroutine per RELEASE. So
// lingerFor gives no linger there.
const releaseLinger = 40 * time.Microsecond

// lingerFor is how long a releaser lingers where the daemon may run on
// ncpu CPUs.
func lingerFor(ncpu int) time.Duration {
	if ncpu < 2 {
		return 0
	}
	return releaseLinger
}

// releaser serves the RELEASEs that come over io_uring, in the order
// they came, on one goroutine of its own.
//
// The kernel does not wait for a RELEASE, so the ring answers it at
// once and hands the work here, off the CPU of the program that closed
// the file (ringHandler). A goroutine per RELEASE did the same, but
// making one and waking a thread for it cost the closing program more
// than the release itself. The releaser instead takes everything
// queued at each turn and, after its queue runs dry, lingers (see
// releaseLinger) before it sleeps, so that a program closing files in
// quick succession never has to wake it.
//
// The goroutine keeps one OS thread (SCHED_OTHER: when woken it should
// run at once, see settle), and lingers by yielding that thread's CPU
// (sched_yield), not the Go scheduler's. Lingering with
// runtime.Gosched, it moved from thread to thread, and the kernel ran
// those threads on the closing program's CPU as often as on the other:
// perf sched showed grep -r waiting 45 µs for a lingering releaser
// after many of its files. One thread stays on the CPU the program
// leaves free, and where it does share the program's CPU, sched_yield
// hands the CPU back whenever the program can run.
//
// A control request (a snapshot, an apply) must see the releases of the
// files closed before it: a file still counted as written is copied
// into a snapshot instead of shared, and apply leaves it as a change.
// settle serves what is queued, and waits for a turn in progress,
// before the request is served. It cannot see a RELEASE the kernel has
// queued for a queue's thread that has not run yet (fuseuring's
// batchPolicy): under load that window can last a scheduler slice, a
// few milliseconds after the close. TestSnapshotCommands, which
// snapshots right after a close, failed 2 times in 150 runs beside a
// CPU hog without settle, and 0 in 160 with it.
//
// Locking: serving takes turn, then mu: whoever takes a batch from q
// serves it before it lets turn go, so settle, holding turn, knows that
// everything pushed before it has been served. mu guards q, parked and
// closed; nothing else is taken under it. queued mirrors len(q), for
// the lingering loop to read without mu. Exactly one push (or close)
// sees parked set and wakes the goroutine.
//
// The goroutine sleeps on a futex of its own (sleeping), so that a push
// wakes its thread with one system call. A channel went through Go's
// scheduler: the send woke an idle thread of the runtime's, which found
// the goroutine locked to another thread and woke that one in turn, all
// of it charged to the queue thread that answered the RELEASE, on the
// closing program's CPU (chansend and its wakeups: 5.7% of that
// thread's time in a churn of small files).
type releaser struct {
	serve  func(*fuse.ReleaseIn)
	linger time.Duration

	turn   sync.Mutex // held while a batch is taken and served
	mu     sync.Mutex
	q      []fuse.ReleaseIn
	parked bool // the goroutine sleeps (or is about to) on sleeping
	closed bool

	queued atomic.Int32

	// side is the side job (setSide): run at the releaser's next turn
	// after kickSide set sideDue. Set once, before the first kick.
	side    func()
	sideDue atomic.Bool

	// sleeping is the futex word: 1 while the parked goroutine may
	// sleep, 0 once it was woken. Accessed atomically.
	sleeping uint32
	done     chan struct{}
}

// newReleaser starts a releaser that hands each RELEASE to serve and
// lingers for linger before it sleeps.
func newReleaser(serve func(*fuse.ReleaseIn), linger time.Duration) *releaser {
	r := &releaser{serve: serve, linger: linger, done: make(chan struct{})}
	go r.run()
	return r
}

// Futex operations (linux/futex.h).
const (
	futexWait    = 0
	futexWake    = 1
	futexPrivate = 128
)

// sleep blocks the goroutine's thread until wake.
func (r *releaser) sleep() {
	for atomic.LoadUint32(&r.sleeping) == 1 {
		// EAGAIN (woken before it slept) and EINTR both loop; nothing
		// else can fail a FUTEX_WAIT on a valid word.
		_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&r.sleeping)), futexWait|futexPrivate, 1, 0, 0, 0)
	}
}

// wake wakes the goroutine sleeping in sleep (or about to).
func (r *releaser) wake() {
	atomic.StoreUint32(&r.sleeping, 0)
	// FUTEX_WAKE of a valid word cannot fail; it returns how many woke.
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&r.sleeping)), futexWake|futexPrivate, 1, 0, 0, 0)
}

// push queues a RELEASE; it never blocks. After close it serves the
// RELEASE itself, since nothing else would.
func (r *releaser) push(in *fuse.ReleaseIn) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.serve(in)
		return
	}
	r.q = append(r.q, *in)
	r.queued.Store(int32(len(r.q)))
	wake := r.parked
	r.parked = false
	r.mu.Unlock()
	if wake {
		r.wake()
	}
}

// setSide gives the releaser a side job, which kickSide has it run:
// work the queue threads hand off their callers' path as they do
// RELEASEs (the store's commits, see branch.Store.HandOffWith). Call it
// before the first kickSide.
func (r *releaser) setSide(fn func()) {
	r.mu.Lock()
	r.side = fn
	r.mu.Unlock()
}

// kickSide has the side job run soon; it never blocks. Lingering, the
// releaser sees it at once; parked, it is woken. After close it runs
// the job itself, since nothing else would.
func (r *releaser) kickSide() {
	r.sideDue.Store(true)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		if r.sideDue.Swap(false) {
			r.side()
		}
		return
	}
	wake := r.parked
	r.parked = false
	r.mu.Unlock()
	if wake {
		r.wake()
	}
}

// settle serves the RELEASEs pushed so far, in the caller's goroutine,
// and returns once every one of them has been served.
func (r *releaser) settle() {
	if r == nil {
		return
	}
	r.turn.Lock()
	defer r.turn.Unlock()
	r.mu.Lock()
	batch := r.q
	r.q = nil
	r.queued.Store(0)
	r.mu.Unlock()
	for i := range batch {
		r.serve(&batch[i])
	}
}

// close serves what is queued and stops the goroutine; call it once no
// more pushes can come.
func (r *releaser) close() {
	r.mu.Lock()
	r.closed = true
	wake := r.parked
	r.parked = false
	r.mu.Unlock()
	if wake {
		r.wake()
	}
	<-r.done
}

// maxKeptBatch is the largest batch buffer the releaser keeps for the
// next turn (a RELEASE takes 64 bytes: 256 KiB).
const maxKeptBatch = 4096

func (r *releaser) run() {
	// The thread exits with the goroutine.
	runtime.LockOSThread()
	defer close(r.done)
	var batch []fuse.ReleaseIn
	last := time.Now()
	for {
		if r.queued.Load() == 0 && !r.sideDue.Load() && time.Since(last) < r.linger {
			_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) // always succeeds
			continue
		}
		if r.sideDue.Swap(false) {
			r.side()
			last = time.Now()
		}
		r.turn.Lock()
		r.mu.Lock()
		batch, r.q = r.q, batch[:0]
		r.queued.Store(0)
		if len(batch) > 0 {
			r.mu.Unlock()
			for i := range batch {
				r.serve(&batch[i])
			}
			r.turn.Unlock()
			if cap(batch) > maxKeptBatch {
				batch = nil // a burst is over: let its buffer go
			}
			last = time.Now()
			continue
		}
		r.turn.Unlock()
		switch {
		case r.closed:
			r.mu.Unlock()
			if r.sideDue.Swap(false) {
				r.side() // kicked before the close
			}
			return
		case time.Since(last) < r.linger || r.sideDue.Load():
			r.mu.Unlock()
		default:
			r.parked = true
			atomic.StoreUint32(&r.sleeping, 1)
			r.mu.Unlock()
			r.sleep()
			last = time.Now()
		}
	}
}
