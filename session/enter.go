package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/procfs"
)

// # Entering a session (agentfs exec -s)
//
// Enter runs a command as root in the mount namespace of a process a
// file names (session.json's DaemonPid). Nothing in the file is taken
// on trust, as root may run with another user's environment (sudo -E:
// HOME and XDG_STATE_HOME the user's):
//
//   - the session's directory is resolved (symbolic links followed: a
//     user's link, XDG_STATE_HOME=/tmp/link, could be pointed elsewhere
//     between a check and a read); the sessions directory, the
//     session's directory and every directory above them, as resolved,
//     belong to the caller (or root) and no one else can write them (a
//     sticky directory such as /tmp aside), none a symbolic link
//     (Lstat), and the record is read again from the resolved path
//     once that is known;
//   - the daemon is held through a pidfd, so that a later process with
//     its pid cannot stand in for it: its start time is the record's
//     (checked while the pidfd shows it alive) and its binary is this
//     one, the same file (an agentfs replaced since the session started
//     cannot enter it: run the command from inside);
//   - its mount namespace is owned by the caller's user namespace
//     (NS_GET_USERNS), whatever the record says: a namespace a user made
//     in a user namespace of their own holds what that user mounted;
//   - the namespace is entered through the pidfd (setns, Linux 5.8),
//     and the caller checks that it is the one it checked.
//
// The command is looked up (PATH) only after that, in the namespace.

// Enter moves the calling thread into the mount namespace of the
// running session, where the project's path shows the session's mount,
// and into the directory the session's command started in. The caller
// has locked its thread (runtime.LockOSThread), and the program it
// execs from that thread runs there. It needs root; a session in a
// user namespace (agentfs run as a normal user) cannot be entered.
// r is read again from its file once the file is known to be the
// caller's alone, and updated to it.
func (r *Record) Enter() error {
	d, err := r.openDaemon()
	if err != nil {
		return err
	}
	defer d.close()
	// A thread shares its file system context (root, working
	// directory) with the process's others until it unshares it, and
	// setns refuses a mount namespace to a thread that shares it.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("entering session %s: unshare: %w", r.ID, err)
	}
	if err := unix.Setns(d.pidfd, unix.CLONE_NEWNS); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("entering session %s's mount namespace: %w (setns through a pidfd needs Linux 5.8 or later)", r.ID, err)
		}
		return fmt.Errorf("entering session %s's mount namespace: %w", r.ID, err)
	}
	if err := d.checkEntered(); err != nil {
		return fmt.Errorf("entering session %s: %w", r.ID, err)
	}
	if err := unix.Chdir(r.Dir); err != nil {
		return fmt.Errorf("entering session %s: its directory %s: %w", r.ID, r.Dir, err)
	}
	return nil
}

// CheckEnter does every check of Enter but the entering: nil when
// Enter can be tried.
func (r *Record) CheckEnter() error {
	d, err := r.openDaemon()
	if err != nil {
		return err
	}
	d.close()
	return nil
}

// refuseEnter says why a process of effective uid euid cannot enter
// the session, as the record tells (nil: the checks of the processes
// and directories follow).
func (r *Record) refuseEnter(euid int) error {
	switch {
	case r.Live() != StateRunning || !r.DaemonAlive():
		return fmt.Errorf("session %s is not running: nothing is mounted to run a command in (agentfs export -s %s BRANCH DIR gives its files)", r.ID, r.ID)
	case r.UserNamespace:
		return fmt.Errorf("session %s runs in a user namespace (agentfs run as a normal user): its mount cannot be entered from outside; run the command from inside the session", r.ID)
	case euid != 0:
		return fmt.Errorf("entering session %s needs root (its mount exists only in its mount namespace): run agentfs exec -s as root, or the command from inside the session", r.ID)
	case r.DaemonStart == 0:
		return fmt.Errorf("session %s: its record has no start time of its daemon (pid %d), which tells the daemon from a later process with its pid: run the command from inside the session", r.ID, r.DaemonPid)
	}
	return nil
}

