package workspace

import (
	"errors"
	"fmt"
	"os"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/procfs"
)

// Bindings: which branch a process sees.
//
// Every branch in use has a live view. A process sees, at the mount
// root, the view of its nearest bound ancestor, or the mount's
// (Mount.Resolve); the operations that act on "the current branch"
// (snapshot create, restore, diff, branch create without a snapshot)
// act on the caller's.
//
// A process bound as root by agentfs exec -b does not go through the
// mount root at all: it sees its branch through a branch mount (a FUSE
// connection of its own whose root is the branch), bound over the
// mountpoint in a mount namespace of its own. One view may be cached by
// one kernel connection only: while a branch has a branch mount in use
// it cannot be shown through the main mount (bound through the root, or
// switched to), and the other way round.

// Bind binds process a.Pid (0: the caller) and its descendants to
// branch a.Branch. With a.Namespace, a caller that is root gets a
// branch mount (BindInfo.MountDir) where the mount can make one and the
// branch is not seen through the root; otherwise the process is bound
// through the mount root.
func (w *Workspace) Bind(c ctl.Caller, a ctl.BindArgs) (ctl.BindInfo, error) {
	return locked(w, func() (ctl.BindInfo, error) {
		if w.attached() == nil {
			return ctl.BindInfo{}, errorf(ErrNotMounted, "binding needs a mounted store")
		}
		if a.Branch == "" {
			return ctl.BindInfo{}, errorf(ErrInvalid, "no branch given: agentfs branch bind NAME (agentfs branch list shows them)")
		}
		l, err := w.meta.Layer(a.Branch)
		if errors.Is(err, branch.ErrNotFound) {
			return ctl.BindInfo{}, errorf(ErrNotFound, "no branch %q: agentfs branch list shows them; agentfs branch create %s makes it", a.Branch, a.Branch)
		}
		if err != nil {
			return ctl.BindInfo{}, storeError(err, fmt.Sprintf("opening branch %q", a.Branch))
		}
		pid, err := bindTarget(c, a.Pid)
		if err != nil {
			return ctl.BindInfo{}, err
		}
		v, err := w.viewOf(l)
		if err != nil {
			return ctl.BindInfo{}, err
		}
		name := l.Name()
		if a.Namespace && c.Uid == 0 && w.attached().CanNamespace() && name != w.current.Load().Name() && w.rootUsersLocked(name) == 0 {
			dir, err := w.attached().BindNamespaced(pid, v)
			if err != nil {
				return ctl.BindInfo{}, bindError(err, pid, a.Branch)
			}
			w.log.Info("process bound through a branch mount", "pid", pid, "branch", name, "dir", dir)
			info := w.bindInfoLocked(pid)
			info.MountDir = dir
			return info, nil
		}
		if n := w.namespacedUsersLocked(name); n > 0 {
			return ctl.BindInfo{}, errorf(ErrBusy, "branch %q is in use by %d process(es) started with agentfs exec -b in mount namespaces of their own: it cannot be shown through the mount root at the same time; run a shell in it with agentfs exec -b %s -- $SHELL, or wait until they end", name, n, name)
		}
		for _, b := range w.attached().Bindings() {
			if b.Namespaced {
				if _, by := w.attached().Resolve(uint32(pid)); by == b.Pid {
					return ctl.BindInfo{}, errorf(ErrInvalid, "process %d runs in branch %q's own mount namespace (agentfs exec -b): binding it through the mount root would change nothing it sees; use agentfs exec -b %s -- COMMAND", pid, b.View.Layer().Name(), a.Branch)
				}
			}
		}
		if err := w.attached().Bind(pid, v); err != nil {
			return ctl.BindInfo{}, bindError(err, pid, a.Branch)
		}
		w.log.Info("process bound", "pid", pid, "branch", a.Branch, "by", c.Pid)
		return w.bindInfoLocked(pid), nil
	})
}

// bindError is the error of a binding the mount refused; an *Error
// the mount made says it all already.
func bindError(err error, pid int, name string) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, ErrNoProcess) {
		return errorf(ErrNoProcess, "no process %d: it exited before it could be bound", pid)
	}
	return eioErrorf(err, "binding process %d to branch %q: %v", pid, name, err)
}

