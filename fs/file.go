package fs

import (
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

func (s *Server) handle(fh uint64) *handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.files[fh]
}

func (s *Server) addHandle(h *handle) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextFh++
	s.files[s.nextFh] = h
	return s.nextFh
}

// setIOMode decides how the kernel does I/O on a new open file: through
// the backing file (passthrough) when the file is upper and the inode
// has no page-cache opens, else through the daemon with the page cache
// kept across opens. The kernel refuses to mix the two modes on one
// inode, and an inode has one backing file at a time.
func (s *Server) setIOMode(h *handle, out *fuse.OpenOut) {
	// FLUSH has nothing to do here (writes are never held back):
	// spare the kernel the round trip at every close.
	out.OpenFlags |= fuse.FOPEN_NOFLUSH
	ino := h.ino
	ino.mu.Lock()
	defer ino.mu.Unlock()
	// A view with a byte limit must see every write that may extend a
	// file, to refuse the one that crosses the limit (overlay/quota.go):
	// its files are served through the page cache, never passed
	// through. Not even read-only opens: the kernel refuses any open
	// but a passthrough one of an inode that has a backing file, and a
	// later open for writing could not be served by the daemon.
	// Pin: the object must stay the node's own while the kernel uses it
	// (a file on an object shared with a snapshot is refused).
	if ino.cached == 0 && h.f.Upper() && s.Passthrough() && !ino.n.FS().BytesLimited() && h.f.Pin() {
		if ino.pt == 0 {
			id, err := s.srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(h.f.Fd())})
			if err == 0 {
				ino.backingID = id
			} else {
				s.log.Warn("passthrough refused by the kernel; serving I/O through the page cache", "err", err)
				s.ptMu.Lock()
				s.passthrough = false
				s.ptMu.Unlock()
			}
		}
		if s.Passthrough() {
			ino.pt++
			h.pt = true
			out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
			out.BackingID = ino.backingID
			return
		}
	}
	ino.cached++
	// A file whose object is still being fetched keeps no pages across
	// opens: the object's check may yet refuse the bytes read so far
	// (overlay.File, streaming), and the next open drops them.
	if h.f.Streaming() {
		h.stream = true
		s.streams.Add(1)
	} else {
		out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
	}
}

func (s *Server) endIOMode(h *handle) {
	ino := h.ino
	ino.mu.Lock()
	defer ino.mu.Unlock()
	if h.stream {
		s.streams.Add(-1)
	}
	if !h.pt {
		ino.cached--
		return
	}
	if ino.pt--; ino.pt == 0 {
		if err := s.srv.UnregisterBackingFd(ino.backingID); err != 0 {
			s.log.Warn("closing backing file", "err", err)
		}
		ino.backingID = 0
	}
}

// Open implements fuse.RawFileSystem.
func (s *Server) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if in.NodeId == controlID {
		out.OpenFlags = fuse.FOPEN_DIRECT_IO
		return fuse.OK
	}
	ino := s.inode(&in.InHeader, in.NodeId)
	if ino == nil {
		return fuse.ENOENT
	}
	f, err := ino.n.FS().Open(ino.n, int(in.Flags))
	if err != nil {
		return errno(s.quotaErr(err, &in.InHeader, ino.n, ""))
	}
	if in.Flags&unix.O_TRUNC != 0 && in.Flags&unix.O_ACCMODE != unix.O_RDONLY {
		// An O_TRUNC open is atomic in FUSE: the kernel clears nothing
		// itself; with killpriv v2 it says whether to (killpriv.go).
		rule := killedMode
		if s.killprivV2 {
			rule = nil
			if in.Mode&fuse.OPEN_KILL_SUIDGID != 0 {
				rule = droppedMode
			}
		}
		if rule != nil {
			if err := s.killPrivs(ino.n, &in.InHeader, rule); err != nil {
				_ = f.Release() // the open fails with killPrivs' error; the kernel never had the file
				return errno(err)
			}
		}
	}
	h := &handle{ino: ino, f: f}
	s.setIOMode(h, out)
	out.Fh = s.addHandle(h)
	if !s.writeback || !s.barrier(in.Pid) {
		s.recordOpen(in, h)
	}
	return fuse.OK
}

