package fs

import (
	"bytes"
	"fmt"
	"reflect"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/fs/fuseuring"
)

// Requests over io_uring (fuseuring) are answered by the same
// RawFileSystem methods go-fuse calls for requests read from /dev/fuse;
// ringHandler decodes them the way go-fuse does (opcode.go there) and
// encodes the replies.

// FUSE opcodes (include/uapi/linux/fuse.h).
const (
	opLookup        = 1
	opGetattr       = 3
	opSetattr       = 4
	opReadlink      = 5
	opSymlink       = 6
	opMknod         = 8
	opMkdir         = 9
	opUnlink        = 10
	opRmdir         = 11
	opRename        = 12
	opLink          = 13
	opOpen          = 14
	opRead          = 15
	opWrite         = 16
	opStatfs        = 17
	opRelease       = 18
	opFsync         = 20
	opSetxattr      = 21
	opGetxattr      = 22
	opListxattr     = 23
	opRemovexattr   = 24
	opFlush         = 25
	opOpendir       = 27
	opReaddir       = 28
	opReleasedir    = 29
	opFsyncdir      = 30
	opAccess        = 34
	opCreate        = 35
	opDestroy       = 38
	opIoctl         = 39
	opPoll          = 40
	opFallocate     = 43
	opReaddirplus   = 44
	opRename2       = 45
	opLseek         = 46
	opCopyFileRange = 47
	opSyncfs        = 50
	opTmpfile       = 51
	opStatx         = 52
)

var opNames = map[uint32]string{
	opLookup: "LOOKUP", opGetattr: "GETATTR", opSetattr: "SETATTR", opReadlink: "READLINK",
	opSymlink: "SYMLINK", opMknod: "MKNOD", opMkdir: "MKDIR", opUnlink: "UNLINK", opRmdir: "RMDIR",
	opRename: "RENAME", opLink: "LINK", opOpen: "OPEN", opRead: "READ", opWrite: "WRITE",
	opStatfs: "STATFS", opRelease: "RELEASE", opFsync: "FSYNC", opSetxattr: "SETXATTR",
	opGetxattr: "GETXATTR", opListxattr: "LISTXATTR", opRemovexattr: "REMOVEXATTR", opFlush: "FLUSH",
	opOpendir: "OPENDIR", opReaddir: "READDIR", opReleasedir: "RELEASEDIR", opFsyncdir: "FSYNCDIR",
	opAccess: "ACCESS", opCreate: "CREATE", opDestroy: "DESTROY", opIoctl: "IOCTL", opPoll: "POLL",
	opFallocate: "FALLOCATE", opReaddirplus: "READDIRPLUS", opRename2: "RENAME2", opLseek: "LSEEK",
	opCopyFileRange: "COPY_FILE_RANGE", opSyncfs: "SYNCFS", opTmpfile: "TMPFILE", opStatx: "STATX",
}

func opName(op uint32) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("OPCODE-%d", op)
}

type ringHandler struct{ s *Server }

// Async implements fuseuring.Handler: what may wait for a disk flush, a
// copy of file data or a control command (which may take a snapshot) is
// served off the queue's thread, so the requests behind it on the same
// CPU are not held up. An IOCTL on any other file (isatty's TCGETS, at
// every fopen) is refused at once, inline.
func (h ringHandler) Async(r *fuseuring.Request) bool {
	switch r.Opcode() {
	case opFsync, opFsyncdir, opFallocate, opCopyFileRange, opSyncfs:
		return true
	case opIoctl:
		return (*fuse.InHeader)(unsafe.Pointer(&r.In[0])).NodeId == controlID
	case opRead:
		// A read the disk serves (see overlay.File.ReadFromDisk): the
		// kernel's readahead sends several, and side by side they keep
		// the disk busy. A read of a range still being fetched waits for
		// the network.
		in := (*fuse.ReadIn)(unsafe.Pointer(&r.In[0]))
		if h.s.streams.Load() > 0 {
			if hd := h.s.handle(in.Fh); hd != nil && !hd.f.Ready(int64(in.Offset), int(in.Size)) {
				return true
			}
		}
		if in.Size < bulkRead {
			return false
		}
		hd := h.s.handle(in.Fh)
		return hd != nil && hd.f.FromDisk(int64(in.Offset), int(in.Size))
	}
	return false
}

