package fs

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/procfs"
)

// Branch views and process bindings.
//
// A mount serves one view per branch in use. Unbound processes see the
// default view (the branch the mount shows); a process bound to a branch
// (Bind), and every descendant of it, sees that branch's view: the
// nearest bound ancestor wins. Only the requests that name the mount
// root (node id 1) depend on the caller; every other node id belongs to
// exactly one view, so the kernel's caches of it are right for every
// process that reaches it.
//
// While no process is bound, root lookups are cached like any other
// (nothing depends on the caller). While one is, root entries and the
// root's attributes are given zero lifetimes, so that the kernel asks
// again at every path walk through the root, with the walking process
// as the caller. Going from one mode to the other drops what the kernel
// cached at the root (activate).
//
// A binding ends when its process exits (a pidfd tells) or with Unbind;
// the process's start time is kept with it and checked at each
// resolution, so a reused pid never inherits a binding.

// viewState is one view as the server serves it.
type viewState struct {
	view *overlay.FS
	root *inode // the view's root: what node id 1 is for its processes
	// tag sets the view's listings of the root apart: the high half of
	// their offsets (see Server.listing); nonzero, unique per server.
	tag uint64
	// retired views belong to deleted branches: every request on their
	// nodes, and at the root for their processes, fails with ENOENT.
	retired atomic.Bool
}

// binding ties a process (a thread group) to a view.
type binding struct {
	pid   uint32
	start uint64 // the process's start time (/proc/PID/stat field 22)
	vs    *viewState
	pidfd int // readable when the process exits; -1 when unavailable
	// namespaced: the process sees its branch through a mount of its
	// own (a branch mount bound over the mountpoint in its mount
	// namespace), not through this mount's root: it does not make the
	// root depend on the caller.
	namespaced bool
}

// resolved is a cached answer of resolve for one thread.
type resolved struct {
	start uint64
	gen   uint64
	vs    *viewState // nil: unbound
	pid   uint32     // the bound ancestor
}

// maxResolved bounds the resolution cache; it is emptied when full.
const maxResolved = 1 << 16

// rootSettle is how long after a change of mode at the root the server
// drops the kernel's root entries a second time: a lookup reply computed
// before the change may reach the kernel after the first drop.
const rootSettle = 100 * time.Millisecond

// binder holds the views and bindings of a server.
//
// Lock order: binder.mu → binder.cacheMu; rootMu is taken alone.
type binder struct {
	s *Server

	def    atomic.Pointer[viewState]
	active atomic.Bool   // some process is bound through the root (not namespaced)
	any    atomic.Bool   // some process is bound at all
	gen    atomic.Uint64 // bumped by every change of bindings or views
	// unbound is called (in a goroutine of its own) when a binding ends.
	unbound func(Binding)

	mu       sync.Mutex
	views    map[*overlay.FS]*viewState
	bindings map[uint32]*binding // by pid (thread group id)
	epfd     int                 // epoll over the bindings' pidfds; -1 when unavailable or closed
	stopfd   int                 // eventfd in epfd's set: written by close to end watchExits
	tags     uint64              // the last viewState.tag given

	cacheMu sync.Mutex
	cache   map[uint32]resolved // by thread id

	// rootMu is held shared by root lookups while they compute their
	// reply's lifetime, exclusively by a change of mode (see activate).
	rootMu sync.RWMutex
}

func newBinder(s *Server, def *overlay.FS) *binder {
	b := &binder{s: s, views: map[*overlay.FS]*viewState{}, bindings: map[uint32]*binding{}, cache: map[uint32]resolved{}, epfd: -1, stopfd: -1}
	b.def.Store(b.addViewLocked(def))
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	stopfd := -1
	if err == nil {
		if stopfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err == nil {
			// Fd 0: no bound process has pid 0.
			err = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, stopfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: stopTag})
		}
	}
	if err != nil {
		s.log.Warn("bindings will end only with unbind: epoll unavailable", "err", err)
		if epfd >= 0 {
			unix.Close(epfd)
		}
		if stopfd >= 0 {
			unix.Close(stopfd)
		}
		return b
	}
	b.epfd, b.stopfd = epfd, stopfd
	go b.watchExits(epfd, stopfd)
	return b
}

