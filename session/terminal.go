package session

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/procgroup"
)

// terminal is the terminal of a supervised run as it was at the start:
// its foreground process group (the run's own) and its modes. A command
// that took the foreground (a job-control shell, some full-screen
// programs) or changed the modes (raw mode) and was stopped for a rewind
// leaves them so; the supervisor gives them back before it starts the
// command again, and at the end.
type terminal struct {
	fd      int
	pgrp    int // the foreground process group: this process's
	termios unix.Termios
}

// saveTerminal returns the state of the terminal f, or nil when f is
// not a terminal or this process is not in its foreground (then it is
// not the run's to give back).
func saveTerminal(f *os.File) *terminal {
	fd := int(f.Fd())
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil // not a terminal
	}
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || pgrp != unix.Getpgrp() {
		return nil
	}
	return &terminal{fd: fd, pgrp: pgrp, termios: *tio}
}

// agentHolds reports whether the command's processes (group) hold the
// terminal's foreground: the leader of the foreground process group is
// one of them. Asked before they are stopped.
func (t *terminal) agentHolds(g *procgroup.Group) bool {
	if t == nil {
		return false
	}
	cur, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	return err == nil && cur != t.pgrp && procgroup.Within(procgroup.Of(cur), g.Path())
}

// restore gives the terminal back: the foreground to the run's process
// group, when the command held it (agentHeld, see agentHolds) or the
// group that has it has no process left, and then the modes, but only
// when the foreground is the run's (given back just now, or never
// taken): the modes belong to whoever holds the foreground, and another
// group holding it (the shell, after agentfs run was suspended and
// resumed in the background) keeps its own. SIGTTOU, which the kernel
// sends a process outside the foreground that changes the terminal, is
// blocked in this thread meanwhile (blocked, not ignored: os/signal
// cannot undo an ignore, and an ignored signal is inherited by the
// commands started); with it blocked the kernel lets such a change
// through, hence the check.
func (t *terminal) restore(agentHeld bool) error {
	if t == nil {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ttou, old unix.Sigset_t
	ttou.Val[(unix.SIGTTOU-1)/64] |= 1 << ((unix.SIGTTOU - 1) % 64)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &ttou, &old); err != nil {
		return fmt.Errorf("blocking SIGTTOU: %w", err)
	}
	defer func() { _ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil) }() // the mask it had
	var errs []error
	cur, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	if err == nil && cur != t.pgrp && (agentHeld || errors.Is(unix.Kill(-cur, 0), unix.ESRCH)) {
		if err := unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, t.pgrp); err != nil {
			errs = append(errs, fmt.Errorf("making process group %d the terminal's foreground again: %w", t.pgrp, err))
		}
		cur, err = unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	}
	// A foreground that cannot be read (the terminal hung up) is not
	// known to be the run's.
	if err == nil && cur == t.pgrp {
		if err := unix.IoctlSetTermios(t.fd, unix.TCSETS, &t.termios); err != nil {
			errs = append(errs, fmt.Errorf("setting the terminal's modes back: %w", err))
		}
	}
	return errors.Join(errs...)
}
