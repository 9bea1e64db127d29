package fs

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"

	"github.com/agentfs/agentfs/fs/fuseuring"
	"github.com/agentfs/agentfs/overlay"
)

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
	// expireOnly: the kernel takes FUSE_EXPIRE_ONLY (expire.go).
	expireOnly bool

	// reads counts the READ requests served (files not passed
	// through); spliced, those answered by splicing; fromDisk, those
	// read from the disk with O_DIRECT (a range of a project file that
	// the lower file system did not cache).
	reads, spliced, fromDisk atomic.Uint64
	// streams counts the open handles of files still being fetched
	// (overlay.File.Streaming at their open): while there is none, a
	// READ on a queue's thread never asks whether its range is there.
	streams atomic.Int64

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

	// linked: the kernel was given the node with more than one link (a
	// file, not a directory), so it may hold names of it other than the
	// one its overlay.Node tracks (see invalidateExpiring).
	linked atomic.Bool

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
	// stream: the file was being fetched at its open (Server.streams).
	stream bool
}

// Init implements fuse.RawFileSystem: it runs after INIT, before any
// other request.
//
// What INIT granted is settled here, before the kernel sends anything
// else: requests come as soon as INIT is answered, before Mount returns.
func (s *Server) Init(srv *fuse.Server) {
	ks := srv.KernelSettings()
	s.killprivV2 = ks.Flags64()&fuse.CAP_HANDLE_KILLPRIV_V2 != 0
	s.expireOnly = canExpire(ks)
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

// known returns the node the kernel knows as id (never the root).
func (s *Server) known(id uint64) *inode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[id]
}

// StatFs implements fuse.RawFileSystem.
func (s *Server) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	st, err := s.views.def.Load().view.Statfs()
	if err != nil {
		return errno(err)
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.Bsize, out.Frsize = uint32(st.Bsize), uint32(st.Frsize)
	out.NameLen = uint32(st.Namelen)
	return fuse.OK
}
