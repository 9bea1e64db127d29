package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/hostpath"
)

// # System sessions (agentfs run --system)
//
// The command's whole file system is a copy-on-write view of /: its
// root directory is the session's mount, whose lower directory is the
// host's /, so that what it installs, edits or caches anywhere lands in
// the session. The processes:
//
//   - the session process, in its private mount namespace (and as a
//     normal user its user namespace), starts the daemon with lower /
//     and mountpoint SESSION/root (daemon/system.go);
//   - a thread of the session process, locked to its goroutine
//     (systemRoot), then takes a mount namespace of its own, binds the
//     kernel's filesystems (SystemView.Live) from the host over the
//     view's directories, covers agentfs's own directories that show
//     through them (Masks) with empty read-only tmpfs, and makes the
//     view its root: pivot_root, the old root detached, so that the
//     command's namespace holds nothing else;
//   - the command is started from that thread (exec.Cmd.Start forks
//     the calling thread): it has the thread's root, namespace and
//     working directory, at the paths it had on the host. So is each
//     relaunch of a supervised command.
//
// The command's mounts are slaves of the session's: the daemon's
// directory of branch mounts (a shared mount, made before the command
// starts), bound into the tmpfs that covers agentfs's runtime directory
// (SystemView.BranchMounts), receives the branch mounts the daemon makes
// later, so that agentfs exec -b inside the session (as root) finds its
// branch mount there and makes it its root (EnterBranchSystemRoot); the
// command's environment says where (systemEnv).
//
// What the view leaves out (overlay.Config.Hide and Seal, recorded in
// the store): agentfs's own directories (the sessions, private stores,
// the registry of mounts) are hidden, so the view never shows its own
// store or mountpoint; the kernel's filesystems (/proc, /sys, /dev,
// /run, and /tmp with --shared-tmp) are sealed: shown as empty
// directories, which the command never sees since they are covered
// by the live ones, and which no walk of the view (diff, export)
// enters.
//
// # /tmp
//
// /tmp is part of the session by default: what a package manager, a
// compiler or an agent leaves there goes with the session, a restore
// takes it back, and the host's /tmp never sees it. --shared-tmp shows
// the host's /tmp live instead (sockets there, such as X11's and
// ssh-agent's, work only so: a socket seen through the view is not the
// listener's), at the price that what the command leaves in /tmp is
// not versioned.

// SystemView is what a system session's view shows live from the host
// and leaves out, as lower paths (absolute).
type SystemView struct {
	// Live are the directories bound from the host over the view.
	Live []string `json:"live"`
	// Hide are the paths the view leaves out; Seal the directories it
	// shows empty (Live among them).
	Hide []string `json:"hide"`
	Seal []string `json:"seal"`
	// Masks are agentfs's directories inside Live that an empty tmpfs
	// covers in the command's namespace.
	Masks []string `json:"masks,omitempty"`
	// SharedTmp: /tmp is the host's (--shared-tmp), not the session's.
	SharedTmp bool `json:"shared_tmp,omitempty"`
	// BranchMounts is where the command sees the daemon's branch
	// mounts (agentfs exec -b inside the session, as root): a
	// directory in the tmpfs that covers agentfs's runtime directory
	// (a Mask), bound to the store's directory of branch mounts. Empty
	// when the session cannot have them (not root, or the runtime
	// directory is not under a live directory).
	BranchMounts string `json:"branch_mounts,omitempty"`
}

// systemRootName is the name of a system session's mountpoint in its
// directory.
const systemRootName = "root"

// kernelDirs are the kernel's filesystems, shown live.
var kernelDirs = []string{"/proc", "/sys", "/dev", "/run"}

