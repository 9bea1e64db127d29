package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/fs/fuseuring"
	"github.com/agentfs/agentfs/overlay"
)

// Kernel cache lifetimes. Everything below the root is branch-qualified,
// and agentfs tells the kernel when it changes something the kernel
// cached, so the timeouts can be long.
const (
	entryTimeout = time.Hour
	attrTimeout  = time.Hour
	negTimeout   = time.Hour
)

// linkedTimeout is how long the kernel keeps a name of a file with more
// than one link on a mount with a writeback cache. There the kernel
// takes no size from agentfs for a file it knows, so a project file
// edited from outside gets a new inode (the watcher cuts its node
// loose) and only the edited name is dropped from the kernel's cache:
// inotify names one link, and the kernel's other names of the file
// would show the old inode (its old size, link count 0) for as long as
// they are cached. A second bounds that, as for every lower edit.
const linkedTimeout = time.Second

// maxRead bounds READ and WRITE requests (max_read, max_write): half of
// the default largest pipe (fs.pipe-max-size), so that a READ and its
// header fit a pipe and can be spliced.
const maxRead = 512 << 10

// readahead is the mount's readahead: how far the kernel reads ahead
// of a program reading a file sequentially, in READs of maxRead. Cold
// reads of a 1 GiB project file (agentfs-bench --only read-cold, 3 to
// 6 rounds of 5 runs, ratio to native) took 1.06–1.32× at 1 MiB, 0.96–
// 1.10× at 4 MiB, 0.95–1.07× at 8 MiB and 1.17–1.19× at 16 MiB (also
// with the disk's own readahead raised from 8 to 16 MiB).
const readahead = 8 << 20

// generation is the generation of every node id: ids are never reused.
const generation = 1

// controlID is the node id of the control file.
const controlID = 2

// Server serves one mount.
type Server struct {
	fuse.RawFileSystem
	opts  Options
	srv   *fuse.Server
	log   *slog.Logger
	views *binder
	uid   uint32 // mount owner

	// passthrough is whether backing files may be registered; it is
	// switched off for good when the kernel refuses one.
	ptMu        sync.Mutex
	passthrough bool

	// splice is whether large READs are answered by splicing (see
	// spliceRead); spliceMax is the largest such READ, which must fit a
	// pipe with the reply's header.
	splice    bool
	spliceMax int

	// barriers are the threads (ids) of WriteBack calls in progress:
	// their FSYNCs are answered at once.
	barriers sync.Map

	// writeback is whether the kernel caches writes (the writeback
	// cache; see doc.go); set by Init, before any request.
	writeback bool

	// killprivV2 is whether the kernel leaves the clearing of setid
	// bits to agentfs (killpriv.go); set by Init, before any request.
	killprivV2 bool

	// reads counts the READ requests served (files not passed
	// through); spliced, those answered by splicing; fromDisk, those
	// read from the disk with O_DIRECT (a range of a project file that
	// the lower file system did not cache).
	reads, spliced, fromDisk atomic.Uint64

	watch *lowerWatch // nil when inotify is unavailable

	// ring serves the requests over io_uring; nil when they come over
	// /dev/fuse, ringWhy then saying why. rel serves the RELEASEs the
	// ring answered at once (release.go).
	ring    *fuseuring.Server
	ringWhy string
	rel     *releaser
	askRing bool // INIT's reply asks for io_uring (set before INIT)

	// negatives are the names the kernel may cache as absent, by
	// directory node id (see Invalidate).
	negMu     sync.Mutex
	negatives map[uint64]map[string]struct{}
	negCount  int

	mu     sync.Mutex
	nodes  map[uint64]*inode
	files  map[uint64]*handle
	nextFh uint64
}

// inode is the kernel's view of one node: its I/O mode.
type inode struct {
	n  *overlay.Node
	vs *viewState // the view n belongs to

	mu        sync.Mutex
	cached    int   // open handles served through the page cache
	pt        int   // open passthrough handles
	backingID int32 // registered backing file while pt > 0

	// listing is the directory's listing that reads at offsets past 0
	// continue (see Server.listing), under lmu.
	lmu     sync.Mutex
	listing []overlay.DirEntry
}

type handle struct {
	ino   *inode
	f     *overlay.File
	pt    bool
	wrote atomic.Bool // a write was reported (activity.go)
}

