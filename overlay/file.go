package overlay

import (
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
)

// File is an open regular file of a view.
//
// A writable file is always upper: Open copies the data up first. A
// read-only file opened before a copy-up reads the lower file until the
// copy-up, then follows the node to its upper object, so it sees the
// writes made after the copy-up; one open on an object shared with a
// snapshot follows the node to the clone a change makes (a thaw).
//
// A file the kernel reads and writes directly (FUSE passthrough: its
// descriptor is the kernel's backing file) cannot follow: it is pinned
// (Pin), and while it is, its object is never shared with a snapshot.
//
// A read-only open of an object whose bytes are still a remote's (a
// pending object, backstore/pending.go) streams it: the open starts the
// object's fetch and returns, and each read waits only until the range
// it reads has arrived (Wait; the last byte waits for the whole
// object's check). Such a file is served by the daemon, never passed
// through (Upper is false until the object is complete): the kernel
// would read the object's missing bytes as zeros. Release closes the
// Stream: a fetch that no open file reads any more, and that nothing
// needs whole, stops, and goes on at the next open.
type File struct {
	n        *Node
	writable bool
	flags    int
	pinned   bool // Pin succeeded; guarded by mu

	// mu guards f: a read-only lower descriptor is replaced by the upper
	// object's after a copy-up (writable files never change descriptor).
	mu  sync.RWMutex
	f   *os.File
	gen uint64 // n.dataGen the descriptor was opened at
	up  bool   // f is an upper object
	// stream is the fetch of f's object while it is pending: reads wait
	// on it (see above).
	stream *backstore.Stream
	// lower is the lower file a read-only open has not opened yet: a
	// kernel that has the data in its page cache never reads, so the
	// descriptor is opened at the first read.
	lower string
	lazy  bool

	// direct is a descriptor of the lower file opened with O_DIRECT,
	// for ReadFromDisk; opened at its first use, under dmu. noDirect: the
	// lower file system refused O_DIRECT.
	dmu      sync.Mutex
	direct   *os.File
	noDirect bool
}

// Open opens regular file n. flags are the open(2) flags; O_CREAT and
// O_EXCL are ignored. Write access or O_TRUNC copy the file up first.
func (v *FS) Open(n *Node, flags int) (*File, error) {
	if flags&(unix.O_ACCMODE|unix.O_TRUNC) == unix.O_RDONLY {
		return v.open(n, flags) // a read changes nothing the gate guards
	}
	defer v.enterChange(n, "", nil, "")()
	return v.open(n, flags)
}

// open is Open inside the change gate (gate.go).
func (v *FS) open(n *Node, flags int) (*File, error) {
	if n.mode == unix.S_IFDIR {
		return nil, unix.EISDIR
	}
	acc := flags & unix.O_ACCMODE
	writable := acc != unix.O_RDONLY
	trunc := flags&unix.O_TRUNC != 0
	for {
		if writable || trunc {
			if err := v.copyUpData(n, !trunc); err != nil {
				return nil, err
			}
			// An object still being fetched (see File) is waited for
			// whole here, without the view's lock: the fetch of a large
			// file must not hold up the view's namespace changes.
			v.mu.RLock()
			obj := n.object
			v.mu.RUnlock()
			if obj != "" {
				if err := v.objs.Fetched(obj); err != nil {
					return nil, err
				}
			}
		}
		// The object is opened and the writer counted under v.mu, and
		// only while it is not frozen: a snapshot taken since the thaw
		// (which left the object shared with it) thaws it again, and a
		// snapshot taken later sees the writer (and clones for itself).
		v.mu.RLock()
		if (writable || trunc) && v.frozenNodeLocked(n) {
			v.mu.RUnlock()
			continue
		}
		file, err := v.openLocked(n, flags, writable, trunc)
		v.mu.RUnlock()
		return file, err
	}
}