// newSystemView computes what a system session's view shows live and
// leaves out, for the sessions directory base.
func newSystemView(base string, sharedTmp bool) *SystemView {
	v := &SystemView{SharedTmp: sharedTmp}
	live := kernelDirs
	if sharedTmp {
		live = append(slices.Clone(live), "/tmp")
	}
	for _, d := range live {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			real := hostpath.ResolveExisting(d)
			v.Live = append(v.Live, real)
			v.Seal = append(v.Seal, real)
		}
	}
	if os.Geteuid() == 0 {
		// Made now, so that the tmpfs over it can hold the branch
		// mounts' directory.
		if rd, err := daemon.RuntimeDir(); err == nil && hostpath.InsideAny(hostpath.ResolveExisting(rd), v.Live) {
			v.BranchMounts = filepath.Join(hostpath.ResolveExisting(rd), "session-branches")
		}
	}
	for _, d := range append([]string{base}, daemon.OwnDirs()...) {
		real := hostpath.ResolveExisting(filepath.Clean(d))
		if real == "/" || slices.Contains(v.Hide, real) {
			continue
		}
		if hostpath.InsideAny(real, v.Live) {
			// Seen live, not through the view: covered where it exists.
			if st, err := os.Stat(real); err == nil && st.IsDir() {
				v.Masks = append(v.Masks, real)
			}
			continue
		}
		v.Hide = append(v.Hide, real)
	}
	return v
}

// systemRoot is the thread that system session r's commands start from
// (see the package doc above).
type systemRoot struct {
	reqs chan func()
}

// startSystemRoot makes the thread, in the command's namespace and
// root.
func startSystemRoot(r *Record) (*systemRoot, error) {
	sr := &systemRoot{reqs: make(chan func())}
	ready := make(chan error)
	go func() {
		// Never unlocked: the thread's namespace and root are the
		// command's; it ends with this goroutine.
		runtime.LockOSThread()
		if err := enterSystemRoot(r); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for f := range sr.reqs {
			f()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return sr, nil
}

// do runs f on the thread.
func (sr *systemRoot) do(f func() error) error {
	done := make(chan error, 1)
	sr.reqs <- func() { done <- f() }
	return <-done
}

// close ends the thread.
func (sr *systemRoot) close() { close(sr.reqs) }

// EnterSystemRoot moves the calling thread, locked
// (runtime.LockOSThread) and in the mount namespace of system session
// r's daemon (Enter), into a namespace whose root is the session's
// view, as the session's command is (agentfs exec -s).
func (r *Record) EnterSystemRoot() error {
	if err := enterSystemRoot(r); err != nil {
		return fmt.Errorf("entering session %s: %w", r.ID, err)
	}
	return nil
}

// enterSystemRoot moves the calling thread (locked) into a mount
// namespace of its own whose root is the view at r.Mountpoint, with the
// kernel's filesystems bound live from the host.
func enterSystemRoot(r *Record) error {
	sv := r.System
	if sv == nil {
		return fmt.Errorf("session %s: its record says nothing of its system view", r.ID)
	}
	// A thread shares its root and working directory with the others
	// until it unshares them; the mount namespace is its own from here.
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("a mount namespace for the command: %w", err)
	}
	// Slaves: nothing made here reaches the session's namespace (or
	// the host's), and the branch mounts the daemon makes later in its
	// shared directory reach this one.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the command's mounts slaves: %w", err)
	}
	root := r.Mountpoint
	for _, d := range sv.Live {
		if err := unix.Mount(d, filepath.Join(root, d), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("showing the host's %s in the session: %w", d, err)
		}
	}
	for _, d := range sv.Masks {
		holdsBranches := sv.BranchMounts != "" && filepath.Dir(sv.BranchMounts) == d
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if !holdsBranches {
			flags |= unix.MS_RDONLY
		}
		err := unix.Mount("tmpfs", filepath.Join(root, d), "tmpfs", flags, "size=4k,mode=0555")
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("covering agentfs's %s in the session: %w", d, err)
		}
		if err == nil && holdsBranches {
			bindBranchMounts(r, filepath.Join(root, sv.BranchMounts))
		}
	}
	if err := pivotInto(root); err != nil {
		return err
	}
	// The command starts in its directory (exec.Cmd.Dir); relative
	// names of the command are found from there too.
	_ = unix.Chdir(r.Dir) // a missing one: exec.Cmd says so
	return nil
}

