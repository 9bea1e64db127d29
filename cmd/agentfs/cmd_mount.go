package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

type mountOptions struct {
	lower       string
	store       string
	backstore   string
	ramdiskSize string
	foreground  bool
	debug       bool
	// Set by the parent for the daemon it starts.
	ephemeral bool
	readyFd   int
}

var mountOpts mountOptions

func (o *mountOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.lower, "lower", "", "the project directory to show (never modified)")
	fs.StringVar(&o.store, "store", "", "keep all state in this directory (default: a private one that unmount deletes)")
	fs.StringVar(&o.backstore, "backstore", "hostfs", "where changed files live: hostfs (a directory in the store) or ramdisk (a tmpfs)")
	fs.StringVar(&o.ramdiskSize, "ramdisk-size", "1G", "size limit of the ramdisk backstore (e.g. 512M, 2G)")
	fs.BoolVar(&o.foreground, "foreground", false, "serve in this process instead of starting a daemon")
	fs.BoolVar(&o.debug, "debug", false, "log every FUSE operation (to the store's agentfs.log, or stderr with --foreground)")
	fs.BoolVar(&o.ephemeral, "ephemeral", false, "internal: delete the store on exit")
	fs.IntVar(&o.readyFd, "ready-fd", -1, "internal: report readiness on this fd")
	fs.MarkHidden("ephemeral")
	fs.MarkHidden("ready-fd")
}

func init() {
	register(&command{
		name:    "mount",
		summary: "mount a copy-on-write view of a project",
		usage:   "--lower DIR [--store DIR] [--backstore hostfs|ramdisk] [--ramdisk-size SIZE] [--foreground] [--debug] MOUNTPOINT",
		help: `Mount shows DIR at MOUNTPOINT. Reads pass through to DIR; the first write
to a file copies it into the backstore; deletes hide the lower file. DIR
itself is never modified. The command returns once the mount is ready; a
daemon serves it until 'agentfs unmount', umount, or SIGTERM.

Without --store, the state lives in a private directory that unmount
deletes: unmounting discards every change. With --store DIR, the changes
persist, and mounting the same store again resumes them.

Examples:
  agentfs mount --lower ~/proj /mnt/ws
  agentfs mount --lower ~/proj --store ~/.ws1 /mnt/ws
  agentfs mount --lower ~/proj --backstore ramdisk --ramdisk-size 2G /mnt/ws`,
		flags: mountOpts.AddFlags,
		run:   func(ctx context.Context, args []string) error { return runMount(ctx, &mountOpts, args) },
	})
}

// mountPlan is a validated mount request.
type mountPlan struct {
	lower, mountpoint, store string
	ephemeral                bool
	backstore                string
	ramdiskSize              int64
	debug                    bool
}

func runMount(ctx context.Context, o *mountOptions, args []string) error {
	if len(args) != 1 {
		return usagef("mount takes one MOUNTPOINT, got %d arguments", len(args))
	}
	p, err := validateMount(o, args[0])
	if err != nil {
		return err
	}
	if o.foreground {
		return serve(ctx, p, o.readyFd)
	}
	return startDaemon(p)
}

// validateMount checks everything that can be checked before mounting.
func validateMount(o *mountOptions, mp string) (*mountPlan, error) {
	if o.lower == "" {
		return nil, usagef("--lower DIR is required")
	}
	lower, err := realDir(o.lower, "lower directory")
	if err != nil {
		return nil, err
	}
	mountpoint, err := realDir(mp, "mountpoint")
	if err != nil {
		return nil, err
	}
	if mountpoint == lower {
		return nil, fmt.Errorf("the mountpoint %s is the lower directory itself: mount somewhere else (e.g. an empty directory next to it)", mountpoint)
	}
	if within(mountpoint, lower) {
		return nil, fmt.Errorf("the mountpoint %s is inside the lower directory %s: the mount would show itself; choose a mountpoint outside the project", mountpoint, lower)
	}
	if within(lower, mountpoint) {
		return nil, fmt.Errorf("the lower directory %s is inside the mountpoint %s: the mount would hide its own lower; choose a mountpoint outside the project", lower, mountpoint)
	}
	if mounted, err := isMountpoint(mountpoint); err != nil {
		return nil, err
	} else if mounted {
		return nil, fmt.Errorf("%s is already a mount point: unmount it first (agentfs unmount %s), or choose another directory", mountpoint, mountpoint)
	}
	if err := checkFuseDevice(); err != nil {
		return nil, err
	}
	p := &mountPlan{lower: lower, mountpoint: mountpoint, backstore: o.backstore, debug: o.debug, ephemeral: o.ephemeral}
	switch o.backstore {
	case "hostfs":
	case "ramdisk":
		if o.store != "" && !o.ephemeral {
			return nil, fmt.Errorf("--backstore ramdisk cannot be combined with --store: the ramdisk is volatile, so a kept store would lose its files; drop one of the two")
		}
		if p.ramdiskSize, err = parseSize(o.ramdiskSize); err != nil {
			return nil, usagef("--ramdisk-size %q: %v (use e.g. 512M or 2G)", o.ramdiskSize, err)
		}
	default:
		return nil, usagef("--backstore %q: must be hostfs or ramdisk", o.backstore)
	}
	if o.store != "" {
		store, err := filepath.Abs(o.store)
		if err != nil {
			return nil, err
		}
		if within(store, mountpoint) || store == mountpoint {
			return nil, fmt.Errorf("the store %s is inside the mountpoint %s: choose a store outside it", store, mountpoint)
		}
		if within(store, lower) || store == lower {
			return nil, fmt.Errorf("the store %s is inside the lower directory %s: agentfs never writes to the lower directory; choose a store outside it", store, lower)
		}
		if st, err := os.Stat(store); err == nil && !st.IsDir() {
			return nil, fmt.Errorf("the store %s is not a directory", store)
		}
		p.store = store
	}
	return p, nil
}

