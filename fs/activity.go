package fs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/overlay"
)

// # Activity
//
// With Options.Activity set, the server reports what programs do in the
// mount: one Event per successful mutating operation, after the
// operation is done (and, with Options.ActivityReads, lookups, opens
// for reading and directory listings). Record runs on the FUSE path: it
// must return at once (queue the event, never wait for I/O).
//
// Writes are reported once per open file, not per write: at the first
// write through the daemon, or, for a file opened for writing with
// passthrough (the kernel then writes to the backing file directly and
// the daemon never sees the writes), when it is opened. A writable open
// with O_TRUNC is a "truncate", and the writes through it are part of
// it, as the writes to a new file are part of its "create". When a file
// opened for writing is released, a CloseWrite event follows (not a
// change in itself: it tells that a writer finished; the kernel sends
// the release after close(2) returns).

// Activity receives the events of a mount.
type Activity interface {
	Record(Event)
}

// EventClass says what kind of event an Event is.
type EventClass uint8

// Event classes.
const (
	// Change is a successful mutating operation.
	Change EventClass = iota
	// Read is a lookup (one that found the name, or did not), an open
	// for reading or a directory listing
	// (reported with Options.ActivityReads only).
	Read
	// CloseWrite is the release of a file opened for writing.
	CloseWrite
)

// Operation names of events.
const (
	OpCreate      = "create"
	OpMknod       = "mknod"
	OpMkdir       = "mkdir"
	OpSymlink     = "symlink"
	OpLink        = "link"
	OpUnlink      = "unlink"
	OpRmdir       = "rmdir"
	OpRename      = "rename"
	OpSetattr     = "setattr" // chmod, chown, truncate, utimes
	OpSetxattr    = "setxattr"
	OpRemovexattr = "removexattr"
	OpWrite       = "write"
	OpTruncate    = "truncate" // an open with O_TRUNC
	OpFallocate   = "fallocate"
	OpCopyRange   = "copy_file_range"
	OpLookup      = "lookup"
	OpOpen        = "open"
	OpReaddir     = "readdir"
	OpClose       = "close"
	// OpQuota is an operation refused with EDQUOT: the branch reached
	// its limit of files or bytes (Attrs says which). It is reported
	// once, until the usage goes down again (overlay.FS.QuotaReport).
	OpQuota = "quota"
)

// DeletedPath is the path of an event on a file that is no longer in
// the tree (unlinked while open).
const DeletedPath = "(deleted)"

// Event is one operation a process did in the mount.
type Event struct {
	Time  time.Time
	Class EventClass
	// Pid is the caller's thread id as the kernel reports it (the FUSE
	// request header carries the thread, not the thread group); 0 when
	// the kernel does not say.
	Pid uint32
	Uid uint32
	Op  string
	// Path is the path the operation acted on, relative to the mount
	// root ("." for the root): for rename the old path, for link the
	// existing file, for copy_file_range the source.
	Path string
	// Path2 is the new path of a rename, the new name of a link, the
	// destination of copy_file_range.
	Path2 string
	// Branch is the branch whose view the operation went to.
	Branch string
	// Attrs says which attributes a setattr changed: "mode", "uid",
	// "gid", "size", "atime", "mtime" joined by ','; for a quota event,
	// which limit was reached: "files" or "bytes".
	Attrs string
}

// record reports op on name inside dir ("" for dir itself) when
// Options.Activity is set and, for reads, Options.ActivityReads.
func (s *Server) record(h *fuse.InHeader, op string, dir *overlay.Node, name string) {
	s.recordEvent(h, op, dir, name, nil, "", "")
}

// recordErr is record when err is nil; it returns err, so that an
// operation's return statement can report it.
func (s *Server) recordErr(err error, h *fuse.InHeader, op string, dir *overlay.Node, name string) error {
	if err == nil {
		s.record(h, op, dir, name)
	}
	return err
}

// recordRename reports a rename (or a link: from is then the existing
// node and fromName "") when err is nil; it returns err.
func (s *Server) recordRename(err error, h *fuse.InHeader, op string, from *overlay.Node, fromName string, to *overlay.Node, toName string) error {
	if err == nil {
		s.recordEvent(h, op, from, fromName, to, toName, "")
	}
	return err
}

// quotaErr reports err when it is the first EDQUOT of n's view since
// its usage last went down (name in n as for record); it returns err.
func (s *Server) quotaErr(err error, h *fuse.InHeader, n *overlay.Node, name string) error {
	if err == nil || s.opts.Activity == nil {
		return err
	}
	if limit, ok := n.FS().QuotaReport(err); ok {
		s.recordEvent(h, OpQuota, n, name, nil, "", limit)
	}
	return err
}

