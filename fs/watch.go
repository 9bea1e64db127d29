package fs

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/overlay"
)

// watchBatch is how long the watcher gathers lower changes before it
// tells the kernel: one invalidation per name for a burst of writes.
const watchBatch = 100 * time.Millisecond

// watchMask is what the watcher hears about: names appearing, going or
// moving in a watched lower directory, and changes of a name's
// attributes or data.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DONT_FOLLOW | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// lowerWatch makes edits to the lower directory from outside the mount
// visible despite the kernel's long cache lifetimes. It watches (with
// inotify) the lower directory of every directory node the kernel
// holds, and when a name there changes, drops what the kernel cached
// for it: the entry (positive or negative), the attributes and data of
// its node, the directory's attributes. Names the mount has changed
// (an upper entry) are left alone: the mount's version wins.
//
// Lock order: lowerWatch.mu is taken alone; the kernel is notified with
// no lock held.
type lowerWatch struct {
	s    *Server
	file *os.File // the inotify fd

	mu    sync.Mutex
	dirs  map[int32]map[uint64]*overlay.Node // wd → kernel node id → dir node
	wdOf  map[uint64]int32                   // kernel node id → wd
	queue map[change]bool
	kick  chan struct{}
	done  chan struct{}
}

type change struct {
	wd   int32
	name string // "" for the directory itself
}

// startLowerWatch starts the watcher; the mount works without one (a
// warning in the log) when inotify is not available.
func startLowerWatch(s *Server) (*lowerWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	w := &lowerWatch{
		s:     s,
		file:  os.NewFile(uintptr(fd), "inotify"),
		dirs:  map[int32]map[uint64]*overlay.Node{},
		wdOf:  map[uint64]int32{},
		queue: map[change]bool{},
		kick:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	go w.read()
	go w.flushLoop()
	return w, nil
}

// add watches the lower directory of dir node n, known to the kernel
// as id.
func (w *lowerWatch) add(id uint64, n *overlay.Node) {
	if w == nil {
		return
	}
	rel, ok := n.FS().LowerDir(n)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.wdOf[id]; ok {
		return
	}
	// Through the view's descriptor of the lower root: under agentfs
	// run the lower path itself is covered by this very mount.
	wd, err := unix.InotifyAddWatch(int(w.file.Fd()), n.FS().LowerPath(rel), watchMask)
	if err != nil {
		// ENOSPC: out of watches (fs.inotify.max_user_watches); the
		// directory still works, its outside edits show late.
		w.s.log.Debug("watching a lower directory", "dir", rel, "err", err)
		return
	}
	set := w.dirs[int32(wd)]
	if set == nil {
		set = map[uint64]*overlay.Node{}
		w.dirs[int32(wd)] = set
	}
	set[id] = n
	w.wdOf[id] = int32(wd)
}

// remove stops watching for node id (the kernel forgot it).
func (w *lowerWatch) remove(id uint64) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, ok := w.wdOf[id]
	if !ok {
		return
	}
	delete(w.wdOf, id)
	set := w.dirs[wd]
	delete(set, id)
	if len(set) == 0 {
		delete(w.dirs, wd)
		// EINVAL when the kernel dropped the watch already (its
		// directory went: IN_IGNORED): nothing is left to remove.
		_, _ = unix.InotifyRmWatch(int(w.file.Fd()), uint32(wd))
	}
}

// close stops the watcher.
func (w *lowerWatch) close() {
	if w == nil {
		return
	}
	close(w.done)
	w.file.Close()
}

// read queues the changes inotify reports.
func (w *lowerWatch) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.s.log.Warn("reading lower changes", "err", err)
			}
			return
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				// Lost events: every watched directory may have changed.
				for wd := range w.dirs {
					w.queue[change{wd: wd}] = true
				}
				continue
			}
			if ev.Mask&unix.IN_IGNORED != 0 {
				continue
			}
			name := string(bytes.TrimRight(nameBytes, "\x00"))
			w.queue[change{wd: ev.Wd, name: name}] = true
		}
		w.mu.Unlock()
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// flushLoop tells the kernel about queued changes, one batch at a time.
func (w *lowerWatch) flushLoop() {
	for {
		select {
		case <-w.done:
			return
		case <-w.kick:
		}
		select {
		case <-w.done:
			return
		case <-time.After(watchBatch):
		}
		w.flush()
	}
}

type invalidation struct {
	dir  uint64 // kernel node id of the directory
	node *overlay.Node
	name string
}

func (w *lowerWatch) flush() {
	w.mu.Lock()
	var todo []invalidation
	for c := range w.queue {
		for id, n := range w.dirs[c.wd] {
			if n == n.FS().Root() {
				id = fuse.FUSE_ROOT_ID // every view's root is node 1 to the kernel
			}
			todo = append(todo, invalidation{dir: id, node: n, name: c.name})
		}
	}
	clear(w.queue)
	w.mu.Unlock()
	for _, iv := range todo {
		if iv.name == "" {
			w.s.notifyInode(iv.dir, 0, 0)
			continue
		}
		v := iv.node.FS()
		if rel, ok := v.LowerDir(iv.node); ok {
			v.LowerDirChanged(rel)
		}
		child, shown := v.LowerChild(iv.node, iv.name)
		if !shown {
			continue
		}
		if child != nil && v.KeepsMount(child) {
			// Something may be mounted over it: its name stays
			// (invalidating it would detach the mount).
			w.s.notifyInode(iv.dir, -1, 0)
			continue
		}
		if child != nil && w.s.writeback && child.Mode() == unix.S_IFREG {
			// The kernel keeps its own size and times of a file it
			// knows: only a new node (inode) shows the new ones.
			v.CutLooseLower(child)
		}
		w.s.notifyEntry(iv.dir, iv.name)
		w.s.notifyInode(iv.dir, -1, 0)
		if child != nil {
			if st := w.s.srv.InodeNotify(child.ID, 0, 0); st != fuse.OK && st != fuse.ENOENT {
				w.s.log.Debug("invalidating a lower file", "name", iv.name, "status", st)
			}
		}
	}
}