// Mount mounts the view at o.Mountpoint and serves it until unmounted.
func Mount(o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		opts:          o,
		log:           o.Logger,
		uid:           uint32(os.Geteuid()),
		nodes:         map[uint64]*inode{},
		files:         map[uint64]*handle{},
		negatives:     map[uint64]map[string]struct{}{},
	}
	s.views = newBinder(s, o.View)
	mo := &fuse.MountOptions{
		AllowOther:           o.AllowOther,
		Options:              []string{"default_permissions"},
		FsName:               o.FsName,
		Name:                 "agentfs",
		DirectMount:          os.Geteuid() == 0,
		MaxWrite:             maxRead, // go-fuse makes max_read the same
		MaxReadAhead:         readahead,
		MaxBackground:        64,
		EnableSymlinkCaching: true,
		// agentfs drops cached data itself where it changes it (and
		// the lower watcher where others do): without this, the
		// kernel refetches attributes before reads and listings.
		ExplicitDataCacheControl: true,
		ExtraCapabilities:        fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2,
		Debug:                    o.Debug,
		Logger:                   log.New(debugWriter{o.Logger}, "", 0),
	}
	if o.WritebackCache {
		mo.ExtraCapabilities |= fuse.CAP_WRITEBACK_CACHE
	}
	if o.IOURing {
		if err := fuseuring.Probe(); err != nil {
			s.ringWhy = err.Error()
		} else {
			s.askRing = true
			mo.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
		}
	}
	// The watch exists before the first LOOKUP, which adds to it; it
	// only ever sends notifications about what was added.
	var err error
	if s.watch, err = startLowerWatch(s); err != nil {
		s.log.Warn("lower directory edits made from outside will show late", "err", err)
	}
	srv, err := fuse.NewServer(s, o.Mountpoint, mo)
	if err != nil {
		s.watch.close()
		return nil, err
	}
	s.srv = srv
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		s.watch.close()
		return nil, err
	}
	s.setReadahead(o.Mountpoint, mo.MaxReadAhead)
	s.watch.add(o.View.Root().ID, o.View.Root())
	return s, nil
}

// startQueues starts the io_uring queues; tests replace it to make
// queues fail.
var startQueues = fuseuring.Start

// startRing moves the connection to io_uring queues. Until every queue
// is registered the kernel keeps using /dev/fuse, and if one cannot be,
// it goes on doing so: the mount works either way, only slower.
func (s *Server) startRing(maxWrite int) {
	dev, err := fuseDevFd(s.srv)
	if err != nil {
		s.log.Warn("requests stay on /dev/fuse", "err", err)
		s.ringWhy = err.Error()
		return
	}
	s.rel = newReleaser(func(in *fuse.ReleaseIn) { s.Release(nil, in) }, lingerFor(runtime.NumCPU()))
	r, err := startQueues(dev, maxWrite, ringHandler{s}) // takes dev
	if err != nil {
		s.rel.close() // the queues are gone: no RELEASE comes this way
	}
	if errors.Is(err, fuseuring.ErrStuck) {
		s.log.Error("aborting the FUSE connection", "err", err)
		s.ringWhy = err.Error()
		if s.opts.AbortConnection != nil {
			s.opts.AbortConnection()
		}
		return
	}
	if err != nil {
		s.log.Warn("requests stay on /dev/fuse", "err", err)
		s.ringWhy = err.Error()
		return
	}
	s.ring = r
	// Each queue's thread waits for requests in io_uring_enter, a
	// system call that keeps its P until the runtime's monitor takes
	// it back, which can take milliseconds. Without a P for each of
	// them, the goroutines a request wakes (badger's writer, the pool)
	// would wait for that.
	// (Queues of CPUs that are possible but not online wait without
	// ever being woken; they need none.) The releaser keeps a P while
	// it lingers: one more.
	extra := min(r.Queues(), runtime.NumCPU())
	if s.rel.linger > 0 {
		extra++
	}
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + extra)
}

// Transport says how requests reach the daemon: "io_uring (N queues)"
// or "/dev/fuse".
func (s *Server) Transport() string {
	switch {
	case s.ring != nil:
		return fmt.Sprintf("io_uring (%d queues)", s.ring.Queues())
	case s.ringWhy != "":
		return "/dev/fuse (io_uring: " + s.ringWhy + ")"
	case s.opts.IOURing:
		return "/dev/fuse (the kernel offers no io_uring)"
	}
	return "/dev/fuse"
}

