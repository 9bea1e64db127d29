package main

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

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/fs"
	"github.com/agentfs/agentfs/overlay"
)

// The daemon's life:
//
//	open the store (branch metadata, backstore), the overlay view
//	mount, write the registry entry, report "ready" to the parent
//	serve until unmounted: by umount/fusermount3 -u from outside, by the
//	  unmount control operation, or by SIGTERM/SIGINT/SIGHUP
//	close everything, delete a private store, remove the registry entry
//
// Unmounting waits a little for the mount to become idle (the client of
// the unmount operation still holds the control file open for a moment),
// then detaches it lazily; if processes keep the detached mount alive,
// the daemon ends their connection after detachGrace (through fusectl,
// or by exiting) and exits: the user asked for the mount to go away.
const (
	busyWait    = 2 * time.Second
	detachGrace = 2 * time.Second
	abortWait   = time.Second
)

// daemon is one serving mount.
type daemon struct {
	plan *mountPlan
	log  *slog.Logger

	meta *branch.Store
	objs *backstore.Store
	view *overlay.FS
	srv  atomic.Pointer[fs.Server]
	conn uint32 // the FUSE connection number (minor of the mount's st_dev)

	// opMu serializes the control operations that read or change
	// snapshots and branches (see ops.go); current is the branch the
	// mount shows to unbound processes (view.Layer(), read without the
	// view's lock), changed only with opMu held. views holds the live
	// view of every branch in use, by name (view among them): one view
	// per branch, so that every process that writes a branch writes
	// through the same in-memory index (ops_bind.go).
	opMu    sync.Mutex
	current atomic.Pointer[branch.Layer]
	views   map[string]*overlay.FS
	// fsOptions are the options of the mount (branch mounts reuse them);
	// branchMounts are the branch mounts of namespaced processes, by
	// branch (ops_bind.go). Both with opMu held.
	fsOptions    fs.Options
	branchMounts map[string]*branchMount
	anchored     bool // the directory of branch mounts is mounted
	// retired are the views of deleted branches that processes may
	// still hold files of (gc spares their objects).
	retired []*overlay.FS

	shutdownOnce sync.Once
	detached     chan struct{} // closed when the mount was detached lazily

	activity *daemonActivity // the activity log and automatic snapshots (activity.go)
}

// serve mounts and serves until unmounted. readyFd, when >= 0, gets
// "ready" or "error: ..." once the outcome is known.
func serve(ctx context.Context, p *mountPlan, readyFd int) (err error) {
	report := func(string) {}
	if readyFd >= 0 {
		f := os.NewFile(uintptr(readyFd), "ready")
		var once sync.Once
		report = func(s string) { once.Do(func() { fmt.Fprintln(f, s); f.Close() }) }
	}
	defer func() {
		if err != nil {
			report("error: " + err.Error())
		}
	}()
	level := slog.LevelInfo
	if p.debug {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if path := os.Getenv("AGENTFS_CPUPROFILE"); path != "" {
		// For performance work: a CPU profile of the daemon's life.
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	if p.store == "" {
		if p.store, err = makePrivateStore(p.lower, p.mountpoint); err != nil {
			return err
		}
		p.ephemeral = true
	}
	// Catch the stop signals from the start: one that arrives while
	// mounting is acted on once the mount is up.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	d := &daemon{plan: p, log: logger, detached: make(chan struct{})}
	defer d.close()
	if p.session {
		// The mount is about to cover the lower path: keep a
		// descriptor of the lower directory, opened now, and reach it
		// through that from here on (daemon.lowerDir).
		fd, err := unix.Open(p.lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("the project %s: %w", p.lower, err)
		}
		defer unix.Close(fd)
		p.lowerDir = fmt.Sprintf("/proc/self/fd/%d", fd)
		p.userns = inUserNamespace()
	}
	if err := d.openStore(); err != nil {
		return err
	}
	if err := d.startActivity(); err != nil {
		return err
	}
	if err := d.mount(); err != nil {
		if p.userns {
			return fmt.Errorf("%w (in a user namespace: %s)", err, usernsMountHint())
		}
		return err
	}
	pid := os.Getpid()
	if !p.session {
		// A session's mount lives in its own mount namespace: the
		// session record stands for it (and agentfs unmount has
		// nothing to clear outside).
		entry := registryEntry{Mountpoint: p.mountpoint, Pid: pid, Store: p.store, Ephemeral: p.ephemeral, Lower: p.lower, Backstore: p.backstore}
		if rd, err := runtimeDir(); err == nil && insideAny(rd, []string{p.lower, p.mountpoint}) {
			logger.Warn("not recording the mount: the runtime directory is inside the lower directory or the mountpoint (set XDG_RUNTIME_DIR or AGENTFS_RUNTIME_DIR)", "dir", rd)
		} else if err := writeRegistry(entry); err != nil {
			logger.Warn("recording the mount in the registry (agentfs unmount cannot clean up if this daemon dies)", "err", err)
		}
		defer removeRegistry(p.mountpoint, pid)
	}
	srv := d.srv.Load()
	logger.Info("mounted", "lower", p.lower, "mountpoint", p.mountpoint, "store", p.store,
		"ephemeral", p.ephemeral, "backstore", d.objs.Info().Kind, "passthrough", srv.Passthrough())

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
		case <-time.After(detachGrace):
			logger.Warn("processes still use the detached mount: ending their connection", "mountpoint", p.mountpoint)
			d.abortConnection(d.conn)
			select {
			case <-unmounted:
			case <-time.After(abortWait):
				d.exitNow(pid)
			}
		}
	}
	logger.Info("unmounted", "mountpoint", p.mountpoint)
	d.unmountBranches()
	return nil
}

