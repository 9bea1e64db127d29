package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/remote"
)

// # Pull
//
// Pull makes a session pushed from another machine a store of this
// machine, over this machine's checkout of the project: it reads the
// session's document and its snapshots', fetches the objects they name
// that are not fetched yet (into PullOptions.Objects, checked, so that
// an interrupted pull resumes), then builds a new store: for each
// snapshot, oldest first, the branch main is reset to the project and
// the snapshot's changes are written into it through the overlay, as a
// program would write them through the mount, and a snapshot of it is
// taken (with the same label and kind; a new id and time); then each
// branch gets its pushed state the same way, or is restored to a
// pulled snapshot when its state is that snapshot's.
//
// The bases that apply's conflict check reads are what this machine's
// project holds at each changed path when the change is written, as
// for any change. Where that differs from what the pushing machine's
// project held there (compared by content: type, size, SHA-256 of a
// file, a symlink's target, not by inode numbers or times), the pull
// records a base that can never match, so that apply reports the path
// as a conflict (and --force overrides it): the change was made over
// other contents than this checkout's. The snapshots keep these bases
// too, so that a restore of one and then an apply see the conflicts.

// PullOptions are the arguments of Pull.
type PullOptions struct {
	Remote   *remote.Remote
	Session  string // the session's id in the remote
	Store    string // the store to build: it must not exist, or be empty
	Project  string // this machine's checkout (a clean absolute path)
	Objects  string // where fetched objects stay until the store is built
	Parallel int
	Progress remote.ProgressFunc
	Logger   *slog.Logger
	Version  string
}

// PullResult says what a pull made.
type PullResult struct {
	Doc       remote.SessionDoc
	Snapshots map[string]string // the pushed id → the id here
	Branches  []string
	Fetched   remote.FetchStats
	// Conflicts are the paths whose project file here differs from
	// the pushing machine's: apply reports them as conflicts.
	Conflicts []string
}

// ReadSessionDocs reads a session's document and those of its
// snapshots and branches (by name).
func ReadSessionDocs(ctx context.Context, r *remote.Remote, id string) (remote.SessionDoc, map[string]*remote.SnapshotDoc, error) {
	var s remote.SessionDoc
	if err := r.GetDoc(ctx, remote.KindSession, id, &s); err != nil {
		return s, nil, err
	}
	if s.Format != remote.Format {
		return s, nil, fmt.Errorf("session %s in the remote has format %d, which this agentfs (format %d) does not read: use a newer agentfs", id, s.Format, remote.Format)
	}
	docs := map[string]*remote.SnapshotDoc{}
	names := slices.Clone(s.Snapshots)
	for _, b := range s.Branches {
		names = append(names, b.State)
	}
	for _, n := range names {
		d, err := r.GetSnapshotDoc(ctx, n)
		if err != nil {
			return s, nil, err
		}
		if d.Format != remote.Format {
			return s, nil, fmt.Errorf("snapshot %s in the remote has format %d, which this agentfs (format %d) does not read: use a newer agentfs", n, d.Format, remote.Format)
		}
		docs[n] = d
	}
	return s, docs, nil
}

