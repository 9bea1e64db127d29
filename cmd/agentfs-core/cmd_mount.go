package main

import (
	"context"
	"os"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/daemon"
)

// mountOptions are the flags of agentfs mount.
type mountOptions struct {
	lower       string
	store       string
	backstore   string
	ramdiskSize string
	foreground  bool
	debug       bool
	noPT        bool
	writeback   bool
	noIOURing   bool
	activity    activityFlags
	// supervisorFd: the session daemon's line to its supervisor.
	supervisorFd int
	// Set by the parent for the daemon it starts.
	ephemeral bool
	readyFd   int
	// session: the daemon of an agentfs run session, in the session's
	// private mount namespace: the mountpoint is the lower directory.
	session bool
	// traceCgroup: the session's cgroup, whose processes the exec
	// trace follows.
	traceCgroup string
	// system: the daemon of an agentfs run --system session, whose
	// lower is / and which hides and seals the paths given.
	system        bool
	exclude, seal []string
	// from: REMOTE/SNAPSHOT to start from (--from).
	from string
	// options are -o lists (mount_options.go); flags are the flags
	// they set, and mountFlags the kernel's.
	options    []string
	flags      *pflag.FlagSet
	mountFlags []string
}

func (o *mountOptions) AddFlags(flags *pflag.FlagSet) {
	flags.StringVar(&o.lower, "lower", "", "the project `DIR` to show (never modified)")
	flags.StringVar(&o.store, "store", "", "keep all state in `DIR`, to mount it again later\n(default: a private directory that unmount deletes)")
	flags.StringVar(&o.backstore, "backstore", "hostfs", "where changed files live, a `KIND`: hostfs (a directory in the store)\nor ramdisk (a size-limited tmpfs; not with --store)")
	flags.StringVar(&o.ramdiskSize, "ramdisk-size", "", "size limit of the ramdisk backstore, a `SIZE` such as 512M or 2G (default 1G)")
	flags.BoolVar(&o.foreground, "foreground", false, "serve in this process (logging to stderr) instead of starting a daemon")
	flags.BoolVar(&o.noPT, "no-passthrough", false, "serve file I/O through the page cache even where FUSE passthrough\nis available (to compare, or to work around a kernel problem)")
	flags.BoolVar(&o.writeback, "writeback-cache", false, "let the kernel gather writes in its page cache and send them in large\nrequests, instead of FUSE passthrough (see docs/semantics.md: file times are\nthe kernel's, and a few stat details differ from the native ones)")
	flags.BoolVar(&o.noIOURing, "no-io-uring", false, "take FUSE requests over /dev/fuse even where FUSE over io_uring is\navailable (to compare, or to work around a kernel problem)")
	o.activity.AddFlags(flags)
	flags.StringArrayVarP(&o.options, "options", "o", nil, "mount options, as mount(8) takes them: any flag above as NAME or NAME=VALUE\n(store=DIR,backstore=ramdisk,auto-snapshot), and nosuid, nodev, noexec")
	flags.BoolVar(&o.debug, "debug", false, "log every FUSE operation (to the store's agentfs.log, or stderr with --foreground)")
	flags.BoolVar(&o.ephemeral, "ephemeral", false, "internal: the store is private; delete it on exit")
	flags.IntVar(&o.readyFd, "ready-fd", -1, "internal: report readiness on this file descriptor")
	flags.BoolVar(&o.session, "session-mount", false, "internal: serve an agentfs run session (mountpoint = lower, in a private mount namespace)")
	mustHide(flags, "ephemeral")
	mustHide(flags, "ready-fd")
	flags.IntVar(&o.supervisorFd, "supervisor-fd", -1, "internal: the line to the session's supervisor")
	mustHide(flags, "session-mount")
	mustHide(flags, "supervisor-fd")
	flags.StringVar(&o.from, "from", "", "start from the snapshot `REMOTE/SNAPSHOT` of a remote (agentfs remote ls REMOTE):\nits files are fetched at their first open (with --store: kept, and the next\nmounts of the store go on with it)")
	flags.StringVar(&o.traceCgroup, "trace-cgroup", "", "internal: trace the commands of the processes in the cgroup `DIR` (an agentfs run session's)")
	mustHide(flags, "trace-cgroup")
	flags.BoolVar(&o.system, "system-mount", false, "internal: serve an agentfs run --system session (lower /)")
	flags.StringArrayVar(&o.exclude, "exclude-path", nil, "internal: a lower `PATH` the view leaves out")
	flags.StringArrayVar(&o.seal, "seal", nil, "internal: a lower directory `PATH` the view shows empty")
	mustHide(flags, "system-mount")
	mustHide(flags, "exclude-path")
	mustHide(flags, "seal")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "mount",
		Usage: "--lower DIR [--store DIR] [--backstore hostfs|ramdisk] [--ramdisk-size SIZE] [--auto-snapshot] [--quiet-period DUR] [--log-reads] [--max-files N] [--max-bytes SIZE] [-o OPTIONS] [--foreground] [--debug] MOUNTPOINT",
		Help: `Mount shows DIR at MOUNTPOINT. Reads pass through to DIR; the first write
to a file copies it into the backstore; deletes hide the lower file. DIR
itself is never modified. The command returns once the mount is ready; a
daemon serves it until 'agentfs unmount', umount, or SIGTERM. The
daemon's log is agentfs.log in the store.

Without --store, the state lives in a private directory that unmount
deletes: unmounting discards every change. With --store DIR, the changes
persist, and mounting the same store again (with the same --lower)
resumes them. One store serves one mount at a time.

Everything is checked before anything is mounted: a missing lower or
mountpoint, a mountpoint inside the lower tree (or the reverse), a
mountpoint that is already mounted, a missing /dev/fuse, a store in use
or written by an incompatible agentfs are refused with an explanation.

Every change programs make in the mount goes to an activity log in the
store (agentfs log shows it). With --auto-snapshot the mount takes a
snapshot once changes settle (--quiet-period) and after each git commit
made inside it; older automatic snapshots thin out (agentfs snapshot
prune). Defaults for these come from ~/.config/agentfs/config and the
project's .agentfs.conf (see docs/guide.md); flags override both.

--max-files and --max-bytes limit what each branch may hold in the
backstore (files, directories and links it made or changed; the bytes
of their data): past a limit, the operation that would cross it fails
with EDQUOT. With --max-bytes, files are served through the page cache
instead of FUSE passthrough, so that the daemon sees every write.

Every flag has a mount(8) spelling, for -o and for mount -t fuse.agentfs
and /etc/fstab (through mount.fuse.agentfs, which make install puts in
/sbin): -o store=DIR,backstore=ramdisk,auto-snapshot. nosuid, nodev
and noexec go to the kernel; mount's own options (rw, noauto, user,
nofail, ...) are ignored. mount.fuse.agentfs --help says more.

Examples:
  agentfs mount --lower ~/proj /mnt/ws
  agentfs mount --lower ~/proj --auto-snapshot --quiet-period 5s /mnt/ws
  agentfs mount --lower ~/proj --store ~/.ws1 /mnt/ws
  agentfs mount --lower ~/proj --backstore ramdisk --ramdisk-size 2G /mnt/ws
  agentfs mount --lower ~/proj --max-files 100000 --max-bytes 10G /mnt/ws
  agentfs mount --lower ~/proj -o store=$HOME/.ws1,auto-snapshot /mnt/ws
  agentfs mount --lower ~/proj --from team/1a2b3c4d /mnt/ws   # a pushed snapshot`,
		Setup: func(flags *pflag.FlagSet, _ cli.Streams) cli.RunFunc {
			o := &mountOptions{flags: flags}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runMount(ctx, o, args) }
		},
	})
}