// Create implements fuse.RawFileSystem.
func (s *Server) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if isControl(in.NodeId, name) {
		return fuse.Status(unix.EEXIST)
	}
	dir, st := s.dirOf(&in.InHeader)
	if st != fuse.OK {
		return st
	}
	n, f, attr, err := dir.n.FS().Create(dir.n, name, int(in.Flags), in.Mode, caller(&in.InHeader))
	if err != nil {
		return errno(s.quotaErr(err, &in.InHeader, dir.n, name))
	}
	s.record(&in.InHeader, OpCreate, dir.n, name)
	s.named(in.NodeId, name)
	s.fillEntry(&out.EntryOut, in.NodeId, n, &attr)
	h := &handle{ino: s.known(n.ID), f: f}
	h.wrote.Store(true) // the create is reported: writes to the new file are part of it
	s.setIOMode(h, &out.OpenOut)
	out.Fh = s.addHandle(h)
	return fuse.OK
}

// Tmpfile implements fuse.RawFileSystem (O_TMPFILE).
func (s *Server) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	dir, st := s.dirOf(&in.InHeader)
	if st != fuse.OK {
		return st
	}
	n, f, attr, err := dir.n.FS().Tmpfile(dir.n, int(in.Flags), in.Mode, caller(&in.InHeader))
	if err != nil {
		return errno(s.quotaErr(err, &in.InHeader, dir.n, ""))
	}
	s.fillEntry(&out.EntryOut, in.NodeId, n, &attr)
	h := &handle{ino: s.known(n.ID), f: f}
	s.setIOMode(h, &out.OpenOut)
	out.Fh = s.addHandle(h)
	return fuse.OK
}

// Read implements fuse.RawFileSystem.
func (s *Server) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	return s.read(in, buf, true)
}

// read serves a READ; tryDisk is whether a large one may be read from
// the disk (ReadFromDisk), false where the caller already found the
// range cached by the lower file system.
func (s *Server) read(in *fuse.ReadIn, buf []byte, tryDisk bool) (fuse.ReadResult, fuse.Status) {
	h := s.handle(in.Fh)
	if h == nil {
		return nil, fuse.EBADF
	}
	s.reads.Add(1)
	// A file still being fetched: the range must have arrived.
	if err := h.f.Wait(int64(in.Offset), int(in.Size)); err != nil {
		return nil, errno(err)
	}
	if in.Size >= bulkRead {
		if tryDisk {
			n, ok, err := h.f.ReadFromDisk(buf[:in.Size], int64(in.Offset))
			if err != nil {
				return nil, errno(err)
			}
			if ok {
				s.fromDisk.Add(1)
				return fuse.ReadResultData(buf[:n]), fuse.OK
			}
		}
		if s.splice && int(in.Size) <= s.spliceMax {
			fd, err := h.f.Dup()
			if err != nil {
				return nil, errno(err)
			}
			return &spliceRead{fd: fd, off: int64(in.Offset), size: int(in.Size), spliced: &s.spliced}, fuse.OK
		}
	}
	n, err := h.f.ReadAt(buf[:in.Size], int64(in.Offset))
	if err != nil {
		return nil, errno(err)
	}
	return fuse.ReadResultData(buf[:n]), fuse.OK
}

// bulkRead is the smallest READ read from the disk when the lower file
// system does not cache it (ReadFromDisk; a smaller one, a small file or
// a file's tail, is not worth a second descriptor) or answered by
// splicing the file's pages into the reply (below it, the two more
// system calls cost more than the copy they save).
const bulkRead = 64 << 10

// spliceRead is a READ reply that go-fuse splices from the file into
// /dev/fuse (Seekable): the data is copied once, from the file's page
// cache into the kernel's request, instead of through a buffer of the
// daemon. It reads from a descriptor of its own, so a release or a
// copy-up that follows the handle to its upper object cannot close it
// under the splice. When splicing fails, go-fuse reads it with Bytes.
type spliceRead struct {
	fd     int
	off    int64
	size   int
	copied bool // go-fuse fell back to Bytes

	spliced *atomic.Uint64 // counts the replies that were spliced
}

func (r *spliceRead) Seekable() (uintptr, int64, int) { return uintptr(r.fd), r.off, r.size }

func (r *spliceRead) Size() int { return r.size }

func (r *spliceRead) Bytes(buf []byte) ([]byte, fuse.Status) {
	r.copied = true
	n, err := unix.Pread(r.fd, buf[:min(len(buf), r.size)], r.off)
	if err != nil {
		return nil, fuse.ToStatus(err)
	}
	return buf[:n], fuse.OK
}

