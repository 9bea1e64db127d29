package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/procfs"
)

// Mount options: agentfs mount -o, and the mount helper
// mount.fuse.agentfs through which mount(8) and /etc/fstab mount
// agentfs. The rules of the option list are daemon.ParseMountOptions';
// here each option of agentfs's own is the mount flag of its name.

// mountHelperName is the name mount(8) runs the helper by
// (cli.MountHelperName).
const mountHelperName = cli.MountHelperName

// Exit codes of a mount helper, as mount(8) lists them.
const (
	mountExitUsage   = 1
	mountExitFailure = 32
)

// applyOptions sets the flags that the -o lists name, and keeps the
// kernel's mount flags; the lists are then done with (a second call
// does nothing). An option of agentfs that is not a mount flag
// is an error, unless sloppy is set (mount -s): then it is reported to
// sloppy and left out.
func (o *mountOptions) applyOptions(sloppy func(msg string)) error {
	if len(o.options) == 0 {
		return nil
	}
	mo, err := daemon.ParseMountOptions(o.options...)
	if err != nil {
		return cli.UsageError{Msg: err.Error()}
	}
	o.options = nil
	o.mountFlags = append(o.mountFlags, mo.Kernel...)
	for _, opt := range mo.Own {
		err := o.setOption(opt)
		var unknown unknownOptionError
		if sloppy != nil && errors.As(err, &unknown) {
			sloppy(err.Error() + " (ignored: sloppy mount)")
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// unknownOptionError is an option that no mount flag has.
type unknownOptionError struct{ cli.UsageError }

// setOption sets the mount flag that opt names.
func (o *mountOptions) setOption(opt daemon.MountOption) error {
	f := o.flags.Lookup(opt.Name)
	if f == nil || f.Hidden || opt.Name == "options" || opt.Name == "help" {
		return unknownOptionError{cli.UsageError{Msg: fmt.Sprintf("unknown mount option %q: agentfs takes %s, and nosuid, nodev, noexec (see agentfs help mount)",
			opt.Name, strings.Join(optionSpellings(o.flags), ", "))}}
	}
	if f.Changed {
		return cli.Usagef("%s is given twice: as --%s and as the mount option %s; give it once", opt.Name, opt.Name, opt)
	}
	value := opt.Value
	if !opt.HasValue {
		if f.Value.Type() != "bool" {
			name, _ := pflag.UnquoteUsage(f)
			return cli.Usagef("mount option %s needs a value: write %s=%s", opt.Name, opt.Name, name)
		}
		value = "true"
	}
	if err := o.flags.Set(opt.Name, value); err != nil {
		return cli.Usagef("mount option %s: %v", opt, err)
	}
	return nil
}

// optionSpellings lists the -o spelling of every mount flag:
// store=DIR, auto-snapshot, ...
func optionSpellings(flags *pflag.FlagSet) []string {
	var out []string
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "options" || f.Name == "help" {
			return
		}
		if f.Value.Type() == "bool" {
			out = append(out, f.Name)
			return
		}
		name, _ := pflag.UnquoteUsage(f)
		out = append(out, f.Name+"="+name)
	})
	sort.Strings(out)
	return out
}

const mountHelperHelp = `Usage: mount.fuse.agentfs LOWER MOUNTPOINT [-o OPTIONS] [-sfnv] [-t fuse.agentfs]

mount.fuse.agentfs is agentfs's mount helper: mount(8) runs it for a
filesystem of type fuse.agentfs, so that agentfs mounts as any FUSE
filesystem does:

  mount -t fuse.agentfs ~/proj /mnt/ws -o store=$HOME/.ws,backstore=hostfs

and from /etc/fstab (mount -a, mount /mnt/ws, and as the user with
"user"):

  /home/me/proj  /mnt/ws  fuse.agentfs  store=/home/me/.ws,noauto,user  0 0

LOWER is the project (lower=DIR in the options says it instead, and
LOWER is then only a name). It is agentfs mount --lower LOWER MOUNTPOINT
with the options as flags: every flag of agentfs mount is an option,
NAME=VALUE or NAME for the flags that take no value (auto-snapshot,
no-passthrough, debug). nosuid, nodev and noexec go to the kernel;
mount's own options (rw, defaults, noauto, user, nofail, _netdev,
x-systemd.*) are ignored; any other option is refused, unless -s
(sloppy) is given, and ro is refused. A MOUNTPOINT that is already an
agentfs mount of LOWER is left as it is (mount -a may run again).
umount MOUNTPOINT ends the daemon cleanly (agentfs unmount works too).

Options:
  -o OPTIONS   the mount options (comma-separated; may be repeated)
  -s           sloppy: ignore options agentfs does not know
  -f           fake: check the options, mount nothing
  -n           do not write /etc/mtab (agentfs never does)
  -v           say what is done
  -t TYPE      fuse.agentfs (as mount passes it)

Exit codes:
  0   mounted (or already mounted)
  1   usage error (an unknown or malformed option, wrong arguments)
  32  the mount failed (the message says why and how to fix it)
`

// mountHelperOptions are the flags mount(8) passes a helper.
type mountHelperOptions struct {
	options                     []string
	sloppy, fake, noMtab, verbo bool
	fsType, namespace           string
	help                        bool
}

func (o *mountHelperOptions) AddFlags(flags *pflag.FlagSet) {
	flags.StringArrayVarP(&o.options, "options", "o", nil, "")
	flags.BoolVarP(&o.sloppy, "sloppy", "s", false, "")
	flags.BoolVarP(&o.fake, "fake", "f", false, "")
	flags.BoolVarP(&o.noMtab, "no-mtab", "n", false, "")
	flags.BoolVarP(&o.verbo, "verbose", "v", false, "")
	flags.StringVarP(&o.fsType, "types", "t", "", "")
	flags.StringVarP(&o.namespace, "namespace", "N", "", "")
	flags.BoolVarP(&o.help, "help", "h", false, "")
}

// runMountHelper is agentfs run as mount.fuse.agentfs.
func runMountHelper(args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "%s: %s\n", mountHelperName, fmt.Sprintf(format, a...))
		return code
	}
	var h mountHelperOptions
	hf := pflag.NewFlagSet(mountHelperName, pflag.ContinueOnError)
	hf.SetOutput(io.Discard)
	h.AddFlags(hf)
	if err := hf.Parse(args); err != nil {
		return fail(mountExitUsage, "%v: run %s --help", err, mountHelperName)
	}
	if h.help {
		fmt.Fprint(stdout, mountHelperHelp)
		return cli.ExitOK
	}
	if hf.NArg() != 2 {
		return fail(mountExitUsage, "takes LOWER and MOUNTPOINT, got %d arguments: run %s --help", hf.NArg(), mountHelperName)
	}
	switch h.fsType {
	case "", "fuse.agentfs", "agentfs":
	default:
		return fail(mountExitUsage, "type %q: this is the helper of fuse.agentfs", h.fsType)
	}
	if h.namespace != "" {
		return fail(mountExitUsage, "-N (mounting in another namespace) is not supported: run mount inside the namespace")
	}
	source, mountpoint := hf.Arg(0), hf.Arg(1)

	flags := pflag.NewFlagSet("mount", pflag.ContinueOnError)
	o := &mountOptions{flags: flags}
	o.AddFlags(flags)
	o.options = h.options
	var sloppy func(string)
	if h.sloppy {
		sloppy = func(msg string) { fmt.Fprintf(stderr, "%s: %s\n", mountHelperName, msg) }
	}
	if err := o.applyOptions(sloppy); err != nil {
		return fail(mountExitUsage, "%v", err)
	}
	if o.lower == "" {
		o.lower = source
	}
	if h.verbo {
		fmt.Fprintf(stderr, "%s: agentfs mount --lower %s %s%s\n", mountHelperName, o.lower, strings.Join(changedFlags(flags), ""), mountpoint)
	}
	if h.fake {
		return cli.ExitOK
	}
	if already, err := mountedAlready(o.lower, mountpoint); err != nil {
		return fail(mountExitFailure, "%v", err)
	} else if already {
		if h.verbo {
			fmt.Fprintf(stderr, "%s: %s is already an agentfs mount of %s\n", mountHelperName, mountpoint, o.lower)
		}
		return cli.ExitOK
	}
	err := runMount(context.Background(), o, []string{mountpoint})
	var ue cli.UsageError
	var due *daemon.UsageError
	switch {
	case err == nil:
		return cli.ExitOK
	case errors.As(err, &ue), errors.As(err, &due):
		return fail(mountExitUsage, "%v", err)
	}
	return fail(mountExitFailure, "%v", err)
}

