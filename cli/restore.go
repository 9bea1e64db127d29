package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
)

// restoreOptions are the flags of agentfs restore.
type restoreOptions struct {
	MountFlag
	dryRun bool
	stdout io.Writer
}

func (o *restoreOptions) AddFlags(flags *pflag.FlagSet) {
	o.MountFlag.AddFlags(flags)
	flags.BoolVarP(&o.dryRun, "dry-run", "n", false, "list the changes the restore would make, and make none")
}

func init() {
	Register(&Command{
		Name:  "restore",
		Usage: "[-C DIR] [--dry-run] ID",
		Help: `Restore makes the branch the mount shows exactly as it was in the
snapshot ID, for every process at once. It first takes a safety
snapshot of the current state and prints how to go back to it:
"to undo: agentfs restore SAFETY-ID". With --dry-run it lists the
changes the restore would make (as agentfs diff would show them from
the current state to the snapshot) and changes nothing.

A program that holds open a file the restore changes keeps that file,
as if it had been deleted and replaced: it reads what it read before,
and what it writes reaches neither the restored state nor any
snapshot. Files the restore leaves as they are stay open as they are.

A restore, once asked, is carried out whatever happens to this command:
SIGTERM that comes during it takes effect once the outcome is printed
(exit code 143). Under agentfs run --supervise, a restore asked from one
of the session's command's processes is answered at once and carried
out right after, when its supervisor has stopped them all, this command
included (see "Agents in control" in the guide).

Examples:
  agentfs restore --dry-run 1a2b
  agentfs restore 1a2b3c4d
  agentfs restore good        # a tag`,
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &restoreOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runRestore(ctx, o, args) }
		},
	})
}

func runRestore(ctx context.Context, o *restoreOptions, args []string) error {
	if len(args) != 1 {
		return Usagef("restore takes one snapshot ID, got %d arguments", len(args))
	}
	// The outcome is printed before SIGTERM ends this command: a
	// self-rewind's answer comes just before the supervisor's SIGTERM,
	// and a restore goes on without its caller anyway.
	term := holdSignal(syscall.SIGTERM)
	err := restore(o, args[0])
	if !term.release() {
		return err
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	return ExitCodeError{Code: 128 + int(syscall.SIGTERM), Msg: msg}
}

// restore restores snapshot ref as o says, and prints the outcome.
func restore(o *restoreOptions, ref string) error {
	rep, err := call[ctl.RestoreReply](&o.MountFlag, ctl.OpRestore, ctl.RestoreArgs{Ref: ref, DryRun: o.dryRun})
	if err != nil {
		return err
	}
	s := rep.Snapshot
	label := ""
	if s.Label != "" {
		label = fmt.Sprintf(" (%s)", Printable(s.Label))
	}
	if o.dryRun {
		if len(rep.Changes) == 0 {
			fmt.Fprintf(o.stdout, "restoring snapshot %s%s into branch %s would change nothing\n", s.ID, label, Printable(rep.Branch))
			return nil
		}
		fmt.Fprintf(o.stdout, "restoring snapshot %s%s into branch %s would make these changes (none made):\n", s.ID, label, Printable(rep.Branch))
		return PrintChanges(o.stdout, rep.Changes)
	}
	if rep.Deferred {
		next := "and starts the command again"
		if !rep.Relaunch {
			next = "and does not start the command again (--max-restarts is used up): the run ends"
		}
		fmt.Fprintf(o.stdout, "restoring snapshot %s%s into branch %s next: this command is one of the session's command's processes, which its supervisor stops in a moment (this one too), then it restores %s. If another rewind stops the command first, or the run ends first, this one is dropped: agentfs log says what became of it\n", s.ID, label, Printable(rep.Branch), next)
		return nil
	}
	fmt.Fprintf(o.stdout, "restored snapshot %s%s into branch %s\n", s.ID, label, Printable(rep.Branch))
	if rep.Safety != nil {
		fmt.Fprintf(o.stdout, "to undo: agentfs restore %s\n", rep.Safety.ID)
	}
	switch {
	case rep.Stopped && rep.Relaunch:
		fmt.Fprintf(o.stdout, "the session's command was stopped before the restore; its supervisor starts it again\n")
	case rep.Stopped:
		fmt.Fprintf(o.stdout, "the session's command was stopped before the restore; its supervisor does not start it again (--max-restarts is used up, or it had ended by itself): the run ends\n")
	}
	return nil
}

// heldSignal is a signal held: while it is, the signal does not end the
// process.
type heldSignal struct{ ch chan os.Signal }

// holdSignal holds sig until release.
func holdSignal(sig os.Signal) *heldSignal {
	h := &heldSignal{ch: make(chan os.Signal, 1)}
	signal.Notify(h.ch, sig)
	return h
}

// release stops holding the signal, and reports whether it came
// meanwhile.
func (h *heldSignal) release() bool {
	signal.Stop(h.ch)
	select {
	case <-h.ch:
		return true
	default:
		return false
	}
}
