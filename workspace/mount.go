package workspace

import (
	"errors"
	"fmt"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// Mount is what a serving mount gives its workspace: which view a
// process sees, the kernel's caches, the processes bound to branches
// and the branch mounts. The daemon implements it; offline there is
// none. The workspace calls it with opMu held, but Describe and
// Bindings, which Status calls without it, and Rewinding (see there);
// it never calls back.
type Mount interface {
	// Resolve returns the view process pid sees at the mount root and
	// the pid whose binding decides it (0 when none does: the view the
	// mount shows).
	Resolve(pid uint32) (*overlay.FS, int)
	// Show makes v the view unbound processes see at once.
	Show(v *overlay.FS)
	// Retire cuts off the processes bound to v, whose branch is being
	// deleted: from then on they get ENOENT, never another branch's
	// files.
	Retire(v *overlay.FS)
	// Invalidate drops what every connection of the mount (branch
	// mounts too) cached of the stale nodes.
	Invalidate(stale []overlay.Stale)
	// Bindings lists the bound processes.
	Bindings() []Binding
	// Bind binds process pid and its descendants to v through the
	// mount root. An error is of kind ErrNoProcess when the process
	// has exited.
	Bind(pid int, v *overlay.FS) error
	// BindNamespaced binds pid to v through a branch mount of v (made
	// on first use) and returns the branch mount's directory, which
	// the process binds over the mountpoint in a mount namespace of
	// its own (agentfs exec -b). Errors as Bind's.
	BindNamespaced(pid int, v *overlay.FS) (string, error)
	// Unbind ends pid's own binding; false when it has none.
	Unbind(pid int) bool
	// NamespacedUsers counts the processes that see branch name
	// through its branch mount.
	NamespacedUsers(name string) int
	// CanNamespace reports whether the mount can make branch mounts
	// (a daemon that is root, not in a user namespace).
	CanNamespace() bool
	// Describe fills in the mount's part of a status: the daemon's
	// pid, the I/O mode and transport, the reads served.
	Describe(st *ctl.Status)
	// Contains reports whether path p is on the mount's file system
	// (also through a bind mount of it).
	Contains(p string) bool
	// Supervised says what a restore of branch name does to a
	// supervised command (agentfs run --supervise: name is the branch
	// the mount shows), as seen from process pid.
	Supervised(name string, pid uint32) Supervision
	// Rewinding stops the supervised command before a restore of branch
	// name to snapshot, asked from outside the command (asker "") or by
	// a process of its start asker (Supervision.Run: a self-rewind,
	// answered already, which the supervisor drops, with an error of
	// ErrRewindDropped, when that start is no longer the one running).
	// It is called without opMu (the command's processes may be in
	// control calls that wait for it), and serializes rewinds: the next
	// one waits until this one's Done has been called, which the
	// workspace does, once it has released opMu, whatever the restore's
	// outcome. An error means the command was not stopped; nothing is
	// restored then.
	Rewinding(name, snapshot, asker string) (Rewind, error)
}

// ErrRewindDropped: the supervisor dropped a self-rewind, as the start
// of the command that asked it is no longer the one running (another
// rewind stopped it, or the run ended).
var ErrRewindDropped = errors.New("the rewind was dropped")

// Supervision is what a restore of a branch does to a supervised
// command.
type Supervision struct {
	// Supervised: the restore stops every process of the session's
	// command first.
	Supervised bool
	// Inside: the caller is one of those processes, so it cannot wait
	// for the restore (see Workspace.Restore); Run is the start of the
	// command it belongs to (its cgroup leaf, "run-N").
	Inside bool
	Run    string
	// Relaunch: the supervisor would start the command again after (it
	// has relaunches left).
	Relaunch bool
}

// Rewind is a supervised command stopped for a restore.
type Rewind struct {
	// Relaunch: the supervisor starts the command again after the
	// restore; false when the run ends instead (no relaunches left, or
	// the command ended by itself meanwhile).
	Relaunch bool
	// Done tells the supervisor the restore's outcome (err nil: snapshot
	// restored, after safety), and ends the rewind.
	Done func(snapshot, safety string, err error)
}

// Binding is a process bound to a branch's view.
type Binding struct {
	Pid  int
	View *overlay.FS
	// Namespaced: it sees the view through a branch mount, in a mount
	// namespace of its own.
	Namespaced bool
}

// Attach attaches the serving mount: from then on the operations act
// on it too. Called once, before the mount serves control requests; a
// second call panics (a mount is never swapped under operations).
func (w *Workspace) Attach(m Mount) {
	if !w.mount.CompareAndSwap(nil, &attachedMount{m}) {
		panic("workspace: Attach called twice")
	}
	if !w.opts.NoHash {
		w.hashes.Start()
	}
}

// attachedMount holds the Mount for the atomic pointer.
type attachedMount struct{ Mount }

// attached returns the mount, nil offline. It takes no lock: the mount
// is attached once, before it serves.
func (w *Workspace) attached() Mount {
	if a := w.mount.Load(); a != nil {
		return a.Mount
	}
	return nil
}

// callerView returns the view process c sees at the mount root: its
// branch's. opMu is held (w.view).
func (w *Workspace) callerView(c ctl.Caller) *overlay.FS {
	if w.attached() != nil {
		v, _ := w.attached().Resolve(c.Pid)
		return v
	}
	return w.view
}

// invalidate drops what the kernel cached of the nodes a restore, an
// apply or a repair cut loose, and what it cached of the root and of
// names that did not exist: it is called even when no node went stale
// (a view that held no node but the root lists none, yet the kernel
// may remember that a name the restore brings back did not exist).
// opMu is held; no lock of a view may be.
func (w *Workspace) invalidate(stale []overlay.Stale) {
	if m := w.attached(); m != nil {
		m.Invalidate(stale)
	}
}

// viewOf returns the live view of branch l, opening it on first use.
// opMu is held.
func (w *Workspace) viewOf(l *branch.Layer) (*overlay.FS, error) {
	if v := w.views[l.Name()]; v != nil {
		return v, nil
	}
	v, err := w.newView(l)
	if err != nil {
		return nil, storeError(err, fmt.Sprintf("opening branch %q", l.Name()))
	}
	w.views[l.Name()] = v
	return v, nil
}

// LiveView returns the live view of branch name, or nil when no
// process sees it.
func (w *Workspace) LiveView(name string) *overlay.FS {
	w.opMu.Lock()
	defer w.opMu.Unlock()
	return w.views[name]
}