// setReadahead raises the readahead of the mount's backing device to
// bytes. The kernel caps a FUSE mount's readahead at the default of
// 128 KiB whatever INIT asks for, so a cold sequential read of a
// project file would reach agentfs as 128 KiB requests, each waiting
// for the lower disk in turn. The device is the mount's own (it goes
// with it); only root may write the knob, and without it reads stay
// correct, only slower.
func (s *Server) setReadahead(mountpoint string, bytes int) {
	// Only a FUSE mount's own device (an anonymous one, major 0): never
	// the disk below a mountpoint that is not (or no longer) ours.
	const fuseMagic = 0x65735546
	var fst unix.Statfs_t
	var st unix.Stat_t
	if err := unix.Statfs(mountpoint, &fst); err != nil || fst.Type != fuseMagic {
		s.log.Debug("readahead left at the default: not a FUSE mount", "err", err)
		return
	}
	if err := unix.Stat(mountpoint, &st); err != nil || unix.Major(st.Dev) != 0 {
		s.log.Debug("readahead left at the default", "err", err)
		return
	}
	knob := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(knob, []byte(strconv.Itoa(bytes>>10)), 0); err != nil {
		s.log.Debug("readahead left at the default", "err", err)
	}
}

type debugWriter struct{ l *slog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.l.Debug(string(p))
	return len(p), nil
}

// Wait returns when the file system is unmounted.
func (s *Server) Wait() {
	s.srv.Wait()
	if s.ring != nil {
		s.ring.Wait()
		s.rel.close()
	}
	s.watch.close()
	s.views.close()
}

// Aside has fn run by the releaser, off the CPU of the program whose
// request a queue thread answers, as RELEASEs are: it returns the
// function that asks for a run of fn (which never blocks), or nil where
// requests come over /dev/fuse, with no releaser. For
// branch.Store.HandOffWith. Call it once, after Mount.
func (s *Server) Aside(fn func()) func() {
	if s.ring == nil || s.rel == nil {
		return nil
	}
	s.rel.setSide(fn)
	return s.rel.kickSide
}

// Unmount unmounts the file system.
func (s *Server) Unmount() error { return s.srv.Unmount() }

// Init implements fuse.RawFileSystem: it runs after INIT, before any
// other request.
//
// What INIT granted is settled here, before the kernel sends anything
// else: requests come as soon as INIT is answered, before Mount returns.
func (s *Server) Init(srv *fuse.Server) {
	ks := srv.KernelSettings()
	s.killprivV2 = ks.Flags64()&fuse.CAP_HANDLE_KILLPRIV_V2 != 0
	// The kernel turns passthrough off where it grants a writeback cache.
	s.writeback = s.opts.WritebackCache && ks.Flags64()&fuse.CAP_WRITEBACK_CACHE != 0
	s.passthrough = s.opts.Passthrough && !s.writeback && ks.Flags64()&fuse.CAP_PASSTHROUGH != 0 && os.Geteuid() == 0
	// Once INIT granted io_uring, the kernel holds every new request
	// until each queue has an entry (or a registration failed), so the
	// queues start here, before the mount is waited for.
	if s.askRing && srv.KernelSettings().Flags64()&fuse.CAP_OVER_IO_URING != 0 {
		s.srv = srv
		s.startRing(maxRead)
	}
	// Ring READ replies are copied from the entry's payload buffer;
	// splicing does not apply to them.
	s.spliceMax = splice.MaxPipeSize() - os.Getpagesize() - int(unsafe.Sizeof(fuse.OutHeader{}))
	s.splice = s.ring == nil && splice.Resizable() && s.spliceMax >= bulkRead
}

// Reads reports how many READ requests the daemon has served (reads the
// kernel does not pass through), how many of them it spliced and how
// many it read from the disk with O_DIRECT.
func (s *Server) Reads() (served, spliced, fromDisk uint64) {
	return s.reads.Load(), s.spliced.Load(), s.fromDisk.Load()
}

// WritebackCache reports whether the kernel holds writes in its page
// cache before it sends them (Options.WritebackCache, granted).
func (s *Server) WritebackCache() bool { return s.writeback }