// realDir resolves p to an absolute path without symlinks and checks it
// is a directory.
func realDir(p, what string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("the %s %s does not exist: create it first (mkdir -p %s)", what, abs, abs)
	case errors.Is(err, syscall.ENOTCONN):
		return "", fmt.Errorf("the %s %s is a dead mount (transport endpoint is not connected): clear it with agentfs unmount %s", what, abs, abs)
	case err != nil:
		return "", fmt.Errorf("the %s %s: %w", what, abs, err)
	case !st.IsDir():
		return "", fmt.Errorf("the %s %s is not a directory", what, abs)
	}
	return filepath.EvalSymlinks(abs)
}

// within reports whether p is strictly inside dir.
func within(p, dir string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// isMountpoint reports whether dir is the root of a mount.
func isMountpoint(dir string) (bool, error) {
	var st, pst unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, err
	}
	if dir == "/" {
		return true, nil
	}
	if err := unix.Lstat(filepath.Dir(dir), &pst); err != nil {
		return false, err
	}
	if st.Dev != pst.Dev {
		return true, nil
	}
	// A bind mount of a directory of the same filesystem keeps st_dev:
	// ask mountinfo.
	return inMountinfo(dir), nil
}

func inMountinfo(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountinfo(fields[4]) == dir {
			return true
		}
	}
	return false
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// checkFuseDevice explains a missing or forbidden /dev/fuse.
func checkFuseDevice() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("/dev/fuse is missing: load the fuse module (modprobe fuse), or run the container with --device /dev/fuse")
	case errors.Is(err, os.ErrPermission):
		return errors.New("/dev/fuse is not accessible to this user: run as root, add yourself to the group that owns /dev/fuse, or in a container grant --device /dev/fuse")
	case err != nil:
		return fmt.Errorf("/dev/fuse cannot be opened: %w", err)
	}
	f.Close()
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			return errors.New("fusermount3 is missing: mounting as a normal user needs it (apt-get install fuse3), or run as root")
		}
	}
	return nil
}

// parseSize parses sizes such as 512M, 2G, 1048576.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult, s = 1<<10, s[:n-1]
		case 'M':
			mult, s = 1<<20, s[:n-1]
		case 'G':
			mult, s = 1<<30, s[:n-1]
		case 'T':
			mult, s = 1<<40, s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, errors.New("not a positive size")
	}
	return v * mult, nil
}

// startDaemon re-executes agentfs as the daemon and waits until the
// mount is ready or the daemon reports why it is not.
func startDaemon(p *mountPlan) error {
	store, ephemeral := p.store, false
	if store == "" {
		var err error
		if store, err = os.MkdirTemp(privateStoreDir(), "store-"); err != nil {
			return fmt.Errorf("creating a private store: %w", err)
		}
		ephemeral = true
	} else if err := os.MkdirAll(store, 0700); err != nil {
		return fmt.Errorf("the store %s: %w", store, err)
	}
	logf, err := os.OpenFile(filepath.Join(store, "agentfs.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0600)
	if err != nil {
		return fmt.Errorf("the store %s: %w", store, err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"mount", "--foreground", "--ready-fd=3", "--lower", p.lower, "--store", store, "--backstore", p.backstore}
	if p.backstore == "ramdisk" {
		args = append(args, "--ramdisk-size", strconv.FormatInt(p.ramdiskSize, 10))
	}
	if ephemeral {
		args = append(args, "--ephemeral")
	}
	if p.debug {
		args = append(args, "--debug")
	}
	args = append(args, p.mountpoint)
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("starting the daemon: %w", err)
	}
	w.Close()
	done := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		done <- strings.TrimSpace(line)
	}()
	var msg string
	select {
	case msg = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		msg = "error: the daemon did not report within 60 s"
	}
	r.Close()
	if msg == "ready" {
		cmd.Process.Release()
		return nil
	}
	cmd.Wait()
	if ephemeral {
		os.RemoveAll(store)
	}
	if msg == "" {
		msg = "the daemon exited without a word; see " + filepath.Join(store, "agentfs.log")
	}
	return errors.New(strings.TrimPrefix(msg, "error: "))
}