// cstring is the NUL-terminated string at the start of b.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// twoNames splits "a\0b\0".
func twoNames(b []byte) (string, string, bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", "", false
	}
	rest := b[i+1:]
	j := bytes.IndexByte(rest, 0)
	if j < 0 {
		return "", "", false
	}
	return string(b[:i]), string(rest[:j]), true
}

// outStruct zeroes the first size bytes of r.Out and returns a pointer
// to them; call it only after the request's payload was read.
func outStruct(r *fuseuring.Request, size uintptr) unsafe.Pointer {
	clear(r.Out[:size])
	return unsafe.Pointer(&r.Out[0])
}

// Serve implements fuseuring.Handler.
func (h ringHandler) Serve(r *fuseuring.Request) (int32, int) {
	s := h.s
	op := r.Opcode()
	in := unsafe.Pointer(&r.In[0])
	hdr := (*fuse.InHeader)(in)
	if s.opts.Debug {
		s.log.Debug(fmt.Sprintf("rx %d: %s n%d (io_uring queue %d)", hdr.Unique, opName(op), hdr.NodeId, r.Queue()))
	}
	st, n := h.serve(r, op, in, hdr)
	if s.opts.Debug {
		s.log.Debug(fmt.Sprintf("tx %d: %v, %d bytes", hdr.Unique, st, n))
	}
	if st != fuse.OK {
		return int32(st), 0
	}
	return 0, n
}

