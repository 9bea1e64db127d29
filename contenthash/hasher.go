package contenthash

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/overlay"
)

// Config is what a Hasher works on.
type Config struct {
	Meta    *branch.Store
	Objects *backstore.Store
	// LowerDir is the path by which the project is opened.
	LowerDir string
	// OpenSnapshot, when set, opens a read-only view of a snapshot as
	// every view of the store is opened (with its hide rules: hidden
	// project paths are no paths of a snapshot, and are never read or
	// hashed); without it, a plain view over LowerDir.
	OpenSnapshot func(branch.Snapshot) (*overlay.FS, error)
	// PendingSum, when set, returns the SHA-256 of the bytes of a
	// pending object (backstore/pending.go: a store started from a
	// remote snapshot, whose keys are its objects' SHA-256), which are
	// not all here: the hash of an object with no record, taken as
	// recorded with its size and mtime of now (while it is pending its
	// bytes are the key's), so that nothing is fetched to be hashed.
	PendingSum func(id string) (Digest, bool)
	// ReadOnly: compute, but record nothing (the store is open
	// read-only).
	ReadOnly bool
	// Helper, when set, is the command of the hashing process (the
	// agentfs binary and HelperCommand), in which the worker reads and
	// hashes (helper.go); without it, it hashes in its own thread.
	Helper []string
	// Gate, when set, is a file the worker waits for to disappear
	// before it hashes each snapshot (for the tests that prove hashing
	// is off the file operations' path).
	Gate string
	// LowerCache, when set, is the user's cache of project file
	// hashes, shared by the user's stores (lowercache.go).
	LowerCache *LowerCache
	// Yield, when set, is called by the worker before each path of a
	// snapshot it walks and before it records what it computed (never
	// by a command's computation): a mount's daemon makes it wait
	// while programs are changing files, so that the worker's walk,
	// reads and commits come between their bursts rather than in them.
	// It returns early when quit is closed.
	Yield  func(quit <-chan struct{})
	Logger *slog.Logger
}

// Hasher computes and keeps the content hashes and roots of one
// store's snapshots (see the package doc).
type Hasher struct {
	cfg Config
	log *slog.Logger

	// mu guards what follows; never held while a file is read or the
	// store is written.
	mu       sync.Mutex
	objects  map[string]branch.ObjectHash // the object hashes known
	inflight map[string]*flight           // snapshot id (+ "\x00worker" for the worker's) → the computation running
	running  bool                         // the worker runs
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	busy     bool // the worker is computing (or has work queued)
	deduped  int64
	helper   *helper         // the hashing process, while the worker runs
	failed   map[string]bool // snapshots whose root the worker failed to compute
	paused   bool            // Pause(true): the hashing process is stopped

	// lowerRead counts the project files read to be hashed.
	lowerRead atomic.Int64

	// quit is closed by Close: a computation running stops at the next
	// file (ErrClosed).
	quit     chan struct{}
	quitOnce sync.Once
}

// ErrClosed is what a computation stopped by Close returns.
var ErrClosed = errors.New("content hashes: closed")

// flight is one computation of a snapshot's root.
type flight struct {
	done chan struct{}
	root branch.SnapshotRoot
	err  error
}

// New makes a Hasher; Start starts its worker.
func New(cfg Config) *Hasher {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Hasher{cfg: cfg, log: cfg.Logger, objects: map[string]branch.ObjectHash{}, inflight: map[string]*flight{}, failed: map[string]bool{}, quit: make(chan struct{})}
}

// RootStatus says where a snapshot's root stands.
type RootStatus string

const (
	// Computed: the root is recorded.
	Computed RootStatus = "computed"
	// Pending: not yet; the worker will compute it.
	Pending RootStatus = "pending"
	// Off: not computed, and no worker runs (hashing is turned off, or
	// nothing serves the store): Root(snap, true) computes it.
	Off RootStatus = "off"
	// Failed: the worker could not compute it (the log says why; Root
	// with compute, or agentfs verify, tries again and says why).
	Failed RootStatus = "failed"
)

