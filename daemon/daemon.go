package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/contenthash"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/fs"
	"github.com/agentfs/agentfs/hide"
	"github.com/agentfs/agentfs/hostpath"
	"github.com/agentfs/agentfs/kernelinfo"
	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/procfs"
	"github.com/agentfs/agentfs/remote"
	"github.com/agentfs/agentfs/workspace"
)

// How long unmounting waits (see the package doc).
const (
	// BusyWait is how long an unmount retries while the mount is busy
	// before it detaches it lazily.
	BusyWait = 2 * time.Second
	// DetachGrace is how long processes may keep a detached mount
	// before their connection is ended.
	DetachGrace = 2 * time.Second
	// AbortWait is how long the daemon waits for an aborted connection
	// to end before it exits anyway.
	AbortWait = time.Second
	// ShutdownWait is how long a daemon may take to end once asked:
	// every step above.
	ShutdownWait = BusyWait + DetachGrace + AbortWait
	// ExitWait is the most a caller waits for a daemon asked to
	// unmount to exit: every step above, and a margin.
	ExitWait = ShutdownWait + 5*time.Second
)

// FsType is the type of agentfs mounts in mountinfo (go-fuse mounts as
// "fuse.NAME").
const FsType = "fuse.agentfs"

// Options are what a daemon needs besides its plan.
type Options struct {
	// ReadyFd, when >= 0, gets "ready" or "error: ..." once the
	// outcome of mounting is known (the starting command waits for it).
	ReadyFd int
	// Version is agentfs's, for status.
	Version string
	// Supervisor, when not nil, is the line to the supervisor of the
	// session's command (agentfs run --supervise): a restore of the
	// branch the mount shows stops the command first (supervisor.go).
	Supervisor *os.File
}

// Daemon is one serving mount.
type Daemon struct {
	plan    *Plan
	log     *slog.Logger
	version string // agentfs's (Options.Version)
	// lastOp is when the activity hook last saw an operation (Unix
	// ns): the hash worker waits for a quiet moment (hashYield).
	lastOp atomic.Int64
	// hashPaused: the hash worker's process is stopped while the
	// mount is busy (pauseHashing).
	hashPaused atomic.Bool
	// store and ephemeral: the plan's store, or a private one made at
	// start. lowerDir reaches the project (see workspace.Options).
	// userns: the daemon runs in a user namespace (agentfs run as a
	// normal user): root there, but no passthrough or allow_other.
	store     string
	ephemeral bool
	lowerDir  string
	userns    bool

	ws       *workspace.Workspace
	srv      atomic.Pointer[fs.Server]
	shown    atomic.Pointer[overlay.FS] // the view unbound processes see (workspace.Mount.Show)
	conn     uint32                     // the FUSE connection number (minor of the mount's st_dev)
	activity *activityHook              // the activity log and automatic snapshots (activity.go)
	trace    *traceHook                 // the exec trace (exectrace.go); set before the mount serves, started once it is up
	super    *supervisorLink            // the session's supervisor, or nil (supervisor.go)
	// fsOptions are the options of the mount, which branch mounts
	// reuse; set before the mount serves, then only read.
	fsOptions fs.Options

	// mu guards the branch mounts (branchmount.go).
	mu           sync.Mutex
	branchMounts map[string]*branchMount
	anchored     bool // the directory of branch mounts is mounted

	shutdownOnce sync.Once
	detached     chan struct{} // closed when the mount was detached lazily
	// registered: the mount has a registry entry, which close removes.
	registered bool
}

var _ workspace.Mount = (*Daemon)(nil)

