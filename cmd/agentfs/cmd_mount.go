package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/ctl"
)

// mountOptions are the flags of agentfs mount.
type mountOptions struct {
	lower       string
	store       string
	backstore   string
	ramdiskSize string
	foreground  bool
	debug       bool
	noPT        bool
	writeback   bool
	noIOURing   bool
	activity    activityFlags
	// Set by the parent for the daemon it starts.
	ephemeral bool
	readyFd   int
	// session: the daemon of an agentfs run session, in the session's
	// private mount namespace: the mountpoint is the lower directory.
	session bool
}

// defaultRamdiskSize is the ramdisk's size limit without --ramdisk-size.
const defaultRamdiskSize = 1 << 30

func (o *mountOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.lower, "lower", "", "the project `DIR` to show (never modified)")
	fs.StringVar(&o.store, "store", "", "keep all state in `DIR`, to mount it again later\n(default: a private directory that unmount deletes)")
	fs.StringVar(&o.backstore, "backstore", "hostfs", "where changed files live, a `KIND`: hostfs (a directory in the store)\nor ramdisk (a size-limited tmpfs; not with --store)")
	fs.StringVar(&o.ramdiskSize, "ramdisk-size", "", "size limit of the ramdisk backstore, a `SIZE` such as 512M or 2G (default 1G)")
	fs.BoolVar(&o.foreground, "foreground", false, "serve in this process (logging to stderr) instead of starting a daemon")
	fs.BoolVar(&o.noPT, "no-passthrough", false, "serve file I/O through the page cache even where FUSE passthrough\nis available (to compare, or to work around a kernel problem)")
	fs.BoolVar(&o.writeback, "writeback-cache", false, "let the kernel gather writes in its page cache and send them in large\nrequests, instead of FUSE passthrough (see the README: file times are\nthe kernel's, and a few stat details differ from the native ones)")
	fs.BoolVar(&o.noIOURing, "no-io-uring", false, "take FUSE requests over /dev/fuse even where FUSE over io_uring is\navailable (to compare, or to work around a kernel problem)")
	o.activity.AddFlags(fs)
	fs.BoolVar(&o.debug, "debug", false, "log every FUSE operation (to the store's agentfs.log, or stderr with --foreground)")
	fs.BoolVar(&o.ephemeral, "ephemeral", false, "internal: the store is private; delete it on exit")
	fs.IntVar(&o.readyFd, "ready-fd", -1, "internal: report readiness on this file descriptor")
	fs.BoolVar(&o.session, "session-mount", false, "internal: serve an agentfs run session (mountpoint = lower, in a private mount namespace)")
	fs.MarkHidden("ephemeral")
	fs.MarkHidden("ready-fd")
	fs.MarkHidden("session-mount")
}

func init() {
	register(&command{
		name:    "mount",
		summary: "mount a copy-on-write view of a project",
		usage:   "--lower DIR [--store DIR] [--backstore hostfs|ramdisk] [--ramdisk-size SIZE] [--auto-snapshot] [--quiet-period DUR] [--log-reads] [--foreground] [--debug] MOUNTPOINT",
		help: `Mount shows DIR at MOUNTPOINT. Reads pass through to DIR; the first write
to a file copies it into the backstore; deletes hide the lower file. DIR
itself is never modified. The command returns once the mount is ready; a
daemon serves it until 'agentfs unmount', umount, or SIGTERM. The
daemon's log is agentfs.log in the store.

Without --store, the state lives in a private directory that unmount
deletes: unmounting discards every change. With --store DIR, the changes
persist, and mounting the same store again (with the same --lower)
resumes them. One store serves one mount at a time.

Everything is checked before anything is mounted: a missing lower or
mountpoint, a mountpoint inside the lower tree (or the reverse), a
mountpoint that is already mounted, a missing /dev/fuse, a store in use
or written by an incompatible agentfs are refused with an explanation.

Every change programs make in the mount goes to an activity log in the
store (agentfs log shows it). With --auto-snapshot the mount takes a
snapshot once changes settle (--quiet-period) and after each git commit
made inside it; older automatic snapshots thin out (agentfs snapshot
prune). Defaults for these come from ~/.config/agentfs/config and the
project's .agentfs.conf (see the README); flags override both.

Examples:
  agentfs mount --lower ~/proj /mnt/ws
  agentfs mount --lower ~/proj --auto-snapshot --quiet-period 5s /mnt/ws
  agentfs mount --lower ~/proj --store ~/.ws1 /mnt/ws
  agentfs mount --lower ~/proj --backstore ramdisk --ramdisk-size 2G /mnt/ws`,
		setup: func(fs *pflag.FlagSet, _ streams) runFunc {
			o := &mountOptions{}
			o.AddFlags(fs)
			return func(ctx context.Context, args []string) error { return runMount(ctx, o, args) }
		},
	})
}