// Recorded returns snap's root if it is recorded, and its status.
func (h *Hasher) Recorded(snap branch.Snapshot) (branch.SnapshotRoot, RootStatus, error) {
	r, ok, err := h.cfg.Meta.SnapshotRootOf(snap)
	if err != nil || ok {
		return r, Computed, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failed[snap.ID] {
		return r, Failed, nil
	}
	if h.running {
		return r, Pending, nil
	}
	return r, Off, nil
}

// Root returns snap's root: the recorded one, or, when none is and
// compute is set, one computed now (and recorded unless read-only),
// sharing the computation the worker may be running for it.
func (h *Hasher) Root(snap branch.Snapshot, compute bool) (branch.SnapshotRoot, bool, error) {
	r, ok, err := h.cfg.Meta.SnapshotRootOf(snap)
	if err != nil || ok || !compute {
		return r, ok, err
	}
	r, err = h.compute(snap, false)
	return r, err == nil, err
}

// compute computes snap's root once, however many ask at a time. The
// worker's computations (background) read and hash in the hashing
// process; one a command waits for, in the daemon itself.
func (h *Hasher) compute(snap branch.Snapshot, background bool) (branch.SnapshotRoot, error) {
	// A command never waits for the worker's computation, which hashes
	// at the lowest priority there is (and may wait for a hashing
	// process that no longer answers): it computes at its own pace,
	// sharing only the computations of other commands. Both record the
	// same root.
	key := snap.ID
	if background {
		key += "\x00worker"
	}
	h.mu.Lock()
	if f := h.inflight[key]; f != nil {
		h.mu.Unlock()
		<-f.done
		return f.root, f.err
	}
	f := &flight{done: make(chan struct{})}
	h.inflight[key] = f
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.inflight, key)
		h.mu.Unlock()
		close(f.done)
	}()
	// Recorded meanwhile (by the flight before this one)?
	if r, ok, err := h.cfg.Meta.SnapshotRootOf(snap); err != nil || ok {
		f.root, f.err = r, err
		return r, err
	}
	start := time.Now()
	m, root, newHashes, err := h.snapshotTree(snap, treeOptions{background: background})
	if err != nil {
		f.err = err
		return branch.SnapshotRoot{}, err
	}
	f.root = branch.SnapshotRoot{Ts: snap.Ts, Root: root, Files: m.Files, Bytes: m.Bytes, Computed: time.Now().Round(0)}
	newHashes.Roots = map[string]branch.SnapshotRoot{snap.ID: f.root}
	if background {
		// Its commit too waits for a quiet moment.
		if err := h.yield(); err != nil {
			f.err = err
			return branch.SnapshotRoot{}, err
		}
	}
	if err := h.record(newHashes); err != nil {
		f.err = err
		return f.root, err
	}
	h.mu.Lock()
	delete(h.failed, snap.ID)
	h.mu.Unlock()
	h.log.Info("snapshot root computed", "id", snap.ID, "root", Hex(root), "files", m.Files, "bytes", m.Bytes,
		"hashed_objects", len(newHashes.Objects), "hashed_project_files", len(newHashes.Lower), "took", time.Since(start))
	return f.root, nil
}

// record keeps what was hashed: in the store unless read-only, and
// the object hashes in memory.
func (h *Hasher) record(hs branch.Hashes) error {
	h.mu.Lock()
	for id, oh := range hs.Objects {
		h.memoObjectLocked(id, oh)
	}
	h.mu.Unlock()
	if h.cfg.ReadOnly {
		return nil
	}
	if err := h.cfg.Meta.PutHashes(hs); err != nil {
		return fmt.Errorf("recording content hashes: %w", err)
	}
	if c := h.cfg.LowerCache; c != nil {
		if err := c.add(hs.Lower); err != nil {
			h.log.Warn("keeping project file hashes in the user's cache", "err", err)
		}
	}
	h.dedupe(hs.Objects)
	return nil
}

