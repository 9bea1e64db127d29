package workspace

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/agentfs/agentfs/autosnap"
	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/contenthash"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/hide"
	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/remote"
)

// Options say which store to open, over which project.
type Options struct {
	// Store is the store directory.
	Store string
	// Lower is the project, as users name it and as the store records
	// it: a store made for one project refuses another.
	Lower string
	// LowerDir is the path by which the project is opened, when not
	// Lower: under agentfs run the daemon's own mount covers the
	// project's path, and a descriptor opened before mounting reaches
	// it (/proc/self/fd/N). Every open of the project goes through it.
	LowerDir string
	// Mountpoint is where the store is (or was) mounted; export refuses
	// targets inside it.
	Mountpoint string
	// Backstore is the kind of backstore (hostfs, ramdisk) and
	// RamdiskSize the ramdisk's limit.
	Backstore   string
	RamdiskSize int64
	// Ephemeral: a private store, deleted when its mount ends (status
	// says so).
	Ephemeral bool
	// Session: the store is an agentfs run session's.
	Session bool
	// System: the store of an agentfs run --system session (system.go);
	// Exclude and Seal are the lower paths every view leaves out, or
	// shows as empty directories (overlay.Config). A store that recorded
	// them gives them when these are not set.
	System        bool
	Exclude, Seal []string
	// Keep bounds the automatic snapshots the retention policy keeps
	// (0: autosnap.DefaultKeep).
	Keep int
	// Limits bound what each branch's view may hold (overlay's quotas);
	// BytesShare, when not 0, sets Limits.Bytes to that percentage of
	// the space free on the backstore's file system at Open.
	Limits     overlay.Limits
	BytesShare int
	// ReadOnly opens the branch metadata read-only: every operation
	// that would change the store fails with ErrReadOnly.
	ReadOnly bool
	// Version is the agentfs version, for Status.
	Version string
	// Hide are the mount's hide rules, which Open records in the store
	// (replacing what an earlier mount of it recorded); nil for a
	// command that opens a store without mounting it, which reads the
	// rules recorded (hide.go).
	Hide *hide.Rules
	// ProgressGate holds each long operation until its progress was
	// asked (progress.go): for the tests of the progress bars only.
	ProgressGate bool
	// NoHash: no worker computes content hashes and roots after each
	// snapshot (a mount's --hash=false); snapshot show and verify
	// still compute what they need. A store opened without a mount
	// never runs the worker (hashes.go).
	NoHash bool
	// HashHelper is the command of the hashing process the worker
	// reads and hashes in (contenthash.Config.Helper); empty: in the
	// worker's own thread.
	HashHelper []string
	// HashGate is a file the hash worker waits for to disappear before
	// each snapshot it hashes: for the tests only.
	HashGate string
	// HashYield holds the hash worker back before each file it reads
	// (contenthash.Config.Yield); nil: it reads at once.
	HashYield func(quit <-chan struct{})
	// MergeGate is a file a merge waits for to disappear half way
	// (mergejournal.go): for the tests only.
	MergeGate string
	// HashCache is the user's cache of project file hashes, shared by
	// the user's stores (contenthash.UserLowerCachePath); empty: none.
	HashCache string
	Logger    *slog.Logger
	// Hasher gives the SHA-256 of an object a push sends (push.go);
	// nil reads the object (remote.ReadHash).
	Hasher remote.Hasher
}

// Workspace is one open store: see the package doc.
type Workspace struct {
	opts   Options
	log    *slog.Logger
	meta   *branch.Store
	objs   *backstore.Store
	hashes *contenthash.Hasher
	policy autosnap.Policy
	// hide and hidden are the store's hide rules and the project's
	// inodes they hide (hide.go), fixed once the store is open.
	hide   *hide.Rules
	hidden *hide.Inodes

	// opMu serializes the operations (see the package doc). current is
	// the branch the mount shows to unbound processes (read without
	// the lock), changed only with opMu held; views holds the live view
	// of every branch in use, by name; view is the current branch's.
	// retired are the views of deleted branches that processes may
	// still hold files of (gc spares their objects).
	opMu    sync.Mutex
	current atomic.Pointer[branch.Layer]
	shown   atomic.Pointer[overlay.FS] // view, for Status (without opMu)
	view    *overlay.FS
	views   map[string]*overlay.FS
	retired []*overlay.FS
	closed  bool // Close ran: operations are refused

	// mount is the serving mount (nil offline); set once by Attach,
	// before the mount serves, and read without a lock (attached).
	mount atomic.Pointer[attachedMount]
	// progress is the progress of the long operation running, nil
	// when none (progress.go); gate holds it for the tests.
	progress atomic.Pointer[ctl.Progress]
	gate     progressGate

	// pinMu guards pinned, the objects that pushes under way send
	// (gc spares them), and pushes, the pushes sending without opMu,
	// which Close cancels and waits for (pushWG) (push.go). Taken
	// under opMu or alone.
	pinMu  sync.Mutex
	pinned map[string]int
	pushes map[*pushPlan]bool
	pushWG sync.WaitGroup
}