func (h ringHandler) serve(r *fuseuring.Request, op uint32, in unsafe.Pointer, hdr *fuse.InHeader) (fuse.Status, int) {
	s := h.s
	if hdr.NodeId == pollHackInode || hdr.NodeId == fuse.FUSE_ROOT_ID && namedOp(op) && cstring(r.Payload) == pollHackName {
		return pollHack(r, op)
	}
	var nocancel <-chan struct{}
	entry := func(f func(out *fuse.EntryOut) fuse.Status) (fuse.Status, int) {
		out := (*fuse.EntryOut)(outStruct(r, unsafe.Sizeof(fuse.EntryOut{})))
		return f(out), int(unsafe.Sizeof(*out))
	}
	switch op {
	case opLookup:
		name := cstring(r.Payload)
		return entry(func(out *fuse.EntryOut) fuse.Status { return s.Lookup(nocancel, hdr, name, out) })
	case opGetattr:
		out := (*fuse.AttrOut)(outStruct(r, unsafe.Sizeof(fuse.AttrOut{})))
		return s.GetAttr(nocancel, (*fuse.GetAttrIn)(in), out), int(unsafe.Sizeof(*out))
	case opSetattr:
		out := (*fuse.AttrOut)(outStruct(r, unsafe.Sizeof(fuse.AttrOut{})))
		return s.SetAttr(nocancel, (*fuse.SetAttrIn)(in), out), int(unsafe.Sizeof(*out))
	case opReadlink:
		target, st := s.Readlink(nocancel, hdr)
		if st != fuse.OK {
			return st, 0
		}
		return st, copy(r.Out, target)
	case opSymlink:
		name, target, ok := twoNames(r.Payload)
		if !ok {
			return fuse.EIO, 0
		}
		return entry(func(out *fuse.EntryOut) fuse.Status { return s.Symlink(nocancel, hdr, target, name, out) })
	case opMknod:
		name := cstring(r.Payload)
		return entry(func(out *fuse.EntryOut) fuse.Status { return s.Mknod(nocancel, (*fuse.MknodIn)(in), name, out) })
	case opMkdir:
		name := cstring(r.Payload)
		return entry(func(out *fuse.EntryOut) fuse.Status { return s.Mkdir(nocancel, (*fuse.MkdirIn)(in), name, out) })
	case opUnlink:
		return s.Unlink(nocancel, hdr, cstring(r.Payload)), 0
	case opRmdir:
		return s.Rmdir(nocancel, hdr, cstring(r.Payload)), 0
	case opRename, opRename2:
		from, to, ok := twoNames(r.Payload)
		if !ok {
			return fuse.EIO, 0
		}
		return s.Rename(nocancel, (*fuse.RenameIn)(in), from, to), 0
	case opLink:
		name := cstring(r.Payload)
		return entry(func(out *fuse.EntryOut) fuse.Status { return s.Link(nocancel, (*fuse.LinkIn)(in), name, out) })
	case opOpen:
		out := (*fuse.OpenOut)(outStruct(r, unsafe.Sizeof(fuse.OpenOut{})))
		return s.Open(nocancel, (*fuse.OpenIn)(in), out), int(unsafe.Sizeof(*out))
	case opOpendir:
		out := (*fuse.OpenOut)(outStruct(r, unsafe.Sizeof(fuse.OpenOut{})))
		return s.OpenDir(nocancel, (*fuse.OpenIn)(in), out), int(unsafe.Sizeof(*out))
	case opCreate:
		name := cstring(r.Payload)
		out := (*fuse.CreateOut)(outStruct(r, unsafe.Sizeof(fuse.CreateOut{})))
		return s.Create(nocancel, (*fuse.CreateIn)(in), name, out), int(unsafe.Sizeof(*out))
	case opTmpfile:
		out := (*fuse.CreateOut)(outStruct(r, unsafe.Sizeof(fuse.CreateOut{})))
		return s.Tmpfile(nocancel, (*fuse.CreateIn)(in), out), int(unsafe.Sizeof(*out))
	case opRead:
		rin := (*fuse.ReadIn)(in)
		buf := r.Out[:min(int(rin.Size), len(r.Out))]
		// A READ the queue's thread serves is one Async found the
		// lower file system caching: no need to ask again.
		res, st := s.read(rin, buf, r.Async)
		if st != fuse.OK {
			return st, 0
		}
		defer res.Done()
		data, st := res.Bytes(buf)
		if st != fuse.OK {
			return st, 0
		}
		if len(data) > 0 && &data[0] != &buf[0] {
			copy(buf, data)
		}
		return fuse.OK, len(data)
	case opWrite:
		win := (*fuse.WriteIn)(in)
		if int(win.Size) > len(r.Payload) {
			return fuse.EIO, 0
		}
		n, st := s.Write(nocancel, win, r.Payload[:win.Size])
		out := (*fuse.WriteOut)(outStruct(r, unsafe.Sizeof(fuse.WriteOut{})))
		out.Size = n
		return st, int(unsafe.Sizeof(*out))
	case opStatfs:
		out := (*fuse.StatfsOut)(outStruct(r, unsafe.Sizeof(fuse.StatfsOut{})))
		return s.StatFs(nocancel, hdr, out), int(unsafe.Sizeof(*out))
	case opRelease:
		// The kernel does not wait for a RELEASE (nor order it with
		// the requests that follow), so it is answered at once and
		// served off the caller's CPU (release.go).
		s.rel.push((*fuse.ReleaseIn)(in))
		return fuse.OK, 0
	case opReleasedir:
		s.ReleaseDir((*fuse.ReleaseIn)(in))
		return fuse.OK, 0
	case opFsync:
		return s.Fsync(nocancel, (*fuse.FsyncIn)(in)), 0
	case opFsyncdir:
		return s.FsyncDir(nocancel, (*fuse.FsyncIn)(in)), 0
	case opFlush:
		return s.Flush(nocancel, (*fuse.FlushIn)(in)), 0
	case opSetxattr:
		xin := (*fuse.SetXAttrIn)(in)
		i := bytes.IndexByte(r.Payload, 0)
		if i < 0 || len(r.Payload) < i+1+int(xin.Size) {
			return fuse.EINVAL, 0
		}
		return s.SetXAttr(nocancel, xin, string(r.Payload[:i]), r.Payload[i+1:i+1+int(xin.Size)]), 0
	case opGetxattr, opListxattr:
		size := (*fuse.GetXAttrIn)(in).Size
		name := ""
		if op == opGetxattr {
			name = cstring(r.Payload)
		}
		var dest []byte
		if size > 0 {
			dest = r.Out[:min(int(size), len(r.Out))]
		}
		var n uint32
		var st fuse.Status
		if op == opGetxattr {
			n, st = s.GetXAttr(nocancel, hdr, name, dest)
		} else {
			n, st = s.ListXAttr(nocancel, hdr, dest)
		}
		if size == 0 {
			if st == fuse.ERANGE {
				st = fuse.OK
			}
			out := (*fuse.GetXAttrOut)(outStruct(r, unsafe.Sizeof(fuse.GetXAttrOut{})))
			out.Size = n
			return st, int(unsafe.Sizeof(*out))
		}
		return st, int(n)
	case opRemovexattr:
		return s.RemoveXAttr(nocancel, hdr, cstring(r.Payload)), 0
	case opReaddir, opReaddirplus:
		rin := (*fuse.ReadIn)(in)
		l := fuse.NewDirEntryList(r.Out[:min(int(rin.Size), len(r.Out))], rin.Offset)
		var st fuse.Status
		if op == opReaddir {
			st = s.ReadDir(nocancel, rin, l)
		} else {
			st = s.ReadDirPlus(nocancel, rin, l)
		}
		return st, len(l.Bytes())
	case opAccess:
		return s.Access(nocancel, (*fuse.AccessIn)(in)), 0
	case opIoctl:
		iin := (*fuse.IoctlIn)(in)
		const outSize = int(unsafe.Sizeof(fuse.IoctlOut{}))
		if int(iin.InSize) > len(r.Payload) || outSize+int(iin.OutSize) > len(r.Out) {
			return fuse.EINVAL, 0
		}
		inbuf := bytes.Clone(r.Payload[:iin.InSize]) // the reply overwrites it
		out := (*fuse.IoctlOut)(outStruct(r, uintptr(outSize)+uintptr(iin.OutSize)))
		st := s.Ioctl(nocancel, iin, inbuf, out, r.Out[outSize:outSize+int(iin.OutSize)])
		return st, outSize + int(iin.OutSize)
	case opFallocate:
		return s.Fallocate(nocancel, (*fuse.FallocateIn)(in)), 0
	case opLseek:
		out := (*fuse.LseekOut)(outStruct(r, unsafe.Sizeof(fuse.LseekOut{})))
		return s.Lseek(nocancel, (*fuse.LseekIn)(in), out), int(unsafe.Sizeof(*out))
	case opCopyFileRange:
		out := (*fuse.WriteOut)(outStruct(r, unsafe.Sizeof(fuse.WriteOut{})))
		n, st := s.CopyFileRange(nocancel, (*fuse.CopyFileRangeIn)(in))
		out.Size = n
		return st, int(unsafe.Sizeof(*out))
	case opStatx:
		out := (*fuse.StatxOut)(outStruct(r, unsafe.Sizeof(fuse.StatxOut{})))
		return s.Statx(nocancel, (*fuse.StatxIn)(in), out), int(unsafe.Sizeof(*out))
	case opDestroy:
		return fuse.OK, 0
	}
	return fuse.ENOSYS, 0
}