// treeOptions say how a tree is hashed.
type treeOptions struct {
	// entries keeps every path in the manifest.
	entries bool
	// fresh reads every file again, trusting no hash recorded (verify).
	fresh bool
	// background: the worker's: files are hashed in the hashing
	// process, at the lowest priority.
	background bool
	// live: the view is a branch being written; its objects may change,
	// so their hashes are neither taken from nor added to the cache.
	live bool
	// visitWalk, when set, is called with each regular file and its
	// contents' hash.
	visitWalk func(e *overlay.WalkEntry, sum Digest)
	// memo, when set, collects the hashes computed instead of a Hashes
	// of this tree's own, and gives back those it holds: one Verify
	// reads each object once, whatever the snapshots naming it.
	memo *branch.Hashes
	// lowerMemo does the same for project files (fresh only).
	lowerMemo map[[2]uint64]Digest
	// missing, when set, is told of an object that cannot be opened
	// (gone from the store), which then counts as empty.
	missing func(e *overlay.WalkEntry, err error)
}

// openSnapshot opens a read-only view of snap.
func (h *Hasher) openSnapshot(snap branch.Snapshot) (*overlay.FS, error) {
	if h.cfg.OpenSnapshot != nil {
		v, err := h.cfg.OpenSnapshot(snap)
		if err != nil {
			return nil, fmt.Errorf("opening snapshot %s: %w", snap.ID, err)
		}
		return v, nil
	}
	v, err := overlay.New(overlay.Config{Lower: h.cfg.LowerDir, Objects: h.cfg.Objects, Snapshot: h.cfg.Meta.SnapshotView(snap), Logger: h.log})
	if err != nil {
		return nil, fmt.Errorf("opening snapshot %s: %w", snap.ID, err)
	}
	return v, nil
}

// snapshotTree hashes snap's view; the hashes it computed are returned
// for recording.
func (h *Hasher) snapshotTree(snap branch.Snapshot, o treeOptions) (Manifest, Digest, branch.Hashes, error) {
	v, err := h.openSnapshot(snap)
	if err != nil {
		return Manifest{}, Digest{}, branch.Hashes{}, err
	}
	defer func() {
		if err := v.Close(); err != nil {
			h.log.Warn("closing a snapshot's view", "id", snap.ID, "err", err)
		}
	}()
	m, root, hs, err := h.tree(v, o)
	if err != nil {
		return m, root, hs, fmt.Errorf("snapshot %s: %w", snap.ID, err)
	}
	m.Snapshot = snap.ID
	return m, root, hs, nil
}

// Manifest hashes view v (a snapshot's, a branch's or the project's):
// its root and every path. A snapshot's files are taken from the
// recorded hashes where there are some; a branch's objects are read.
func (h *Hasher) Manifest(v *overlay.FS, snapshot string) (Manifest, error) {
	m, _, hs, err := h.tree(v, treeOptions{entries: true, live: snapshot == ""})
	if err != nil {
		return Manifest{}, err
	}
	m.Snapshot = snapshot
	if err := h.record(hs); err != nil {
		h.log.Warn("recording the hashes of a manifest", "err", err)
	}
	return m, nil
}

// SnapshotManifest is Manifest of snapshot snap.
func (h *Hasher) SnapshotManifest(snap branch.Snapshot) (Manifest, error) {
	m, _, hs, err := h.snapshotTree(snap, treeOptions{entries: true})
	if err != nil {
		return Manifest{}, err
	}
	if err := h.record(hs); err != nil {
		h.log.Warn("recording the hashes of a manifest", "err", err)
	}
	return m, nil
}