func runMount(ctx context.Context, o *mountOptions, args []string) error {
	if len(args) != 1 {
		return cli.Usagef("mount takes one MOUNTPOINT, got %d arguments", len(args))
	}
	if err := o.applyOptions(nil); err != nil {
		return err
	}
	p, err := daemon.Validate(o.request(args[0]))
	if err != nil {
		return err
	}
	if o.foreground {
		opts := daemon.Options{ReadyFd: o.readyFd, Version: cli.Version}
		if o.supervisorFd >= 0 {
			opts.Supervisor = os.NewFile(uintptr(o.supervisorFd), "supervisor")
		}
		return daemon.Serve(ctx, p, opts)
	}
	d, err := daemon.Start(p, nil)
	if err != nil {
		return err
	}
	return d.Process.Release()
}

// request is the mount request the flags make.
func (o *mountOptions) request(mountpoint string) daemon.Request {
	return daemon.Request{Lower: o.lower, Mountpoint: mountpoint, Store: o.store, Backstore: o.backstore, RamdiskSize: o.ramdiskSize,
		Debug: o.debug, NoPassthrough: o.noPT, WritebackCache: o.writeback, NoIOURing: o.noIOURing,
		Activity: o.activity.overrides(), Ephemeral: o.ephemeral, Session: o.session, TraceCgroup: o.traceCgroup, MountFlags: o.mountFlags,
		System: o.system, Exclude: o.exclude, Seal: o.seal,
		From: o.from}
}
