package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/config"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/hostpath"
	"github.com/agentfs/agentfs/procfs"
)

// Request is a mount request as the user made it: agentfs mount's
// flags.
type Request struct {
	Lower, Mountpoint string
	Store             string // "": a private store, deleted at unmount
	Backstore         string // hostfs or ramdisk
	RamdiskSize       string // a size such as 512M; "" for the default
	Debug             bool
	NoPassthrough     bool
	WritebackCache    bool
	NoIOURing         bool
	Activity          config.Overrides
	// MountFlags are kernel mount flags (nosuid, nodev, noexec and
	// their opposites: MountOptions.Kernel).
	MountFlags []string
	// Ephemeral: the store was made private by the command that
	// started this daemon; the daemon deletes it when it ends.
	Ephemeral bool
	// Session: the mount of an agentfs run session, over the project
	// itself in a private mount namespace (Mountpoint = Lower).
	Session bool
	// TraceCgroup is the session's cgroup: the exec trace follows its
	// processes ("": the processes working in the mount only).
	TraceCgroup string
	// System: the mount of an agentfs run --system session (Session
	// too): the lower is /, the mountpoint and the store are inside
	// paths the view hides (Exclude), and Seal lists the directories it
	// shows empty (system.go).
	System        bool
	Exclude, Seal []string
	// From is REMOTE/SNAPSHOT: the mount starts from that snapshot of a
	// remote, its files fetched at their first open (remote.go).
	From string
}

// Plan is a validated mount request. Nothing changes it once made: what
// the daemon decides while it starts (a private store, the path that
// reaches the project) is the daemon's own state.
type Plan struct {
	Lower, Mountpoint string
	Store             string // "" until the daemon makes a private one
	Ephemeral         bool
	Backstore         string
	RamdiskSize       int64
	Debug             bool
	NoPassthrough     bool
	WritebackCache    bool
	NoIOURing         bool
	Session           bool
	TraceCgroup       string
	System            bool
	Exclude, Seal     []string
	Activity          config.Settings
	MountFlags        []string
	From              string // REMOTE/SNAPSHOT (Request.From)
}

// UsageError is a request whose flags cannot work together or whose
// values cannot be read (the CLI exits 2 for it).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// UsageMistake marks e as a mistake in how agentfs was called: the
// command line exits 2 (package cli).
func (e *UsageError) UsageMistake() {}

func usagef(format string, a ...any) error { return &UsageError{fmt.Sprintf(format, a...)} }

// DefaultRamdiskSize is the ramdisk's size limit without --ramdisk-size.
const DefaultRamdiskSize = 1 << 30

// Validate checks everything that can be checked before mounting, so
// that a bad request fails before anything is created or mounted: the
// flags, the lower directory and the mountpoint (that exist, neither
// inside the other, the mountpoint not mounted already), the store
// (outside both, empty or an agentfs store), the configuration files,
// and /dev/fuse.
func Validate(r Request) (*Plan, error) {
	if r.Lower == "" {
		return nil, usagef("--lower DIR is required (the project to show)")
	}
	p := &Plan{Backstore: r.Backstore, Debug: r.Debug, Ephemeral: r.Ephemeral, NoPassthrough: r.NoPassthrough,
		WritebackCache: r.WritebackCache, NoIOURing: r.NoIOURing, Session: r.Session, TraceCgroup: r.TraceCgroup,
		System: r.System, Exclude: r.Exclude, Seal: r.Seal, From: r.From}
	for _, f := range r.MountFlags {
		if !kernelMountFlags[f] {
			return nil, usagef("mount flag %q: agentfs passes only nosuid, nodev, noexec, suid, dev and exec to the kernel", f)
		}
		p.MountFlags = append(p.MountFlags, f)
	}
	switch r.Backstore {
	case "hostfs":
		if r.RamdiskSize != "" {
			return nil, usagef("--ramdisk-size applies to --backstore ramdisk only")
		}
	case "ramdisk":
		if r.Store != "" && !r.Ephemeral {
			return nil, errors.New("--backstore ramdisk cannot be combined with --store: the ramdisk is volatile, so a kept store would lose its files at unmount; drop --store, or use --backstore hostfs")
		}
		p.RamdiskSize = DefaultRamdiskSize
		if r.RamdiskSize != "" {
			size, err := ParseSize(r.RamdiskSize)
			if err != nil {
				return nil, usagef("--ramdisk-size %q: %v (use e.g. 512M or 2G)", r.RamdiskSize, err)
			}
			p.RamdiskSize = size
		}
	default:
		return nil, usagef("--backstore %q: must be hostfs or ramdisk", r.Backstore)
	}
	var err error
	if p.Lower, err = RealDir(r.Lower, "lower directory"); err != nil {
		return nil, err
	}
	if p.Mountpoint, err = RealDir(r.Mountpoint, "mountpoint"); err != nil {
		return nil, err
	}
	if p.System {
		if err := checkSystemPlan(p); err != nil {
			return nil, err
		}
	} else if p.Session {
		// agentfs run: the view goes over the project itself, in a
		// mount namespace of its own (the project may well be a mount
		// point: a bind mount, a volume).
		if p.Mountpoint != p.Lower {
			return nil, fmt.Errorf("internal: a session mount shows its lower directory at the same path, not %s at %s", p.Lower, p.Mountpoint)
		}
		if inOuterMountNamespace() {
			return nil, errors.New("--session-mount is agentfs run's own: it mounts over the project in a private mount namespace; use agentfs run")
		}
	} else if err := checkNesting(p.Lower, p.Mountpoint); err != nil {
		return nil, err
	}
	cfg, err := config.Load(p.Lower)
	if err != nil {
		return nil, err
	}
	// agentfs run takes automatic snapshots by default; a plain mount
	// when asked to.
	if p.Activity, err = config.Resolve(cfg, r.Activity, p.Session); err != nil {
		return nil, &UsageError{err.Error()}
	}
	if p.WritebackCache && !p.Activity.MaxBytes.Off() {
		// The kernel would take writes into its cache and send them
		// later: the write that crosses the limit could not fail.
		return nil, usagef("--writeback-cache cannot keep a byte limit (--max-bytes %s): the write that crosses it must fail, not a later writeback; drop --writeback-cache, or give --max-bytes off", p.Activity.MaxBytes)
	}
	if !p.Session {
		if err := checkNotMounted(p.Mountpoint); err != nil {
			return nil, err
		}
	}
	if r.Store != "" && p.System {
		if p.Store = filepath.Clean(r.Store); !filepath.IsAbs(p.Store) {
			return nil, fmt.Errorf("internal: a system session's store %s is not an absolute path", r.Store)
		}
		if err := checkSystemStore(p); err != nil {
			return nil, err
		}
	} else if r.Store != "" {
		if p.Store, err = checkStore(r.Store, p.Lower, p.Mountpoint); err != nil {
			return nil, err
		}
	}
	if err := CheckFuseDevice(false); err != nil {
		return nil, err
	}
	return p, nil
}

