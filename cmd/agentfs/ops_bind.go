package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/fs"
	"github.com/agentfs/agentfs/overlay"
)

// Branch views and process bindings: the daemon's side.
//
// The daemon keeps one live view per branch in use (d.views): the
// mount's branch, and every branch a process is bound to. A process
// sees, at the mount root, the view of its nearest bound ancestor, or
// the mount's (fs.Server.Resolve); the operations that act on "the
// current branch" (snapshot create, restore, diff, branch create
// without --from) act on the caller's.

// viewOf returns the live view of branch l, opening it on first use.
// opMu must be held.
func (d *daemon) viewOf(l *branch.Layer) (*overlay.FS, error) {
	if v := d.views[l.Name()]; v != nil {
		return v, nil
	}
	v, err := overlay.New(overlay.Config{Lower: d.lowerDir(), Objects: d.objs, Layer: l,
		AllocIno: d.meta.AllocIno, Sync: d.meta.Sync, Logger: d.log})
	if err != nil {
		return nil, storeError(err, fmt.Sprintf("opening branch %q", l.Name()))
	}
	d.views[l.Name()] = v
	return v, nil
}

// callerView returns the view the calling process sees at the mount
// root: its branch's.
func (d *daemon) callerView(c ctl.Caller) *overlay.FS {
	if srv := d.srv.Load(); srv != nil {
		v, _ := srv.Resolve(c.Pid)
		return v
	}
	return d.view
}

// handleBindings registers bind, unbind and current.
func (d *daemon) handleBindings(s *ctl.Server) {
	s.Handle(ctl.OpBranchBind, serialized(d, ctl.OpBranchBind, d.branchBind))
	s.Handle(ctl.OpBranchUnbind, serialized(d, ctl.OpBranchUnbind, d.branchUnbind))
	s.Handle(ctl.OpBranchCurrent, serialized(d, ctl.OpBranchCurrent, d.branchCurrent))
}

// bindTarget checks that the caller may bind (or unbind) process pid:
// it exists, it is not the daemon, and it is the caller's own unless the
// caller is root. Pid 0 is the caller.
func (d *daemon) bindTarget(c ctl.Caller, pid int) (int, error) {
	if pid == 0 {
		pid = int(c.Pid)
	}
	if pid < 0 {
		return 0, ctl.Errorf(syscall.EINVAL, "bad process id %d: give the pid of a running process", pid)
	}
	if pid == os.Getpid() {
		return 0, ctl.Errorf(syscall.EINVAL, "process %d is the agentfs daemon of this mount: bind a shell or a command (agentfs exec -b BRANCH -- CMD)", pid)
	}
	uid, err := processUid(pid)
	if err != nil {
		return 0, ctl.Errorf(syscall.ESRCH, "no process %d: it does not exist (or has exited); give the pid of a running process", pid)
	}
	if c.Uid != 0 && uid != c.Uid {
		return 0, ctl.Errorf(syscall.EPERM, "process %d belongs to uid %d, not to you (uid %d): only root may bind another user's processes", pid, uid, c.Uid)
	}
	return pid, nil
}

// processUid returns the real uid of process pid.
func processUid(pid int) (uint32, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			u, err := strconv.ParseUint(f[0], 10, 32)
			return uint32(u), err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no Uid line", pid)
}