// go-fuse's WaitMount opens pollHackName at the root, which go-fuse
// answers itself as a file of node pollHackInode, so that the kernel
// learns that POLL is not implemented before the Go runtime's poller
// could ask it from a daemon thread (poll.go there). Requests over the
// ring get the same answers.
const (
	pollHackName  = ".go-fuse-epoll-hack"
	pollHackInode = ^uint64(0)
)

// namedOp reports whether op's payload begins with a name in the
// directory of the request's node.
func namedOp(op uint32) bool {
	switch op {
	case opLookup, opMknod, opMkdir, opUnlink, opRmdir, opSymlink, opRename, opRename2, opLink, opCreate:
		return true
	}
	return false
}

func pollHack(r *fuseuring.Request, op uint32) (fuse.Status, int) {
	attr := fuse.Attr{Ino: pollHackInode, Mode: fuse.S_IFREG | 0o644, Nlink: 1}
	switch op {
	case opLookup:
		out := (*fuse.EntryOut)(outStruct(r, unsafe.Sizeof(fuse.EntryOut{})))
		out.NodeId, out.Attr = pollHackInode, attr
		return fuse.OK, int(unsafe.Sizeof(*out))
	case opOpen:
		out := (*fuse.OpenOut)(outStruct(r, unsafe.Sizeof(fuse.OpenOut{})))
		out.Fh = pollHackInode
		return fuse.OK, int(unsafe.Sizeof(*out))
	case opGetattr, opSetattr:
		out := (*fuse.AttrOut)(outStruct(r, unsafe.Sizeof(fuse.AttrOut{})))
		out.Attr = attr
		return fuse.OK, int(unsafe.Sizeof(*out))
	case opGetxattr:
		return fuse.ENODATA, 0
	case opAccess, opFlush, opRelease:
		return fuse.OK, 0
	case opPoll:
		return fuse.ENOSYS, 0
	}
	return fuse.ERANGE, 0
}