// openLocked opens n's data for Open. v.mu is held.
func (v *FS) openLocked(n *Node, flags int, writable, trunc bool) (*File, error) {
	obj, lower, gen := n.object, n.lower, n.dataGen.Load()
	meta := n.entry != nil && n.entry.Metacopy

	var f *os.File
	var err error
	up := obj != "" && !meta
	oflags := unix.O_RDONLY
	if writable {
		oflags = unix.O_RDWR
	}
	if !up {
		file := v.newFile(n, nil, false, flags)
		file.gen, file.lower, file.lazy = gen, lower, true
		return file, nil
	}
	var stream *backstore.Stream
	if writable || trunc {
		f, err = v.objs.Open(obj, oflags)
	} else {
		f, stream, err = v.objs.OpenStream(obj)
	}
	if err != nil {
		return nil, err
	}
	if trunc && up {
		// O_TRUNC truncates even a read-only open (as open(2) does for a
		// caller allowed to write): through a writable descriptor.
		err := v.truncateLocked(n, int(f.Fd()), 0)
		if err == unix.EINVAL || err == unix.EBADF {
			var w *os.File
			if w, err = v.objs.Open(obj, unix.O_WRONLY); err == nil {
				err = v.truncateLocked(n, int(w.Fd()), 0)
				w.Close()
			}
		}
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	file := v.newFile(n, f, up, flags)
	file.gen, file.stream = gen, stream
	return file, nil
}

func (v *FS) newFile(n *Node, f *os.File, up bool, flags int) *File {
	acc := flags & unix.O_ACCMODE
	v.nodesMu.Lock()
	n.opens++
	if acc != unix.O_RDONLY {
		n.writers++
		v.writing[n] = struct{}{}
	}
	v.nodesMu.Unlock()
	return &File{n: n, f: f, up: up, flags: flags, writable: acc != unix.O_RDONLY, gen: n.dataGen.Load()}
}

// Node returns the file's node.
func (f *File) Node() *Node { return f.n }

// Writing is the number of files of the view open for writing or
// passed through: those a snapshot taken now would clone. A close(2)
// is not counted out until the kernel's RELEASE, which it sends after
// close returns.
func (v *FS) Writing() int {
	v.nodesMu.Lock()
	defer v.nodesMu.Unlock()
	return len(v.writing)
}

// Writable reports whether the file was opened for writing.
func (f *File) Writable() bool { return f.writable }

// Upper reports whether the file's descriptor is an upper object, which
// the kernel may use directly (passthrough): not while the object is
// still being fetched.
func (f *File) Upper() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.up && (f.stream == nil || f.stream.Done())
}

// Streaming reports whether the file's object is still being fetched
// (see File): its reads may wait, and none of its data may be kept in a
// cache beyond the file (the object's check may yet refuse it).
func (f *File) Streaming() bool {
	st := f.streamOf()
	return st != nil && !st.Done()
}

// streamOf returns the fetch the file's reads wait on, nil for none.
func (f *File) streamOf() *backstore.Stream {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.stream
}

// Wait waits until the file's bytes in [off, off+size) are there to
// read: at once unless its object is being fetched (see File), when it
// returns the error that stopped the fetch.
func (f *File) Wait(off int64, size int) error {
	if st := f.streamOf(); st != nil {
		return st.Wait(off + int64(size))
	}
	return nil
}

// Ready reports whether Wait(off, size) would return at once.
func (f *File) Ready(off int64, size int) bool {
	st := f.streamOf()
	return st == nil || st.Ready(off+int64(size))
}

// Fd returns the current descriptor (following a copy-up). Only
// writable files, whose descriptor never changes, may keep it.
func (f *File) Fd() int {
	fd := -1
	// An error (a released file, a reopen that failed) leaves fd -1,
	// which the system calls given it refuse with EBADF.
	_ = f.withFd(func(d int) error { fd = d; return nil })
	return fd
}

// withFd runs fn with the current descriptor, after following the node
// to its upper object if it was copied up since the file was opened.
func (f *File) withFd(fn func(fd int) error) error {
	f.mu.RLock()
	if f.lazy || !f.writable && f.n.dataGen.Load() != f.gen {
		f.mu.RUnlock()
		f.mu.Lock()
		err := f.openLazyLocked()
		if err == nil {
			err = f.followLocked()
		}
		f.mu.Unlock()
		if err != nil {
			return err
		}
		f.mu.RLock()
	}
	defer f.mu.RUnlock()
	if f.f == nil {
		return unix.EBADF
	}
	return fn(int(f.f.Fd()))
}

// openLazyLocked opens the descriptor of a read-only file opened on a
// lower file: the lower file, or the upper object if the node was
// copied up since.
func (f *File) openLazyLocked() error {
	if !f.lazy {
		return nil
	}
	v := f.n.view
	v.mu.RLock()
	obj, gen := f.n.object, f.n.dataGen.Load()
	meta := f.n.entry != nil && f.n.entry.Metacopy
	v.mu.RUnlock()
	var nf *os.File
	var err error
	up := gen != f.gen && obj != "" && !meta
	if up {
		nf, err = v.objs.Open(obj, unix.O_RDONLY)
	} else {
		nf, err = v.openLower(f.lower, unix.O_RDONLY)
	}
	if err != nil {
		return err
	}
	f.f, f.gen, f.up, f.lazy = nf, gen, up, false
	return nil
}