// changedFlags are the flags set, as --NAME=VALUE words each followed by
// a space (for -v).
func changedFlags(flags *pflag.FlagSet) []string {
	var out []string
	flags.Visit(func(f *pflag.Flag) {
		if f.Name != "lower" {
			out = append(out, fmt.Sprintf("--%s=%s ", f.Name, f.Value))
		}
	})
	return out
}

// mountedAlready reports whether mountpoint is an agentfs mount of
// lower (mount -a again, or a second mount of an fstab line).
func mountedAlready(lower, mountpoint string) (bool, error) {
	lowerReal, err := filepath.EvalSymlinks(lower)
	if err != nil {
		return false, nil // Validate says what is wrong with it
	}
	mp, err := filepath.Abs(mountpoint)
	if err != nil {
		return false, nil
	}
	if r, err := filepath.EvalSymlinks(mp); err == nil {
		mp = r
	}
	e, mounted, err := procfs.MountAt(procfs.MountinfoPath, mp)
	if err != nil || !mounted {
		return false, err
	}
	return e.FsType == "fuse.agentfs" && e.Source == lowerReal, nil
}

// isMountHelper reports whether agentfs was started as the mount
// helper (argv[0] is mount.fuse.agentfs).
func isMountHelper() bool { return filepath.Base(os.Args[0]) == mountHelperName }