// fuseConn returns the connection of the /dev/fuse descriptor go-fuse
// serves srv on. go-fuse does not export it; it is read from the
// server's fuseFD.conn (a syscall.RawConn, so the descriptor stays in
// the runtime's poller and go-fuse's reads are left as they are). Any
// change of that layout in a go-fuse upgrade makes this fail.
func fuseConn(srv *fuse.Server) (syscall.RawConn, error) {
	v := reflect.ValueOf(srv).Elem().FieldByName("fuseFD")
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, fmt.Errorf("go-fuse Server has no fuseFD")
	}
	c := v.Elem().FieldByName("conn")
	if !c.IsValid() || c.Type() != reflect.TypeOf((*syscall.RawConn)(nil)).Elem() || !c.CanAddr() {
		return nil, fmt.Errorf("go-fuse fuseFD has no conn")
	}
	conn := *(*syscall.RawConn)(unsafe.Pointer(c.UnsafeAddr()))
	if conn == nil {
		return nil, fmt.Errorf("go-fuse fuseFD.conn is nil")
	}
	return conn, nil
}

// closeOnExec marks srv's /dev/fuse descriptor close-on-exec. go-fuse
// opens /dev/fuse with syscall.Open and no O_CLOEXEC (and a descriptor
// fusermount passes arrives without it too), so every process the
// daemon starts after the mount (the hashing process, which runs as
// nobody on files an agent wrote) would inherit the connection: a
// process holding it could read the kernel's requests and answer them,
// and keeps the mount alive after the daemon dies.
func closeOnExec(srv *fuse.Server) error {
	conn, err := fuseConn(srv)
	if err != nil {
		return err
	}
	var serr error
	if err := conn.Control(func(f uintptr) {
		_, serr = unix.FcntlInt(f, unix.F_SETFD, unix.FD_CLOEXEC)
	}); err != nil {
		return err
	}
	return serr
}

// fuseDevFd returns a duplicate of the /dev/fuse descriptor go-fuse
// serves srv on (fuseConn); if it cannot be had, agentfs stays on
// /dev/fuse.
func fuseDevFd(srv *fuse.Server) (int, error) {
	conn, err := fuseConn(srv)
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := conn.Control(func(f uintptr) {
		fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	buf := make([]byte, 64)
	if n, err := unix.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd), buf); err != nil || string(buf[:n]) != "/dev/fuse" {
		unix.Close(fd)
		return -1, fmt.Errorf("go-fuse's descriptor is not /dev/fuse")
	}
	return fd, nil
}