// recordSetattr reports a setattr, naming the attributes it changed.
func (s *Server) recordSetattr(in *fuse.SetAttrIn, n *overlay.Node) {
	if s.opts.Activity == nil || s.writeback && in.Valid&^fuse.FATTR_LOCKOWNER == flushedTimes {
		return
	}
	s.recordEvent(&in.InHeader, OpSetattr, n, "", nil, "", setattrNames(in.Valid))
}

// flushedTimes is what a SETATTR sets when the kernel sends the times of
// a file it wrote through its writeback cache (at close or writeback):
// part of the write, not a change of its own. A program's utimes never
// comes with a file handle.
const flushedTimes = fuse.FATTR_MTIME | fuse.FATTR_CTIME | fuse.FATTR_FH

// recordWrite reports the first successful write through an open
// file (see "Activity" above): later calls for the same handle do
// nothing.
func (s *Server) recordWrite(h *fuse.InHeader, hd *handle, err error) {
	if s.opts.Activity == nil || err != nil || hd.wrote.Swap(true) {
		return
	}
	s.record(h, OpWrite, hd.ino.n, "")
}

// recordCopy reports the first successful copy_file_range into an open
// file, as recordWrite does for writes.
func (s *Server) recordCopy(in *fuse.CopyFileRangeIn, src, dst *handle, err error) {
	if s.opts.Activity == nil || err != nil || dst.wrote.Swap(true) {
		return
	}
	s.recordEvent(&in.InHeader, OpCopyRange, src.ino.n, "", dst.ino.n, "", "")
}

// recordOpen reports an open: a truncate for O_TRUNC, a write for an
// open for writing whose writes the kernel passes through, a read
// otherwise. A writable handle that is not passed through reports its
// first write (recordWrite).
func (s *Server) recordOpen(in *fuse.OpenIn, hd *handle) {
	if s.opts.Activity == nil {
		return
	}
	writable := in.Flags&unix.O_ACCMODE != unix.O_RDONLY
	switch {
	case in.Flags&unix.O_TRUNC != 0 && writable:
		s.record(&in.InHeader, OpTruncate, hd.ino.n, "")
		hd.wrote.Store(true) // what follows rewrites the file: part of the truncate
	case writable && (hd.pt || s.writeback):
		// The kernel writes on its own (passthrough), or later on
		// behalf of nobody in particular (writeback cache): the open
		// is the last request that says who writes.
		s.recordWrite(&in.InHeader, hd, nil)
	case !writable:
		s.record(&in.InHeader, OpOpen, hd.ino.n, "")
	}
}

// recordClose reports the release of a file opened for writing.
func (s *Server) recordClose(in *fuse.ReleaseIn, hd *handle) {
	if s.opts.Activity == nil || !hd.f.Writable() {
		return
	}
	s.recordEvent(&in.InHeader, OpClose, hd.ino.n, "", nil, "", "")
}

// eventClass returns the class of an operation.
func eventClass(op string) EventClass {
	switch op {
	case OpLookup, OpOpen, OpReaddir:
		return Read
	case OpClose:
		return CloseWrite
	}
	return Change
}

// recordEvent builds and hands over one event. Paths come from the
// nodes' views, so they are right whichever branch view a node is in.
func (s *Server) recordEvent(h *fuse.InHeader, op string, n *overlay.Node, name string, n2 *overlay.Node, name2, attrs string) {
	a := s.opts.Activity
	if a == nil {
		return
	}
	class := eventClass(op)
	if class == Read && !s.opts.ActivityReads {
		return
	}
	ev := Event{Time: time.Now(), Class: class, Pid: h.Pid, Uid: h.Uid, Op: op, Attrs: attrs}
	view := n.FS()
	ev.Branch = view.BranchName()
	ev.Path = nodePath(view, n, name)
	if n2 != nil {
		ev.Path2 = nodePath(n2.FS(), n2, name2)
	}
	a.Record(ev)
}

// nodePath is the path of name in dir, or of dir itself for name ""
// ("." for the root); DeletedPath for a node no longer in the tree (a
// file unlinked while open).
func nodePath(view *overlay.FS, dir *overlay.Node, name string) string {
	var p string
	var ok bool
	if name == "" {
		p, ok = view.Path(dir)
	} else {
		p, ok = view.ChildPath(dir, name)
	}
	switch {
	case !ok:
		return DeletedPath
	case p == "":
		return "."
	}
	return p
}

// setattrNames names the attributes a SETATTR request changes.
func setattrNames(valid uint32) string {
	names := ""
	for _, a := range []struct {
		bit  uint32
		name string
	}{
		{fuse.FATTR_MODE, "mode"}, {fuse.FATTR_UID, "uid"}, {fuse.FATTR_GID, "gid"},
		{fuse.FATTR_SIZE, "size"}, {fuse.FATTR_ATIME, "atime"}, {fuse.FATTR_MTIME, "mtime"},
	} {
		if valid&a.bit != 0 {
			if names != "" {
				names += ","
			}
			names += a.name
		}
	}
	return names
}