// addViewLocked returns the state of view v, made on first use.
func (b *binder) addViewLocked(v *overlay.FS) *viewState {
	vs := b.views[v]
	if vs == nil {
		b.tags++
		vs = &viewState{view: v, root: &inode{n: v.Root()}, tag: b.tags}
		vs.root.vs = vs
		b.views[v] = vs
	}
	return vs
}

// view returns the state of view v (made on first use, when its root
// directory starts being watched for outside edits).
func (b *binder) view(v *overlay.FS) *viewState {
	b.mu.Lock()
	vs, known := b.views[v]
	if !known {
		vs = b.addViewLocked(v)
	}
	b.mu.Unlock()
	if !known {
		b.s.watch.add(v.Root().ID, v.Root())
	}
	return vs
}

// caller returns the view whose root the request's caller sees.
func (b *binder) caller(h *fuse.InHeader) *viewState {
	if !b.active.Load() {
		return b.def.Load()
	}
	if vs, _ := b.resolve(h.Pid); vs != nil {
		return vs
	}
	return b.def.Load()
}

// resolve returns the view process (or thread) tid is bound to through
// its nearest bound ancestor, and that ancestor's pid; nil when it is
// not bound.
func (b *binder) resolve(tid uint32) (*viewState, uint32) {
	if !b.any.Load() || tid == 0 {
		return nil, 0
	}
	st, err := procfs.ReadStat(int(tid))
	if err != nil {
		return nil, 0
	}
	gen := b.gen.Load()
	b.cacheMu.Lock()
	c, ok := b.cache[tid]
	b.cacheMu.Unlock()
	if ok && c.start == st.Start && c.gen == gen {
		return c.vs, c.pid
	}
	vs, pid := b.walk(tid, st)
	b.cacheMu.Lock()
	if len(b.cache) >= maxResolved {
		clear(b.cache)
	}
	b.cache[tid] = resolved{start: st.Start, gen: gen, vs: vs, pid: pid}
	b.cacheMu.Unlock()
	return vs, pid
}

// walk finds the nearest bound ancestor of thread tid (whose stat is st),
// starting with its own thread group.
func (b *binder) walk(tid uint32, st procfs.Stat) (*viewState, uint32) {
	pid, start := tid, st.Start
	if tgid, ok := threadGroup(tid); ok && tgid != tid {
		pid = tgid
		lst, err := procfs.ReadStat(int(pid))
		if err != nil {
			return nil, 0
		}
		start = lst.Start
	}
	next := uint32(st.Ppid)
	for range 4096 { // a bound on the depth of the process tree
		b.mu.Lock()
		bd := b.bindings[pid]
		b.mu.Unlock()
		if bd != nil && bd.start == start {
			return bd.vs, pid
		}
		if next <= 1 {
			return nil, 0
		}
		pst, err := procfs.ReadStat(int(next))
		if err != nil {
			return nil, 0
		}
		pid, start, next = next, pst.Start, uint32(pst.Ppid)
	}
	return nil, 0
}

// threadGroup returns the thread group (process) of thread tid, from
// /proc/TID/status.
func threadGroup(tid uint32) (uint32, bool) {
	v, err := procfs.Status(int(tid), "Tgid")
	if err != nil {
		return 0, false
	}
	ids, err := procfs.ParseIDs(v[0])
	if err != nil || len(ids) != 1 {
		return 0, false
	}
	return ids[0], true
}

// Errors of Bind.
var (
	ErrNoProcess = errors.New("no such process")
)

// bind binds process pid to view v, replacing an earlier binding of it.
func (b *binder) bind(pid uint32, v *overlay.FS, namespaced bool) error {
	st, err := procfs.ReadStat(int(pid))
	if err != nil {
		return fmt.Errorf("process %d: %w", pid, ErrNoProcess)
	}
	pidfd := -1
	b.mu.Lock()
	watched := b.epfd >= 0
	b.mu.Unlock()
	if watched {
		if fd, err := unix.PidfdOpen(int(pid), 0); err == nil {
			pidfd = fd
		}
	}
	// The pid may have been reused between the two reads.
	if st2, err := procfs.ReadStat(int(pid)); err != nil || st2.Start != st.Start {
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		return fmt.Errorf("process %d: %w", pid, ErrNoProcess)
	}
	vs := b.view(v)
	b.mu.Lock()
	old := b.bindings[pid]
	bd := &binding{pid: pid, start: st.Start, vs: vs, pidfd: pidfd, namespaced: namespaced}
	b.bindings[pid] = bd
	if pidfd >= 0 && b.epfd >= 0 {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(pid)}
		if err := unix.EpollCtl(b.epfd, unix.EPOLL_CTL_ADD, pidfd, &ev); err != nil {
			b.s.log.Warn("watching a bound process for its exit", "pid", pid, "err", err)
		}
	}
	if old != nil {
		b.dropLocked(old)
	}
	wasActive := b.active.Load()
	b.countLocked()
	b.gen.Add(1)
	b.mu.Unlock()
	if !wasActive && b.active.Load() {
		b.rootChanged()
	}
	if old != nil {
		b.ended(old)
	}
	return nil
}