// WriteBack has the kernel send what it holds of writes to the mount
// and returns when agentfs has them: before a control request or an
// automatic snapshot reads the view's files. Without a writeback cache
// it does nothing.
//
// syncfs(2) is no barrier on a FUSE mount (the kernel neither waits for
// the WRITEs it starts nor asks the server), but fsync(2) of a file is:
// it waits for every WRITE of the inode. Every inode with cached writes
// has a handle open for writing (the kernel writes a file back before
// its RELEASE), so WriteBack opens each such inode by its handle
// (open_by_handle_at: node id and generation, as the kernel encodes a
// FUSE file handle) and fsyncs it. The FSYNCs this thread causes are
// answered at once: they are barriers, not requests for durability.
// It must run on no thread that serves requests, with no lock held
// that serving a WRITE takes.
func (s *Server) WriteBack() error {
	if !s.writeback {
		return nil
	}
	var nodes []*overlay.Node
	seen := map[uint64]bool{}
	s.mu.Lock()
	for _, h := range s.files {
		if n := h.ino.n; !h.pt && h.f.Writable() && !seen[n.ID] {
			seen[n.ID] = true
			nodes = append(nodes, n)
		}
	}
	s.mu.Unlock()
	if len(nodes) == 0 {
		return nil
	}
	mfd, err := unix.Open(s.opts.Mountpoint, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := uint32(unix.Gettid())
	s.barriers.Store(tid, true)
	defer s.barriers.Delete(tid)
	var first error
	for _, n := range nodes {
		id := n.ID
		fh := make([]byte, 12)
		binary.NativeEndian.PutUint32(fh[0:], uint32(id>>32))
		binary.NativeEndian.PutUint32(fh[4:], uint32(id))
		binary.NativeEndian.PutUint32(fh[8:], generation)
		fd, err := openByHandle(mfd, unix.NewFileHandle(fuseFileHandle, fh), unix.O_RDONLY|unix.O_CLOEXEC)
		if err == unix.EPERM {
			// open_by_handle_at needs CAP_DAC_READ_SEARCH: a daemon
			// that is not root opens the file by its name, where the
			// mount's root shows its branch.
			fd, err = s.openByPath(mfd, n)
		}
		if err == unix.ESTALE || err == unix.ENOENT {
			continue // the kernel forgot the inode, or the name is gone with nothing cached under it
		}
		if err == nil {
			err = unix.Fsync(fd)
			unix.Close(fd)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("writing back node %d: %w", id, err)
		}
	}
	return first
}

// openByPath opens node n through the mount by its path, for WriteBack
// without the privilege to open it by handle: only a node of the view
// unbound processes see (the one the daemon sees at the root); ENOENT
// for others.
func (s *Server) openByPath(mfd int, n *overlay.Node) (int, error) {
	v := n.FS()
	if s.views.def.Load().fs != v {
		return -1, unix.ENOENT
	}
	p, ok := v.Path(n)
	if !ok || p == "" {
		return -1, unix.ENOENT
	}
	fd, err := unix.Openat(mfd, p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.EACCES {
		fd, err = unix.Openat(mfd, p, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	return fd, err
}

// barrier reports whether thread tid is a WriteBack's.
func (s *Server) barrier(tid uint32) bool {
	_, ok := s.barriers.Load(tid)
	return ok
}

// openByHandle is open_by_handle_at(2); tests make it refuse.
var openByHandle = unix.OpenByHandleAt

// fuseFileHandle is the type of the file handles the kernel makes for
// FUSE inodes (fuse_encode_fh in fs/fuse/inode.c).
const fuseFileHandle = 0x81

// Passthrough reports whether reads and writes of upper files go
// directly to their backing files.
func (s *Server) Passthrough() bool {
	s.ptMu.Lock()
	defer s.ptMu.Unlock()
	return s.passthrough
}

func (s *Server) String() string { return "agentfs" }

// errno converts an error from below into the status the kernel gets.
// It is the one place where Go errors become errnos.
func errno(err error) fuse.Status {
	if err == nil {
		return fuse.OK
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return fuse.Status(e)
	}
	return fuse.EIO
}

// inode returns the node that node id names for the request's caller:
// for the mount root, the root of the caller's view. It is nil when the
// kernel's node is unknown or belongs to a retired view.
func (s *Server) inode(h *fuse.InHeader, id uint64) *inode {
	if id == fuse.FUSE_ROOT_ID {
		vs := s.views.caller(h)
		if vs.retired.Load() {
			return nil
		}
		return vs.root
	}
	s.mu.Lock()
	ino := s.nodes[id]
	s.mu.Unlock()
	if ino == nil || ino.vs.retired.Load() {
		return nil
	}
	return ino
}

// register records a node the kernel now references (one lookup).
func (s *Server) register(n *overlay.Node) *inode {
	s.mu.Lock()
	ino := s.nodes[n.ID]
	isNew := ino == nil
	if isNew {
		ino = &inode{n: n, vs: s.views.view(n.FS())}
		s.nodes[n.ID] = ino
	}
	s.mu.Unlock()
	if isNew && n.IsDir() {
		s.watch.add(n.ID, n)
	}
	return ino
}

// caller returns who made the request.
func caller(h *fuse.InHeader) overlay.Caller {
	return overlay.Caller{Uid: h.Uid, Gid: h.Gid}
}

func fillAttr(a *fuse.Attr, st *unix.Stat_t) {
	a.Ino = st.Ino
	a.Size = uint64(st.Size)
	a.Blocks = uint64(st.Blocks)
	a.Atime, a.Atimensec = uint64(st.Atim.Sec), uint32(st.Atim.Nsec)
	a.Mtime, a.Mtimensec = uint64(st.Mtim.Sec), uint32(st.Mtim.Nsec)
	a.Ctime, a.Ctimensec = uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec)
	a.Mode = st.Mode
	a.Nlink = uint32(st.Nlink)
	a.Uid, a.Gid = st.Uid, st.Gid
	a.Rdev = uint32(st.Rdev)
	a.Blksize = uint32(st.Blksize)
}

// fillEntry answers a lookup-like request for node n.
// A name in the root (kernel node id parent) lives only as long as the
// root's lookups do not depend on the caller (see views.go).
func (s *Server) fillEntry(out *fuse.EntryOut, parent uint64, n *overlay.Node, st *unix.Stat_t) {
	s.register(n)
	out.NodeId = n.ID
	out.Generation = generation
	fillAttr(&out.Attr, st)
	timeout := entryTimeout
	if parent == fuse.FUSE_ROOT_ID {
		timeout = s.views.rootTimeout()
	}
	if s.writeback && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
		timeout = min(timeout, linkedTimeout)
	}
	out.SetEntryTimeout(timeout)
	out.SetAttrTimeout(attrTimeout)
}

// known returns the node the kernel knows as id (never the root).
func (s *Server) known(id uint64) *inode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[id]
}

// dropRoot drops what the kernel cached at the root: the names in the
// roots of the views, the negative entries there, and the root's
// attributes.
func (s *Server) dropRoot() {
	s.views.mu.Lock()
	views := make([]*overlay.FS, 0, len(s.views.views))
	for v, vs := range s.views.views {
		if !vs.retired.Load() {
			views = append(views, v)
		}
	}
	s.views.mu.Unlock()
	names := map[string]bool{}
	for _, v := range views {
		if ents, err := v.ReadDir(v.Root()); err == nil {
			for _, e := range ents {
				if e.Name != "." && e.Name != ".." {
					names[e.Name] = true
				}
			}
		}
	}
	s.negMu.Lock()
	for name := range s.negatives[fuse.FUSE_ROOT_ID] {
		names[name] = true
	}
	s.negMu.Unlock()
	for name := range names {
		s.srv.EntryNotify(fuse.FUSE_ROOT_ID, name)
	}
	s.srv.InodeNotify(fuse.FUSE_ROOT_ID, 0, 0)
}

func (s *Server) controlAttr(a *fuse.Attr) {
	now := uint64(time.Now().Unix())
	a.Ino = controlID
	a.Mode = unix.S_IFREG | 0600
	a.Nlink = 1
	a.Uid, a.Gid = s.uid, uint32(os.Getegid())
	a.Atime, a.Mtime, a.Ctime = now, now, now
}

func isControl(parent uint64, name string) bool {
	return parent == fuse.FUSE_ROOT_ID && name == ctl.ControlName
}

// Lookup implements fuse.RawFileSystem.
func (s *Server) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if isControl(h.NodeId, name) {
		if s.opts.Control == nil {
			return fuse.ENOENT
		}
		out.NodeId = controlID
		out.Generation = generation
		s.controlAttr(&out.Attr)
		return fuse.OK
	}
	if h.NodeId == fuse.FUSE_ROOT_ID {
		// The reply's lifetime must not outlive a change of mode (see
		// binder.rootChanged).
		s.views.rootMu.RLock()
		defer s.views.rootMu.RUnlock()
	}
	dir := s.inode(h, h.NodeId)
	if dir == nil {
		return fuse.ENOENT
	}
	n, st, err := dir.n.FS().Lookup(dir.n, name)
	if err == unix.ENOENT {
		// A negative entry: node id 0 with a lifetime (an ENOENT
		// error would not be cached).
		*out = fuse.EntryOut{}
		if (h.NodeId != fuse.FUSE_ROOT_ID || !s.views.active.Load()) && s.noteNegative(h.NodeId, name) {
			out.SetEntryTimeout(negTimeout)
		}
		return fuse.OK
	}
	if err != nil {
		return errno(err)
	}
	s.fillEntry(out, h.NodeId, n, &st)
	s.record(h, OpLookup, dir.n, name)
	return fuse.OK
}

