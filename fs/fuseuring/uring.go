package fuseuring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The io_uring ABI this package uses (include/uapi/linux/io_uring.h):
// a ring of 128-byte submission entries (IORING_SETUP_SQE128: a FUSE
// command does not fit a 64-byte one), owned by one thread
// (SINGLE_ISSUER) that also runs the completion work
// (DEFER_TASKRUN).
const (
	sysIOURingSetup = 425
	sysIOURingEnter = 426

	setupSQE128        = 1 << 10
	setupSingleIssuer  = 1 << 12
	setupDeferTaskrun  = 1 << 13
	featSingleMmap     = 1 << 0
	enterGetEvents     = 1 << 0
	offSQRing          = 0
	offSQEs            = 0x10000000
	opRead             = 22
	opWrite            = 23
	opURingCmd         = 46
	sqeSize            = 128
	cqeSize            = 16
	sqeOffOpcode       = 0
	sqeOffFd           = 4
	sqeOffCmdOp        = 8 // URING_CMD: cmd_op shares the offset of off
	sqeOffOff          = 8
	sqeOffAddr         = 16
	sqeOffLen          = 24
	sqeOffUserData     = 32
	sqeOffCmd          = 48
	cqeOffUserData     = 0
	cqeOffRes          = 8
	ioringParamsLength = 120
)

type sqOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqOffsets
	cqOff                                                                  cqOffsets
}

// ring is one io_uring instance. It is used by the thread that made it
// only (SINGLE_ISSUER), so nothing here is locked.
type ring struct {
	fd      int
	mem     []byte // SQ and CQ rings, one mapping (FEAT_SINGLE_MMAP)
	sqes    []byte
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqLen   uint32
	sqArray []uint32
	tail    uint32 // the SQ tail as filled, published at enter
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    []byte
}

// newRing makes a ring for a queue: used by one thread only, which also
// runs the completion work.
func newRing(entries uint32) (*ring, error) {
	return makeRing(entries, setupSQE128|setupSingleIssuer|setupDeferTaskrun)
}

// makeRing makes a ring with setup flags, which hold setupSQE128.
func makeRing(entries, flags uint32) (*ring, error) {
	var p params
	p.flags = flags
	if unsafe.Sizeof(p) != ioringParamsLength {
		panic("io_uring_params layout")
	}
	fd, _, e := unix.Syscall(sysIOURingSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	r := &ring{fd: int(fd)}
	if p.features&featSingleMmap == 0 {
		r.close()
		return nil, fmt.Errorf("io_uring: kernel lacks IORING_FEAT_SINGLE_MMAP")
	}
	size := max(int(p.sqOff.array)+int(p.sqEntries)*4, int(p.cqOff.cqes)+int(p.cqEntries)*cqeSize)
	mem, err := unix.Mmap(r.fd, offSQRing, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring mmap: %w", err)
	}
	r.mem = mem
	sqes, err := unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring mmap: %w", err)
	}
	r.sqes = sqes
	u32 := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	r.sqHead, r.sqTail = u32(p.sqOff.head), u32(p.sqOff.tail)
	r.sqMask, r.sqLen = *u32(p.sqOff.ringMask), *u32(p.sqOff.ringEntries)
	r.sqArray = unsafe.Slice(u32(p.sqOff.array), p.sqEntries)
	r.tail = *r.sqTail
	r.cqHead, r.cqTail = u32(p.cqOff.head), u32(p.cqOff.tail)
	r.cqMask = *u32(p.cqOff.ringMask)
	r.cqes = mem[p.cqOff.cqes : p.cqOff.cqes+p.cqEntries*cqeSize]
	return r, nil
}

func (r *ring) close() {
	// Mappings Mmap made: only a bad address or length fails.
	if r.sqes != nil {
		_ = unix.Munmap(r.sqes)
	}
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
	}
	unix.Close(r.fd)
}

// sqe returns the next free submission entry, zeroed, or nil when the
// submission queue is full (submit first).
func (r *ring) sqe() []byte {
	if r.tail-atomic.LoadUint32(r.sqHead) >= r.sqLen {
		return nil
	}
	i := r.tail & r.sqMask
	s := r.sqes[i*sqeSize : (i+1)*sqeSize]
	clear(s)
	r.sqArray[i] = i
	r.tail++
	return s
}

// pending is the number of entries filled but not yet submitted.
func (r *ring) pending() uint32 { return r.tail - atomic.LoadUint32(r.sqHead) }

// enter submits what was filled and, with wait, sleeps until at least
// one completion is there.
func (r *ring) enter(wait bool) error {
	if wait {
		return r.submit(1, enterGetEvents)
	}
	return r.submit(0, 0)
}

// submitWait submits what was filled and sleeps until want
// completions are there (fewer when the completion queue is full).
func (r *ring) submitWait(want uint32) error { return r.submit(want, enterGetEvents) }

// submit is io_uring_enter for what was filled, with min_complete want
// and flags.
func (r *ring) submit(want uint32, flags uintptr) error {
	atomic.StoreUint32(r.sqTail, r.tail)
	for {
		_, _, e := unix.Syscall6(sysIOURingEnter, uintptr(r.fd), uintptr(r.pending()), uintptr(want), flags, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			if r.pending() == 0 && r.ready() >= want {
				return nil
			}
			continue
		case unix.EBUSY, unix.EAGAIN:
			// The completion queue is full: the caller reaps first.
			if r.ready() > 0 {
				return nil
			}
			continue
		}
		return fmt.Errorf("io_uring_enter: %w", e)
	}
}

// ready is the number of completions waiting.
func (r *ring) ready() uint32 { return atomic.LoadUint32(r.cqTail) - *r.cqHead }

// reap calls f for every completion waiting and releases them.
func (r *ring) reap(f func(userData uint64, res int32)) {
	head := *r.cqHead
	for tail := atomic.LoadUint32(r.cqTail); head != tail; head++ {
		c := r.cqes[(head&r.cqMask)*cqeSize:]
		ud := *(*uint64)(unsafe.Pointer(&c[cqeOffUserData]))
		res := *(*int32)(unsafe.Pointer(&c[cqeOffRes]))
		atomic.StoreUint32(r.cqHead, head+1)
		f(ud, res)
	}
}

func put32(b []byte, off int, v uint32) { *(*uint32)(unsafe.Pointer(&b[off])) = v }
func put64(b []byte, off int, v uint64) { *(*uint64)(unsafe.Pointer(&b[off])) = v }
