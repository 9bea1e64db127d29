package overlay

import (
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/hide"
)

// Config describes one view: a lower directory and a branch layer.
type Config struct {
	// Lower is the absolute path of the lower directory. It is only ever
	// opened read-only (Apply alone writes below it: see "Who writes the
	// lower directory" in doc.go).
	Lower string
	// Objects holds the upper inodes.
	Objects *backstore.Store
	// Layer holds the branch's entries. Nil for a read-only view of a
	// snapshot (Snapshot set): every change then fails with EROFS.
	Layer *branch.Layer
	// Snapshot is the snapshot a read-only view shows (when Layer is
	// nil): export, diff --patch. With neither Layer nor Snapshot the
	// view is the plain lower tree, read-only (see LowerView).
	Snapshot *branch.View
	// AllocIno returns a fresh inode number for an inode created in the
	// overlay.
	AllocIno func() (uint64, error)
	// Sync makes committed metadata durable (called on fsync).
	Sync func() error
	// Hide hides lower paths (hide.go); HiddenInodes are the lower
	// inodes hidden paths name (hide.Scan), shared by the views of one
	// store. Nil: nothing is hidden.
	Hide         *hide.Rules
	HiddenInodes *hide.Inodes
	// Limits bound what the branch may hold in the backstore (quota.go).
	Limits Limits
	// Exclude and Seal are lower paths the view leaves out, or shows as
	// empty directories (exclude.go): agentfs run --system's own
	// directories and the kernel's filesystems.
	Exclude, Seal []string
	// DeviceSlot numbers the (device, high 16 bits of st_ino) pairs of
	// lower files that are not on the lower root's filesystem, from 0,
	// the same pair always the same number (ino.go). Nil: numbered in
	// this view's memory.
	DeviceSlot func(dev, high uint64) (uint64, error)
	Logger     *slog.Logger
}

// Caller is the identity that creates an inode.
type Caller struct {
	Uid, Gid uint32
}

// nextNodeID numbers nodes across all views; 1 is the mount root, which
// belongs to the fs package.
var nextNodeID atomic.Uint64

func init() { nextNodeID.Store(1) }

// FS is one view: a lower directory overlaid by one branch layer.
type FS struct {
	cfg      Config
	objs     *backstore.Store
	layer    *branch.Layer
	log      *slog.Logger
	lowerFd  int // O_PATH directory fd of the lower root
	lowerDev uint64
	excl     exclusions // lower paths left out (exclude.go)
	slots    deviceSlots

	// gate holds off the operations that would change a path a merge
	// is applying (gate.go).
	gate changeGate
	// mu guards the namespace (see the package doc).
	mu        sync.RWMutex
	rootEntry *branch.Entry
	// dirs holds the upper entries by parent directory path, then name.
	dirs map[string]map[string]*branch.Entry
	// links counts the entries that reference each regular-file object.
	links map[string]int
	// multiNamed counts the objects in links referenced more than once
	// (hard links): while it is 0, no object has another name, and a
	// restore need not ask links (reloadPathsLocked).
	multiNamed int
	// hardlinks maps the st_ino of a copied-up lower file that had more
	// than one name (its entry carries Origin) to that entry, so that
	// the lower file's other names resolve to the same upper inode, as
	// overlayfs does with index=on.
	hardlinks map[uint64]*branch.Entry
	// hiddenLinks counts, per lower st_ino, the whiteouts that hide a
	// lower-only name of a hard-linked lower file (st_nlink).
	hiddenLinks map[uint64]int
	// anchors counts the internal entries that keep such a file's upper
	// copy after its last upper name went (see anchorPath).
	anchors map[uint64]int
	// ndirs counts the directory entries in each dirs map (st_nlink).
	ndirs map[string]int
	// lowerSubdirs caches the names of the subdirectories of lower
	// directories, for the st_nlink of merged directories; the lower
	// watcher drops what changes (LowerDirChanged).
	lowerSubdirsMu sync.Mutex
	lowerSubdirs   map[string]map[string]bool
	root           *Node

	// copyCtimes holds, for objects copied up in this session whose
	// ctime has not changed since, the copy's ctime and the lower
	// inode's (see keepCtime).
	ctimeMu    sync.Mutex
	copyCtimes map[string]copyTimes

	nodesMu  sync.Mutex
	byObject map[string]*Node
	byLower  map[string]*Node
	// byLowerIno holds the lower-only node of each hard-linked lower
	// file (st_nlink > 1), by st_ino: every name of the file is one node,
	// so the kernel has one inode for it, as overlayfs with index=on.
	byLowerIno map[uint64]*Node
	// staleNodes holds the nodes a Reload cut loose until the kernel
	// forgets them (their objects are live for gc: LiveObjects).
	staleNodes map[*Node]struct{}
	// writing holds the nodes with files open for writing or passed
	// through (Node.writers or Node.pins above 0): those a Snapshot
	// clones, found without a walk of every node.
	writing map[*Node]struct{}
	// released, when not nil, is closed (and cleared) by the release
	// that empties writing: awaitReleases waits on it.
	released chan struct{}
	// cutPasses counts the passes of cutChangedLocked: a node whose
	// cutPass is the current one was cut loose by it.
	cutPasses uint32

	quota quota // the usage against cfg.Limits (quota.go)
}