// Serve mounts plan p and serves it until it is unmounted.
func Serve(ctx context.Context, p *Plan, o Options) (err error) {
	report := func(string) {}
	if o.ReadyFd >= 0 {
		f := os.NewFile(uintptr(o.ReadyFd), "ready")
		var once sync.Once
		report = func(s string) {
			once.Do(func() {
				// The parent reads one line, or sees the pipe close.
				fmt.Fprintln(f, s)
				f.Close()
			})
		}
	}
	defer func() {
		if err != nil {
			report("error: " + err.Error())
		}
	}()
	level := slog.LevelInfo
	if p.Debug {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if path := os.Getenv("AGENTFS_CPUPROFILE"); path != "" {
		// For performance work: a CPU profile of the daemon's life.
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	d := &Daemon{plan: p, log: logger, version: o.Version, store: p.Store, ephemeral: p.Ephemeral, lowerDir: p.Lower, detached: make(chan struct{})}
	if o.Supervisor != nil {
		d.super = newSupervisorLink(o.Supervisor)
		defer d.super.close()
	}
	if d.store == "" {
		if d.store, err = MakePrivateStore(p.Lower, p.Mountpoint); err != nil {
			return err
		}
		d.ephemeral = true
	}
	// Catch the stop signals from the start: one that arrives while
	// mounting is acted on once the mount is up.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	defer d.close()
	if p.Session {
		// The mount is about to cover the lower path: keep a
		// descriptor of the lower directory, opened now, and reach it
		// through that from here on.
		fd, err := unix.Open(p.Lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("the project %s: %w", p.Lower, err)
		}
		defer unix.Close(fd)
		d.lowerDir = fmt.Sprintf("/proc/self/fd/%d", fd)
		d.userns = procfs.InUserNamespace()
	}
	rules, err := hide.New(p.Activity.Hide)
	if err != nil {
		return err
	}
	// A mount --from starts a new store from the remote snapshot, or
	// goes on with a kept one started from it (workspace/from.go).
	startFrom := false
	var (
		fromRemote   *remote.Remote
		fromDoc      *remote.SnapshotDoc
		fromStart    = time.Now()
		fromReadTime time.Duration
	)
	if p.From != "" {
		if startFrom, err = workspace.CheckFromStore(d.store, p.From); err != nil {
			return err
		}
	}
	// The remote's snapshot is read while the store opens (its round
	// trips overlap the store's start), except for a kept store: read
	// before it is made, a bad remote or snapshot leaves it as it was
	// (a private store goes anyway).
	var fromRead chan error
	if startFrom {
		fromRead = make(chan error, 1)
		go func() {
			var err error
			fromRemote, fromDoc, err = workspace.OpenRemoteSnapshot(ctx, p.From)
			fromReadTime = time.Since(fromStart)
			fromRead <- err
		}()
		if !d.ephemeral {
			if err := <-fromRead; err != nil {
				return err
			}
			fromRead = nil
		}
	}
	d.ws, err = workspace.Open(workspace.Options{Store: d.store, Lower: p.Lower, LowerDir: d.lowerDir, Mountpoint: p.Mountpoint,
		Backstore: p.Backstore, RamdiskSize: p.RamdiskSize, Ephemeral: d.ephemeral, Session: p.Session,
		System: p.System, Exclude: p.Exclude, Seal: p.Seal,
		Keep: p.Activity.Keep, Version: o.Version, Logger: logger, Hide: rules,
		Limits:     overlay.Limits{Files: p.Activity.MaxFiles, Bytes: p.Activity.MaxBytes.Bytes},
		BytesShare: p.Activity.MaxBytes.Percent,
		// Only the tests of the progress bars set it (workspace/progress.go).
		ProgressGate: os.Getenv("AGENTFS_TEST_PROGRESS_GATE") == "1",
		NoHash:       !p.Activity.Hash,
		HashHelper:   hashHelper(),
		HashCache:    contenthash.UserLowerCachePath(),
		// Only the tests that block the hash worker set it.
		HashGate:  os.Getenv("AGENTFS_TEST_HASH_GATE"),
		MergeGate: os.Getenv("AGENTFS_TEST_MERGE_GATE"),
		HashYield: d.hashYield})
	if err != nil {
		return err
	}
	if startFrom {
		opened := time.Since(fromStart)
		if fromRead != nil {
			if err := <-fromRead; err != nil {
				return err
			}
		}
		// The store is new: give main the snapshot, its files fetched
		// at their first open (workspace/from.go).
		if err := d.ws.StartFrom(fromRemote, fromDoc); err != nil {
			return err
		}
		logger.Info("starting from a remote snapshot", "from", p.From, "read_seconds", fromReadTime.Seconds(),
			"opened_seconds", opened.Seconds(), "seconds", time.Since(fromStart).Seconds())
	}
	d.shown.Store(d.ws.View())
	d.ws.Attach(d)
	if err := d.startActivity(); err != nil {
		return err
	}
	d.trace = &traceHook{d: d, running: map[int]*activity.Entry{}}
	if err := d.mount(o.Version); err != nil {
		if d.userns {
			return fmt.Errorf("%w (in a user namespace: %s)", err, UsernsMountHint())
		}
		return err
	}
	pid := os.Getpid()
	if !p.Session {
		// A session's mount lives in its own mount namespace: the
		// session record stands for it (and agentfs unmount has
		// nothing to clear outside).
		entry := RegistryEntry{Mountpoint: p.Mountpoint, Pid: pid, Store: d.store, Ephemeral: d.ephemeral, Lower: p.Lower, Backstore: p.Backstore}
		if rd, err := RuntimeDir(); err == nil && hostpath.InsideAny(rd, []string{p.Lower, p.Mountpoint}) {
			logger.Warn("not recording the mount: the runtime directory is inside the lower directory or the mountpoint (set XDG_RUNTIME_DIR or AGENTFS_RUNTIME_DIR)", "dir", rd)
		} else if err := writeRegistry(entry); err != nil {
			logger.Warn("recording the mount in the registry (agentfs unmount cannot clean up if this daemon dies)", "err", err)
		}
		// Removed by close, last: a daemon that dies while it closes
		// the store leaves the entry, by which agentfs unmount deletes
		// a private store it left.
		d.registered = true
	}
	if p.System && d.root() {
		// The system session's command gets its namespace once the
		// mount is ready: the directory of branch mounts must be a
		// shared mount by then, for agentfs exec -b inside to see the
		// branch mounts made later (session/system.go).
		d.mu.Lock()
		_, err := d.branchAnchorLocked()
		d.mu.Unlock()
		if err != nil {
			logger.Warn("the directory of branch mounts: agentfs exec -b will not work inside the session", "err", err)
		}
	}
	d.trace.start()
	srv := d.srv.Load()
	logger.Info("mounted", "lower", p.Lower, "mountpoint", p.Mountpoint, "store", d.store,
		"ephemeral", d.ephemeral, "backstore", d.ws.Objects().Info().Kind, "passthrough", srv.Passthrough())

	go func() {
		for s := range sigs {
			d.shutdown("signal " + s.String())
		}
	}()
	report("ready")

	unmounted := make(chan struct{})
	go func() { srv.Wait(); close(unmounted) }()
	select {
	case <-unmounted:
	case <-d.detached:
		select {
		case <-unmounted:
		case <-time.After(DetachGrace):
			logger.Warn("processes still use the detached mount: ending their connection", "mountpoint", p.Mountpoint)
			d.abortConnection(d.conn)
			select {
			case <-unmounted:
			case <-time.After(AbortWait):
				d.exitNow(pid)
			}
		}
	}
	logger.Info("unmounted", "mountpoint", p.Mountpoint)
	d.unmountBranches()
	return nil
}

// exitNow ends a daemon whose detached mount is still in use and whose
// FUSE connection could not be aborted (no fusectl): it makes the
// metadata durable and exits; the kernel ends the connection when the
// /dev/fuse descriptor closes, and the processes still inside get
// ENOTCONN. Nothing is closed that a request in flight could still use,
// except a private store, which is going away anyway.
func (d *Daemon) exitNow(pid int) {
	d.log.Warn("the FUSE connection did not end; exiting anyway")
	if d.activity != nil {
		if err := d.activity.log.Close(); err != nil { // write what is queued
			d.log.Warn("closing the activity log", "err", err)
		}
	}
	if err := d.ws.Meta().Sync(); err != nil {
		d.log.Error("syncing the metadata", "err", err)
	}
	if d.ephemeral {
		if err := d.ws.Objects().Close(); err != nil {
			d.log.Warn("closing the backstore", "err", err)
		}
		d.discardStore()
	}
	RemoveRegistry(d.plan.Mountpoint, pid)
	os.Exit(0)
}

// uringKnob is the fuse module's switch for FUSE over io_uring.
const uringKnob = kernelinfo.URingKnob

// enableIOURing turns on the fuse module's enable_uring parameter, off
// by default, and reports whether it is on. The parameter only lets a
// FUSE server ask for io_uring at INIT; servers that do not ask are not
// affected, and connections made before keep what they have.
func enableIOURing(log *slog.Logger) bool {
	b, err := os.ReadFile(uringKnob)
	if err != nil {
		log.Debug("no FUSE over io_uring in this kernel", "err", err)
		return false
	}
	if strings.TrimSpace(string(b)) == "Y" {
		return true
	}
	if err := os.WriteFile(uringKnob, []byte("Y"), 0); err != nil {
		log.Warn("FUSE over io_uring left off", "knob", uringKnob, "err", err)
		return false
	}
	log.Info("turned FUSE over io_uring on", "knob", uringKnob)
	return true
}

// root reports whether the daemon has the privileges of root in the
// initial user namespace: passthrough, allow_other, branch mounts.
func (d *Daemon) root() bool { return os.Geteuid() == 0 && !d.userns }

// mount mounts the view with the control server.
func (d *Daemon) mount(version string) error {
	p := d.plan
	// Root of a user namespace (agentfs run as a normal user) mounts
	// directly but gets neither passthrough (it needs CAP_SYS_ADMIN
	// in the initial namespace) nor allow_other (which would shut
	// out the processes of the initial namespace, the CLI among them).
	root := d.root()
	control := ctl.NewServer(uint32(os.Geteuid()), d.log)
	d.handle(control)
	ioURing := root && !p.NoIOURing && enableIOURing(d.log)
	d.fsOptions = fs.Options{
		Mountpoint: p.Mountpoint,
		View:       d.shown.Load(),
		Control:    control,
		// Passthrough or a writeback cache: the kernel grants not both.
		Passthrough:     root && !p.NoPassthrough && !p.WritebackCache,
		WritebackCache:  p.WritebackCache,
		IOURing:         ioURing,
		AbortConnection: d.abortOwnConnection,
		AllowOther:      root,
		FsName:          p.Lower,
		MountFlags:      p.MountFlags,
		Debug:           p.Debug,
		Logger:          d.log,

		Activity:      d.activity,
		ActivityReads: p.Activity.LogReads,
	}
	if p.WritebackCache {
		// Without a writeback cache nothing is held back: control
		// requests need not list the mounts.
		d.fsOptions.WriteBackAll = d.writeBack
	}
	srv, err := fs.Mount(d.fsOptions)
	if err != nil {
		return fmt.Errorf("mounting %s: %w", p.Mountpoint, err)
	}
	srv.OnUnbind(d.bindingEnded)
	// The metadata commits of creates, unlinks and renames reach
	// badger from the releaser, not from the queue thread that answers
	// the program (branch.Store.HandOffWith).
	meta := d.ws.Meta()
	if kick := srv.Aside(meta.HandOver); kick != nil {
		meta.HandOffWith(kick)
	}
	d.srv.Store(srv)
	var st unix.Stat_t
	if err := unix.Stat(p.Mountpoint, &st); err == nil {
		d.conn = unix.Minor(st.Dev)
	}
	return nil
}

// abortOwnConnection aborts the mount's FUSE connection, found in the
// mount table: the mountpoint cannot be stat'ed while the kernel holds
// requests.
func (d *Daemon) abortOwnConnection() {
	e, ok, err := procfs.MountAt(mountinfoPath, d.plan.Mountpoint)
	if err != nil || !ok || e.FsType != FsType {
		d.log.Warn("aborting the FUSE connection: the mount is not in the mount table", "mountpoint", d.plan.Mountpoint, "err", err)
		return
	}
	if _, minor, ok := strings.Cut(e.Dev, ":"); ok {
		if n, err := strconv.ParseUint(minor, 10, 32); err == nil {
			d.abortConnection(uint32(n))
		}
	}
}

// close releases everything; a private store is deleted (in the
// background: discardStore). The registry entry goes last.
func (d *Daemon) close() {
	start := time.Now()
	d.trace.close()
	d.closeActivity()
	waitGate("AGENTFS_TEST_CLOSE_GATE")
	if d.ws != nil {
		if err := d.ws.Close(); err != nil {
			d.log.Warn("closing the store", "err", err)
		}
		d.log.Info("closed the store", "seconds", time.Since(start).Seconds())
	}
	if d.ephemeral && d.store != "" {
		d.discardStore()
	}
	if d.registered {
		RemoveRegistry(d.plan.Mountpoint, os.Getpid())
	}
}

// waitGate waits while the file the environment variable env names
// exists: only the tests that hold the daemon's exit or the remover
// back set one (AGENTFS_TEST_CLOSE_GATE, AGENTFS_TEST_REMOVE_GATE).
func waitGate(env string) {
	gate := os.Getenv(env)
	for gate != "" {
		if _, err := os.Lstat(gate); err != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// discardStore deletes the private store: it moves it aside and leaves
// the deletion to a remover process (trash.go), which may take long
// after this daemon has exited.
func (d *Daemon) discardStore() {
	if err := DiscardPrivateStore(d.store); err != nil {
		d.log.Warn("removing the private store", "err", err)
		return
	}
	d.log.Info("the private store is being deleted in the background", "store", d.store)
}

// shutdown starts unmounting (once): cleanly while the mount becomes
// idle within BusyWait, then lazily.
func (d *Daemon) shutdown(why string) {
	d.shutdownOnce.Do(func() {
		go func() {
			mp := d.plan.Mountpoint
			d.log.Info("unmounting", "reason", why)
			deadline := time.Now().Add(BusyWait)
			// The first try usually finds the mount busy: the command
			// that asked for the unmount still holds the control file
			// for a moment after the reply. Retry soon, then less often.
			var err error
			for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
				if err = UnmountOnce(mp, false); err == nil {
					return
				}
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(pause)
			}
			d.log.Warn("the mount is busy: detaching it lazily", "err", err)
			if err := UnmountOnce(mp, true); err != nil {
				d.log.Error("detaching the mount", "err", err)
			}
			close(d.detached)
		}()
	})
}

// abortConnection ends the FUSE connection through fusectl, as
// `echo 1 > /sys/fs/fuse/connections/N/abort` does. Where fusectl is not
// mounted (systemd mounts it; a bare system may not), it mounts it.
func (d *Daemon) abortConnection(conn uint32) {
	if conn == 0 {
		return
	}
	const dir = "/sys/fs/fuse/connections"
	p := filepath.Join(dir, fmt.Sprint(conn), "abort")
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mount("fusectl", dir, "fusectl", 0, ""); err != nil {
			d.log.Warn("mounting fusectl", "dir", dir, "err", err)
		}
	}
	if err := os.WriteFile(p, []byte("1"), 0); err != nil {
		d.log.Warn("aborting the FUSE connection", "path", p, "err", err)
	}
}

// UnmountOnce unmounts mp, lazily (MNT_DETACH) when lazy: directly as
// root, through fusermount3 otherwise.
func UnmountOnce(mp string, lazy bool) error {
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = unix.MNT_DETACH
		}
		if err := unix.Unmount(mp, flags); err != nil {
			return fmt.Errorf("unmounting %s: %w", mp, err)
		}
		return nil
	}
	args := []string{"-u", "-q"}
	if lazy {
		args = append(args, "-z")
	}
	out, err := exec.Command("fusermount3", append(args, mp)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fusermount3 -u %s: %v: %s", mp, err, out)
	}
	return nil
}

// handle registers the control operations: the workspace's, and the
// daemon's own (ping, unmount).
func (d *Daemon) handle(s *ctl.Server) {
	d.ws.Register(s)
	s.Handle(ctl.OpPing, func(ctl.Caller, json.RawMessage) (any, error) { return "pong", nil })
	s.Handle(ctl.OpDaemon, func(ctl.Caller, json.RawMessage) (any, error) {
		return ctl.DaemonInfo{Pid: os.Getpid(), Version: d.version}, nil
	})
	s.Handle(ctl.OpUnmount, func(c ctl.Caller, _ json.RawMessage) (any, error) {
		d.shutdown(fmt.Sprintf("unmount requested by pid %d (uid %d)", c.Pid, c.Uid))
		return ctl.UnmountReply{Pid: os.Getpid()}, nil
	})
}

// hashHelper is the command of the hashing process: this binary's
// hidden command (contenthash.RunHelper); none when the binary cannot
// be found.
func hashHelper() []string {
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	return []string{self, contenthash.HelperCommand}
}