// exitNow ends a daemon whose detached mount is still in use and whose
// FUSE connection could not be aborted (no fusectl): it makes the
// metadata durable and exits; the kernel ends the connection when the
// /dev/fuse descriptor closes, and the processes still inside get
// ENOTCONN. Nothing is closed that a request in flight could still use,
// except a private store, which is going away anyway.
func (d *daemon) exitNow(pid int) {
	p := d.plan
	d.log.Warn("the FUSE connection did not end; exiting anyway")
	if d.activity != nil {
		d.activity.log.Close() // write what is queued
	}
	if err := d.meta.Sync(); err != nil {
		d.log.Error("syncing the metadata", "err", err)
	}
	removeRegistry(p.mountpoint, pid)
	if p.ephemeral {
		if err := d.objs.Close(); err != nil {
			d.log.Warn("closing the backstore", "err", err)
		}
		os.RemoveAll(p.store)
	}
	os.Exit(0)
}

// openStore opens the branch metadata, checks the store belongs to this
// lower directory, opens the backstore and the overlay view.
func (d *daemon) openStore() error {
	p := d.plan
	var err error
	d.meta, err = branch.Open(branch.Options{Dir: p.store, Logger: d.log})
	if err != nil {
		return err
	}
	prev, err := d.meta.Info("lower")
	switch {
	case errors.Is(err, branch.ErrNotFound):
		if err := d.meta.SetInfo("lower", []byte(p.lower)); err != nil {
			return fmt.Errorf("the store %s: recording its lower directory: %w", p.store, err)
		}
	case err != nil:
		return fmt.Errorf("the store %s: reading its lower directory: %w", p.store, err)
	case string(prev) != p.lower:
		return fmt.Errorf("the store %s was made for the lower directory %s, not %s: mount it with --lower %s, or use another --store", p.store, prev, p.lower, prev)
	}
	layer, err := d.resumeBranch()
	if err != nil {
		return fmt.Errorf("the store %s: %w", p.store, err)
	}
	d.current.Store(layer)
	d.objs, err = backstore.Open(backstore.Options{Kind: p.backstore, Dir: p.store, RamdiskSize: p.ramdiskSize})
	if err != nil {
		return fmt.Errorf("opening the %s backstore: %w", p.backstore, err)
	}
	if d.objs.Crashed() {
		// The daemon before this one died: what it made and did not
		// commit, and its idle objects, are referred to by nothing,
		// and nothing uses them yet.
		r, err := d.objs.Collect(backstore.GCOptions{Referenced: d.meta.ReferencedObjects, Grace: -1})
		if err != nil {
			return fmt.Errorf("the store %s: collecting what the daemon before this one left: %w", p.store, err)
		}
		d.objs.Recovered()
		d.log.Info("collected what the daemon before this one left", "objects", r.Objects, "removed", r.Removed, "freed", r.Freed)
	}
	d.view, err = overlay.New(overlay.Config{Lower: d.lowerDir(), Objects: d.objs, Layer: layer,
		AllocIno: d.meta.AllocIno, Sync: d.meta.Sync, Logger: d.log})
	if err != nil {
		return err
	}
	d.views = map[string]*overlay.FS{layer.Name(): d.view}
	return nil
}

