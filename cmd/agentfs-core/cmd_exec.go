package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/session"
)

func init() {
	cli.Register(&cli.Command{
		Name:  "exec",
		Usage: "-b BRANCH [-C DIR] -- COMMAND [ARGS...]",
		Help: `Exec runs COMMAND so that it, and everything it starts, sees the branch
BRANCH at the mount, while other processes keep seeing theirs. It binds
itself to the branch and then becomes COMMAND (same pid, terminal and
environment), so the exit code is COMMAND's. When the current directory
is inside the mount, COMMAND starts in the same directory of BRANCH.

As root, COMMAND runs in a mount namespace of its own, where a second
mount of BRANCH is bound over the mountpoint: no other process pays
anything for it. Otherwise (a normal user, or --no-namespace) it is
bound through the mount root, as agentfs branch bind binds a shell:
while it runs, every path walk through the mount root asks agentfs.

With -s SESSION (as root), COMMAND runs in the running session's view,
in the session's mount namespace, starting in the session's directory.
The session's record is not trusted: its directory and those above it
must be root's (not writable by others), and the daemon it names must
be agentfs, started when the record says, with a mount namespace of
root's own user namespace. A session of a normal user (in a user
namespace) cannot be entered: run the command inside it.

Examples:
  agentfs exec -b try2 -- make test
  agentfs exec -s a3f9 -b try2 -- make test
  agentfs exec -b try3 -C /mnt/ws -- sh -c 'cd /mnt/ws && ./run-agent'`,
		ExitCodes: `Exit codes:
  COMMAND's exit code once it runs
  1  agentfs could not start it (the message says why)
  2  usage error
`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &execOptions{}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runExec(ctx, o, args) }
		},
	})
}

// execOptions are the flags of agentfs exec.
type execOptions struct {
	mountFlag
	branch      string
	noNamespace bool
}

func (o *execOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.StringVarP(&o.branch, "branch", "b", "", "the `BRANCH` the command sees")
	flags.BoolVar(&o.noNamespace, "no-namespace", false, "bind through the mount root, as branch bind does, even as root")
}

func runExec(ctx context.Context, o *execOptions, args []string) error {
	if o.branch == "" {
		return cli.Usagef("exec needs a branch: agentfs exec -b BRANCH -- COMMAND")
	}
	if len(args) == 0 {
		return cli.Usagef("exec needs a command: agentfs exec -b %s -- COMMAND [ARGS...]", o.branch)
	}
	wd, _ := os.Getwd()
	var system *session.Record // a system session entered
	if o.Session != "" {
		// The command must see the session's mount at the project's
		// path: this thread (and the command it becomes) enters the
		// session's mount namespace, and the mount is found there.
		if o.Dir != "" {
			return cli.Usagef("-C DIR and -s SESSION both name what to talk to: give one")
		}
		r, err := session.Find(o.Session)
		if err != nil {
			return err
		}
		runtime.LockOSThread()
		// Enter trusts nothing of the record (see session.Enter) and
		// reads it again.
		if err := r.Enter(); err != nil {
			return err
		}
		wd, o.mountFlag = r.Dir, mountFlag{cli.MountFlag{Dir: r.Dir}}
		if r.KindOf() == session.KindSystem {
			// The view is at the session's mountpoint in the daemon's
			// namespace; the command gets it as its root below.
			o.mountFlag = mountFlag{cli.MountFlag{Dir: r.Mountpoint}}
			system = r
		}
	}
	inSystem := system == nil && session.InSystemSession()
	if inSystem && (o.noNamespace || os.Geteuid() != 0) {
		// A binding through the mount root would give the root's
		// names another view's nodes, and the kernel would drop /proc,
		// /dev, ... from the whole session.
		return errors.New("inside a system session, agentfs exec -b needs root and a branch mount of its own (no --no-namespace): run it as root, or from outside with agentfs exec -s SESSION -b BRANCH")
	}
	c, err := o.dial()
	if err != nil {
		return err
	}
	root := c.Root()
	info, err := c.Bind(ctl.BindArgs{Pid: os.Getpid(), Branch: o.branch, Namespace: !o.noNamespace && os.Geteuid() == 0})
	_ = c.Close() // the binding is made; the exec below replaces this process anyway
	if err != nil {
		return err
	}
	switch {
	case info.MountDir != "" && inSystem:
		// The branch mount becomes the root, as the session's view is
		// the session's command's (session/system.go).
		runtime.LockOSThread()
		if err := session.EnterBranchSystemRoot(info.MountDir); err != nil {
			return err
		}
	case info.MountDir != "":
		// From here on this thread (and the command it becomes) lives
		// in a mount namespace of its own.
		runtime.LockOSThread()
		if err := daemon.EnterBranchMount(info.MountDir, root); err != nil {
			return err
		}
	}
	if system != nil {
		// As the session's own command: the view is the root, the
		// kernel's filesystems live (session/system.go).
		runtime.LockOSThread()
		if err := system.EnterSystemRoot(); err != nil {
			return err
		}
	}
	if err := enterBranchDir(o.Dir, wd); err != nil {
		return err
	}
	// Looked up only now, where the command runs: in the namespace
	// entered, from its directory.
	path, err := exec.LookPath(args[0])
	if err != nil {
		return fmt.Errorf("cannot run %s: %w", args[0], err)
	}
	err = syscall.Exec(path, args, os.Environ())
	return fmt.Errorf("running %s: %w", args[0], err)
}

// enterBranchDir makes the working directory wd again, through its path,
// so that a directory inside the mount is the bound branch's, not the
// one the process started in. A directory the branch lacks is an error.
func enterBranchDir(mountDir, wd string) error {
	if wd == "" {
		return nil
	}
	root, err := ctl.FindMount(wd)
	if err != nil {
		return nil // not inside a mount: nothing changes
	}
	if err := os.Chdir(wd); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the directory %s does not exist in the branch: start from the mount root (-C %s) or create it there first", wd, root)
		}
		return fmt.Errorf("entering %s in the branch: %w", wd, err)
	}
	return nil
}
