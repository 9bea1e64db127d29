package daemon

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/fs"
	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/workspace"
)

// The daemon's side of workspace.Mount: what the workspace's operations
// reach of the mount. Called with the workspace's operation lock held.

// Resolve implements workspace.Mount.
func (d *Daemon) Resolve(pid uint32) (*overlay.FS, int) {
	if srv := d.srv.Load(); srv != nil {
		return srv.Resolve(pid)
	}
	return d.shown.Load(), 0
}

// Show implements workspace.Mount.
func (d *Daemon) Show(v *overlay.FS) {
	d.shown.Store(v)
	if srv := d.srv.Load(); srv != nil {
		srv.SetDefault(v)
	}
}

// Retire implements workspace.Mount.
func (d *Daemon) Retire(v *overlay.FS) {
	if srv := d.srv.Load(); srv != nil {
		srv.Retire(v)
	}
	d.mu.Lock()
	bm := d.branchMounts[v.Layer().Name()]
	d.mu.Unlock()
	if bm != nil {
		bm.srv.Retire(v)
	}
}

// Invalidate implements workspace.Mount.
func (d *Daemon) Invalidate(stale []overlay.Stale) {
	if srv := d.srv.Load(); srv != nil {
		srv.Invalidate(stale)
	}
	for _, bm := range d.branchMountList() {
		bm.srv.Invalidate(stale)
	}
	if a := d.activity; a != nil {
		a.ignore.ForgetAll() // the ignore files may be among the stale
	}
}

// Bindings implements workspace.Mount.
func (d *Daemon) Bindings() []workspace.Binding {
	srv := d.srv.Load()
	if srv == nil {
		return nil
	}
	var out []workspace.Binding
	for _, b := range srv.Bindings() {
		out = append(out, workspace.Binding{Pid: b.Pid, View: b.View, Namespaced: b.Namespaced})
	}
	return out
}

// Bind implements workspace.Mount.
func (d *Daemon) Bind(pid int, v *overlay.FS) error {
	srv := d.srv.Load()
	if srv == nil {
		return workspace.ErrNotMounted
	}
	return bindError(srv.Bind(pid, v))
}

// bindError gives fs.ErrNoProcess the workspace's kind.
func bindError(err error) error {
	if errors.Is(err, fs.ErrNoProcess) {
		return errors.Join(workspace.ErrNoProcess, err)
	}
	return err
}

// Unbind implements workspace.Mount.
func (d *Daemon) Unbind(pid int) bool {
	srv := d.srv.Load()
	return srv != nil && srv.Unbind(pid)
}

// CanNamespace implements workspace.Mount.
func (d *Daemon) CanNamespace() bool { return d.root() }

// Contains implements workspace.Mount.
func (d *Daemon) Contains(p string) bool {
	var st, mst unix.Stat_t
	return unix.Lstat(p, &st) == nil && unix.Stat(d.plan.Mountpoint, &mst) == nil && st.Dev == mst.Dev
}

// Describe implements workspace.Mount.
func (d *Daemon) Describe(st *ctl.Status) {
	st.Pid = os.Getpid()
	st.Store, st.Ephemeral = d.store, d.ephemeral
	st.Supervised = d.super != nil
	st.Trace = d.trace.Status()
	st.Transport = "none"
	srv := d.srv.Load()
	if srv == nil {
		st.IOMode = "none (not mounted yet)"
		return
	}
	st.Passthrough, st.WritebackCache = srv.Passthrough(), srv.WritebackCache()
	st.Reads, st.ReadsSpliced, st.ReadsFromDisk = srv.Reads()
	st.Transport = srv.Transport()
	switch {
	case strings.HasPrefix(st.Transport, "io_uring"):
	case d.plan.NoIOURing:
		st.Transport += " (--no-io-uring)"
	case !d.root():
		st.Transport += " (io_uring is turned on as root only)"
	}
	st.IOMode = IOMode(st.Passthrough, st.WritebackCache, d.root(), d.plan.NoPassthrough || d.plan.WritebackCache)
	if st.Passthrough && st.MaxBytes > 0 {
		// fs serves no file of a byte-limited view through passthrough.
		st.IOMode = "page cache (no passthrough: the byte limit, --max-bytes, needs the daemon to see every write)"
	}
}

// IOMode says in words how file I/O is served; refused is whether the
// mount was asked not to use passthrough (--no-passthrough, or
// --writeback-cache, which the kernel does not grant with it).
func IOMode(passthrough, writeback, root, refused bool) string {
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