// lowerDir is the path by which the daemon opens the lower directory:
// the project path, except under agentfs run, where the daemon's own
// mount covers that path and a descriptor opened before mounting
// reaches it (/proc/self/fd/N). Every open of the lower directory by
// path goes through it; plan.lower stays the name shown to users and
// recorded in the store.
func (d *daemon) lowerDir() string {
	if d.plan.lowerDir != "" {
		return d.plan.lowerDir
	}
	return d.plan.lower
}

// uringKnob is the fuse module's switch for FUSE over io_uring.
const uringKnob = "/sys/module/fuse/parameters/enable_uring"

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

// mount mounts the view with the control server.
func (d *daemon) mount() error {
	p := d.plan
	// Root of a user namespace (agentfs run as a normal user) mounts
	// directly but gets neither passthrough (it needs CAP_SYS_ADMIN
	// in the initial namespace) nor allow_other (which would shut
	// out the processes of the initial namespace, the CLI among them).
	root := os.Geteuid() == 0 && !p.userns
	control := ctl.NewServer(uint32(os.Geteuid()), d.log)
	d.handle(control)
	ioURing := root && !p.noIOURing && enableIOURing(d.log)
	d.fsOptions = fs.Options{
		Mountpoint: p.mountpoint,
		View:       d.view,
		Control:    control,
		// Passthrough or a writeback cache: the kernel grants not both.
		Passthrough:    root && !p.noPassthrough && !p.writeback,
		WritebackCache: p.writeback,
		IOURing:        ioURing,
		AbortConnection: func() {
			// Found in the mount table: the mountpoint cannot be
			// stat'ed while the kernel holds requests.
			if e, ok, _ := mountAt(p.mountpoint); ok && e.FsType == agentfsFsType {
				if _, minor, ok := strings.Cut(e.Dev, ":"); ok {
					if n, err := strconv.ParseUint(minor, 10, 32); err == nil {
						d.abortConnection(uint32(n))
					}
				}
			}
		},
		AllowOther: root,
		FsName:     p.lower,
		Debug:      p.debug,
		Logger:     d.log,

		Activity:      d.activity,
		ActivityReads: p.activity.logReads,
	}
	if p.writeback {
		// Without a writeback cache nothing is held back: control
		// requests need not take opMu to list the mounts.
		d.fsOptions.WriteBackAll = d.writeBack
	}
	srv, err := fs.Mount(d.fsOptions)
	if err != nil {
		return fmt.Errorf("mounting %s: %w", p.mountpoint, err)
	}
	srv.OnUnbind(d.bindingEnded)
	// The metadata commits of creates, unlinks and renames reach
	// badger from the releaser, not from the queue thread that answers
	// the program (branch.Store.HandOffWith).
	if d.meta != nil {
		if kick := srv.Aside(d.meta.HandOver); kick != nil {
			d.meta.HandOffWith(kick)
		}
	}
	d.srv.Store(srv)
	var st unix.Stat_t
	if err := unix.Stat(p.mountpoint, &st); err == nil {
		d.conn = unix.Minor(st.Dev)
	}
	return nil
}

// close releases everything; a private store is deleted.
func (d *daemon) close() {
	d.closeActivity()
	for name, v := range d.views {
		if err := v.Close(); err != nil {
			d.log.Warn("closing the overlay", "branch", name, "err", err)
		}
	}
	for _, v := range d.retired {
		v.Close()
	}
	if d.objs != nil {
		if err := d.objs.Close(); err != nil {
			d.log.Warn("closing the backstore", "err", err)
		}
	}
	if d.meta != nil {
		d.meta.HandOffWith(nil)
		if err := d.meta.Close(); err != nil {
			d.log.Warn("closing the metadata", "err", err)
		}
	}
	if d.plan.ephemeral && d.plan.store != "" {
		if err := os.RemoveAll(d.plan.store); err != nil {
			d.log.Warn("removing the private store", "err", err)
		}
	}
}

// shutdown starts unmounting (once): cleanly while the mount becomes idle
// within busyWait, then lazily.
func (d *daemon) shutdown(why string) {
	d.shutdownOnce.Do(func() {
		go func() {
			mp := d.plan.mountpoint
			d.log.Info("unmounting", "reason", why)
			deadline := time.Now().Add(busyWait)
			// The first try usually finds the mount busy: the command
			// that asked for the unmount still holds the control file
			// for a moment after the reply. Retry soon, then less often.
			var err error
			for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
				if err = unmountOnce(mp, false); err == nil {
					return
				}
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(pause)
			}
			d.log.Warn("the mount is busy: detaching it lazily", "err", err)
			if err := unmountOnce(mp, true); err != nil {
				d.log.Error("detaching the mount", "err", err)
			}
			close(d.detached)
		}()
	})
}