// Open opens the store of o: the branch metadata (under the store's
// lock: one process at a time), which must have been made for o.Lower
// (a new store records it), the backstore, and the view of the branch
// the store showed last. A store whose last user died is collected of
// what that one left uncommitted. Close releases it all.
func Open(o Options) (*Workspace, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if !filepath.IsAbs(o.Lower) || filepath.Clean(o.Lower) != o.Lower {
		return nil, fmt.Errorf("the project %q: give it as a clean absolute path (a store records it, and refuses another)", o.Lower)
	}
	if o.LowerDir == "" {
		o.LowerDir = o.Lower
	}
	if o.Backstore == "" {
		o.Backstore = "hostfs"
	}
	w := &Workspace{opts: o, log: o.Logger, policy: autosnap.Policy{Keep: o.Keep}}
	if err := w.open(); err != nil {
		if cerr := w.Close(); cerr != nil {
			w.log.Warn("closing a store that failed to open", "err", cerr)
		}
		return nil, err
	}
	return w, nil
}

func (w *Workspace) open() error {
	o := w.opts
	var err error
	w.meta, err = branch.Open(branch.Options{Dir: o.Store, ReadOnly: o.ReadOnly, Logger: w.log})
	if err != nil {
		return err
	}
	prev, err := w.meta.Info("lower")
	switch {
	case errors.Is(err, branch.ErrNotFound):
		if err := w.meta.SetInfo("lower", []byte(o.Lower)); err != nil {
			return fmt.Errorf("the store %s: recording its lower directory: %w", o.Store, err)
		}
	case err != nil:
		return fmt.Errorf("the store %s: reading its lower directory: %w", o.Store, err)
	case string(prev) != o.Lower:
		return fmt.Errorf("the store %s was made for the lower directory %s, not %s: mount it with --lower %s, or use another --store", o.Store, prev, o.Lower, prev)
	}
	if err := w.loadSystem(); err != nil {
		return err
	}
	if err := w.openHide(); err != nil {
		return fmt.Errorf("the store %s: %w", o.Store, err)
	}
	layer, err := w.resumeBranch()
	if err != nil {
		return fmt.Errorf("the store %s: %w", o.Store, err)
	}
	w.current.Store(layer)
	w.objs, err = backstore.Open(backstore.Options{Kind: o.Backstore, Dir: o.Store, RamdiskSize: o.RamdiskSize})
	if err != nil {
		return fmt.Errorf("opening the %s backstore: %w", o.Backstore, err)
	}
	if err := w.openFromSource(); err != nil { // a store started from a remote snapshot (from.go)
		return fmt.Errorf("the store %s: %w", o.Store, err)
	}
	if w.objs.Crashed() && !o.ReadOnly {
		// The process before this one died: what it made and did not
		// commit, and its idle objects, are referred to by nothing,
		// and nothing uses them yet.
		r, err := w.objs.Collect(backstore.GCOptions{Referenced: w.meta.ReferencedObjects, Grace: -1})
		if err != nil {
			return fmt.Errorf("the store %s: collecting what the daemon before this one left: %w", o.Store, err)
		}
		w.objs.Recovered()
		w.log.Info("collected what the daemon before this one left", "objects", r.Objects, "removed", r.Removed, "freed", r.Freed)
	}
	if o.BytesShare > 0 {
		free, err := w.objs.FsFree()
		if err != nil {
			return fmt.Errorf("the byte limit, a share of the backstore's free space: %w", err)
		}
		w.opts.Limits.Bytes = max(free/100*int64(o.BytesShare), 1)
	}
	w.view, err = w.newView(layer)
	if err != nil {
		return err
	}
	w.shown.Store(w.view)
	w.views = map[string]*overlay.FS{layer.Name(): w.view}
	if err := w.recoverMerge(); err != nil {
		return fmt.Errorf("the store %s: %w", o.Store, err)
	}
	var lowerCache *contenthash.LowerCache
	if o.HashCache != "" {
		lowerCache = contenthash.OpenLowerCache(o.HashCache)
	}
	w.hashes = contenthash.New(contenthash.Config{Meta: w.meta, Objects: w.objs, LowerDir: o.LowerDir, LowerCache: lowerCache,
		ReadOnly: o.ReadOnly, Gate: o.HashGate, Helper: o.HashHelper, Yield: o.HashYield, Logger: w.log, PendingSum: w.pendingSum,
		OpenSnapshot: func(s branch.Snapshot) (*overlay.FS, error) { return w.readView(nil, w.meta.SnapshotView(s)) }})
	return nil
}