func (r *spliceRead) Done() {
	if r.fd < 0 {
		return
	}
	unix.Close(r.fd)
	r.fd = -1
	if !r.copied {
		r.spliced.Add(1)
	}
}

// Write implements fuse.RawFileSystem.
func (s *Server) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	h := s.handle(in.Fh)
	if h == nil {
		return 0, fuse.EBADF
	}
	n, err := h.f.WriteAt(data, int64(in.Offset))
	s.recordWrite(&in.InHeader, h, err)
	return uint32(n), errno(s.quotaErr(err, &in.InHeader, h.ino.n, ""))
}

// Lseek implements fuse.RawFileSystem (SEEK_DATA and SEEK_HOLE).
func (s *Server) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	h := s.handle(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	off, err := h.f.Lseek(int64(in.Offset), int(in.Whence))
	out.Offset = uint64(off)
	return errno(err)
}

// Fallocate implements fuse.RawFileSystem.
func (s *Server) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	h := s.handle(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	err := s.recordErr(h.f.Allocate(in.Mode, int64(in.Offset), int64(in.Length)), &in.InHeader, OpFallocate, h.ino.n, "")
	return errno(s.quotaErr(err, &in.InHeader, h.ino.n, ""))
}

// CopyFileRange implements fuse.RawFileSystem.
func (s *Server) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	src, dst := s.handle(in.FhIn), s.handle(in.FhOut)
	if src == nil || dst == nil {
		return 0, fuse.EBADF
	}
	n, err := src.f.CopyTo(int64(in.OffIn), dst.f, int64(in.OffOut), int(in.Len))
	s.recordCopy(in, src, dst, err)
	return uint32(n), errno(s.quotaErr(err, &in.InHeader, dst.ino.n, ""))
}

// Flush implements fuse.RawFileSystem. There is nothing to do at a
// close: agentfs holds no writes back. Opens say so (FOPEN_NOFLUSH),
// but with a writeback cache the kernel sends FLUSH at every close
// anyway, once it has written the file's cached pages; ENOSYS has it
// stop for good.
func (s *Server) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	if s.writeback {
		return fuse.ENOSYS
	}
	return fuse.OK
}

// Fsync implements fuse.RawFileSystem.
func (s *Server) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if s.writeback && s.barrier(in.Pid) {
		return fuse.OK // WriteBack's: the kernel has sent the writes
	}
	h := s.handle(in.Fh)
	if h == nil {
		return errno(s.views.def.Load().view.Sync())
	}
	return errno(h.f.Sync(in.FsyncFlags&1 != 0))
}

// Release implements fuse.RawFileSystem.
func (s *Server) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	if in.NodeId == controlID {
		return
	}
	s.mu.Lock()
	h := s.files[in.Fh]
	delete(s.files, in.Fh)
	s.mu.Unlock()
	if h == nil {
		return
	}
	s.endIOMode(h)
	s.recordClose(in, h)
	if err := h.f.Release(); err != nil {
		s.log.Warn("release", "err", err)
	}
	if h.ino.n.FS().Forget(h.ino.n, 0) {
		s.mu.Lock()
		if s.nodes[h.ino.n.ID] == h.ino {
			delete(s.nodes, h.ino.n.ID)
		}
		s.mu.Unlock()
	}
}

// OpenDir implements fuse.RawFileSystem: ENOSYS, since agentfs keeps no
// state per open directory (see Directories in doc.go).
func (s *Server) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