// New opens the view described by cfg and loads its entries.
func New(cfg Config) (*FS, error) {
	fd, err := unix.Open(cfg.Lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lower directory %s: %w", cfg.Lower, err)
	}
	v, err := newWithFd(cfg, fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return v, nil
}

// newWithFd is New with the lower directory already open (fd, O_PATH),
// which the view then owns; on error the caller closes fd.
func newWithFd(cfg Config, fd int) (*FS, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Sync == nil {
		cfg.Sync = func() error { return nil }
	}
	if cfg.AllocIno == nil {
		cfg.AllocIno = func() (uint64, error) { return 0, unix.EROFS }
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("lower directory %s: %w", cfg.Lower, err)
	}
	v := &FS{
		cfg:          cfg,
		objs:         cfg.Objects,
		layer:        cfg.Layer,
		log:          cfg.Logger,
		lowerFd:      fd,
		lowerDev:     st.Dev,
		excl:         newExclusions(cfg.Exclude, cfg.Seal),
		slots:        deviceSlots{of: cfg.DeviceSlot},
		dirs:         map[string]map[string]*branch.Entry{},
		links:        map[string]int{},
		hardlinks:    map[uint64]*branch.Entry{},
		hiddenLinks:  map[uint64]int{},
		anchors:      map[uint64]int{},
		ndirs:        map[string]int{},
		lowerSubdirs: map[string]map[string]bool{},
		byObject:     map[string]*Node{},
		copyCtimes:   map[string]copyTimes{},
		byLower:      map[string]*Node{},
		byLowerIno:   map[uint64]*Node{},
		staleNodes:   map[*Node]struct{}{},
		writing:      map[*Node]struct{}{},
	}
	v.quota.limits = cfg.Limits
	if err := v.loadLocked(); err != nil {
		return nil, err
	}
	v.root = &Node{ID: nextNodeID.Add(1), view: v, mode: unix.S_IFDIR, ino: st.Ino, hasLower: true}
	if e := v.rootEntry; e != nil {
		v.root.ino = e.Ino
		v.promoteLocked(v.root, e)
	}
	v.root.lookups = 1 // the kernel never forgets the root
	return v, nil
}

// loadLocked (re)builds the in-memory index from the layer.
func (v *FS) loadLocked() error {
	v.rootEntry = nil
	v.dirs = map[string]map[string]*branch.Entry{}
	v.links = map[string]int{}
	v.multiNamed = 0
	v.hardlinks = map[uint64]*branch.Entry{}
	v.hiddenLinks = map[uint64]int{}
	v.anchors = map[uint64]int{}
	v.ndirs = map[string]int{}
	v.resetQuotaLocked()
	defer v.sizeLoadedLocked()
	return v.sourceLocked().Load(func(p string, e *branch.Entry) error {
		v.indexPut(p, e)
		return nil
	})
}

// Close releases the lower directory.
func (v *FS) Close() error {
	return unix.Close(v.lowerFd)
}

// Root returns the view's root directory node.
func (v *FS) Root() *Node { return v.root }

// Lower returns the lower directory of the view.
func (v *FS) Lower() string { return v.cfg.Lower }

// LowerPath returns a path that reaches the lower directory rel
// ("" for the root) through the view's own descriptor of the lower
// root (/proc/self/fd/N/rel), not through Lower: it stays right when
// something is mounted over Lower after the view opened it (agentfs
// run mounts the view over its own lower directory), or when Lower is
// renamed. For path-only interfaces such as inotify; the last
// component is rel's own (not followed through a symlink when the
// caller asks so).
func (v *FS) LowerPath(rel string) string {
	if rel == "" {
		rel = "."
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", v.lowerFd, rel)
}

// Objects returns the view's backstore.
func (v *FS) Objects() *backstore.Store { return v.objs }

// indexGet returns the upper entry at p, or nil.
func (v *FS) indexGet(p string) *branch.Entry {
	if p == "" {
		return v.rootEntry
	}
	dir, name := splitPath(p)
	return v.dirs[dir][name]
}

// indexPut records e at p in the in-memory index.
func (v *FS) indexPut(p string, e *branch.Entry) {
	v.indexDel(p)
	if p == "" {
		v.rootEntry = e
		return
	}
	dir, name := splitPath(p)
	m := v.dirs[dir]
	if m == nil {
		m = map[string]*branch.Entry{}
		v.dirs[dir] = m
	}
	m[name] = e
	v.indexCountIn(p, dir, e)
}

// indexCountIn counts the entry e, just put at p (in directory dir), in
// the index's counts: subdirectories, links, hard links, quota. It
// reports whether e's object may have another name: a regular object
// that another entry names too, or a directory's.
func (v *FS) indexCountIn(p, dir string, e *branch.Entry) (shared bool) {
	if e.Type == branch.TypeDir {
		shared = e.Object != ""
		v.ndirs[dir]++
		if e.Object != "" {
			v.quotaIn(e)
		}
	}
	v.countLinks(p, e, 1)
	if e.Type != branch.TypeDir && e.Object != "" {
		n := v.links[e.Object]
		v.links[e.Object] = n + 1
		if n == 1 {
			v.multiNamed++
		}
		if n == 0 {
			v.quotaIn(e)
		}
		if e.Origin != "" {
			v.hardlinks[e.Ino] = e
		}
		shared = n > 0
	}
	return shared
}

// indexDel forgets the entry at p (not its children).
func (v *FS) indexDel(p string) {
	if p == "" {
		v.rootEntry = nil
		return
	}
	dir, name := splitPath(p)
	m := v.dirs[dir]
	old := m[name]
	if old == nil {
		return
	}
	delete(m, name)
	if len(m) == 0 {
		delete(v.dirs, dir)
	}
	v.indexCountOut(p, dir, old)
}

// indexCountOut takes the entry old, just removed from p (in directory
// dir), out of the index's counts, as indexCountIn put it in, and
// reports as it does whether old's object may have another name.
func (v *FS) indexCountOut(p, dir string, old *branch.Entry) (shared bool) {
	if old.Type == branch.TypeDir {
		shared = old.Object != ""
		if n := v.ndirs[dir]; n <= 1 {
			delete(v.ndirs, dir)
		} else {
			v.ndirs[dir] = n - 1
		}
		if old.Object != "" {
			v.quotaOut(old)
		}
	}
	v.countLinks(p, old, -1)
	if old.Type != branch.TypeDir && old.Object != "" {
		if n := v.links[old.Object]; n > 1 {
			v.links[old.Object] = n - 1
			if n == 2 {
				v.multiNamed--
			}
			shared = true
		} else {
			delete(v.links, old.Object)
			v.quotaOut(old)
			if h := v.hardlinks[old.Ino]; h != nil && h.Object == old.Object {
				delete(v.hardlinks, old.Ino)
			}
		}
	}
	return shared
}

// countLinks keeps hiddenLinks in step with the entry e at p being
// added (d = 1) or removed (d = -1).
func (v *FS) countLinks(p string, e *branch.Entry, d int) {
	if e.IsWhiteout() && e.Ino != 0 {
		v.hiddenLinks[e.Ino] += d
	}
	if e.Type == branch.TypeFile && strings.HasPrefix(p, internalDir+"/links/") {
		v.anchors[e.Ino] += d
	}
}

// subtree returns the paths of every upper entry strictly below p, in
// an order where parents come before children.
func (v *FS) subtree(p string) []string {
	var out []string
	var walk func(dir string)
	walk = func(dir string) {
		for name := range v.dirs[dir] {
			c := joinPath(dir, name)
			out = append(out, c)
			walk(c)
		}
	}
	walk(p)
	return out
}

func splitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// lowerRel turns a lower path ("" is the root) into a path for *at
// calls relative to the lower root fd.
func lowerRel(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// redirectOf returns the lower path stored in a directory entry.
func redirectOf(e *branch.Entry) (string, bool) {
	if e.Opaque || e.Redirect == "" {
		return "", false
	}
	return strings.TrimPrefix(path.Clean(e.Redirect), "/"), true
}

// redirectFor encodes a lower path for Entry.Redirect.
func redirectFor(lower string) string { return "/" + lower }

// Layer returns the branch layer the view shows.
func (v *FS) Layer() *branch.Layer { return v.layer }