// countLocked sets active and any from the bindings. b.mu is held.
func (b *binder) countLocked() {
	root := false
	for _, bd := range b.bindings {
		root = root || !bd.namespaced
	}
	b.active.Store(root)
	b.any.Store(len(b.bindings) > 0)
}

// ended tells the owner that binding bd is over.
func (b *binder) ended(bd *binding) {
	b.mu.Lock()
	f := b.unbound
	b.mu.Unlock()
	if f != nil {
		go f(Binding{Pid: int(bd.pid), View: bd.vs.view, Namespaced: bd.namespaced})
	}
}

// unbind ends the binding of pid; it reports whether there was one.
func (b *binder) unbind(pid uint32) bool {
	b.mu.Lock()
	bd := b.bindings[pid]
	if bd == nil {
		b.mu.Unlock()
		return false
	}
	delete(b.bindings, pid)
	b.dropLocked(bd)
	wasActive := b.active.Load()
	b.countLocked()
	b.gen.Add(1)
	b.mu.Unlock()
	if wasActive && !b.active.Load() {
		b.rootChanged()
	}
	b.ended(bd)
	return true
}

// dropLocked releases what binding bd holds (its pidfd).
func (b *binder) dropLocked(bd *binding) {
	if bd.pidfd >= 0 {
		if b.epfd >= 0 {
			// Its error is of no account: closing the pidfd takes it
			// out of the set all the same.
			_ = unix.EpollCtl(b.epfd, unix.EPOLL_CTL_DEL, bd.pidfd, nil)
		}
		unix.Close(bd.pidfd)
		bd.pidfd = -1
	}
}

// stopTag marks the stop eventfd's events in the epoll set.
const stopTag = 0

// watchExits ends the bindings of processes that exit, until close
// writes stopfd; it owns epfd and stopfd (close only marks them gone)
// and closes them when it returns.
func (b *binder) watchExits(epfd, stopfd int) {
	defer unix.Close(stopfd)
	defer unix.Close(epfd)
	evs := make([]unix.EpollEvent, 16)
	for {
		n, err := unix.EpollWait(epfd, evs, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			b.s.log.Warn("bindings will end only with unbind from now on", "err", err)
			return
		}
		for _, ev := range evs[:n] {
			if ev.Fd == stopTag {
				return
			}
			pid := uint32(ev.Fd)
			b.mu.Lock()
			bd := b.bindings[pid]
			alive := bd != nil && bd.pidfd >= 0 && pidfdAlive(bd.pidfd)
			b.mu.Unlock()
			if bd != nil && !alive {
				b.s.log.Debug("bound process exited: binding ended", "pid", pid)
				b.unbindIf(bd)
			}
		}
	}
}

// unbindIf ends binding bd if it is still in force.
func (b *binder) unbindIf(bd *binding) {
	b.mu.Lock()
	cur := b.bindings[bd.pid]
	b.mu.Unlock()
	if cur == bd {
		b.unbind(bd.pid)
	}
}

// pidfdAlive reports whether the process of pidfd has not exited.
func pidfdAlive(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// close stops the exit watcher, which closes the epoll set.
func (b *binder) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, bd := range b.bindings {
		b.dropLocked(bd)
	}
	if b.epfd >= 0 {
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		if _, err := unix.Write(b.stopfd, one); err != nil {
			// Cannot happen (an eventfd's counter far from full): the
			// watcher would go on, with epfd and stopfd open.
			b.s.log.Warn("stopping the exit watcher", "err", err)
		}
		b.epfd, b.stopfd = -1, -1
	}
}