// followLocked reopens a read-only descriptor on the node's current
// upper object after a copy-up or a thaw.
func (f *File) followLocked() error {
	if f.writable || f.f == nil || f.n.dataGen.Load() == f.gen {
		return nil
	}
	v := f.n.view
	v.mu.RLock()
	obj, gen := f.n.object, f.n.dataGen.Load()
	v.mu.RUnlock()
	nf, err := v.objs.Open(obj, unix.O_RDONLY)
	if err != nil {
		return err
	}
	f.f.Close()
	if f.stream != nil {
		f.stream.Close()
	}
	f.f, f.gen, f.up, f.stream = nf, gen, true, nil
	return nil
}

// ReadAt reads from the file's current data.
func (f *File) ReadAt(p []byte, off int64) (n int, err error) {
	if err := f.Wait(off, len(p)); err != nil {
		return 0, err
	}
	err = f.withFd(func(fd int) error {
		n, err = unix.Pread(fd, p, off)
		return err
	})
	return n, err
}

// directAlign is the alignment ReadFromDisk asks of an O_DIRECT read's
// offset, length and buffer: a page, which every block size divides.
const directAlign = 4096

// ReadFromDisk reads a range of a lower file that the lower file
// system does not cache, with O_DIRECT, straight from the disk into p,
// and reports whether it did (ok false: nothing was read; read the range
// with ReadAt). It serves the kernel's large READs, which fill the
// mount's page cache: read with O_DIRECT, the bytes are kept once, in
// the mount's cache, instead of twice (the lower file's and the
// mount's), and a cold read allocates half the pages. A range the lower
// cache holds even in part is left to ReadAt, which copies from it; so
// are upper files, ranges or buffers not aligned to directAlign, and
// lower file systems without O_DIRECT or cachestat(2). p holds whole
// pages; a read at the end of the file is short, as pread's is.
func (f *File) ReadFromDisk(p []byte, off int64) (n int, ok bool, err error) {
	if uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directAlign != 0 {
		return 0, false, nil
	}
	err = f.withFd(func(fd int) error {
		if !f.directOK(fd, off, len(p)) {
			return nil
		}
		d := f.directFd(fd)
		if d < 0 {
			return nil
		}
		var rerr error
		n, rerr = unix.Pread(d, p, off)
		if rerr == unix.EINVAL {
			// An alignment the file system asks more of.
			f.dmu.Lock()
			f.noDirect = true
			f.dmu.Unlock()
			n = 0
			return nil
		}
		ok = true
		return rerr
	})
	return n, ok, err
}

// FromDisk reports whether ReadFromDisk would read [off, off+size) from
// the disk now: a caller may serve such reads side by side.
func (f *File) FromDisk(off int64, size int) bool {
	var ok bool
	// On an error ok stays false: the read is served in line, and meets
	// the error itself (withFd again), which it returns.
	_ = f.withFd(func(fd int) error {
		ok = f.directOK(fd, off, size)
		return nil
	})
	return ok
}

// directOK reports whether a read of [off, off+size) of descriptor fd,
// f's current one, goes to the disk with O_DIRECT. f.mu is held.
func (f *File) directOK(fd int, off int64, size int) bool {
	if f.up || off%directAlign != 0 || size%directAlign != 0 {
		return false
	}
	f.dmu.Lock()
	no := f.noDirect
	f.dmu.Unlock()
	return !no && uncached(fd, off, size)
}

// uncached reports whether the page cache holds none of fd's bytes in
// [off, off+size): cachestat(2), which starts no I/O (a RWF_NOWAIT read
// would start readahead).
func uncached(fd int, off int64, size int) bool {
	var st unix.Cachestat_t
	r := unix.CachestatRange{Off: uint64(off), Len: uint64(size)}
	if unix.Cachestat(uint(fd), &r, &st, 0) != nil {
		return false
	}
	return st.Cache == 0 && st.Dirty == 0 && st.Writeback == 0
}

