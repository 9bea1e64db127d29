package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/fs"
	"github.com/agentfs/agentfs/overlay"
)

// daemon is one serving mount.
type daemon struct {
	plan  *mountPlan
	log   *slog.Logger
	meta  *branch.Store
	objs  *backstore.Store
	view  *overlay.FS
	srv   *fs.Server
	once  sync.Once
	ready func(string)
}

// serve mounts and serves until unmounted. readyFd, when >= 0, gets
// "ready" or "error: ..." once the outcome is known.
func serve(ctx context.Context, p *mountPlan, readyFd int) (err error) {
	report := func(string) {}
	if readyFd >= 0 {
		f := os.NewFile(uintptr(readyFd), "ready")
		var once sync.Once
		report = func(s string) { once.Do(func() { fmt.Fprintln(f, s); f.Close() }) }
	}
	defer func() {
		if err != nil {
			report("error: " + err.Error())
		}
	}()
	level := slog.LevelInfo
	if p.debug {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if p.store == "" {
		if p.store, err = os.MkdirTemp(privateStoreDir(), "store-"); err != nil {
			return fmt.Errorf("creating a private store: %w", err)
		}
		p.ephemeral = true
	}
	d := &daemon{plan: p, log: logger, ready: report}
	defer d.close()
	if err := d.open(); err != nil {
		return err
	}
	if err := writeRegistry(registryEntry{Mountpoint: p.mountpoint, Pid: os.Getpid(), Store: p.store, Ephemeral: p.ephemeral, Lower: p.lower}); err != nil {
		logger.Warn("recording the mount", "err", err)
	}
	defer removeRegistry(p.mountpoint)
	logger.Info("mounted", "lower", p.lower, "mountpoint", p.mountpoint, "store", p.store, "passthrough", d.srv.Passthrough())
	report("ready")

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		s := <-sigs
		logger.Info("signal: unmounting", "signal", s.String())
		d.unmount()
	}()
	d.srv.Wait()
	signal.Stop(sigs)
	logger.Info("unmounted", "mountpoint", p.mountpoint)
	return nil
}

func (d *daemon) open() error {
	p := d.plan
	var err error
	d.meta, err = branch.Open(branch.Options{Dir: p.store, Logger: d.log})
	if err != nil {
		return err
	}
	if prev, err := d.meta.Info("lower"); err == nil && string(prev) != p.lower {
		return fmt.Errorf("the store %s belongs to the lower directory %s, not %s: use --lower %s, or another --store", p.store, prev, p.lower, prev)
	} else if errors.Is(err, branch.ErrNotFound) {
		if err := d.meta.SetInfo("lower", []byte(p.lower)); err != nil {
			return err
		}
	}
	layer, err := d.meta.Layer("main")
	if err != nil {
		return err
	}
	d.objs, err = backstore.Open(backstore.Options{Kind: p.backstore, Dir: p.store, RamdiskSize: p.ramdiskSize})
	if err != nil {
		return err
	}
	d.view, err = overlay.New(overlay.Config{Lower: p.lower, Objects: d.objs, Layer: layer,
		AllocIno: d.meta.AllocIno, Sync: d.meta.Sync, Logger: d.log})
	if err != nil {
		return err
	}
	control := ctl.NewServer(uint32(os.Geteuid()))
	d.handle(control)
	d.srv, err = fs.Mount(fs.Options{
		Mountpoint:  p.mountpoint,
		View:        d.view,
		Control:     control,
		Passthrough: os.Geteuid() == 0,
		AllowOther:  os.Geteuid() == 0,
		FsName:      p.lower,
		Debug:       p.debug,
		Logger:      d.log,
	})
	if err != nil {
		return fmt.Errorf("mounting %s: %w", p.mountpoint, err)
	}
	return nil
}

// close releases everything; an ephemeral store is deleted.
func (d *daemon) close() {
	if d.view != nil {
		d.view.Close()
	}
	if d.objs != nil {
		if err := d.objs.Close(); err != nil {
			d.log.Warn("closing the backstore", "err", err)
		}
	}
	if d.meta != nil {
		if err := d.meta.Close(); err != nil {
			d.log.Warn("closing the metadata", "err", err)
		}
	}
	if d.plan.ephemeral && d.plan.store != "" {
		if err := os.RemoveAll(d.plan.store); err != nil {
			d.log.Warn("removing the private store", "err", err)
		}
	}
}

// unmount unmounts the file system, waiting for it to become idle for
// a while (a control request may still hold a file open), then detaching
// it lazily.
func (d *daemon) unmount() {
	d.once.Do(func() {
		go func() {
			mp := d.plan.mountpoint
			for i := 0; i < 50; i++ {
				if err := unmountOnce(mp, false); err == nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err := unmountOnce(mp, true); err != nil {
				d.log.Error("unmounting", "err", err)
			}
		}()
	})
}

// unmountOnce unmounts mp, lazily when lazy.
func unmountOnce(mp string, lazy bool) error {
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = unix.MNT_DETACH
		}
		return unix.Unmount(mp, flags)
	}
	args := []string{"-u", "-q"}
	if lazy {
		args = append(args, "-z")
	}
	out, err := exec.Command("fusermount3", append(args, mp)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fusermount3: %v: %s", err, out)
	}
	return nil
}

func (d *daemon) handle(s *ctl.Server) {
	s.Handle(ctl.OpPing, func(ctl.Caller, json.RawMessage) (any, error) { return "pong", nil })
	s.Handle(ctl.OpStatus, func(ctl.Caller, json.RawMessage) (any, error) { return d.status(), nil })
	s.Handle(ctl.OpUnmount, func(ctl.Caller, json.RawMessage) (any, error) {
		d.unmount()
		return map[string]int{"pid": os.Getpid()}, nil
	})
}

func (d *daemon) status() ctl.Status {
	info := d.objs.Info()
	u, _ := d.objs.Usage()
	st := ctl.Status{
		Version: version, Pid: os.Getpid(),
		Lower: d.plan.lower, Mountpoint: d.plan.mountpoint,
		Store: d.plan.store, Ephemeral: d.plan.ephemeral,
		Backstore: info.Kind, BackingMode: info.Mode, BackingRoot: info.Root,
		Reflink: info.Reflink, Passthrough: d.srv.Passthrough(),
		Objects: u.Objects, Bytes: u.Bytes, FsFree: u.FsFree, SizeLimit: info.SizeLimit,
	}
	if st.Passthrough {
		st.IOMode = "passthrough (reads and writes of changed files go straight to the backstore)"
	} else {
		why := "kernel did not grant it"
		if os.Geteuid() != 0 {
			why = "not root"
		}
		st.IOMode = "page cache (no passthrough: " + why + ")"
	}
	return st
}

// privateStoreDir is where private (ephemeral) stores live: on disk,
// not in /run, so that large copy-ups do not fill memory.
func privateStoreDir() string {
	dir := "/var/tmp/agentfs"
	if os.Geteuid() != 0 {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("agentfs-%d", os.Geteuid()))
	}
	os.MkdirAll(dir, 0700)
	return dir
}

// runtimeDir is where the mount registry lives.
func runtimeDir() string {
	dir := "/run/agentfs"
	if os.Geteuid() != 0 {
		if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
			dir = filepath.Join(x, "agentfs")
		} else {
			dir = filepath.Join(os.TempDir(), fmt.Sprintf("agentfs-%d", os.Geteuid()))
		}
	}
	os.MkdirAll(dir, 0700)
	return dir
}