// checkNotMounted refuses a mountpoint that is already a mount point.
func checkNotMounted(mp string) error {
	e, mounted, err := procfs.MountAt(mountinfoPath, mp)
	if err != nil {
		return err
	}
	if mounted || hostpath.IsMountRoot(mp) {
		what := "a mount point"
		if mounted {
			what = "a mount point (" + e.FsType + ")"
		}
		return fmt.Errorf("the mountpoint %s is already %s: unmount it first (agentfs unmount %s, or umount), or choose another directory", mp, what, mp)
	}
	return nil
}

// mountinfoPath is the mount table read; tests point it elsewhere.
var mountinfoPath = procfs.MountinfoPath

// RealDir resolves p to an absolute path without symlinks and checks it
// is a directory. what names it in errors ("lower directory").
func RealDir(p, what string) (string, error) {
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
	case hostpath.Within(mp, lower):
		return mpInLower
	case hostpath.Within(lower, mp):
		return lowerInMp
	}
	lowerID, err := hostpath.IDOf(lower)
	if err != nil {
		return fmt.Errorf("the lower directory %s: %w", lower, err)
	}
	mpID, err := hostpath.IDOf(mp)
	if err != nil {
		return fmt.Errorf("the mountpoint %s: %w", mp, err)
	}
	if lowerID == mpID {
		return sameDir
	}
	if hostpath.HasAncestor(mp, lowerID) {
		return mpInLower
	}
	if hostpath.HasAncestor(lower, mpID) {
		return lowerInMp
	}
	return nil
}

// storeEntries are the names agentfs keeps in a store directory.
var storeEntries = func() map[string]bool {
	m := map[string]bool{"meta": true, "lock": true, "objects": true, "ramdisk": true, "spill": true, "agentfs.log": true, "branches": true,
		"pending": true,                   // backstore/pending.go's journal
		"from":    true, "from.tmp": true} // workspace/from.go's record
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
	real := hostpath.ResolveExisting(abs)
	switch {
	case real == lower || hostpath.Within(real, lower):
		return "", fmt.Errorf("the store %s is inside the lower directory %s: agentfs never writes to the lower directory; choose a store outside it", abs, lower)
	case real == mp || hostpath.Within(real, mp):
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

// devFuse is the FUSE device CheckFuseDevice opens; tests point it
// elsewhere.
var devFuse = "/dev/fuse"

// CheckFuseDevice explains a missing or forbidden /dev/fuse. forUserns:
// the mount will be made by the root of a user namespace (agentfs run
// as a normal user), for whom only the permission bits for others
// count, and who needs no fusermount3.
func CheckFuseDevice(forUserns bool) error {
	f, err := os.OpenFile(devFuse, os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s is missing: load the fuse module (modprobe fuse), or run the container with --device /dev/fuse", devFuse)
	case errors.Is(err, os.ErrPermission) && forUserns:
		return fmt.Errorf("%s cannot be opened (permission denied): agentfs run as a normal user mounts from a user namespace, which needs %s usable by all (chmod 0666 %s, the usual setting); or run agentfs run as root (sudo)", devFuse, devFuse, devFuse)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s cannot be opened (permission denied): run as root, or make it usable by all (chmod 0666 %s, the usual setting); in a container, add --device /dev/fuse", devFuse, devFuse)
	case err != nil:
		return fmt.Errorf("%s cannot be opened: %w: load the fuse module (modprobe fuse), or run the container with --device /dev/fuse", devFuse, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", devFuse, err)
	}
	if os.Geteuid() != 0 && !forUserns {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			return errors.New("fusermount3 is missing: mounting as a normal user needs it (apt-get install fuse3), or run as root")
		}
	}
	return nil
}

// ParseSize parses sizes such as 512M, 2G, 1.5G, 64KiB or 1048576 (bytes;
// binary units), from 1M to 1P.
func ParseSize(s string) (int64, error) {
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

// inOuterMountNamespace reports whether this process is known to share
// its mount namespace with its grandparent. A session's daemon runs in
// a namespace of its own, made by its parent (the session process)
// under agentfs run (its grandparent); a mount started from a shell
// shares the shell's. False when a namespace cannot be read.
func inOuterMountNamespace() bool {
	self, err := procfs.MountNamespace(0)
	if err != nil {
		return false
	}
	grandparent := procfs.Parent(os.Getppid())
	if grandparent <= 0 {
		return false
	}
	outer, err := procfs.MountNamespace(grandparent)
	return err == nil && outer == self
}