// listing returns the entries of directory in.NodeId from in.Offset on,
// and the offset of the first one's predecessor (the first entry's
// offset is that plus 1, and so on). With no handles, offsets are
// indexes into a listing kept per node: made anew at each read from
// offset 0 (a rewind, or a kernel filling its cache), reused by the
// reads that continue it and dropped at its end, so a walk of a large
// tree does not keep every listing in memory.
//
// The kernel fills its cache of a listing from the reads whose offsets
// continue the cache's last one, and marks it complete at an empty read
// at that offset. For the root, whose listing depends on the caller,
// offsets carry the view's tag in their high half, so that one branch's
// reads never continue or complete a cache another branch's reads
// began; and at the end of a pass the cached pages are dropped before
// the empty reply, so the complete cache the kernel holds is one it
// must refill, from the daemon, as the next caller.
func (s *Server) listing(in *fuse.ReadIn) (*inode, []overlay.DirEntry, uint64, fuse.Status) {
	ino := s.inode(&in.InHeader, in.NodeId)
	if ino == nil {
		return nil, nil, 0, fuse.ENOENT
	}
	if !ino.n.IsDir() {
		return nil, nil, 0, fuse.ENOTDIR
	}
	index, start := in.Offset, in.Offset
	if in.NodeId == fuse.FUSE_ROOT_ID {
		index = in.Offset & (1<<32 - 1)
		start = ino.vs.tag<<32 | index
	}
	ents, err := s.listFrom(in, ino, index)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	if ents == nil && in.NodeId == fuse.FUSE_ROOT_ID {
		s.notifyInode(fuse.FUSE_ROOT_ID, 0, 0)
	}
	return ino, ents, start, fuse.OK
}

// listFrom returns the entries of ino's listing from index offset on,
// nil at its end, under ino.lmu.
func (s *Server) listFrom(in *fuse.ReadIn, ino *inode, offset uint64) ([]overlay.DirEntry, error) {
	ino.lmu.Lock()
	defer ino.lmu.Unlock()
	if ino.listing == nil || offset == 0 {
		if offset == 0 {
			s.record(&in.InHeader, OpReaddir, ino.n, "")
		}
		ents, err := ino.n.FS().ReadDir(ino.n)
		if err != nil {
			return nil, err
		}
		if ino.n == ino.n.FS().Root() {
			kept := ents[:0]
			for _, e := range ents {
				if e.Name != ctl.ControlName {
					kept = append(kept, e)
				}
			}
			ents = kept
		}
		ino.listing = ents
	}
	if offset >= uint64(len(ino.listing)) {
		// The kernel has the listing now; a read that continues
		// another pass after this makes it anew.
		ino.listing = nil
		return nil, nil
	}
	return ino.listing[offset:], nil
}

// ReadDir implements fuse.RawFileSystem.
func (s *Server) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	_, ents, start, st := s.listing(in)
	if st != fuse.OK {
		return st
	}
	for i, e := range ents {
		if !out.AddDirEntry(fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Mode, Off: start + uint64(i) + 1}) {
			break
		}
	}
	return fuse.OK
}

// ReadDirPlus implements fuse.RawFileSystem: each name comes with its
// node and attributes, which saves the kernel one lookup per name.
func (s *Server) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	ino, ents, start, st := s.listing(in)
	if st != fuse.OK {
		return st
	}
	for i, e := range ents {
		eo := out.AddDirLookupEntry(fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Mode, Off: start + uint64(i) + 1})
		if eo == nil {
			break
		}
		if e.Name == "." || e.Name == ".." {
			continue
		}
		n, st, err := ino.n.FS().Lookup(ino.n, e.Name)
		if err != nil {
			continue // a zero node id: the kernel looks the name up itself
		}
		s.fillEntry(eo, in.NodeId, n, &st)
	}
	return fuse.OK
}

// FsyncDir implements fuse.RawFileSystem.
func (s *Server) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return errno(s.views.def.Load().view.Sync())
}

// Ioctl implements fuse.RawFileSystem: only the control file answers.
func (s *Server) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	if in.NodeId != controlID || s.opts.Control == nil {
		return fuse.Status(unix.ENOTTY)
	}
	// What the caller closed before it asks is released before it is
	// answered (release.go), and what it wrote is here (WriteBack; an
	// IOCTL is served on a goroutine of its own, never a queue's
	// thread).
	s.rel.settle()
	if h, err := ctl.ParseHeader(inbuf); err == nil && h.Op.ReadsFiles() {
		if s.opts.WriteBackAll != nil {
			s.opts.WriteBackAll()
		} else if err := s.WriteBack(); err != nil {
			s.log.Warn("writing back the kernel's cached writes", "err", err)
		}
	}
	c := ctl.Caller{Pid: in.Pid, Uid: in.Uid, Gid: in.Gid}
	n, e := s.opts.Control.HandleIoctl(c, in.Cmd, inbuf, outbuf)
	if e != 0 {
		return fuse.Status(e)
	}
	out.Result = int32(n)
	return fuse.OK
}

var _ = overlay.DirEntry{}