// objectSums returns the objects docs name, each once.
func objectSums(docs map[string]*remote.SnapshotDoc) ([]remote.Sum, error) {
	seen := map[remote.Sum]bool{}
	var out []remote.Sum
	for name, d := range docs {
		for _, c := range d.Changes {
			if c.Object == "" {
				continue
			}
			s, err := remote.ParseSum(c.Object)
			if err != nil {
				return nil, fmt.Errorf("snapshot %s, %s: %v", name, c.Path, err)
			}
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// Pull builds the store of a pushed session (see above).
func Pull(ctx context.Context, o PullOptions) (PullResult, error) {
	var res PullResult
	doc, docs, err := ReadSessionDocs(ctx, o.Remote, o.Session)
	if err != nil {
		return res, err
	}
	res.Doc = doc
	sums, err := objectSums(docs)
	if err != nil {
		return res, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	res.Fetched, err = o.Remote.Fetch(ctx, sums, o.Objects, o.Parallel, o.Progress)
	log.Info("pull: fetched", "objects", res.Fetched.Fetched, "bytes", res.Fetched.FetchedBytes, "skipped", res.Fetched.Skipped,
		"seconds", time.Since(start).Seconds(), "err", err)
	if err != nil {
		return res, err
	}
	start = time.Now()
	w, err := Open(Options{Store: o.Store, Lower: o.Project, Session: true, Version: o.Version, Logger: o.Logger})
	if err != nil {
		return res, err
	}
	_, err = locked(w, func() (struct{}, error) { return struct{}{}, w.pullLocked(o, doc, docs, &res) })
	if cerr := w.Close(); err == nil && cerr != nil {
		err = cerr
	}
	log.Info("pull: store built", "snapshots", len(res.Snapshots), "branches", len(res.Branches), "conflicts", len(res.Conflicts),
		"seconds", time.Since(start).Seconds(), "err", err)
	return res, err
}

// pullLocked writes the pulled snapshots and branches into w. opMu is
// held.
func (w *Workspace) pullLocked(o PullOptions, doc remote.SessionDoc, docs map[string]*remote.SnapshotDoc, res *PullResult) error {
	main := w.view
	if main.Layer().Name() != "main" {
		return fmt.Errorf("the new store shows branch %s, not main", main.Layer().Name())
	}
	empty, err := main.Snapshot("pull: the project", branch.KindSafety)
	if err != nil {
		return storeError(err, "pull: taking the empty snapshot")
	}
	defer w.dropSnapshotLocked(empty.ID, "pull")
	im := newImporter(false)
	im.objects = o.Objects
	res.Snapshots = map[string]string{}
	for _, id := range doc.Snapshots {
		d := docs[id]
		if err := im.reset(main, empty); err != nil {
			return err
		}
		if err := im.write(main, d); err != nil {
			return fmt.Errorf("pull: snapshot %s: %w", id, err)
		}
		// The snapshot keeps the bases: a restore of it, then an
		// apply, sees the conflicts too.
		if _, err := im.markConflicts(main, d); err != nil {
			return err
		}
		snap, err := main.Snapshot(d.Label, importKind(d.Kind))
		if err != nil {
			return storeError(err, "pull: taking snapshot of "+id)
		}
		res.Snapshots[id] = snap.ID
	}
	for _, b := range doc.Branches {
		d := docs[b.State]
		v := main
		if b.Name != "main" {
			from := res.Snapshots[b.Origin]
			if from == "" {
				from = empty.ID
			}
			origin, err := w.meta.Snapshot(from)
			if err != nil {
				return storeError(err, "pull: the origin of branch "+b.Name)
			}
			l, err := w.meta.CreateLayer(b.Name, origin)
			if err != nil {
				return storeError(err, "pull: creating branch "+b.Name)
			}
			if v, err = w.viewOf(l); err != nil {
				return err
			}
		}
		// A branch whose state is a pulled snapshot's (main after the
		// post-run snapshot, most often) is restored to it: nothing to
		// write again.
		if same := sameAsSnapshot(d, doc.Snapshots, docs, res.Snapshots); same != "" {
			snap, err := w.meta.Snapshot(same)
			if err != nil {
				return storeError(err, "pull: snapshot "+same)
			}
			if _, err := v.Restore(snap); err != nil {
				return storeError(err, "pull: restoring branch "+b.Name)
			}
		} else {
			if err := im.reset(v, empty); err != nil {
				return err
			}
			if err := im.write(v, d); err != nil {
				return fmt.Errorf("pull: branch %s: %w", b.Name, err)
			}
		}
		conflicts, err := im.markConflicts(v, d)
		if err != nil {
			return err
		}
		if b.Name == "main" {
			res.Conflicts = conflicts
		}
		res.Branches = append(res.Branches, b.Name)
	}
	return nil
}

// markConflicts records, in v's branch, a base that never matches for
// each path of d where this machine's project differs from the pushing
// machine's (see conflicts), and returns those paths, sorted.
func (im *importer) markConflicts(v *overlay.FS, d *remote.SnapshotDoc) ([]string, error) {
	bases, err := im.conflicts(v, d)
	if err != nil || len(bases) == 0 {
		return nil, err
	}
	if err := v.SetBases(bases); err != nil {
		return nil, storeError(err, "pull: recording the conflicts")
	}
	var paths []string
	for p := range bases {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths, nil
}

// sameAsSnapshot returns the local id of the newest pulled snapshot
// whose changes are d's, or "".
func sameAsSnapshot(d *remote.SnapshotDoc, order []string, docs map[string]*remote.SnapshotDoc, local map[string]string) string {
	for i := len(order) - 1; i >= 0; i-- {
		if s := docs[order[i]]; s != nil && slices.EqualFunc(s.Changes, d.Changes, sameChange) {
			return local[order[i]]
		}
	}
	return ""
}

// sameChange reports whether two pulled changes are the same.
func sameChange(a, b remote.Change) bool {
	if (a.Base == nil) != (b.Base == nil) || a.Base != nil && *a.Base != *b.Base {
		return false
	}
	if !maps.EqualFunc(a.Xattrs, b.Xattrs, bytes.Equal) {
		return false
	}
	a.Base, b.Base, a.Xattrs, b.Xattrs = nil, nil, nil, nil
	return reflect.DeepEqual(a, b)
}

// importKind is the kind a pulled snapshot is taken with.
func importKind(kind string) string {
	switch kind {
	case branch.KindManual, branch.KindAuto, branch.KindGit, branch.KindBuild, branch.KindIdle, branch.KindSafety, branch.KindPreRun, branch.KindPostRun:
		return kind
	}
	return branch.KindManual
}

// importer writes pulled changes into views.
type importer struct {
	objects string // the fetched objects
	asRoot  bool   // owners are set (else the files are the caller's)
	// self is the process's user and group: the files' owner unless
	// asRoot (newImporter).
	self overlay.Caller
	// lazy: a regular file is made with its size and no data, its
	// object pending (backstore/pending.go) on the SHA-256 in pending.
	lazy    bool
	pending map[string]string
	// deferred are the objects given out ahead for the new files of a
	// lazy import (path → id): made at their first use
	// (backstore/deferred.go). Those no change took are dropped.
	deferred map[string]string
	// queue holds new files of deferred objects waiting to be named all
	// at once in their directory (overlay.FS.AdoptFiles): one commit
	// for up to maxQueue files of a directory, not one per file. Any
	// other change flushes it first (it may name a queued file).
	queue struct {
		dir        *overlay.Node // with a reference while names are queued
		path       string        // dir's path
		names, ids []string
	}
}

// newImporter returns an importer (lazy: see importer.lazy).
func newImporter(lazy bool) *importer {
	return &importer{lazy: lazy, asRoot: os.Geteuid() == 0, self: overlay.Caller{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}}
}

// reset makes v's branch the project again.
func (im *importer) reset(v *overlay.FS, empty branch.Snapshot) error {
	if _, err := v.Restore(empty); err != nil {
		return storeError(err, "pull: resetting the branch")
	}
	return nil
}

// write makes each change of d in v, then gives the directories their
// attributes (their times would move with every name made in them).
func (im *importer) write(v *overlay.FS, d *remote.SnapshotDoc) error {
	var dirs []remote.Change
	defer im.dropQueue(v)
	for _, c := range d.Changes {
		if err := im.change(v, c); err != nil {
			return fmt.Errorf("%s: %w", c.Path, err)
		}
		if c.Type == "dir" {
			dirs = append(dirs, c)
		}
	}
	if err := im.flush(v); err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		c := dirs[i]
		if err := im.withNode(v, c.Path, func(n *overlay.Node) error { return im.setAttrs(v, n, c) }); err != nil {
			return fmt.Errorf("%s: %w", c.Path, err)
		}
	}
	return nil
}

// withNode calls fn with the node at p in v (ENOENT when none).
func (im *importer) withNode(v *overlay.FS, p string, fn func(n *overlay.Node) error) error {
	dir, name, err := im.parent(v, p)
	if err != nil {
		return err
	}
	defer v.Forget(dir, 1)
	n, _, err := v.Lookup(dir, name)
	if err != nil {
		return err
	}
	defer v.Forget(n, 1)
	return fn(n)
}

// parent returns the node of p's directory (with a reference to drop)
// and p's name.
func (im *importer) parent(v *overlay.FS, p string) (*overlay.Node, string, error) {
	dir := v.Root()
	v.Ref(dir)
	names := splitPath(p)
	if len(names) == 0 {
		v.Forget(dir, 1)
		return nil, "", fmt.Errorf("the root cannot be pulled as a change")
	}
	for _, name := range names[:len(names)-1] {
		n, _, err := v.Lookup(dir, name)
		v.Forget(dir, 1)
		if err != nil {
			return nil, "", err
		}
		dir = n
	}
	return dir, names[len(names)-1], nil
}

func splitPath(p string) []string {
	var out []string
	for _, name := range strings.Split(p, "/") {
		if name != "" {
			out = append(out, name)
		}
	}
	return out
}

// change makes change c in v.
func (im *importer) change(v *overlay.FS, c remote.Change) error {
	_, queued := im.deferred[c.Path]
	if !queued || len(c.Xattrs) > 0 {
		if err := im.flush(v); err != nil {
			return err
		}
	}
	var dir *overlay.Node
	var name string
	var err error
	if d, n := splitLast(c.Path); queued && im.queue.dir != nil && n != "" && d == im.queue.path {
		// The next file of the queue's directory: no walk from the root.
		dir, name = im.queue.dir, n
		v.Ref(dir)
	} else {
		dir, name, err = im.parent(v, c.Path)
	}
	if err != nil {
		return err
	}
	defer v.Forget(dir, 1)
	old, st, err := v.Lookup(dir, name)
	switch {
	case err == nil:
		defer v.Forget(old, 1)
	case errors.Is(err, unix.ENOENT):
		old = nil
	default:
		return err
	}
	if c.Kind == "deleted" || c.Type == "" {
		if old == nil {
			return nil
		}
		return im.remove(v, dir, name, old, &st)
	}
	if c.Type == "file" && c.Link != "" {
		return im.link(v, dir, name, old, &st, c)
	}
	isDir := old != nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
	keep := old != nil && (c.Type == "dir" && isDir || c.Type == "file" && st.Mode&unix.S_IFMT == unix.S_IFREG)
	if old != nil && !keep {
		if err := im.remove(v, dir, name, old, &st); err != nil {
			return err
		}
	}
	caller := im.self
	if im.asRoot {
		caller = overlay.Caller{Uid: c.Uid, Gid: c.Gid}
	}
	var n *overlay.Node
	switch c.Type {
	case "dir":
		if keep {
			return nil // its attributes at the end
		}
		n, _, err = v.Mkdir(dir, name, c.Mode&07777, caller)
	case "file":
		if id, ok := im.deferred[c.Path]; ok && !keep {
			delete(im.deferred, c.Path)
			if len(c.Xattrs) == 0 {
				return im.enqueue(v, dir, name, id, c)
			}
			return im.adopt(v, dir, name, id, c)
		}
		n, err = im.file(v, dir, name, old, keep, c, caller)
	case "symlink":
		n, _, err = v.Symlink(dir, name, c.Target, caller)
	case "fifo", "socket", "char", "block":
		typ := map[string]uint32{"fifo": unix.S_IFIFO, "socket": unix.S_IFSOCK, "char": unix.S_IFCHR, "block": unix.S_IFBLK}[c.Type]
		n, _, err = v.Mknod(dir, name, typ|c.Mode&07777, c.Rdev, caller)
	default:
		return fmt.Errorf("a file of type %q cannot be pulled", c.Type)
	}
	if err != nil {
		return err
	}
	defer v.Forget(n, 1)
	if c.Type == "dir" {
		return nil
	}
	if im.lazy && c.Type == "file" && !keep {
		// A new placeholder has the mode and owner already (Create) and
		// no xattrs: what is left are c's xattrs and its times.
		return im.setNewAttrs(v, n, c)
	}
	return im.setAttrs(v, n, c)
}

// link makes name in dir another name of the file at c.Link, written
// before it (a hard link of the pushed snapshot), in place of old.
func (im *importer) link(v *overlay.FS, dir *overlay.Node, name string, old *overlay.Node, st *unix.Stat_t, c remote.Change) error {
	return im.withNode(v, c.Link, func(n *overlay.Node) error {
		if v.ObjectID(n) == "" {
			return fmt.Errorf("its link %s is no file written by the pull: the document is damaged", c.Link)
		}
		if old != nil {
			if err := im.remove(v, dir, name, old, st); err != nil {
				return err
			}
		}
		_, err := v.Link(n, dir, name)
		return err
	})
}

// adopt makes name in dir the new file of c, whose object id was given
// out ahead with c's attributes (deferOf), and gives it c's xattrs
// (which make the object: an object is deferred only until something
// needs its inode).
func (im *importer) adopt(v *overlay.FS, dir *overlay.Node, name, id string, c remote.Change) error {
	n, _, err := v.Adopt(dir, name, id)
	if err != nil {
		return err
	}
	defer v.Forget(n, 1)
	return im.setNewXattrs(v, n, c)
}

// maxQueue bounds the files named in one commit (importer.queue).
const maxQueue = 4096

// enqueue queues name in dir, a new file whose object id was given out
// ahead with c's attributes and which has no xattrs, to be named with
// the others of dir (flush).
func (im *importer) enqueue(v *overlay.FS, dir *overlay.Node, name, id string, c remote.Change) error {
	q := &im.queue
	if q.dir != dir || len(q.names) >= maxQueue {
		if err := im.flush(v); err != nil {
			return err
		}
		v.Ref(dir)
		q.dir = dir
		q.path, _ = splitLast(c.Path)
	}
	q.names, q.ids = append(q.names, name), append(q.ids, id)
	return nil
}

// splitLast splits p at its last slash (dir "" when it has none).
func splitLast(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// flush names the queued files (enqueue).
func (im *importer) flush(v *overlay.FS) error {
	q := &im.queue
	if len(q.names) == 0 {
		im.dropQueue(v)
		return nil
	}
	err := v.AdoptFiles(q.dir, q.names, q.ids)
	im.dropQueue(v)
	return err
}

// dropQueue empties the queue, dropping its reference.
func (im *importer) dropQueue(v *overlay.FS) {
	q := &im.queue
	if q.dir != nil {
		v.Forget(q.dir, 1)
	}
	q.dir, q.path, q.names, q.ids = nil, "", nil, nil
}

// deferOf returns the object to give out ahead for c, a change of a
// lazy import, if c makes a regular file of its own (not a hard link).
func (im *importer) deferOf(c remote.Change) (backstore.Deferred, bool) {
	if c.Kind == "deleted" || c.Type != "file" || c.Link != "" {
		return backstore.Deferred{}, false
	}
	if _, err := remote.ParseSum(c.Object); err != nil {
		return backstore.Deferred{}, false // file says so
	}
	d := backstore.Deferred{Key: c.Object, Size: c.Size, Mode: c.Mode & 07777, Atime: c.Mtime, Mtime: c.Mtime}
	if im.asRoot {
		d.Uid, d.Gid = c.Uid, c.Gid
	}
	return d, true
}

// setNewXattrs gives n, a file just made, c's xattrs.
func (im *importer) setNewXattrs(v *overlay.FS, n *overlay.Node, c remote.Change) error {
	for name, val := range c.Xattrs {
		if err := v.Setxattr(n, name, val, 0); err != nil {
			return fmt.Errorf("setting xattr %s: %w", name, err)
		}
	}
	return nil
}

// setNewAttrs gives n, a file just made with c's mode and owner, c's
// xattrs and times.
func (im *importer) setNewAttrs(v *overlay.FS, n *overlay.Node, c remote.Change) error {
	if err := im.setNewXattrs(v, n, c); err != nil {
		return err
	}
	ts := unix.NsecToTimespec(c.Mtime)
	_, err := v.Setattr(n, overlay.SetAttr{Mtime: &ts, Atime: &ts}, nil)
	return err
}

// file writes a regular file's contents from its fetched object: over
// the existing file (keep) or as a new one.
func (im *importer) file(v *overlay.FS, dir *overlay.Node, name string, old *overlay.Node, keep bool, c remote.Change, caller overlay.Caller) (*overlay.Node, error) {
	sum, err := remote.ParseSum(c.Object)
	if err != nil {
		return nil, err
	}
	if im.lazy {
		return im.placeholder(v, dir, name, old, keep, c, caller)
	}
	src, err := os.Open(remote.ObjectPath(im.objects, sum))
	if err != nil {
		return nil, err
	}
	defer func() { _ = src.Close() }()
	var n *overlay.Node
	var f *overlay.File
	if keep {
		if f, err = v.Open(old, unix.O_WRONLY|unix.O_TRUNC); err != nil {
			return nil, err
		}
		v.Ref(old)
		n = old
	} else if n, f, _, err = v.Create(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, c.Mode&07777, caller); err != nil {
		return nil, err
	}
	_, err = io.Copy(&fileWriter{f: f}, src)
	if rerr := f.Release(); err == nil {
		err = rerr
	}
	if err != nil {
		v.Forget(n, 1)
		return nil, err
	}
	return n, nil
}

// placeholder makes a regular file of c's size with no data, whose
// object is to be made pending on c's object.
func (im *importer) placeholder(v *overlay.FS, dir *overlay.Node, name string, old *overlay.Node, keep bool, c remote.Change, caller overlay.Caller) (*overlay.Node, error) {
	var n *overlay.Node
	var f *overlay.File
	var err error
	if keep {
		if f, err = v.Open(old, unix.O_WRONLY|unix.O_TRUNC); err != nil {
			return nil, err
		}
		v.Ref(old)
		n = old
	} else if n, f, _, err = v.Create(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, c.Mode&07777, caller); err != nil {
		return nil, err
	}
	err = unix.Ftruncate(f.Fd(), c.Size)
	if rerr := f.Release(); err == nil {
		err = rerr
	}
	if err != nil {
		v.Forget(n, 1)
		return nil, err
	}
	if im.pending == nil {
		im.pending = map[string]string{}
	}
	im.pending[v.ObjectID(n)] = c.Object
	return n, nil
}

// fileWriter writes to an overlay file from its start, in order.
type fileWriter struct {
	f   *overlay.File
	off int64
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

// setAttrs gives n the xattrs, mode, owner (as root) and times of c,
// and takes away the xattrs c does not have (a file kept from the
// project may have others).
func (im *importer) setAttrs(v *overlay.FS, n *overlay.Node, c remote.Change) error {
	if c.Type != "symlink" {
		if err := im.setXattrs(v, n, c); err != nil {
			return err
		}
	}
	var in overlay.SetAttr
	if c.Type != "symlink" {
		mode := c.Mode & 07777
		in.Mode = &mode
	}
	if im.asRoot {
		uid, gid := c.Uid, c.Gid
		in.Uid, in.Gid = &uid, &gid
	}
	ts := unix.NsecToTimespec(c.Mtime)
	in.Mtime, in.Atime = &ts, &ts
	_, err := v.Setattr(n, in, nil)
	return err
}

// setXattrs makes n's xattrs those of c.
func (im *importer) setXattrs(v *overlay.FS, n *overlay.Node, c remote.Change) error {
	for name, val := range c.Xattrs {
		if err := v.Setxattr(n, name, val, 0); err != nil {
			return fmt.Errorf("setting xattr %s: %w", name, err)
		}
	}
	buf := make([]byte, 64<<10)
	size, err := v.Listxattr(n, buf)
	if errors.Is(err, unix.EOPNOTSUPP) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, name := range strings.Split(string(buf[:size]), "\x00") {
		if _, keep := c.Xattrs[name]; keep || !strings.HasPrefix(name, "user.") {
			continue
		}
		if err := v.Removexattr(n, name); err != nil {
			return fmt.Errorf("removing xattr %s: %w", name, err)
		}
	}
	return nil
}

// remove removes the file at name in dir, a directory with all it
// holds.
func (im *importer) remove(v *overlay.FS, dir *overlay.Node, name string, n *overlay.Node, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return v.Unlink(dir, name)
	}
	ents, err := v.ReadDir(n)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name == "." || e.Name == ".." {
			continue
		}
		c, cst, err := v.Lookup(n, e.Name)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return err
		}
		err = im.remove(v, n, e.Name, c, &cst)
		v.Forget(c, 1)
		if err != nil {
			return err
		}
	}
	return v.Rmdir(dir, name)
}

// conflicts compares, for each change of d, what this machine's
// project holds at its path with what the pushing machine's held
// (Base), by content, and returns a base that can never match for each
// path where they differ.
//
// A path under one the project does not hold as a directory (absent,
// or no directory) is absent too, without a look: so a snapshot pulled
// over a project that holds none of its directories (a new project, an
// empty --lower) costs a look per top-level name, not one per file.
func (im *importer) conflicts(v *overlay.FS, d *remote.SnapshotDoc) (map[string]*branch.Base, error) {
	out := map[string]*branch.Base{}
	noDir := map[string]struct{}{} // project paths that hold no directory
	for _, c := range d.Changes {
		var same bool
		if underNoDir(noDir, c.Path) {
			same = c.Base == nil
		} else {
			var dir bool
			var err error
			same, dir, err = sameAsBase(v.LowerPath(c.Path), c.Base)
			switch {
			case errors.Is(err, unix.ENOTDIR):
				// Something above c.Path is no directory: nothing
				// under its parent is there either.
				if i := strings.LastIndexByte(c.Path, '/'); i > 0 {
					noDir[c.Path[:i]] = struct{}{}
				}
			case errors.Is(err, unix.ENOENT):
			case err != nil:
				return nil, fmt.Errorf("pull: %s in the project: %w", c.Path, err)
			}
			if !dir {
				noDir[c.Path] = struct{}{}
			}
		}
		if same {
			continue
		}
		// A base of the other machine's file: its inode number (0)
		// is none of this machine's, so apply finds it replaced (or
		// deleted); where it had nothing, apply finds a file appeared.
		b := &branch.Base{Seen: 1}
		if c.Base != nil {
			b.Exists, b.Mode, b.Size = true, typeBits(c.Base.Type), c.Base.Size
		}
		out[c.Path] = b
	}
	return out, nil
}

// typeBits is the S_IFMT of a FileInfo type.
func typeBits(t string) uint32 {
	return map[string]uint32{"file": unix.S_IFREG, "dir": unix.S_IFDIR, "symlink": unix.S_IFLNK, "fifo": unix.S_IFIFO,
		"socket": unix.S_IFSOCK, "char": unix.S_IFCHR, "block": unix.S_IFBLK}[t]
}

// projectLstat is the lstat of the conflict check's project files (a
// test counts them).
var projectLstat = unix.Lstat

// underNoDir reports whether a parent of p (a slash-separated path
// relative to the project) is in noDir.
func underNoDir(noDir map[string]struct{}, p string) bool {
	if len(noDir) == 0 {
		return false
	}
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
		if _, ok := noDir[p[:i]]; ok {
			return true
		}
	}
	return false
}

// sameAsBase reports whether the project file at p (a path of this
// machine's project) is what base describes, by content, and whether p
// is a directory in the project. An absent p is what a nil base
// describes: err is then lstat's ENOENT or ENOTDIR, with same set.
func sameAsBase(p string, base *remote.Base) (same, dir bool, err error) {
	var st unix.Stat_t
	err = projectLstat(p, &st)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return base == nil, false, err
	}
	if err != nil {
		return false, true, err
	}
	dir = st.Mode&unix.S_IFMT == unix.S_IFDIR
	same, err = sameStat(p, &st, base)
	return same, dir, err
}

// sameStat is sameAsBase for a project file p whose lstat is st.
func sameStat(p string, st *unix.Stat_t, base *remote.Base) (bool, error) {
	if base == nil || st.Mode&unix.S_IFMT != typeBits(base.Type) {
		return false, nil
	}
	switch base.Type {
	case "file":
		if st.Size != base.Size {
			return false, nil
		}
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOATIME, 0)
		if errors.Is(err, unix.EPERM) {
			f, err = os.Open(p)
		}
		if err != nil {
			return false, err
		}
		defer func() { _ = f.Close() }()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return false, err
		}
		return hex.EncodeToString(h.Sum(nil)) == base.Object, nil
	case "symlink":
		t, err := os.Readlink(p)
		return err == nil && t == base.Target, err
	}
	return true, nil
}

// Pulled is the record of a pulled session a PushSession names, as the
// CLI's session record takes it.
func Pulled(doc remote.SessionDoc) ctl.PushSession {
	return ctl.PushSession{ID: doc.ID, Project: doc.Project, Command: doc.Command, Started: doc.Started, Ended: doc.Ended,
		ExitCode: doc.ExitCode, State: doc.State, PreRun: doc.PreRun}
}
