package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A view is the tree as one filesystem shows it: for native, the native
// copy (or a fresh copy of part of it); for the overlays, a mount of the
// lower tree with an empty upper. Everything a view creates lives in
// WORKDIR/runs/FS and is removed when it closes.
type view struct {
	filesystem string // fsNative, fsAgentfs, ...
	root       string // the tree's root as this filesystem shows it
	dir        string // WORKDIR/runs/FS, or "" for the shared native tree
	// unmount is set while a mount is up.
	unmount func(context.Context) error
}

// unmountTimeout bounds one unmount; a busy mount is detached after it.
const unmountTimeout = 30 * time.Second

// fsStatus says whether a filesystem can run here, and if not, why.
type fsStatus struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Version   string `json:"version,omitempty"`
	Note      string `json:"note,omitempty"`
	// Trace is what agentfs status said of the exec trace in the test
	// mount of an agentfs filesystem: "on: whose" or "off: why".
	Trace string `json:"trace,omitempty"`
}

// probeFilesystems checks each requested filesystem once, by mounting it
// over an empty lower directory where it is a mount.
func (b *bench) probeFilesystems(ctx context.Context) []fsStatus {
	var out []fsStatus
	for _, name := range b.cfg.filesystems {
		st := fsStatus{Name: name, Available: true}
		switch name {
		case fsOverlayfs:
			st.Version = "Linux " + kernelRelease()
			if os.Geteuid() != 0 {
				st.Available, st.Note = false, "skipped: mounting overlayfs needs root (run as root: sudo make bench)"
			}
		case fsFuseOverlayfs:
			if _, err := exec.LookPath("fuse-overlayfs"); err != nil {
				st.Available, st.Note = false, "skipped: fuse-overlayfs is not installed (apt-get install fuse-overlayfs; make bench does it as root)"
			} else {
				st.Version = toolVersion("fuse-overlayfs", "--version")
				st.Version = strings.TrimPrefix(st.Version, "fuse-overlayfs: ")
			}
		}
		if agentfsMount(name) {
			st.Version = toolVersion(b.cfg.agentfsBinary(name), "version")
		}
		if _, err := os.Stat("/dev/fuse"); err != nil && st.Available && (name == fsFuseOverlayfs || agentfsMount(name)) {
			st.Available, st.Note = false, "skipped: /dev/fuse is missing (load the fuse module, or run the container with --device /dev/fuse)"
		}
		if st.Available && name != fsNative {
			trace, err := b.probeMount(ctx, name)
			if err != nil {
				st.Available, st.Note = false, "skipped: a test mount failed: "+err.Error()
			}
			st.Trace = trace
		}
		if !st.Available {
			b.logf("%s: %s", name, st.Note)
		}
		out = append(out, st)
	}
	return out
}

// probeMount mounts filesystem over an empty lower directory and
// unmounts it. For an agentfs filesystem it returns what agentfs status
// says of the exec trace there ("" when it cannot say).
func (b *bench) probeMount(ctx context.Context, filesystem string) (trace string, err error) {
	lower := filepath.Join(b.runsDir(), "probe-lower")
	if err := os.MkdirAll(lower, 0o755); err != nil {
		return "", err
	}
	defer func() { joinCleanup(&err, os.RemoveAll(lower)) }()
	v, err := b.mountView(ctx, filesystem, lower)
	if err == nil && agentfsMount(filesystem) {
		trace = b.traceStatus(ctx, filesystem, v.root)
	}
	return trace, errors.Join(err, b.closeView(v))
}