// directFd returns the O_DIRECT descriptor of f's lower file, whose
// descriptor (f.f) is fd, opening it at the first call, or -1 when the
// lower file system has no O_DIRECT. It is opened by the lower path, so
// it must be the same file as fd: a file replaced in the project since
// (git checkout renames new files over old ones) is read through fd.
func (f *File) directFd(fd int) int {
	f.dmu.Lock()
	defer f.dmu.Unlock()
	if f.noDirect {
		return -1
	}
	if f.direct == nil {
		d, err := f.n.view.openLower(f.lower, unix.O_RDONLY|unix.O_DIRECT)
		if err != nil {
			f.noDirect = true
			return -1
		}
		var a, b unix.Stat_t
		if unix.Fstat(fd, &a) != nil || unix.Fstat(int(d.Fd()), &b) != nil || a.Dev != b.Dev || a.Ino != b.Ino {
			d.Close()
			f.noDirect = true
			return -1
		}
		f.direct = d
	}
	return int(f.direct.Fd())
}

// Dup returns a new descriptor of the file's current data (following a
// copy-up, as ReadAt does), for a reader that outlives the call: the
// caller closes it. A descriptor of a lower file is read-only.
func (f *File) Dup() (fd int, err error) {
	err = f.withFd(func(d int) error {
		var derr error
		fd, derr = unix.FcntlInt(uintptr(d), unix.F_DUPFD_CLOEXEC, 0)
		return derr
	})
	return fd, err
}

// WriteAt writes to the file (which is upper).
func (f *File) WriteAt(p []byte, off int64) (n int, err error) {
	if !f.writable {
		return 0, unix.EBADF
	}
	err = f.withFd(func(fd int) error {
		return f.n.view.growFd(f.n, fd, endAt(off+int64(len(p))), true, func(maxEnd int64) (int64, error) {
			q := p
			if maxEnd >= 0 {
				if maxEnd <= off {
					return -1, errBytesQuota
				}
				q = p[:min(int64(len(p)), maxEnd-off)]
			}
			var werr error
			n, werr = unix.Pwrite(fd, q, off)
			return -1, werr
		})
	})
	return n, err
}

// CopyTo copies n bytes to dst with copy_file_range(2).
func (f *File) CopyTo(offIn int64, dst *File, offOut int64, n int) (int, error) {
	if !dst.writable {
		return 0, unix.EBADF
	}
	if err := f.Wait(offIn, n); err != nil {
		return 0, err
	}
	dfd := dst.Fd()
	var done int
	err := f.withFd(func(fd int) error {
		return dst.n.view.growFd(dst.n, dfd, endAt(offOut+int64(n)), true, func(maxEnd int64) (int64, error) {
			size := n
			if maxEnd >= 0 {
				if maxEnd <= offOut {
					return -1, errBytesQuota
				}
				size = int(min(int64(n), maxEnd-offOut))
			}
			var err error
			done, err = unix.CopyFileRange(fd, &offIn, dfd, &offOut, size, 0)
			return -1, err
		})
	})
	return done, err
}

// Lseek serves SEEK_DATA and SEEK_HOLE on the current data. An object
// being fetched is data from end to end, as it is once fetched (its
// missing bytes are holes only until they arrive).
func (f *File) Lseek(off int64, whence int) (pos int64, err error) {
	if st := f.streamOf(); st != nil && !st.Done() {
		switch {
		case off < 0:
			return 0, unix.EINVAL
		case off >= st.Size():
			return 0, unix.ENXIO
		case whence == unix.SEEK_HOLE:
			return st.Size(), nil
		}
		return off, nil
	}
	err = f.withFd(func(fd int) error {
		pos, err = unix.Seek(fd, off, whence)
		return err
	})
	return pos, err
}

// Allocate is fallocate(2) on the (upper) file.
func (f *File) Allocate(mode uint32, off, size int64) error {
	if !f.writable {
		return unix.EBADF
	}
	var endOf func(int64) int64
	switch {
	case mode&unix.FALLOC_FL_KEEP_SIZE != 0:
		// The size stays (a hole punched, blocks kept beyond the end):
		// bytes count st_size.
	case mode&unix.FALLOC_FL_INSERT_RANGE != 0:
		endOf = func(cur int64) int64 { return cur + size }
	default:
		endOf = endAt(off + size)
	}
	return f.withFd(func(fd int) error {
		return f.n.view.growFd(f.n, fd, endOf, false, func(int64) (int64, error) {
			return -1, unix.Fallocate(fd, mode, off, size)
		})
	})
}

// Sync flushes the file's data (and, unless datasync, its attributes)
// and makes the view's metadata durable.
func (f *File) Sync(datasync bool) error {
	err := f.withFd(func(fd int) error {
		if datasync {
			return unix.Fdatasync(fd)
		}
		return unix.Fsync(fd)
	})
	if err != nil {
		return err
	}
	return f.n.view.cfg.Sync()
}