// Forget implements fuse.RawFileSystem.
func (s *Server) Forget(nodeid, nlookup uint64) {
	if nodeid == controlID || nodeid == fuse.FUSE_ROOT_ID {
		return
	}
	s.mu.Lock()
	ino := s.nodes[nodeid]
	s.mu.Unlock()
	if ino == nil {
		return
	}
	if ino.n.FS().Forget(ino.n, nlookup) {
		s.mu.Lock()
		if s.nodes[nodeid] == ino {
			delete(s.nodes, nodeid)
		}
		s.mu.Unlock()
		s.watch.remove(nodeid)
		s.forgetNegatives(nodeid)
	}
}

// GetAttr implements fuse.RawFileSystem.
func (s *Server) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.NodeId == controlID {
		s.controlAttr(&out.Attr)
		return fuse.OK
	}
	ino := s.inode(&in.InHeader, in.NodeId)
	if ino == nil {
		return fuse.ENOENT
	}
	st, err := ino.n.FS().Getattr(ino.n)
	if err != nil {
		return errno(err)
	}
	fillAttr(&out.Attr, &st)
	out.SetTimeout(s.attrTimeout(in.NodeId))
	return fuse.OK
}

// attrTimeout is the lifetime of the attributes of kernel node id: the
// root's depend on the caller while processes are bound.
func (s *Server) attrTimeout(id uint64) time.Duration {
	if id == fuse.FUSE_ROOT_ID && s.views.active.Load() {
		return 0
	}
	return attrTimeout
}