// tree hashes view v.
func (h *Hasher) tree(v *overlay.FS, o treeOptions) (Manifest, Digest, branch.Hashes, error) {
	b := newBuilder(o.entries)
	hs := branch.Hashes{Objects: map[string]branch.ObjectHash{}}
	if o.memo != nil {
		hs = *o.memo
		defer func() { *o.memo = hs }()
	}
	err := overlay.Walk(v, func(e *overlay.WalkEntry) error {
		if o.background {
			if err := h.yield(); err != nil {
				return err
			}
		}
		select {
		case <-h.quit:
			return ErrClosed
		default:
		}
		if e.Missing {
			err := fmt.Errorf("%s: listed in the snapshot, but its file in the store is gone (agentfs fsck says more): %w", e.Path, unix.ENOENT)
			if o.missing == nil {
				return err
			}
			o.missing(e, err)
			return nil
		}
		typ := typeLetter(e.Stat.Mode)
		switch typ {
		case "d":
			return b.dir(e.Path, e.Stat.Mode)
		case "f":
			ent := Entry{Path: e.Path, Type: typ, Size: e.Stat.Size, Object: e.Object, Lower: e.Lower}
			sum, size, err := h.fileSum(e, o, &hs)
			if err != nil {
				return fmt.Errorf("%s: %w", e.Path, err)
			}
			ent.Size = size
			if o.visitWalk != nil {
				o.visitWalk(e, sum)
			}
			return b.leaf(ent, e.Stat.Mode, sum)
		case "":
			return fmt.Errorf("%s: a file of unknown type %o", e.Path, e.Stat.Mode&unix.S_IFMT)
		}
		return b.leaf(Entry{Path: e.Path, Type: typ, Target: e.Target}, e.Stat.Mode, specialNode(&e.Stat, e.Target))
	})
	if err != nil {
		return Manifest{}, Digest{}, hs, err
	}
	m, root, err := b.finish()
	return m, root, hs, err
}

// Pause stops (on) or continues the hashing process, if there is one:
// a mount's daemon stops it while programs are changing files, so that
// a file being hashed does not take the CPU and caches they use. A
// computation waiting for the paused process waits with it; Close
// ends it either way.
func (h *Hasher) Pause(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused == on {
		return
	}
	h.paused = on
	if p := h.helper; p != nil {
		if on {
			p.signal(unix.SIGSTOP)
		} else {
			p.signal(unix.SIGCONT)
		}
	}
}

// yield holds the worker back as Config.Yield says; ErrClosed once the
// Hasher is closed.
func (h *Hasher) yield() error {
	if h.cfg.Yield != nil {
		h.cfg.Yield(h.quit)
	}
	select {
	case <-h.quit:
		return ErrClosed
	default:
		return nil
	}
}