// mountPlan is a validated mount request.
type mountPlan struct {
	lower, mountpoint string
	store             string // "" until a private one is made
	ephemeral         bool
	backstore         string
	ramdiskSize       int64
	debug             bool
	noPassthrough     bool
	writeback         bool
	noIOURing         bool

	// session: an agentfs run session's mount (see runSession): the
	// mountpoint is the lower directory itself, in a private mount
	// namespace; no registry entry (the session record stands for it).
	session bool
	// lowerDir, when set, is the path by which the daemon reaches the
	// lower directory (/proc/self/fd/N of a descriptor opened before
	// mounting): under a session the lower path is covered by the
	// mount. See daemon.lowerDir.
	lowerDir string
	// userns: the daemon runs in a user namespace (agentfs run as a
	// normal user): root there, but no passthrough or allow_other.
	userns bool
	// offline: the store is opened in-process with nothing mounted
	// (an ended session, see openOffline).
	offline bool

	activity activitySettings
}

func runMount(ctx context.Context, o *mountOptions, args []string) error {
	if len(args) != 1 {
		return usagef("mount takes one MOUNTPOINT, got %d arguments", len(args))
	}
	p, err := validateMount(o, args[0])
	if err != nil {
		return err
	}
	if o.foreground {
		return serve(ctx, p, o.readyFd)
	}
	return startDaemon(p)
}

// validateMount checks everything that can be checked before mounting,
// so that a bad request fails before anything is created or mounted.
func validateMount(o *mountOptions, mp string) (*mountPlan, error) {
	if o.lower == "" {
		return nil, usagef("--lower DIR is required (the project to show)")
	}
	p := &mountPlan{backstore: o.backstore, debug: o.debug, ephemeral: o.ephemeral, noPassthrough: o.noPT, writeback: o.writeback, noIOURing: o.noIOURing, session: o.session}
	switch o.backstore {
	case "hostfs":
		if o.ramdiskSize != "" {
			return nil, usagef("--ramdisk-size applies to --backstore ramdisk only")
		}
	case "ramdisk":
		if o.store != "" && !o.ephemeral {
			return nil, errors.New("--backstore ramdisk cannot be combined with --store: the ramdisk is volatile, so a kept store would lose its files at unmount; drop --store, or use --backstore hostfs")
		}
		p.ramdiskSize = defaultRamdiskSize
		if o.ramdiskSize != "" {
			size, err := parseSize(o.ramdiskSize)
			if err != nil {
				return nil, usagef("--ramdisk-size %q: %v (use e.g. 512M or 2G)", o.ramdiskSize, err)
			}
			p.ramdiskSize = size
		}
	default:
		return nil, usagef("--backstore %q: must be hostfs or ramdisk", o.backstore)
	}
	var err error
	if p.lower, err = realDir(o.lower, "lower directory"); err != nil {
		return nil, err
	}
	if p.mountpoint, err = realDir(mp, "mountpoint"); err != nil {
		return nil, err
	}
	if p.session {
		// agentfs run: the view goes over the project itself, in a
		// mount namespace of its own (the project may well be a mount
		// point: a bind mount, a volume).
		if p.mountpoint != p.lower {
			return nil, fmt.Errorf("internal: a session mount shows its lower directory at the same path, not %s at %s", p.lower, p.mountpoint)
		}
		if inOuterMountNamespace() {
			return nil, errors.New("--session-mount is agentfs run's own: it mounts over the project in a private mount namespace; use agentfs run")
		}
	} else if err := checkNesting(p.lower, p.mountpoint); err != nil {
		return nil, err
	}
	cfg, err := loadConfig(p.lower)
	if err != nil {
		return nil, err
	}
	// agentfs run takes automatic snapshots by default; a plain mount
	// when asked to.
	if p.activity, err = o.activity.resolve(cfg, p.session); err != nil {
		return nil, err
	}
	if !p.session {
		if err := checkNotMounted(p.mountpoint); err != nil {
			return nil, err
		}
	}
	if o.store != "" {
		if p.store, err = checkStore(o.store, p.lower, p.mountpoint); err != nil {
			return nil, err
		}
	}
	if err := checkFuseDevice(); err != nil {
		return nil, err
	}
	return p, nil
}

// checkNotMounted refuses a mountpoint that is already a mount point.
func checkNotMounted(mp string) error {
	e, mounted, err := mountAt(mp)
	if err != nil {
		return err
	}
	if mounted || isMountRoot(mp) {
		what := "a mount point"
		if mounted {
			what = "a mount point (" + e.FsType + ")"
		}
		return fmt.Errorf("the mountpoint %s is already %s: unmount it first (agentfs unmount %s, or umount), or choose another directory", mp, what, mp)
	}
	return nil
}