// branchBind binds a process and its descendants to a branch.
func (d *daemon) branchBind(c ctl.Caller, args ctl.BindArgs) (any, error) {
	srv := d.srv.Load()
	if srv == nil {
		return nil, ctl.Errorf(syscall.ENOTCONN, "binding needs a mounted store")
	}
	if args.Branch == "" {
		return nil, ctl.Errorf(syscall.EINVAL, "no branch given: agentfs branch bind NAME (agentfs branch list shows them)")
	}
	l, err := d.meta.Layer(args.Branch)
	if errors.Is(err, branch.ErrNotFound) {
		return nil, ctl.Errorf(syscall.ENOENT, "no branch %q: agentfs branch list shows them; agentfs branch create %s makes it", args.Branch, args.Branch)
	}
	if err != nil {
		return nil, storeError(err, fmt.Sprintf("opening branch %q", args.Branch))
	}
	pid, err := d.bindTarget(c, args.Pid)
	if err != nil {
		return nil, err
	}
	v, err := d.viewOf(l)
	if err != nil {
		return nil, err
	}
	name := l.Name()
	if args.Namespace && c.Uid == 0 && os.Geteuid() == 0 && !d.plan.userns && name != d.current.Load().Name() && d.rootUsers(name) == 0 {
		bm, err := d.branchMountFor(name, v)
		if err != nil {
			return nil, err
		}
		if err := srv.BindNamespaced(pid, v); err != nil {
			if errors.Is(err, fs.ErrNoProcess) {
				return nil, ctl.Errorf(syscall.ESRCH, "no process %d: it exited before it could be bound", pid)
			}
			return nil, ctl.Errorf(syscall.EIO, "binding process %d to branch %q: %v", pid, args.Branch, err)
		}
		bm.users++
		d.log.Info("process bound through a branch mount", "pid", pid, "branch", name, "dir", bm.dir)
		info := d.bindInfo(pid)
		info.MountDir = bm.dir
		return info, nil
	}
	if n := d.namespacedUsers(name); n > 0 {
		return nil, ctl.Errorf(syscall.EBUSY, "branch %q is in use by %d process(es) started with agentfs exec -b in mount namespaces of their own: it cannot be shown through the mount root at the same time; run a shell in it with agentfs exec -b %s -- $SHELL, or wait until they end", name, n, name)
	}
	for _, b := range srv.Bindings() {
		if b.Namespaced {
			if _, by := srv.Resolve(uint32(pid)); by == b.Pid {
				return nil, ctl.Errorf(syscall.EINVAL, "process %d runs in branch %q's own mount namespace (agentfs exec -b): binding it through the mount root would change nothing it sees; use agentfs exec -b %s -- COMMAND", pid, b.View.Layer().Name(), args.Branch)
			}
		}
	}
	if err := srv.Bind(pid, v); err != nil {
		if errors.Is(err, fs.ErrNoProcess) {
			return nil, ctl.Errorf(syscall.ESRCH, "no process %d: it exited before it could be bound", pid)
		}
		return nil, ctl.Errorf(syscall.EIO, "binding process %d to branch %q: %v", pid, args.Branch, err)
	}
	d.log.Info("process bound", "pid", pid, "branch", args.Branch, "by", c.Pid)
	return d.bindInfo(pid), nil
}

// branchUnbind ends a process's binding.
func (d *daemon) branchUnbind(c ctl.Caller, args ctl.BindArgs) (any, error) {
	srv := d.srv.Load()
	if srv == nil {
		return nil, ctl.Errorf(syscall.ENOTCONN, "unbinding needs a mounted store")
	}
	pid, err := d.bindTarget(c, args.Pid)
	if err != nil {
		return nil, err
	}
	if !srv.Unbind(pid) {
		info := d.bindInfo(pid)
		if info.BoundBy != 0 {
			return nil, ctl.Errorf(syscall.EINVAL, "process %d is not bound itself: it sees branch %q through process %d, its ancestor; unbind that one (agentfs branch unbind --pid %d)", pid, info.Branch, info.BoundBy, info.BoundBy)
		}
		return nil, ctl.Errorf(syscall.EINVAL, "process %d is not bound to a branch: it sees branch %q, the mount's", pid, info.Branch)
	}
	d.log.Info("process unbound", "pid", pid, "by", c.Pid)
	return d.bindInfo(pid), nil
}

// branchCurrent says which branch a process sees.
func (d *daemon) branchCurrent(c ctl.Caller, args ctl.BindArgs) (any, error) {
	pid := args.Pid
	if pid == 0 {
		pid = int(c.Pid)
	} else if _, err := processUid(pid); err != nil {
		return nil, ctl.Errorf(syscall.ESRCH, "no process %d: give the pid of a running process", pid)
	}
	return d.bindInfo(pid), nil
}

// bindInfo describes what process pid sees.
func (d *daemon) bindInfo(pid int) ctl.BindInfo {
	info := ctl.BindInfo{Pid: pid, Branch: d.current.Load().Name(), Command: commandLine(pid)}
	if srv := d.srv.Load(); srv != nil {
		v, by := srv.Resolve(uint32(pid))
		info.Branch, info.BoundBy = v.Layer().Name(), by
		for _, b := range srv.Bindings() {
			info.Namespaced = info.Namespaced || b.Pid == by && b.Namespaced
		}
	}
	return info
}

// bindings lists the processes bound to a branch.
func (d *daemon) bindings() []ctl.BindInfo {
	out := []ctl.BindInfo{}
	srv := d.srv.Load()
	if srv == nil {
		return out
	}
	for _, b := range srv.Bindings() {
		out = append(out, ctl.BindInfo{Pid: b.Pid, Branch: b.View.Layer().Name(), BoundBy: b.Pid, Command: commandLine(b.Pid), Namespaced: b.Namespaced})
	}
	return out
}