// fileSum returns the hash and size of regular file e's contents:
// recorded, or read now (and added to hs).
func (h *Hasher) fileSum(e *overlay.WalkEntry, o treeOptions, hs *branch.Hashes) (Digest, int64, error) {
	if e.Object != "" {
		if oh, ok := hs.Objects[e.Object]; ok {
			return oh.Sum, oh.Size, nil
		}
		recorded := false
		if !o.fresh && !o.live {
			oh, ok, err := h.objectHash(e.Object)
			if err != nil {
				return Digest{}, 0, err
			}
			// The object still has the size and mtime it was hashed
			// with (an id is used again for new contents only once the
			// object it named was removed).
			if st, serr := h.cfg.Objects.Lstat(e.Object); ok && serr == nil && st.Size == oh.Size && st.Mtim.Nano() == oh.Mtime {
				return oh.Sum, oh.Size, nil
			}
			recorded = ok
		}
		f, err := e.OpenData()
		if err != nil {
			if o.missing != nil && isMissing(err) {
				o.missing(e, err)
				return sha256.Sum256(nil), 0, nil
			}
			return Digest{}, 0, err
		}
		defer f.Close()
		sum, n, err := h.hashData(f, o.background)
		if err != nil {
			return Digest{}, 0, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return Digest{}, 0, err
		}
		if recorded {
			// A snapshot's object never changes (the branch clones it
			// first): other size or mtime than when it was hashed is
			// damage (an edit in the store, the disk). Its recorded
			// hash stays, for verify to report it with every snapshot
			// naming it.
			h.log.Warn("an object changed since it was hashed: agentfs verify reports it", "object", e.Object, "path", e.Path)
			return sum, n, nil
		}
		if !o.live || o.memo != nil {
			hs.Objects[e.Object] = branch.ObjectHash{Sum: sum, Size: n, Mtime: st.Mtim.Nano()}
		}
		return sum, n, nil
	}
	ls := &e.LowerStat
	lk := [2]uint64{ls.Dev, ls.Ino}
	if sum, ok := o.lowerMemo[lk]; ok {
		return sum, ls.Size, nil
	}
	if !o.fresh {
		lh, ok, err := h.cfg.Meta.LowerHashOf(ls.Dev, ls.Ino)
		if err != nil {
			return Digest{}, 0, err
		}
		if ok && lh.Size == ls.Size && lh.Mtime == ls.Mtim.Nano() && lh.Ctime == ls.Ctim.Nano() {
			return lh.Sum, lh.Size, nil
		}
		if c := h.cfg.LowerCache; c != nil {
			lh, ok, err := c.get(ls.Dev, ls.Ino)
			if err != nil {
				h.log.Warn("the cache of project file hashes", "err", err)
			}
			if ok && lh.Size == ls.Size && lh.Mtime == ls.Mtim.Nano() && lh.Ctime == ls.Ctim.Nano() {
				hs.Lower = append(hs.Lower, lh) // into the store's keys too
				return lh.Sum, lh.Size, nil
			}
		}
	}
	h.lowerRead.Add(1)
	start := time.Now()
	f, err := e.OpenData()
	if err != nil {
		return Digest{}, 0, err
	}
	defer f.Close()
	sum, n, err := h.hashData(f, o.background)
	if err != nil {
		return Digest{}, 0, err
	}
	if o.lowerMemo != nil {
		o.lowerMemo[lk] = sum
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil && st.Dev == ls.Dev && st.Ino == ls.Ino &&
		st.Size == ls.Size && st.Size == n && st.Mtim == ls.Mtim && st.Ctim == ls.Ctim &&
		settled(ls, start) {
		// Unchanged while read, and changed long enough before that a
		// later change gets another ctime: the hash is true of that
		// state, and of every state with the same size and times.
		hs.Lower = append(hs.Lower, branch.LowerHash{Dev: ls.Dev, Ino: ls.Ino, Size: n, Mtime: ls.Mtim.Nano(), Ctime: ls.Ctim.Nano(), Sum: sum})
	}
	return sum, n, nil
}

// racyWindow is how long before its hashing a project file must last
// have changed for its hash to be kept. A change within the same tick
// of the file system's clock keeps the ctime (and the size, when it
// rewrites bytes in place): a coarse clock (4 ms jiffies where the
// file system has no fine-grained timestamps), a one-second one (ext4
// with 128-byte inodes, NFS servers), FAT's two seconds. Such a file is
// hashed again the next time (as git's index treats a "racily clean"
// file).
const racyWindow = 2 * time.Second

// settled reports whether project file ls last changed at least
// racyWindow before start, so that any change after start gives it
// another ctime.
func settled(ls *unix.Stat_t, start time.Time) bool {
	return time.Unix(ls.Ctim.Unix()).Add(racyWindow).Before(start) &&
		time.Unix(ls.Mtim.Unix()).Add(racyWindow).Before(start)
}

// hashData hashes what f holds: for the worker (background) in the
// hashing process while there is one, else here.
func (h *Hasher) hashData(f *os.File, background bool) (Digest, int64, error) {
	var p *helper
	if background {
		h.mu.Lock()
		p = h.helper
		h.mu.Unlock()
	}
	if p != nil {
		sum, n, err := p.hash(f)
		if err == nil {
			return sum, n, nil
		}
		if !p.gone() {
			// The process could not read it (it holds no privilege: a
			// project on a FUSE file system that serves only its
			// user, say): the daemon reads it.
			h.log.Debug("the hashing process could not read a file: hashing it in the daemon", "err", err)
			if _, serr := f.Seek(0, io.SeekStart); serr != nil {
				return Digest{}, 0, serr
			}
			return hashFile(f)
		}
		h.mu.Lock()
		if h.helper == p {
			h.helper = nil
		}
		h.mu.Unlock()
		if cerr := p.close(); cerr != nil { // reaped now, not when the worker ends
			err = fmt.Errorf("%w (%v)", err, cerr)
		}
		select {
		case <-h.quit: // killed by Close: read nothing more
			return Digest{}, 0, ErrClosed
		default:
		}
		h.log.Warn("the hashing process stopped: hashing in the daemon from now on", "err", err)
		if _, serr := f.Seek(0, io.SeekStart); serr != nil {
			return Digest{}, 0, serr
		}
	}
	return hashFile(f)
}

// ProjectFilesRead is the number of project files this Hasher read to
// hash them (those whose hash it had were not).
func (h *Hasher) ProjectFilesRead() int64 { return h.lowerRead.Load() }

// objectHash returns the recorded hash of object id.
func (h *Hasher) objectHash(id string) (branch.ObjectHash, bool, error) {
	h.mu.Lock()
	oh, ok := h.objects[id]
	h.mu.Unlock()
	if ok {
		return oh, true, nil
	}
	got, err := h.cfg.Meta.ObjectHashes([]string{id})
	if err != nil {
		return branch.ObjectHash{}, false, err
	}
	oh, ok = got[id]
	if ok {
		h.mu.Lock()
		h.memoObjectLocked(id, oh)
		h.mu.Unlock()
		return oh, true, nil
	}
	return h.pendingHash(id)
}

// pendingHash returns the hash of object id if it is pending
// (Config.PendingSum), with its size and mtime of now; not kept in
// memory (once filled, the object is hashed like any other).
func (h *Hasher) pendingHash(id string) (branch.ObjectHash, bool, error) {
	if h.cfg.PendingSum == nil {
		return branch.ObjectHash{}, false, nil
	}
	sum, ok := h.cfg.PendingSum(id)
	if !ok {
		return branch.ObjectHash{}, false, nil
	}
	st, err := h.cfg.Objects.Lstat(id)
	if err != nil {
		if isMissing(err) {
			return branch.ObjectHash{}, false, nil
		}
		return branch.ObjectHash{}, false, err
	}
	// Still pending once stat'ed: the size and mtime are those of the
	// key's bytes.
	if again, ok := h.cfg.PendingSum(id); !ok || again != sum {
		return branch.ObjectHash{}, false, nil
	}
	return branch.ObjectHash{Sum: sum, Size: st.Size, Mtime: st.Mtim.Nano()}, true, nil
}

// maxObjectMemo bounds the object hashes kept in memory (about 120
// bytes each): past it they are dropped, and read from the store again
// when needed, so that a daemon's memory does not grow with every
// object it ever hashed.
const maxObjectMemo = 100_000

// memoObjectLocked keeps object id's hash in memory. h.mu is held.
func (h *Hasher) memoObjectLocked(id string, oh branch.ObjectHash) {
	if len(h.objects) >= maxObjectMemo {
		clear(h.objects)
	}
	h.objects[id] = oh
}

// ObjectHash returns the SHA-256 of object id's contents as recorded
// (ok false when it was never hashed). For a caller that addresses
// objects by their contents (remote storage).
func (h *Hasher) ObjectHash(id string) (Digest, bool, error) {
	oh, ok, err := h.objectHash(id)
	return oh.Sum, ok, err
}

// ObjectsWithHash returns the objects recorded with contents sum that
// still exist.
func (h *Hasher) ObjectsWithHash(sum Digest) ([]string, error) {
	ids, err := h.cfg.Meta.ObjectsWithHash(sum)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		if _, err := h.cfg.Objects.Lstat(id); err == nil {
			out = append(out, id)
		} else if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOENT) {
			return nil, err
		}
	}
	return out, nil
}

// ForgetRemoved drops the hashes of the objects that no longer exist
// (after garbage collection).
func (h *Hasher) ForgetRemoved() error {
	ids, err := h.cfg.Meta.HashedObjects()
	if err != nil {
		return err
	}
	var gone []string
	for _, id := range ids {
		if _, err := h.cfg.Objects.Lstat(id); isMissing(err) {
			gone = append(gone, id)
		}
	}
	return h.Forget(gone)
}

// Forget drops the hashes of removed objects ids.
func (h *Hasher) Forget(ids []string) error {
	h.mu.Lock()
	for _, id := range ids {
		delete(h.objects, id)
	}
	h.mu.Unlock()
	if h.cfg.ReadOnly || len(ids) == 0 {
		return nil
	}
	return h.cfg.Meta.DropObjectHashes(ids)
}