// realDir resolves p to an absolute path without symlinks and checks it
// is a directory. what names it in errors.
func realDir(p, what string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("the %s %s: %w", what, p, err)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("the %s %s does not exist: create it first (mkdir -p %s)", what, abs, abs)
	case ctl.DaemonGone(err):
		return "", fmt.Errorf("the %s %s is a dead mount (%w): clear it with agentfs unmount %s", what, abs, err, abs)
	case err != nil:
		return "", fmt.Errorf("the %s %s: %w", what, abs, err)
	case !st.IsDir():
		return "", fmt.Errorf("the %s %s is not a directory", what, abs)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("the %s %s: %w", what, abs, err)
	}
	return real, nil
}

// within reports whether p is strictly inside dir (both clean and
// absolute).
func within(p, dir string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// checkNesting refuses a mountpoint inside the lower tree, a lower inside
// the mountpoint, and the two being one directory: the mount would show
// itself (or hide its own lower). Paths are compared first; then
// (st_dev, st_ino) of every ancestor, which also catches the same
// directory reached through a bind mount.
func checkNesting(lower, mp string) error {
	sameDir := fmt.Errorf("the mountpoint %s is the lower directory itself: mount it somewhere else (e.g. an empty directory next to it)", mp)
	mpInLower := fmt.Errorf("the mountpoint %s is inside the lower directory %s: the mount would show itself; choose a mountpoint outside the project", mp, lower)
	lowerInMp := fmt.Errorf("the lower directory %s is inside the mountpoint %s: the mount would hide its own lower; choose a mountpoint outside the project", lower, mp)
	switch {
	case mp == lower:
		return sameDir
	case within(mp, lower):
		return mpInLower
	case within(lower, mp):
		return lowerInMp
	}
	lowerID, err := dirID(lower)
	if err != nil {
		return fmt.Errorf("the lower directory %s: %w", lower, err)
	}
	mpID, err := dirID(mp)
	if err != nil {
		return fmt.Errorf("the mountpoint %s: %w", mp, err)
	}
	if lowerID == mpID {
		return sameDir
	}
	if hasAncestor(mp, lowerID) {
		return mpInLower
	}
	if hasAncestor(lower, mpID) {
		return lowerInMp
	}
	return nil
}

// fileID identifies a directory across paths.
type fileID struct{ dev, ino uint64 }

func dirID(p string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return fileID{}, err
	}
	return fileID{st.Dev, st.Ino}, nil
}

// hasAncestor reports whether a strict ancestor of p is the directory id.
func hasAncestor(p string, id fileID) bool {
	for {
		parent := filepath.Dir(p)
		if parent == p {
			return false
		}
		p = parent
		if pid, err := dirID(p); err == nil && pid == id {
			return true
		}
	}
}

// isMountRoot reports whether dir is on another device than its parent,
// which mountinfo would also show; it catches a mount that mountinfo
// lists under another path (e.g. in a chroot).
func isMountRoot(dir string) bool {
	if dir == "/" {
		return true
	}
	var st, pst unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &pst) != nil {
		return false
	}
	return st.Dev != pst.Dev
}

// storeEntries are the names agentfs keeps in a store directory.
var storeEntries = func() map[string]bool {
	m := map[string]bool{"meta": true, "lock": true, "objects": true, "ramdisk": true, "spill": true, "agentfs.log": true}
	for _, n := range activity.FileNames {
		m[n] = true
	}
	return m
}()

// checkStore validates --store: a directory (or a path to create) outside
// the lower tree and the mountpoint, that is empty or an agentfs store.
func checkStore(store, lower, mp string) (string, error) {
	abs, err := filepath.Abs(store)
	if err != nil {
		return "", fmt.Errorf("the store %s: %w", store, err)
	}
	// Resolve what exists of the path, so that a symlink cannot hide
	// that it points into the lower tree.
	real := resolveExisting(abs)
	switch {
	case real == lower || within(real, lower):
		return "", fmt.Errorf("the store %s is inside the lower directory %s: agentfs never writes to the lower directory; choose a store outside it", abs, lower)
	case real == mp || within(real, mp):
		return "", fmt.Errorf("the store %s is inside the mountpoint %s: choose a store outside it", abs, mp)
	}
	st, err := os.Stat(real)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return real, nil // created by the daemon
	case err != nil:
		return "", fmt.Errorf("the store %s: %w", abs, err)
	case !st.IsDir():
		return "", fmt.Errorf("the store %s is not a directory", abs)
	}
	names, err := os.ReadDir(real)
	if err != nil {
		return "", fmt.Errorf("the store %s: %w", abs, err)
	}
	for _, n := range names {
		if !storeEntries[n.Name()] {
			return "", fmt.Errorf("the store %s is a directory with other files in it (%s): it is not an agentfs store; use a new or empty directory", abs, n.Name())
		}
	}
	return real, nil
}