// runSystem is Run of a system session whose command starts in dir.
func runSystem(o RunOptions, dir string) error {
	if err := prepareRecord(&o, ""); err != nil {
		return err
	}
	settings, err := loadSettings(dir, o.Activity)
	if err != nil {
		return err
	}
	recordSettings(o, &settings)
	if o.Activity.Hash == nil {
		// The hash worker hashes every file a snapshot holds: of a
		// system session's, every file of the system. --hash asks for
		// it.
		settings.Hash = false
	}
	base, err := BaseDir()
	if err != nil {
		return err
	}
	rec, err := create("/", dir, o.Command, true)
	if err != nil {
		return err
	}
	rec.System = newSystemView(hostpath.ResolveExisting(base), o.SharedTmp)
	return runSession(o, rec, settings)
}

// configDir is where the session's configuration is read: the project,
// or for a system session the directory its command started in.
func (r *Record) configDir() string {
	if r.KindOf() == KindSystem {
		return r.Dir
	}
	return r.Project
}

// bundleProject is the project a record's target must be outside of:
// none for a system session, whose project is the whole system (the
// record is written to the host, as export -s is).
func (r *Record) bundleProject() string {
	if r.KindOf() == KindSystem {
		return ""
	}
	return r.Project
}

// bindBranchMounts binds the daemon's directory of branch mounts (a
// shared mount) at dir, in the command's namespace, as a slave: the
// branch mounts the daemon makes there later show at dir. Without it
// agentfs exec -b inside the session says it cannot (no error here).
func bindBranchMounts(r *Record, dir string) {
	src := filepath.Join(r.Store, "branches")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return
	}
	if err := unix.Mount(src, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		_ = os.Remove(dir) // in the command's own tmpfs
	}
}

// systemEnv is what a system session's command learns of its session
// in its environment, for agentfs exec -b inside it
// (EnterBranchSystemRoot): the kernel's directories live from the host,
// and where the daemon's branch mounts show.
func (r *Record) systemEnv() []string {
	sv := r.System
	if r.KindOf() != KindSystem || sv == nil {
		return nil
	}
	env := []string{SystemLiveEnv + "=" + strings.Join(sv.Live, ":")}
	if sv.BranchMounts != "" {
		env = append(env, BranchMountsEnv+"="+filepath.Join(r.Store, "branches")+"="+sv.BranchMounts)
	}
	return env
}

// The environment of a system session's command (systemEnv).
const (
	SystemLiveEnv   = "AGENTFS_SYSTEM_LIVE"
	BranchMountsEnv = "AGENTFS_BRANCH_MOUNTS"
)

// InSystemSession reports whether this process runs in a system
// session (its environment says so).
func InSystemSession() bool { return os.Getenv(SystemLiveEnv) != "" }

// EnterBranchSystemRoot moves the calling thread, locked, from inside
// a system session into a mount namespace whose root is the branch
// mount the daemon made at mountDir (a path in the daemon's namespace),
// with the kernel's directories live, as the session's own command has
// the session's view (agentfs exec -b inside a system session).
func EnterBranchSystemRoot(mountDir string) error {
	from, to, ok := strings.Cut(os.Getenv(BranchMountsEnv), "=")
	rel, err := filepath.Rel(from, mountDir)
	if !ok || err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("the branch mount %s cannot be reached from inside this system session (agentfs exec -b inside a system session needs root and agentfs's runtime directory under /run): run it from outside, agentfs exec -s SESSION -b BRANCH", mountDir)
	}
	dir := filepath.Join(to, rel)
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("a mount namespace for the branch: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the branch's mounts slaves: %w", err)
	}
	for _, d := range filepath.SplitList(os.Getenv(SystemLiveEnv)) {
		if err := unix.Mount(d, filepath.Join(dir, d), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("showing %s in the branch: %w", d, err)
		}
	}
	return pivotInto(dir)
}

// pivotInto makes dir, a mount point, the root of the calling thread's
// mount namespace, the old root detached: pivot_root(".", ".") stacks
// the old root over the new one; the lazy unmount then takes it away,
// as runc does.
func pivotInto(dir string) error {
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("the new root %s: %w", dir, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("making %s the root (pivot_root): %w", dir, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	return unix.Chdir("/")
}
