package workspace

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
)

// Kind is the sort of an error, for errors.Is: what went wrong in the
// workspace's terms. Each kind has the errno the control protocol sends
// for it, unless the error carries one of its own (Error.Errno).
type Kind struct {
	name  string
	errno syscall.Errno
}

func (k *Kind) Error() string { return k.name }

// Errno is the errno the control protocol answers for k.
func (k *Kind) Errno() syscall.Errno { return k.errno }

// The kinds of errors.
var (
	// ErrNotFound: no such snapshot, tag, branch or process binding.
	ErrNotFound = &Kind{"not found", syscall.ENOENT}
	// ErrInvalid: a bad name, an ambiguous id prefix, a bad argument.
	ErrInvalid = &Kind{"invalid", syscall.EINVAL}
	// ErrExists: the name is taken.
	ErrExists = &Kind{"exists", syscall.EEXIST}
	// ErrBusy: in use (the branch the mount shows, a tagged snapshot,
	// a branch seen through a branch mount).
	ErrBusy = &Kind{"in use", syscall.EBUSY}
	// ErrReadOnly: the store cannot be written.
	ErrReadOnly = &Kind{"read-only", syscall.EROFS}
	// ErrClosed: the store is closed, or closing.
	ErrClosed = &Kind{"closed", syscall.ESHUTDOWN}
	// ErrNotMounted: the operation needs a mount and there is none
	// (the store of an ended session).
	ErrNotMounted = &Kind{"not mounted", syscall.ENOTCONN}
	// ErrNoProcess: no such process.
	ErrNoProcess = &Kind{"no such process", syscall.ESRCH}
	// ErrPermission: the caller may not do this.
	ErrPermission = &Kind{"permission denied", syscall.EPERM}
	// ErrIO: anything else that failed: the project's or the host's
	// file systems, the store's disk. Error.Errno says what the system
	// call said, when one failed.
	ErrIO = &Kind{"input/output error", syscall.EIO}
)

var kinds = []*Kind{ErrNotFound, ErrInvalid, ErrExists, ErrBusy, ErrReadOnly, ErrClosed, ErrNotMounted, ErrNoProcess, ErrPermission, ErrIO}

// kindOfErrno is the kind of an errno a daemon answered (ErrIO for an
// errno no kind has).
func kindOfErrno(errno syscall.Errno) *Kind {
	for _, k := range kinds {
		if k.errno == errno {
			return k
		}
	}
	return ErrIO
}

// Error is an error of an operation: its kind, the message the user
// sees, the errno the control protocol sends (the kind's, or what a
// failed system call said), and the error it came from, if any.
type Error struct {
	Kind  *Kind
	Errno syscall.Errno
	Msg   string
	Err   error // the cause; may be nil
}

func (e *Error) Error() string { return e.Msg }

// Unwrap gives the errno first (so that errors.As finds the one the
// protocol sends), then the kind, then the cause.
func (e *Error) Unwrap() []error {
	out := []error{e.errno(), e.Kind}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

func (e *Error) errno() syscall.Errno {
	if e.Errno != 0 {
		return e.Errno
	}
	return e.Kind.errno
}

// errorf makes an *Error of kind k.
func errorf(k *Kind, format string, a ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, a...)}
}

// ioErrorf makes an ErrIO error of err with the message format; the
// errno sent is err's when it carries one (EACCES, ENOSPC, ...), for
// the failures of the host's file systems that the caller can act on
// (an export target, the project written by apply).
func ioErrorf(err error, format string, a ...any) error {
	e := &Error{Kind: ErrIO, Msg: fmt.Sprintf(format, a...), Err: err}
	var en syscall.Errno
	if errors.As(err, &en) && en != 0 {
		e.Errno = en
	}
	return e
}

// eioErrorf makes an ErrIO error of err that the protocol sends as EIO,
// whatever err carries.
func eioErrorf(err error, format string, a ...any) error {
	return &Error{Kind: ErrIO, Msg: fmt.Sprintf(format, a...), Err: err}
}

// storeError turns an error of the branch store into one for the user:
// what failed (what, e.g. "deleting snapshot 1a2b3c4d") and the kind of
// the error, with the fix where the kind has one. An error that is
// none of the store's is ErrIO, with its errno (see ioErrorf).
func storeError(err error, what string) error {
	var k *Kind
	switch {
	case errors.Is(err, branch.ErrReadOnly):
		return &Error{Kind: ErrReadOnly, Err: err,
			Msg: fmt.Sprintf("%s: the store is read-only: nothing was changed; mount it writable to change it", what)}
	case errors.Is(err, branch.ErrNotFound):
		k = ErrNotFound
	case errors.Is(err, branch.ErrInvalidName), errors.Is(err, branch.ErrAmbiguous):
		k = ErrInvalid
	case errors.Is(err, branch.ErrExists):
		k = ErrExists
	case errors.Is(err, branch.ErrInUse):
		k = ErrBusy
	case errors.Is(err, branch.ErrClosed):
		k = ErrClosed
	default:
		return ioErrorf(err, "%s: %v", what, err)
	}
	return &Error{Kind: k, Msg: fmt.Sprintf("%s: %v", what, err), Err: err}
}

// fromCtl turns an error a client got from a daemon into an *Error of
// the kind its errno says (the wire carries the errno and the message,
// not the kind: an ENOENT of the host's, say from an export target,
// reads as ErrNotFound here); other errors (the control file could not
// be reached) pass as they are.
func fromCtl(err error) error {
	var ce *ctl.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	return &Error{Kind: kindOfErrno(ce.Errno), Errno: ce.Errno, Msg: ce.Error(), Err: ce}
}