// SetAttr implements fuse.RawFileSystem.
func (s *Server) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.NodeId == controlID {
		return fuse.EPERM
	}
	ino := s.inode(&in.InHeader, in.NodeId)
	if ino == nil {
		return fuse.ENOENT
	}
	// chown(-1, -1) comes without any attribute: it changes only ctime.
	const attrBits = fuse.FATTR_MODE | fuse.FATTR_UID | fuse.FATTR_GID | fuse.FATTR_SIZE |
		fuse.FATTR_ATIME | fuse.FATTR_MTIME | fuse.FATTR_ATIME_NOW | fuse.FATTR_MTIME_NOW
	var sa overlay.SetAttr
	if u, ok := in.GetUID(); ok {
		sa.Uid = &u
	}
	if g, ok := in.GetGID(); ok {
		sa.Gid = &g
	}
	// kill is the rule of the setid bits this request clears, which the
	// kernel leaves to agentfs with killpriv v2 (killpriv.go): those of a
	// chown (the attribute-less request is also the kernel's before a
	// write), or of a truncate by a caller without CAP_FSETID. They are
	// cleared after the request, from the attributes it leaves; a
	// non-root chown needs the group before it.
	var kill func(mode, gid uint32, h *fuse.InHeader) uint32
	var oldGid *uint32
	if m, ok := in.GetMode(); ok {
		if !s.killprivV2 {
			// Only the owner may chmod (the kernel checks): a mode
			// change by another user is the kernel clearing setuid
			// for a write or truncate; complete it (killpriv.go).
			if st, err := ino.n.FS().Getattr(ino.n); err == nil && dropsOnlySetid(st.Mode, m) {
				if h := procCaller(&in.InHeader); h.Uid != 0 && st.Uid != h.Uid {
					m = killedMode(st.Mode&unix.S_IFMT|m&07777, st.Gid, h) & 07777
				}
			}
		}
		sa.Mode = &m
	} else if s.killprivV2 {
		switch {
		case sa.Uid != nil || sa.Gid != nil || in.Valid&attrBits == 0:
			kill = chownedMode
			if in.Uid != 0 && sa.Gid != nil {
				if st, err := ino.n.FS().Getattr(ino.n); err == nil {
					oldGid = &st.Gid
				}
			}
		case in.Valid&fuse.FATTR_KILL_SUIDGID != 0:
			kill = droppedMode
		}
	}
	if sz, ok := in.GetSize(); ok {
		sa.Size = &sz
	}
	if in.Valid&fuse.FATTR_ATIME != 0 {
		ts := unix.Timespec{Sec: int64(in.Atime), Nsec: int64(in.Atimensec)}
		if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
			ts = unix.Timespec{Nsec: unix.UTIME_NOW}
		}
		sa.Atime = &ts
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		ts := unix.Timespec{Sec: int64(in.Mtime), Nsec: int64(in.Mtimensec)}
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			ts = unix.Timespec{Nsec: unix.UTIME_NOW}
		}
		sa.Mtime = &ts
	}
	sa.Ctime = in.Valid&fuse.FATTR_CTIME != 0 || in.Valid&attrBits == 0
	var f *overlay.File
	if fh, ok := in.GetFh(); ok {
		if h := s.handle(fh); h != nil {
			f = h.f
		}
	}
	st, err := ino.n.FS().Setattr(ino.n, sa, f)
	if err != nil {
		return errno(err)
	}
	if kill != nil && st.Mode&setidBits != 0 {
		gid := st.Gid
		if oldGid != nil {
			gid = *oldGid
		}
		if m := kill(st.Mode, gid, procCaller(&in.InHeader)); m != st.Mode {
			perm := m & 07777
			if st, err = ino.n.FS().Setattr(ino.n, overlay.SetAttr{Mode: &perm}, f); err != nil {
				return errno(err)
			}
		}
	}
	s.recordSetattr(in, ino.n)
	fillAttr(&out.Attr, &st)
	out.SetTimeout(s.attrTimeout(in.NodeId))
	return fuse.OK
}