// commandLine returns the command line of process pid, "" when unknown.
func commandLine(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// Branch mounts.
//
// A process that agentfs exec -b binds (as root) does not go through the
// mount root at all: the daemon mounts the branch's view a second time,
// at a directory of the store (a branch mount, a FUSE connection of its
// own whose root is the branch), and agentfs exec binds that mount over
// the mountpoint in a new mount namespace before it runs the command.
// The command sees its branch at the same path with every cache of the
// kernel on, and the main mount's root stays independent of the caller
// (no cost to anyone). Its binding is still recorded (namespaced), so
// that the control operations it runs act on its branch.
//
// One view may be cached by one kernel connection only: while a branch
// has a branch mount in use, it cannot be shown through the main mount
// (bound through the root, or switched to), and the other way round.

// branchMount is one branch mount.
type branchMount struct {
	dir   string
	srv   *fs.Server
	users int // namespaced bindings that use it
}

// rootUsers counts the processes bound to branch name through the root.
func (d *daemon) rootUsers(name string) int {
	n := 0
	if srv := d.srv.Load(); srv != nil {
		for _, b := range srv.Bindings() {
			if !b.Namespaced && b.View.Layer().Name() == name {
				n++
			}
		}
	}
	return n
}

// branchMountFor returns the branch mount of view v (branch name),
// mounting it on first use. opMu is held.
func (d *daemon) branchMountFor(name string, v *overlay.FS) (*branchMount, error) {
	if bm := d.branchMounts[name]; bm != nil {
		return bm, nil
	}
	if d.branchMounts == nil {
		d.branchMounts = map[string]*branchMount{}
	}
	anchor, err := d.branchAnchor()
	if err != nil {
		return nil, ctl.Errorf(syscall.EIO, "preparing the directory of branch mounts: %v", err)
	}
	dir, err := os.MkdirTemp(anchor, "branch-")
	if err != nil {
		return nil, ctl.Errorf(syscall.EIO, "making the directory of branch %q's mount: %v", name, err)
	}
	o := d.fsOptions
	o.Mountpoint, o.View, o.FsName = dir, v, d.plan.lower+"#"+name
	srv, err := fs.Mount(o)
	if err != nil {
		os.Remove(dir)
		return nil, ctl.Errorf(syscall.EIO, "mounting branch %q for a namespaced process: %v", name, err)
	}
	bm := &branchMount{dir: dir, srv: srv}
	d.branchMounts[name] = bm
	d.log.Info("branch mount", "branch", name, "dir", dir)
	return bm, nil
}

// branchAnchor returns the directory the branch mounts are made in: a
// shared mount of its own (bound onto itself), so that a branch mount
// made after a process entered a mount namespace still shows in that
// namespace (agentfs exec -b inside agentfs exec -b). opMu is held.
func (d *daemon) branchAnchor() (string, error) {
	dir := filepath.Join(d.plan.store, "branches")
	if d.anchored {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind-mounting %s onto itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return "", fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	d.anchored = true
	return dir, nil
}

// bindingEnded releases what a binding held: a branch mount nobody uses
// any more is detached (processes still inside keep it until they exit).
func (d *daemon) bindingEnded(b fs.Binding) {
	if !b.Namespaced {
		return
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	name := b.View.Layer().Name()
	bm := d.branchMounts[name]
	if bm == nil {
		return
	}
	if bm.users--; bm.users > 0 {
		return
	}
	delete(d.branchMounts, name)
	d.detachBranchMount(name, bm)
}

// detachBranchMount unmounts bm lazily and removes its directory.
func (d *daemon) detachBranchMount(name string, bm *branchMount) {
	if err := unix.Unmount(bm.dir, unix.MNT_DETACH); err != nil {
		d.log.Warn("detaching a branch mount", "branch", name, "dir", bm.dir, "err", err)
		return
	}
	go func() {
		bm.srv.Wait()
		os.Remove(bm.dir)
		d.log.Info("branch mount gone", "branch", name)
	}()
}

// unmountBranches detaches every branch mount (the daemon is ending).
func (d *daemon) unmountBranches() {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	for name, bm := range d.branchMounts {
		delete(d.branchMounts, name)
		d.detachBranchMount(name, bm)
	}
	if d.anchored {
		dir := filepath.Join(d.plan.store, "branches")
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			d.log.Warn("detaching the directory of branch mounts", "dir", dir, "err", err)
		}
		d.anchored = false
	}
}

// namespacedUsers counts the processes bound to branch name through a
// branch mount. opMu is held.
func (d *daemon) namespacedUsers(name string) int {
	if bm := d.branchMounts[name]; bm != nil {
		return bm.users
	}
	return 0
}