// rootChanged drops what the kernel cached at the root after the mode
// changed (bindings began or ended) or the default view changed: every
// name of the root that the kernel may hold, with the root's attributes.
// A root lookup that computed its reply's lifetime before the change may
// land after the first drop, so the names are dropped a second time once
// those replies had time to arrive.
func (b *binder) rootChanged() {
	// A barrier, not a critical section: it waits out the root
	// lookups that hold rootMu shared (lookup.go).
	b.rootMu.Lock()
	b.rootMu.Unlock() //nolint:staticcheck // SA2001: deliberate barrier; no root lookup computes with the old mode any more
	b.s.dropRoot()
	time.AfterFunc(rootSettle, b.s.dropRoot)
}

// rootTimeout is the entry lifetime of a name in the root.
func (b *binder) rootTimeout() time.Duration {
	if b.active.Load() {
		return 0
	}
	return entryTimeout
}

// Binding is a process bound to a view.
type Binding struct {
	Pid  int
	View *overlay.FS
	// Namespaced: it sees the view through a branch mount in its own
	// mount namespace (BindNamespaced).
	Namespaced bool
}

// Bind binds process pid (a thread group) and its descendants to view
// v: from now on they see v at the mount root. An earlier binding of pid
// is replaced. It fails with ErrNoProcess when pid does not exist.
// Permission checks are the caller's.
func (s *Server) Bind(pid int, v *overlay.FS) error {
	return s.views.bind(uint32(pid), v, false)
}

// BindNamespaced records that process pid and its descendants see view
// v through a mount of their own (a branch mount over the mountpoint in
// their mount namespace): Resolve answers v for them, and the root's
// answers stay independent of the caller.
func (s *Server) BindNamespaced(pid int, v *overlay.FS) error {
	return s.views.bind(uint32(pid), v, true)
}

// OnUnbind sets f to be called, in a goroutine of its own, whenever a
// binding ends (Unbind, the process's exit, a new binding of its pid).
func (s *Server) OnUnbind(f func(Binding)) {
	s.views.mu.Lock()
	s.views.unbound = f
	s.views.mu.Unlock()
}

// Unbind ends the binding of process pid; it reports whether there was
// one.
func (s *Server) Unbind(pid int) bool { return s.views.unbind(uint32(pid)) }

// Resolve returns the view that process (or thread) pid sees at the
// mount root, and the pid of the bound ancestor that decided it (0 when
// no process of its ancestry is bound: the default view).
func (s *Server) Resolve(pid uint32) (*overlay.FS, int) {
	if vs, bound := s.views.resolve(pid); vs != nil {
		return vs.view, int(bound)
	}
	return s.views.def.Load().view, 0
}

// Bindings lists the bindings in force, by pid.
func (s *Server) Bindings() []Binding {
	s.views.mu.Lock()
	defer s.views.mu.Unlock()
	out := make([]Binding, 0, len(s.views.bindings))
	for _, bd := range s.views.bindings {
		out = append(out, Binding{Pid: int(bd.pid), View: bd.vs.view, Namespaced: bd.namespaced})
	}
	slices.SortFunc(out, func(a, b Binding) int { return a.Pid - b.Pid })
	return out
}

// SetDefault makes v the view of unbound processes (a branch switch).
// Processes inside the old default view's directories keep them, as
// after a chroot; paths from the root show v.
func (s *Server) SetDefault(v *overlay.FS) {
	vs := s.views.view(v)
	if s.views.def.Swap(vs) == vs {
		return
	}
	s.views.gen.Add(1)
	s.views.rootChanged()
}

// Retire cuts view v off (its branch was deleted): requests on its nodes
// and at the root of processes still bound to it fail with ENOENT from
// now on (files open already stay readable and writable: the process
// keeps what it had, never another branch's data), and what the kernel
// cached of its nodes is dropped. v must not be the default view.
func (s *Server) Retire(v *overlay.FS) {
	s.views.mu.Lock()
	vs := s.views.views[v]
	s.views.mu.Unlock()
	if vs == nil || vs.retired.Swap(true) {
		return
	}
	s.views.gen.Add(1)
	s.mu.Lock()
	var ids []uint64
	for id, ino := range s.nodes {
		if ino.vs == vs {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.dropInode(id)
	}
	s.dropRoot()
}