// abortConnection ends the FUSE connection through fusectl, as
// `echo 1 > /sys/fs/fuse/connections/N/abort` does. Where fusectl is not
// mounted (systemd mounts it; a bare system may not), it mounts it.
func (d *daemon) abortConnection(conn uint32) {
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

// unmountOnce unmounts mp, lazily (MNT_DETACH) when lazy: directly as
// root, through fusermount3 otherwise.
func unmountOnce(mp string, lazy bool) error {
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

// handle registers the control operations.
func (d *daemon) handle(s *ctl.Server) {
	s.Handle(ctl.OpPing, func(ctl.Caller, json.RawMessage) (any, error) { return "pong", nil })
	s.Handle(ctl.OpStatus, func(ctl.Caller, json.RawMessage) (any, error) { return d.status() })
	s.Handle(ctl.OpUnmount, func(c ctl.Caller, _ json.RawMessage) (any, error) {
		d.shutdown(fmt.Sprintf("unmount requested by pid %d (uid %d)", c.Pid, c.Uid))
		return ctl.UnmountReply{Pid: os.Getpid()}, nil
	})
	d.handleSnapshots(s)
	d.handleBranches(s)
	d.handleBindings(s)
	d.handleChanges(s)
	d.handleApply(s)
	d.handleActivity(s)
	// What a command changed is written before it returns: a kill -9
	// of the daemon right after cannot take it back.
	s.After(func() error {
		if err := d.meta.Settle(); err != nil && !errors.Is(err, branch.ErrClosed) {
			return err
		}
		return nil
	})
}

// status describes the mount for agentfs status.
func (d *daemon) status() (ctl.Status, error) {
	info := d.objs.Info()
	u, err := d.objs.Usage()
	if err != nil {
		d.log.Warn("backstore usage", "err", err)
	}
	passthrough, writeback := false, false
	var reads, spliced, fromDisk uint64
	transport := "none"
	if srv := d.srv.Load(); srv != nil {
		passthrough = srv.Passthrough()
		writeback = srv.WritebackCache()
		reads, spliced, fromDisk = srv.Reads()
		transport = srv.Transport()
		switch {
		case strings.HasPrefix(transport, "io_uring"):
		case d.plan.noIOURing:
			transport += " (--no-io-uring)"
		case os.Geteuid() != 0 || d.plan.userns:
			transport += " (io_uring is turned on as root only)"
		}
	}
	pid := os.Getpid()
	if d.plan.offline {
		pid = 0
	}
	st := ctl.Status{
		Version: version, Pid: pid, Owner: uint32(os.Geteuid()), Offline: d.plan.offline, Session: d.plan.session || d.plan.offline,
		Lower: d.plan.lower, Mountpoint: d.plan.mountpoint,
		Store: d.plan.store, Branch: d.current.Load().Name(), Ephemeral: d.plan.ephemeral,
		Backstore: info.Kind, BackingMode: info.Mode, BackingRoot: info.Root, SizeLimit: info.SizeLimit,
		Reflink: info.Reflink, Passthrough: passthrough, WritebackCache: writeback,
		IOMode:    ioMode(passthrough, writeback, os.Geteuid() == 0 && !d.plan.userns, d.plan.noPassthrough || d.plan.writeback),
		Transport: transport, Reads: reads, ReadsSpliced: spliced, ReadsFromDisk: fromDisk,
		Objects: u.Objects, Bytes: u.Bytes, FsFree: u.FsFree,
		Bindings: d.bindings(),
	}
	if d.plan.offline {
		st.IOMode = "none (not mounted: the session has ended)"
	}
	return st, nil
}

// ioMode says in words how file I/O is served; refused is whether the
// mount was asked not to use passthrough (--no-passthrough, or
// --writeback-cache, which the kernel does not grant with it).
func ioMode(passthrough, writeback, root, refused bool) string {
	switch {
	case passthrough:
		return "passthrough"
	case writeback:
		return "page cache with writeback cache (--writeback-cache; no passthrough)"
	case refused:
		return "page cache (no passthrough: --no-passthrough)"
	case !root:
		return "page cache (no passthrough: not root)"
	}
	return "page cache (no passthrough: the kernel did not grant it; it needs Linux 6.9 or later)"
}