func (s *Server) dirOf(h *fuse.InHeader) (*inode, fuse.Status) {
	dir := s.inode(h, h.NodeId)
	if dir == nil {
		return nil, fuse.ENOENT
	}
	return dir, fuse.OK
}

// Mknod implements fuse.RawFileSystem.
func (s *Server) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if isControl(in.NodeId, name) {
		return fuse.Status(unix.EEXIST)
	}
	dir, st := s.dirOf(&in.InHeader)
	if st != fuse.OK {
		return st
	}
	n, attr, err := dir.n.FS().Mknod(dir.n, name, in.Mode, uint64(in.Rdev), caller(&in.InHeader))
	if err != nil {
		return errno(err)
	}
	s.record(&in.InHeader, OpMknod, dir.n, name)
	s.fillEntry(out, in.NodeId, n, &attr)
	return fuse.OK
}

// Mkdir implements fuse.RawFileSystem.
func (s *Server) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if isControl(in.NodeId, name) {
		return fuse.Status(unix.EEXIST)
	}
	dir, st := s.dirOf(&in.InHeader)
	if st != fuse.OK {
		return st
	}
	n, attr, err := dir.n.FS().Mkdir(dir.n, name, in.Mode, caller(&in.InHeader))
	if err != nil {
		return errno(err)
	}
	s.record(&in.InHeader, OpMkdir, dir.n, name)
	s.fillEntry(out, in.NodeId, n, &attr)
	return fuse.OK
}

// Symlink implements fuse.RawFileSystem.
func (s *Server) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	if isControl(h.NodeId, name) {
		return fuse.Status(unix.EEXIST)
	}
	dir, st := s.dirOf(h)
	if st != fuse.OK {
		return st
	}
	n, attr, err := dir.n.FS().Symlink(dir.n, name, target, caller(h))
	if err != nil {
		return errno(err)
	}
	s.record(h, OpSymlink, dir.n, name)
	s.fillEntry(out, h.NodeId, n, &attr)
	return fuse.OK
}

// Link implements fuse.RawFileSystem.
func (s *Server) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if isControl(in.NodeId, name) {
		return fuse.Status(unix.EEXIST)
	}
	if in.Oldnodeid == controlID {
		return fuse.EPERM
	}
	dir, st := s.dirOf(&in.InHeader)
	if st != fuse.OK {
		return st
	}
	src := s.inode(&in.InHeader, in.Oldnodeid)
	if src == nil {
		return fuse.ENOENT
	}
	if src.vs != dir.vs {
		return fuse.Status(unix.EXDEV) // a file of another branch
	}
	attr, err := src.n.FS().Link(src.n, dir.n, name)
	if err != nil {
		return errno(err)
	}
	s.recordRename(nil, &in.InHeader, OpLink, src.n, "", dir.n, name)
	s.fillEntry(out, in.NodeId, src.n, &attr)
	return fuse.OK
}