// Pin marks f as used by the kernel directly (FUSE passthrough), and
// reports whether it may be: only a file open on its node's current
// upper object, which no snapshot shares, may. While a file is pinned
// its object stays the node's own: a snapshot gives itself a clone (as
// for a file open for writing), so no change ever thaws the node away
// from the object the kernel uses. A file that cannot be pinned is
// served by the daemon, and follows its node.
func (f *File) Pin() bool {
	v := f.n.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pinned {
		return true
	}
	if !f.up || f.lazy || f.f == nil || f.n.dataGen.Load() != f.gen || f.stream != nil && !f.stream.Done() {
		return false
	}
	v.nodesMu.Lock()
	defer v.nodesMu.Unlock()
	// A node a Reload cut loose is pinned only while it already is: the
	// kernel passes every open of its inode through to the backing file
	// it has, and refuses any other open (a reopen through /proc/PID/fd/N).
	// The object stays as much the node's own as it was: a Reload never
	// hands it to anyone, and the safety snapshot of a restore cloned it.
	if f.n.stale && f.n.pins == 0 || !f.n.stale && f.n.entry != nil && v.frozenLocked(f.n.entry) {
		return false
	}
	f.n.pins++
	v.writing[f.n] = struct{}{}
	f.pinned = true
	return true
}

// Release closes the file. The caller then calls Forget(node, 0): an
// unlinked node's object goes when its last file and kernel reference
// are gone.
func (f *File) Release() error {
	f.mu.Lock()
	var err error
	if f.f != nil {
		err = f.f.Close()
	}
	f.f, f.lazy = nil, false
	if f.stream != nil {
		// The fetch goes on only while some file reads it (or a caller
		// needs the whole object): backstore.Stream.Close.
		f.stream.Close()
	}
	f.dmu.Lock()
	if f.direct != nil {
		f.direct.Close()
		f.direct = nil
	}
	f.dmu.Unlock()
	pinned := f.pinned
	f.pinned = false
	f.mu.Unlock()
	v := f.n.view
	v.nodesMu.Lock()
	f.n.opens--
	if f.writable {
		f.n.writers--
	}
	if pinned {
		f.n.pins--
	}
	if f.n.writers == 0 && f.n.pins == 0 {
		delete(v.writing, f.n)
		if len(v.writing) == 0 && v.released != nil {
			close(v.released)
			v.released = nil
		}
	}
	v.nodesMu.Unlock()
	return err
}

// releaseWait bounds awaitReleases: the kernel sends RELEASE when
// close(2) returns, so what a program just closed comes within a few
// milliseconds even under load; a file still open after it is open.
const releaseWait = 50 * time.Millisecond

// releaseWaitHook, when set (tests), is called by awaitReleases before
// it waits.
var releaseWaitHook func()

// awaitReleases waits until no file of the view is open for writing,
// or releaseWait has passed: the kernel tells the daemon of a close
// after close(2) returns, so a file a program wrote and closed just
// before asking for an apply may still count as open, and apply would
// keep it as a change of the branch.
func (v *FS) awaitReleases() {
	v.nodesMu.Lock()
	if len(v.writing) == 0 {
		v.nodesMu.Unlock()
		return
	}
	if v.released == nil {
		v.released = make(chan struct{})
	}
	ch := v.released
	v.nodesMu.Unlock()
	if releaseWaitHook != nil {
		releaseWaitHook()
	}
	t := time.NewTimer(releaseWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// Sync makes the view's committed metadata durable.
func (v *FS) Sync() error { return v.cfg.Sync() }

// endAt is growFd's endOf for an operation that extends a file to end.
func endAt(end int64) func(int64) int64 { return func(int64) int64 { return end } }

// truncate sets the size of n's data through fd (a descriptor of its
// object), within the byte limit (quota.go).
func (v *FS) truncate(n *Node, fd int, size int64) error {
	return v.growFd(n, fd, endAt(size), false, func(int64) (int64, error) { return -1, unix.Ftruncate(fd, size) })
}

// truncateLocked is truncate with v.mu held (shared is enough).
func (v *FS) truncateLocked(n *Node, fd int, size int64) error {
	return v.growFdLocked(n, fd, endAt(size), false, func(int64) (int64, error) { return -1, unix.Ftruncate(fd, size) })
}
