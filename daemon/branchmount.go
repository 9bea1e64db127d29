package daemon

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/fs"
	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/workspace"
)

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
// that the control operations it runs act on its branch. The rules of
// when a branch may have one are the workspace's (workspace.Bind).

// branchMount is one branch mount.
type branchMount struct {
	dir   string
	srv   *fs.Server
	users int // namespaced bindings that use it
}

// BindNamespaced implements workspace.Mount.
func (d *Daemon) BindNamespaced(pid int, v *overlay.FS) (string, error) {
	srv := d.srv.Load()
	if srv == nil {
		return "", workspace.ErrNotMounted
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	name := v.Layer().Name()
	bm, err := d.branchMountForLocked(name, v)
	if err != nil {
		return "", err
	}
	if err := srv.BindNamespaced(pid, v); err != nil {
		if bm.users == 0 {
			// Made for this binding, and used by nothing else.
			delete(d.branchMounts, name)
			d.detachBranchMount(name, bm)
		}
		return "", bindError(err)
	}
	bm.users++
	return bm.dir, nil
}

// NamespacedUsers implements workspace.Mount.
func (d *Daemon) NamespacedUsers(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if bm := d.branchMounts[name]; bm != nil {
		return bm.users
	}
	return 0
}

// branchMountList returns the branch mounts.
func (d *Daemon) branchMountList() []*branchMount {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*branchMount, 0, len(d.branchMounts))
	for _, bm := range d.branchMounts {
		out = append(out, bm)
	}
	return out
}

// branchMountForLocked returns the branch mount of view v (branch
// name), mounting it on first use. d.mu is held.
func (d *Daemon) branchMountForLocked(name string, v *overlay.FS) (*branchMount, error) {
	if bm := d.branchMounts[name]; bm != nil {
		return bm, nil
	}
	if d.branchMounts == nil {
		d.branchMounts = map[string]*branchMount{}
	}
	anchor, err := d.branchAnchorLocked()
	if err != nil {
		return nil, mountError(err, "preparing the directory of branch mounts: %v", err)
	}
	dir, err := os.MkdirTemp(anchor, "branch-")
	if err != nil {
		return nil, mountError(err, "making the directory of branch %q's mount: %v", name, err)
	}
	o := d.fsOptions
	o.Mountpoint, o.View, o.FsName = dir, v, d.plan.Lower+"#"+name
	srv, err := fs.Mount(o)
	if err != nil {
		if rerr := os.Remove(dir); rerr != nil {
			d.log.Warn("removing the directory of a branch mount that failed", "dir", dir, "err", rerr)
		}
		return nil, mountError(err, "mounting branch %q for a namespaced process: %v", name, err)
	}
	bm := &branchMount{dir: dir, srv: srv}
	d.branchMounts[name] = bm
	d.log.Info("branch mount", "branch", name, "dir", dir)
	return bm, nil
}

// mountError is the error of a branch mount that could not be made: an
// I/O error of the mount (EIO), whatever the system call said, as the
// process asking to be bound can do nothing about it.
func mountError(err error, format string, a ...any) error {
	return &workspace.Error{Kind: workspace.ErrIO, Msg: fmt.Sprintf(format, a...), Err: err}
}

// branchAnchorLocked returns the directory the branch mounts are made
// in: a shared mount of its own (bound onto itself), so that a branch
// mount made after a process entered a mount namespace still shows in
// that namespace (agentfs exec -b inside agentfs exec -b). d.mu is held.
func (d *Daemon) branchAnchorLocked() (string, error) {
	dir := filepath.Join(d.store, "branches")
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
		if uerr := unix.Unmount(dir, unix.MNT_DETACH); uerr != nil {
			d.log.Warn("detaching the directory of branch mounts", "dir", dir, "err", uerr)
		}
		return "", fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	d.anchored = true
	return dir, nil
}

// bindingEnded releases what a binding held: a branch mount nobody uses
// any more is detached (processes still inside keep it until they exit).
func (d *Daemon) bindingEnded(b fs.Binding) {
	if !b.Namespaced {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
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

// detachBranchMount unmounts bm lazily and removes its directory once
// its connection has ended.
func (d *Daemon) detachBranchMount(name string, bm *branchMount) {
	if err := unix.Unmount(bm.dir, unix.MNT_DETACH); err != nil {
		d.log.Warn("detaching a branch mount", "branch", name, "dir", bm.dir, "err", err)
		return
	}
	go func() {
		bm.srv.Wait()
		if err := os.Remove(bm.dir); err != nil {
			d.log.Warn("removing the directory of a branch mount", "dir", bm.dir, "err", err)
		}
		d.log.Info("branch mount gone", "branch", name)
	}()
}

// unmountBranches detaches every branch mount (the daemon is ending).
func (d *Daemon) unmountBranches() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, bm := range d.branchMounts {
		delete(d.branchMounts, name)
		d.detachBranchMount(name, bm)
	}
	if d.anchored {
		dir := filepath.Join(d.store, "branches")
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			d.log.Warn("detaching the directory of branch mounts", "dir", dir, "err", err)
		}
		d.anchored = false
	}
}

// EnterBranchMount makes this thread's view of the mount at root the
// branch mount dir: a new mount namespace (receiving mount events from
// the parent one, sending none back) where dir is bound over root.
func EnterBranchMount(dir, root string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("making a mount namespace for the branch (unshare): %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the mount namespace a slave of its parent: %w", err)
	}
	if err := unix.Mount(dir, root, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the branch mount %s over %s: %w", dir, root, err)
	}
	return nil
}