// traceStatus is the "trace" field of agentfs status --json in the
// agentfs mount mnt, or "" (the status failed, or an older agentfs
// does not say).
func (b *bench) traceStatus(ctx context.Context, filesystem, mnt string) string {
	out, err := output(ctx, "", b.env, b.cfg.agentfsBinary(filesystem), "status", "--json", "-C", mnt)
	if err != nil {
		b.logf("%s: agentfs status: %v", filesystem, err)
		return ""
	}
	var st struct {
		Trace string `json:"trace"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		b.logf("%s: agentfs status --json: %v", filesystem, err)
	}
	return st.Trace
}

func kernelRelease() string {
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return ""
	}
	return unix.ByteSliceToString(uts.Release[:])
}

func (b *bench) runsDir() string { return filepath.Join(b.cfg.workdir, "runs") }

// openView makes filesystem's view of the tree for workload w.
func (b *bench) openView(ctx context.Context, filesystem string, w *workload) (*view, error) {
	if filesystem != fsNative {
		return b.mountView(ctx, filesystem, b.tree.lower())
	}
	if !w.fresh {
		return &view{filesystem: filesystem, root: b.tree.native()}, nil
	}
	// Native has no upper: a workload that changes the tree gets a
	// fresh copy of the parts it touches.
	v := &view{filesystem: filesystem, dir: filepath.Join(b.runsDir(), filesystem)}
	v.root = filepath.Join(v.dir, "tree")
	if err := b.resetDir(v.dir); err != nil {
		return nil, err
	}
	b.views[v] = true
	if err := os.MkdirAll(v.root, 0o755); err != nil {
		return v, err
	}
	for _, rel := range w.nativeCopy(b.tree) {
		dst := filepath.Join(v.root, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return v, err
		}
		if err := runQuiet(ctx, "", b.env, "cp", "-a", "--reflink=auto", filepath.Join(b.tree.native(), rel), dst); err != nil {
			return v, err
		}
	}
	return v, nil
}

// mountView mounts filesystem over lower with a new, empty upper.
func (b *bench) mountView(ctx context.Context, filesystem, lower string) (*view, error) {
	v := &view{filesystem: filesystem, dir: filepath.Join(b.runsDir(), filesystem)}
	upper, work, mnt := filepath.Join(v.dir, "upper"), filepath.Join(v.dir, "work"), filepath.Join(v.dir, "mnt")
	v.root = mnt
	if err := b.resetDir(v.dir); err != nil {
		return nil, err
	}
	b.views[v] = true
	for _, d := range []string{upper, work, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return v, err
		}
	}
	overlayOpts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	switch filesystem {
	case fsOverlayfs:
		if err := unix.Mount("overlay", mnt, "overlay", 0, overlayOpts); err != nil {
			return v, fmt.Errorf("mount -t overlay %s: %w", mnt, err)
		}
	case fsFuseOverlayfs:
		if err := runQuiet(ctx, "", b.env, "fuse-overlayfs", "-o", overlayOpts, mnt); err != nil {
			return v, err
		}
	case fsAgentfs, fsAgentfsUntraced, fsAgentfsNohash, fsAgentfsQuota, fsAgentfsBaseline, fsAgentfsBound, fsAgentfsBoundRoot:
		// The default backstore (hostfs) in a private store, which
		// AGENTFS_PRIVATE_DIR puts in the work directory.
		args := append(append([]string{"mount"}, mountFlags(filesystem)...), "--lower", lower, mnt)
		if err := runQuiet(ctx, "", b.env, b.cfg.agentfsBinary(filesystem), args...); err != nil {
			return v, err
		}
		// A snapshot of the fresh mount, as agentfs run takes before
		// its command: the hash worker then hashes the whole tree while
		// the workload runs (agentfs-nohash, --hash=false, does not).
		if err := runQuiet(ctx, "", b.env, b.cfg.agentfsBinary(filesystem), "snapshot", "create", "-m", "bench", "-C", mnt); err != nil {
			return v, errors.Join(err, b.unmount(ctx, filesystem, mnt))
		}
		if boundVariant(filesystem) {
			stop, err := b.bindOther(ctx, mnt, filesystem == fsAgentfsBoundRoot)
			v.unmount = func(ctx context.Context) error { return errors.Join(stop(), b.unmount(ctx, filesystem, mnt)) }
			if err != nil {
				return v, err
			}
			return v, nil
		}
	default:
		return v, fmt.Errorf("%s is not a mountable filesystem", filesystem)
	}
	v.unmount = func(ctx context.Context) error { return b.unmount(ctx, filesystem, mnt) }
	if !isMountRoot(mnt) {
		return v, fmt.Errorf("%s reported success but %s is not a mount", filesystem, mnt)
	}
	return v, nil
}

// closeView unmounts v (if it is a mount) and removes its directory.
// It runs even after an interrupt: it does not use the run's context.
func (b *bench) closeView(v *view) error {
	if v == nil {
		return nil
	}
	var errs []error
	if v.unmount != nil {
		ctx, cancel := context.WithTimeout(context.Background(), unmountTimeout)
		err := v.unmount(ctx)
		cancel()
		if err != nil {
			errs = append(errs, err)
		} else {
			v.unmount = nil
			errs = append(errs, b.deleteUnmountedStores())
		}
	}
	if v.unmount == nil {
		delete(b.views, v)
		if v.dir != "" && isMountRoot(v.root) {
			// Never remove files through a mount.
			errs = append(errs, fmt.Errorf("%s is still mounted; not removing %s (unmount it by hand: umount -l %s)", v.root, v.dir, v.root))
		} else if v.dir != "" {
			errs = append(errs, os.RemoveAll(v.dir))
		}
	}
	return errors.Join(errs...)
}

// deleteUnmountedStores deletes the private stores of the mounts
// unmounted so far. agentfs unmount leaves that to a process in the
// background at the lowest priority (the store is renamed
// trash-store-*, beside the others: daemon/trash.go), which on a loaded
// machine takes minutes, and whose disk work must not be charged to the
// runs timed next: the bench deletes them itself, at once, beside it
// (two deleters of one tree only ever find less to delete).
func (b *bench) deleteUnmountedStores() error {
	left, err := filepath.Glob(filepath.Join(b.cfg.workdir, "agentfs", "trash-*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range left {
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// closeAll closes every view still open (at the end, after an error or
// an interrupt).
func (b *bench) closeAll() error {
	var errs []error
	for v := range b.views {
		errs = append(errs, b.closeView(v))
	}
	return errors.Join(errs...)
}

// resetDir empties dir for a new view, first unmounting a mount left in
// it by an earlier run that was killed.
func (b *bench) resetDir(dir string) error {
	if err := b.unmountLeftover(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return os.MkdirAll(dir, 0o755)
}

// unmountLeftover unmounts dir/mnt if it is still mounted.
func (b *bench) unmountLeftover(dir string) error {
	mnt := filepath.Join(dir, "mnt")
	if !isMountRoot(mnt) {
		return nil
	}
	b.logf("unmounting %s, left mounted by an earlier run", mnt)
	ctx, cancel := context.WithTimeout(context.Background(), unmountTimeout)
	defer cancel()
	return b.unmount(ctx, filepath.Base(dir), mnt)
}

// unmount unmounts mnt the way filesystem is unmounted, retrying while it is
// busy, and detaches it if that does not end.
func (b *bench) unmount(ctx context.Context, filesystem, mnt string) error {
	try := func() error {
		switch filesystem {
		case fsAgentfs, fsAgentfsUntraced, fsAgentfsNohash, fsAgentfsQuota, fsAgentfsBaseline, fsAgentfsBound, fsAgentfsBoundRoot:
			if bin := b.cfg.agentfsBinary(filesystem); bin != "" {
				return runQuiet(ctx, "", b.env, bin, "unmount", mnt)
			}
			return runQuiet(ctx, "", b.env, "fusermount3", "-u", mnt)
		case fsFuseOverlayfs:
			return runQuiet(ctx, "", b.env, "fusermount3", "-u", mnt)
		default:
			return unix.Unmount(mnt, 0)
		}
	}
	var err error
	for delay := 50 * time.Millisecond; ; delay *= 2 {
		if err = try(); err == nil || !isMountRoot(mnt) {
			if !isMountRoot(mnt) {
				return nil
			}
			err = fmt.Errorf("still mounted after a successful unmount")
		}
		if ctx.Err() != nil || delay > 2*time.Second {
			break
		}
		time.Sleep(delay)
	}
	b.logf("%s: unmounting %s failed (%v); detaching it", filesystem, mnt, err)
	if derr := unix.Unmount(mnt, unix.MNT_DETACH); derr != nil && isMountRoot(mnt) {
		return fmt.Errorf("unmounting %s %s: %v; detaching: %w (unmount it by hand: umount -l %s)", filesystem, mnt, err, derr, mnt)
	}
	return nil
}

// cleanupLeftovers unmounts and removes what an earlier, killed run left
// in WORKDIR/runs.
func (b *bench) cleanupLeftovers() error {
	entries, err := os.ReadDir(b.runsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			errs = append(errs, b.unmountLeftover(filepath.Join(b.runsDir(), e.Name())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(b.runsDir())
}

// bindOther makes another branch active in the agentfs mount mnt: it
// creates the branch "other" and starts a process bound to it, which
// lives until stop: as agentfs exec -b does (a branch mount in a mount
// namespace of its own, as root), or through the root (throughRoot: as
// agentfs branch bind does), which makes the root's answers depend on
// the caller, for every process.
//
// stop fails if the process had ended before it: the runs in the mount
// may then have been made without the binding.
func (b *bench) bindOther(ctx context.Context, mnt string, throughRoot bool) (stop func() error, err error) {
	stop = func() error { return nil }
	if err := runQuiet(ctx, "", b.env, b.cfg.agentfsBin, "branch", "create", "other", "-C", mnt); err != nil {
		return stop, err
	}
	args := []string{"exec", "-b", "other", "-C", mnt}
	if throughRoot {
		args = append(args, "--no-namespace")
	}
	cmd := exec.Command(b.cfg.agentfsBin, append(args, "--", "sleep", "1000000")...)
	cmd.Env = b.env
	if err := cmd.Start(); err != nil {
		return stop, fmt.Errorf("starting a process bound to branch other: %w", err)
	}
	stop = func() error {
		if err := cmd.Process.Kill(); err != nil {
			return fmt.Errorf("stopping the process bound to branch other: %w", err)
		}
		// Killed as asked, Wait reports the kill; any other end is the
		// process's own, before it was asked.
		err := cmd.Wait()
		if st := cmd.ProcessState; st != nil {
			if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				return nil
			}
		}
		return fmt.Errorf("the process bound to branch other ended before it was stopped: %v", err)
	}
	// Wait until the binding is in force.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out, err := exec.Command(b.cfg.agentfsBin, "status", "--json", "-C", mnt).Output()
		if err == nil && strings.Contains(string(out), `"branch": "other"`) {
			return stop, nil
		}
	}
	return func() error { return nil }, errors.Join(fmt.Errorf("the process bound to branch other did not show in agentfs status"), stop())
}