// openDaemon checks the record, its directories and the daemon's
// process and namespace, as the package doc says, and returns the
// daemon held. r becomes the record read again.
func (r *Record) openDaemon() (*daemonHandle, error) {
	euid := os.Geteuid()
	if err := r.refuseEnter(euid); err != nil {
		return nil, err
	}
	dir, err := filepath.EvalSymlinks(r.SessionDir())
	if err != nil {
		return nil, fmt.Errorf("session %s: its directory: %w", r.ID, err)
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := checkPrivateDir(d, euid); err != nil {
			return nil, fmt.Errorf("session %s: %w", r.ID, err)
		}
	}
	fresh, err := Load(dir)
	if err != nil {
		return nil, fmt.Errorf("session %s: reading its record again: %w", r.ID, err)
	}
	if fresh.ID != r.ID {
		return nil, fmt.Errorf("session %s: its record now names session %q: run agentfs exec -s again", r.ID, fresh.ID)
	}
	*r = *fresh
	if err := r.refuseEnter(euid); err != nil {
		return nil, err
	}
	d, err := openDaemonProcess(r.DaemonPid, r.DaemonStart)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", r.ID, err)
	}
	return d, nil
}

// checkPrivateDir checks that dir belongs to euid and no one else can
// write it, and that every directory above it belongs to euid or root
// and is writable by no one else, or is sticky (as /tmp is): no other
// user can then replace dir or what it holds. dir is a resolved path
// (filepath.EvalSymlinks): a symbolic link on it is refused, as its
// owner could point it elsewhere after the check.
func checkPrivateDir(dir string, euid int) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("the directory %s: %w", dir, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory", dir)
	case int(st.Uid) != euid:
		return fmt.Errorf("the directory %s belongs to uid %d, not to you (uid %d): as root, use root's own sessions (sudo without -E, or XDG_STATE_HOME set to a directory of root's)", dir, st.Uid, euid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("the directory %s can be written by other users (mode %o): chmod go-w %s", dir, st.Mode&0o7777, dir)
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("the directory %s: %w", p, err)
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return fmt.Errorf("%s, above %s, is a symbolic link, which its owner could point elsewhere after the check: run agentfs exec -s again", p, dir)
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("%s, above %s, is not a directory", p, dir)
		case int(st.Uid) != euid && st.Uid != 0:
			return fmt.Errorf("the directory %s, above %s, belongs to uid %d, who could replace what it holds: as root, use root's own sessions (sudo without -E, or XDG_STATE_HOME set to a directory of root's)", p, dir, st.Uid)
		case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			return fmt.Errorf("the directory %s, above %s, can be written by other users (mode %o), who could replace what it holds: chmod go-w %s", p, dir, st.Mode&0o7777, p)
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}

// daemonHandle is a session's daemon, held through a pidfd, and its
// mount namespace as checked.
type daemonHandle struct {
	pid, pidfd, nsfd int
}

// openDaemonProcess holds process pid, which must be the one that
// started at start (clock ticks after boot), run an agentfs binary and
// have a mount namespace owned by the caller's user namespace.
func openDaemonProcess(pid int, start uint64) (*daemonHandle, error) {
	if pid <= 0 || start == 0 {
		return nil, fmt.Errorf("no daemon recorded (pid %d, start %d)", pid, start)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("its daemon (pid %d) has ended: nothing is mounted to run a command in", pid)
	case errors.Is(err, unix.ENOSYS):
		return nil, fmt.Errorf("holding its daemon (pid %d): pidfd_open: %w (entering a session needs Linux 5.8 or later)", pid, err)
	case err != nil:
		return nil, fmt.Errorf("holding its daemon (pid %d): pidfd_open: %w", pid, err)
	}
	d := &daemonHandle{pid: pid, pidfd: pidfd, nsfd: -1}
	if err := d.check(start); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// check checks the process held (see openDaemonProcess) and opens its
// mount namespace. What it reads through /proc/PID is the held
// process's as long as the pidfd shows it alive after the reads.
func (d *daemonHandle) check(start uint64) error {
	if got := procfs.StartTime(d.pid); got != start {
		return fmt.Errorf("process %d is not its daemon (it started at tick %d, the daemon at tick %d): the daemon has ended and its pid was reused", d.pid, got, start)
	}
	if err := checkAgentfsBinary(d.pid); err != nil {
		return err
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(d.pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("its daemon's (pid %d) mount namespace: %w", d.pid, err)
	}
	d.nsfd = fd
	if err := unix.PidfdSendSignal(d.pidfd, 0, nil, 0); err != nil {
		return fmt.Errorf("its daemon (pid %d) ended while agentfs checked it: %w", d.pid, err)
	}
	return checkNamespaceOwner(d.nsfd, d.pid)
}

// checkAgentfsBinary checks that process pid runs the binary of this
// process: the same file (device and inode), not merely one named
// agentfs, which anyone can build.
func checkAgentfsBinary(pid int) error {
	exe := "/proc/" + strconv.Itoa(pid) + "/exe"
	var st, self unix.Stat_t
	if err := unix.Stat(exe, &st); err != nil {
		return fmt.Errorf("the binary of its daemon (pid %d): %w", pid, err)
	}
	if err := unix.Stat("/proc/self/exe", &self); err != nil {
		return fmt.Errorf("this process's binary: %w", err)
	}
	if st.Dev == self.Dev && st.Ino == self.Ino {
		return nil
	}
	target, err := os.Readlink(exe)
	if err != nil {
		target = "another binary"
	}
	mine, err := os.Readlink("/proc/self/exe")
	if err != nil {
		mine = "this one"
	}
	if filepath.Base(strings.TrimSuffix(target, " (deleted)")) == "agentfs" {
		return fmt.Errorf("process %d runs %s, not this agentfs (%s): if agentfs was replaced since the session started, run the command from inside the session", pid, target, mine)
	}
	return fmt.Errorf("process %d runs %s, not agentfs (%s): it is not the session's daemon (its record is wrong)", pid, target, mine)
}

// checkNamespaceOwner checks that the mount namespace nsfd (process
// pid's) is owned by this process's user namespace.
func checkNamespaceOwner(nsfd, pid int) error {
	userfd, err := unix.IoctlRetInt(nsfd, unix.NS_GET_USERNS)
	if err != nil {
		// EPERM: the owner is an ancestor of this user namespace.
		return fmt.Errorf("the owner of its daemon's (pid %d) mount namespace: NS_GET_USERNS: %w", pid, err)
	}
	defer unix.Close(userfd)
	var owner, mine unix.Stat_t
	if err := unix.Fstat(userfd, &owner); err != nil {
		return fmt.Errorf("the owner of its daemon's (pid %d) mount namespace: %w", pid, err)
	}
	if err := unix.Stat("/proc/self/ns/user", &mine); err != nil {
		return fmt.Errorf("this process's user namespace: %w", err)
	}
	if owner.Dev != mine.Dev || owner.Ino != mine.Ino {
		return fmt.Errorf("its daemon's (pid %d) mount namespace belongs to another user namespace (a normal user's agentfs run, or a record that is wrong): it cannot be entered from outside; run the command from inside the session", pid)
	}
	return nil
}

// checkEntered checks that the calling thread is now in the mount
// namespace checked.
func (d *daemonHandle) checkEntered() error {
	var now, want unix.Stat_t
	if err := unix.Fstat(d.nsfd, &want); err != nil {
		return err
	}
	if err := unix.Stat("/proc/thread-self/ns/mnt", &now); err != nil {
		return fmt.Errorf("checking the mount namespace entered: %w", err)
	}
	if now.Dev != want.Dev || now.Ino != want.Ino {
		return fmt.Errorf("its daemon (pid %d) changed its mount namespace while agentfs entered it: try again", d.pid)
	}
	return nil
}

// close releases the pidfd and the namespace.
func (d *daemonHandle) close() {
	if d.nsfd >= 0 {
		_ = unix.Close(d.nsfd) // only read
	}
	_ = unix.Close(d.pidfd) // only read
}