// newView opens a writable view of branch l.
func (w *Workspace) newView(l *branch.Layer) (*overlay.FS, error) {
	cfg := w.viewConfig()
	cfg.Layer, cfg.AllocIno, cfg.Sync, cfg.Limits = l, w.meta.AllocIno, w.meta.Sync, w.opts.Limits
	return overlay.New(cfg)
}

// readView opens a view that an operation reads (nothing writes it):
// of branch l, of snapshot snap, or, with neither, the plain project;
// with the store's hide rules, as every view of the store.
func (w *Workspace) readView(l *branch.Layer, snap *branch.View) (*overlay.FS, error) {
	cfg := w.viewConfig()
	cfg.Layer, cfg.Snapshot = l, snap
	return overlay.New(cfg)
}

// viewConfig is what every view of the store shares: the project, the
// objects, the hide rules, the lower paths left out and the numbering
// of other filesystems' inodes.
func (w *Workspace) viewConfig() overlay.Config {
	return overlay.Config{Lower: w.opts.LowerDir, Objects: w.objs, Logger: w.log, Hide: w.hide, HiddenInodes: w.hidden,
		Exclude: w.opts.Exclude, Seal: w.opts.Seal, DeviceSlot: w.meta.DeviceSlot}
}

// currentBranchKey is the store info key that names the branch a kept
// store shows, so that mounting it again resumes that branch.
const currentBranchKey = "branch"

// resumeBranch returns the branch the store showed when it was last
// used (main for a new store, or when that branch is gone).
func (w *Workspace) resumeBranch() (*branch.Layer, error) {
	name := "main"
	switch b, err := w.meta.Info(currentBranchKey); {
	case err == nil:
		name = string(b)
	case !errors.Is(err, branch.ErrNotFound):
		return nil, fmt.Errorf("reading the current branch: %w", err)
	}
	l, err := w.meta.Layer(name)
	if errors.Is(err, branch.ErrNotFound) && name != "main" {
		w.log.Warn("the branch the store showed last is gone: showing main", "branch", name)
		l, err = w.meta.Layer("main")
	}
	return l, err
}

// Close closes the views, the backstore and the metadata, once no
// operation runs; operations asked later fail with ErrClosed. A mount
// attached must have ended first.
func (w *Workspace) Close() error {
	w.opMu.Lock()
	defer w.opMu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.stopPushesLocked()
	if w.hashes != nil {
		w.hashes.Close()
	}
	var errs []error
	for name, v := range w.views {
		if err := v.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing the view of branch %q: %w", name, err))
		}
	}
	for _, v := range w.retired {
		if err := v.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing the view of deleted branch %q: %w", v.Layer().Name(), err))
		}
	}
	if w.objs != nil {
		if err := w.objs.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing the backstore: %w", err))
		}
	}
	if w.meta != nil {
		w.meta.HandOffWith(nil)
		if err := w.meta.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing the metadata: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Store is the store directory.
func (w *Workspace) Store() string { return w.opts.Store }

// Lower is the project's path, as users name it.
func (w *Workspace) Lower() string { return w.opts.Lower }

// LowerDir is the path by which the project is opened (Options.LowerDir).
func (w *Workspace) LowerDir() string { return w.opts.LowerDir }

// View returns the view of the branch the mount shows to unbound
// processes (the one a daemon mounts).
func (w *Workspace) View() *overlay.FS {
	w.opMu.Lock()
	defer w.opMu.Unlock()
	return w.view
}

// Meta is the branch store, for the daemon's hand-off of metadata
// commits (branch.Store.HandOffWith) and its kill -9 path.
func (w *Workspace) Meta() *branch.Store { return w.meta }

// Objects is the backstore.
func (w *Workspace) Objects() *backstore.Store { return w.objs }

// Settle makes what the operations changed durable (the control server
// runs it after each one, before the reply).
func (w *Workspace) Settle() error {
	if err := w.meta.Settle(); err != nil && !errors.Is(err, branch.ErrClosed) {
		return err
	}
	return nil
}

// Self is the caller of an operation run by this process for itself
// (an ended session's store, a tool): it sees the mount's branch.
func Self() ctl.Caller {
	return ctl.Caller{Pid: uint32(os.Getpid()), Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}
}

// locked runs fn with opMu held; a closed workspace runs nothing.
func locked[T any](w *Workspace, fn func() (T, error)) (T, error) {
	w.opMu.Lock()
	defer w.opMu.Unlock()
	if w.closed {
		var zero T
		return zero, errorf(ErrClosed, "the store %s is closed", w.opts.Store)
	}
	return fn()
}

// writable refuses, before anything is done, an operation (what, e.g.
// "restoring snapshot 1a2b3c4d") that would change a store opened
// read-only.
func (w *Workspace) writable(what string) error {
	if w.opts.ReadOnly {
		return errorf(ErrReadOnly, "%s: the store is open read-only: nothing was changed; open it writable to change it", what)
	}
	return nil
}