// Unlink implements fuse.RawFileSystem.
func (s *Server) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if isControl(h.NodeId, name) {
		return fuse.EPERM
	}
	dir, st := s.dirOf(h)
	if st != fuse.OK {
		return st
	}
	return errno(s.recordErr(dir.n.FS().Unlink(dir.n, name), h, OpUnlink, dir.n, name))
}

// Rmdir implements fuse.RawFileSystem.
func (s *Server) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if isControl(h.NodeId, name) {
		return fuse.ENOTDIR
	}
	dir, st := s.dirOf(h)
	if st != fuse.OK {
		return st
	}
	return errno(s.recordErr(dir.n.FS().Rmdir(dir.n, name), h, OpRmdir, dir.n, name))
}

// Rename implements fuse.RawFileSystem.
func (s *Server) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if isControl(in.NodeId, oldName) || isControl(in.Newdir, newName) {
		return fuse.EPERM
	}
	odir, st := s.dirOf(&in.InHeader)
	if st != fuse.OK {
		return st
	}
	ndir := s.inode(&in.InHeader, in.Newdir)
	if ndir == nil {
		return fuse.ENOENT
	}
	if odir.vs != ndir.vs {
		return fuse.Status(unix.EXDEV) // a directory of another branch
	}
	return errno(s.recordRename(odir.n.FS().Rename(odir.n, oldName, ndir.n, newName, in.Flags), &in.InHeader, OpRename, odir.n, oldName, ndir.n, newName))
}

// Readlink implements fuse.RawFileSystem.
func (s *Server) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	ino := s.inode(h, h.NodeId)
	if ino == nil {
		return nil, fuse.ENOENT
	}
	t, err := ino.n.FS().Readlink(ino.n)
	if err != nil {
		return nil, errno(err)
	}
	return []byte(t), fuse.OK
}

// Access implements fuse.RawFileSystem. With default_permissions the
// kernel checks permissions itself and does not ask.
func (s *Server) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	return fuse.OK
}

// GetXAttr implements fuse.RawFileSystem.
func (s *Server) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if h.NodeId == controlID {
		return 0, fuse.ENODATA
	}
	ino := s.inode(h, h.NodeId)
	if ino == nil {
		return 0, fuse.ENOENT
	}
	n, err := ino.n.FS().Getxattr(ino.n, attr, dest)
	if err == unix.ERANGE {
		n, err = ino.n.FS().Getxattr(ino.n, attr, nil)
		if err == nil {
			return uint32(n), fuse.ERANGE
		}
	}
	return uint32(n), errno(err)
}

// ListXAttr implements fuse.RawFileSystem.
func (s *Server) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	if h.NodeId == controlID {
		return 0, fuse.OK
	}
	ino := s.inode(h, h.NodeId)
	if ino == nil {
		return 0, fuse.ENOENT
	}
	n, err := ino.n.FS().Listxattr(ino.n, dest)
	if err == unix.ERANGE {
		n, err = ino.n.FS().Listxattr(ino.n, nil)
		if err == nil {
			return uint32(n), fuse.ERANGE
		}
	}
	return uint32(n), errno(err)
}

// SetXAttr implements fuse.RawFileSystem.
func (s *Server) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if in.NodeId == controlID {
		return fuse.EPERM
	}
	ino := s.inode(&in.InHeader, in.NodeId)
	if ino == nil {
		return fuse.ENOENT
	}
	return errno(s.recordErr(ino.n.FS().Setxattr(ino.n, attr, data, int(in.Flags)), &in.InHeader, OpSetxattr, ino.n, ""))
}

// RemoveXAttr implements fuse.RawFileSystem.
func (s *Server) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	if h.NodeId == controlID {
		return fuse.EPERM
	}
	ino := s.inode(h, h.NodeId)
	if ino == nil {
		return fuse.ENOENT
	}
	return errno(s.recordErr(ino.n.FS().Removexattr(ino.n, attr), h, OpRemovexattr, ino.n, ""))
}

// StatFs implements fuse.RawFileSystem.
func (s *Server) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	st, err := s.views.def.Load().fs.Statfs()
	if err != nil {
		return errno(err)
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.Bsize, out.Frsize = uint32(st.Bsize), uint32(st.Frsize)
	out.NameLen = uint32(st.Namelen)
	return fuse.OK
}

var _ = fmt.Sprintf