// Unbind ends the binding of process a.Pid (0: the caller).
func (w *Workspace) Unbind(c ctl.Caller, a ctl.BindArgs) (ctl.BindInfo, error) {
	return locked(w, func() (ctl.BindInfo, error) {
		if w.attached() == nil {
			return ctl.BindInfo{}, errorf(ErrNotMounted, "unbinding needs a mounted store")
		}
		pid, err := bindTarget(c, a.Pid)
		if err != nil {
			return ctl.BindInfo{}, err
		}
		if !w.attached().Unbind(pid) {
			info := w.bindInfoLocked(pid)
			if info.BoundBy != 0 {
				return ctl.BindInfo{}, errorf(ErrInvalid, "process %d is not bound itself: it sees branch %q through process %d, its ancestor; unbind that one (agentfs branch unbind --pid %d)", pid, info.Branch, info.BoundBy, info.BoundBy)
			}
			return ctl.BindInfo{}, errorf(ErrInvalid, "process %d is not bound to a branch: it sees branch %q, the mount's", pid, info.Branch)
		}
		w.log.Info("process unbound", "pid", pid, "by", c.Pid)
		return w.bindInfoLocked(pid), nil
	})
}

// Current says which branch process pid (0: the caller) sees.
func (w *Workspace) Current(c ctl.Caller, pid int) (ctl.BindInfo, error) {
	if pid == 0 {
		pid = int(c.Pid)
	} else if _, err := procfs.Uid(pid); err != nil {
		return ctl.BindInfo{}, errorf(ErrNoProcess, "no process %d: give the pid of a running process", pid)
	}
	return locked(w, func() (ctl.BindInfo, error) { return w.bindInfoLocked(pid), nil })
}

// bindTarget checks that caller c may bind (or unbind) process pid: it
// exists, it is not this process (the daemon), and it is the caller's
// own unless the caller is root. Pid 0 is the caller.
func bindTarget(c ctl.Caller, pid int) (int, error) {
	if pid == 0 {
		pid = int(c.Pid)
	}
	if pid < 0 {
		return 0, errorf(ErrInvalid, "bad process id %d: give the pid of a running process", pid)
	}
	if pid == os.Getpid() {
		return 0, errorf(ErrInvalid, "process %d is the agentfs daemon of this mount: bind a shell or a command (agentfs exec -b BRANCH -- CMD)", pid)
	}
	uid, err := procfs.Uid(pid)
	if err != nil {
		return 0, errorf(ErrNoProcess, "no process %d: it does not exist (or has exited); give the pid of a running process", pid)
	}
	if c.Uid != 0 && uid != c.Uid {
		return 0, errorf(ErrPermission, "process %d belongs to uid %d, not to you (uid %d): only root may bind another user's processes", pid, uid, c.Uid)
	}
	return pid, nil
}

// bindInfoLocked describes what process pid sees. opMu is held.
func (w *Workspace) bindInfoLocked(pid int) ctl.BindInfo {
	info := ctl.BindInfo{Pid: pid, Branch: w.current.Load().Name(), Command: procfs.CommandLine(pid)}
	if w.attached() != nil {
		v, by := w.attached().Resolve(uint32(pid))
		info.Branch, info.BoundBy = v.Layer().Name(), by
		for _, b := range w.attached().Bindings() {
			info.Namespaced = info.Namespaced || b.Pid == by && b.Namespaced
		}
	}
	return info
}

// bindings lists the processes bound to a branch. It needs no lock:
// the mount is attached before it serves, and lists its own bindings.
func (w *Workspace) bindings() []ctl.BindInfo {
	out := []ctl.BindInfo{}
	if w.attached() == nil {
		return out
	}
	for _, b := range w.attached().Bindings() {
		out = append(out, ctl.BindInfo{Pid: b.Pid, Branch: b.View.Layer().Name(), BoundBy: b.Pid, Command: procfs.CommandLine(b.Pid), Namespaced: b.Namespaced})
	}
	return out
}

// rootUsersLocked counts the processes bound to branch name through the
// mount root. opMu is held.
func (w *Workspace) rootUsersLocked(name string) int {
	n := 0
	if w.attached() != nil {
		for _, b := range w.attached().Bindings() {
			if !b.Namespaced && b.View.Layer().Name() == name {
				n++
			}
		}
	}
	return n
}

// namespacedUsersLocked counts the processes bound to branch name
// through a branch mount. opMu is held.
func (w *Workspace) namespacedUsersLocked(name string) int {
	if w.attached() == nil {
		return 0
	}
	return w.attached().NamespacedUsers(name)
}