// devFuse is the FUSE device checkFuseDevice opens; tests point it
// elsewhere.
var devFuse = "/dev/fuse"

// checkFuseDevice explains a missing or forbidden /dev/fuse.
func checkFuseDevice() error {
	f, err := os.OpenFile(devFuse, os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s is missing: load the fuse module (modprobe fuse), or run the container with --device /dev/fuse", devFuse)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s cannot be opened (permission denied): run as root, or make it usable by all (chmod 0666 %s, the usual setting); in a container, add --device /dev/fuse", devFuse, devFuse)
	case err != nil:
		return fmt.Errorf("%s cannot be opened: %w: load the fuse module (modprobe fuse), or run the container with --device /dev/fuse", devFuse, err)
	}
	f.Close()
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			return errors.New("fusermount3 is missing: mounting as a normal user needs it (apt-get install fuse3), or run as root")
		}
	}
	return nil
}

// parseSize parses sizes such as 512M, 2G, 1.5G, 64KiB or 1048576 (bytes;
// binary units).
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "B")
	t = strings.TrimSuffix(t, "I")
	mult := 1.0
	if n := len(t); n > 0 {
		if i := strings.IndexByte("KMGT", t[n-1]); i >= 0 {
			mult = float64(int64(1) << (10 * (i + 1)))
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || strings.ContainsAny(t, "eEnN+-") {
		return 0, errors.New("not a size")
	}
	size := v * mult
	if size < 1<<20 {
		return 0, errors.New("too small (at least 1M)")
	}
	if size > 1<<50 {
		return 0, errors.New("too large")
	}
	return int64(size), nil
}

// startDaemon re-executes agentfs as the daemon and waits until the
// mount is ready or the daemon reports why it is not.
func startDaemon(p *mountPlan) error {
	cmd, err := spawnDaemon(p)
	if err != nil {
		return err
	}
	cmd.Process.Release()
	return nil
}

// spawnDaemon starts the daemon of p and waits until its mount is
// ready; it returns the daemon's process (not waited for), or why it
// could not mount.
func spawnDaemon(p *mountPlan) (*exec.Cmd, error) {
	store, ephemeral := p.store, false
	if store == "" {
		var err error
		if store, err = makePrivateStore(p.lower, p.mountpoint); err != nil {
			return nil, err
		}
		ephemeral = true
	} else if err := os.MkdirAll(store, 0700); err != nil {
		return nil, fmt.Errorf("creating the store %s: %w", store, err)
	}
	removePrivate := func() {
		if ephemeral {
			os.RemoveAll(store)
		}
	}
	logPath := filepath.Join(store, "agentfs.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0600)
	if err != nil {
		removePrivate()
		return nil, fmt.Errorf("opening the daemon's log in the store: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		removePrivate()
		return nil, fmt.Errorf("starting the daemon: %w", err)
	}
	defer r.Close()
	self, err := os.Executable()
	if err != nil {
		removePrivate()
		return nil, fmt.Errorf("finding the agentfs binary to start the daemon: %w", err)
	}
	args := []string{"mount", "--foreground", "--ready-fd=3", "--lower", p.lower, "--store", store, "--backstore", p.backstore}
	if p.backstore == "ramdisk" {
		args = append(args, "--ramdisk-size", strconv.FormatInt(p.ramdiskSize, 10))
	}
	if ephemeral {
		args = append(args, "--ephemeral")
	}
	if p.debug {
		args = append(args, "--debug")
	}
	if p.noPassthrough {
		args = append(args, "--no-passthrough")
	}
	if p.writeback {
		args = append(args, "--writeback-cache")
	}
	if p.noIOURing {
		args = append(args, "--no-io-uring")
	}
	if p.session {
		args = append(args, "--session-mount")
	}
	args = append(args, p.activity.daemonArgs()...)
	args = append(args, p.mountpoint)
	cmd := exec.Command(self, args...)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		w.Close()
		removePrivate()
		return nil, fmt.Errorf("starting the daemon: %w", err)
	}
	w.Close()
	done := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		done <- strings.TrimSpace(line)
	}()
	var msg string
	select {
	case msg = <-done:
	case <-time.After(startTimeout):
		cmd.Process.Kill()
		msg = fmt.Sprintf("error: the daemon did not report within %v; see %s", startTimeout, logPath)
	}
	if msg == "ready" {
		return cmd, nil
	}
	cmd.Wait()
	removePrivate()
	if msg == "" {
		msg = "the daemon exited without saying why; see " + logPath
		if ephemeral {
			msg = "the daemon exited without saying why; run with --foreground to see its log"
		}
	}
	return nil, errors.New(strings.TrimPrefix(msg, "error: "))
}

// startTimeout bounds how long mount waits for the daemon.
const startTimeout = 60 * time.Second
