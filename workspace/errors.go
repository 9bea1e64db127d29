package workspace

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
)

// Kind is the sort of an error: a sentinel for errors.Is. Each carries
// the errno the control protocol answers for it (Unwrap gives it, so
// that errors.As(err, &syscall.Errno) finds it too).
type Kind struct {
	name  string
	errno syscall.Errno
}

func (k *Kind) Error() string { return k.name }

// Unwrap gives the errno of the kind.
func (k *Kind) Unwrap() error { return k.errno }

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
	// ErrClosed: the store is closing.
	ErrClosed = &Kind{"closed", syscall.ESHUTDOWN}
	// ErrNotMounted: the operation needs a mount and there is none
	// (the store of an ended session).
	ErrNotMounted = &Kind{"not mounted", syscall.ENOTCONN}
	// ErrNoProcess: no such process.
	ErrNoProcess = &Kind{"no such process", syscall.ESRCH}
	// ErrPermission: the caller may not do this.
	ErrPermission = &Kind{"permission denied", syscall.EPERM}
	// ErrIO: anything else that failed.
	ErrIO = &Kind{"input/output error", syscall.EIO}
)

var kinds = []*Kind{ErrNotFound, ErrInvalid, ErrExists, ErrBusy, ErrReadOnly, ErrClosed, ErrNotMounted, ErrNoProcess, ErrPermission, ErrIO}

// kindOfErrno is the kind of an errno a daemon answered; an errno no
// kind has keeps ErrIO's place but its own number (see Error.Unwrap).
func kindOfErrno(errno syscall.Errno) *Kind {
	for _, k := range kinds {
		if k.errno == errno {
			return k
		}
	}
	return ErrIO
}

// Error is an error of an operation: its kind, the message the user
// sees, and the error it came from, if any.
type Error struct {
	Kind *Kind
	Msg  string
	Err  error // the cause; may be nil
}

func (e *Error) Error() string { return e.Msg }

// Unwrap gives the kind first (its errno is the one the protocol
// sends), then the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// errorf makes an *Error of kind k.
func errorf(k *Kind, format string, a ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, a...)}
}

// ioErrorf makes an error of err, of the kind its errno says (EIO when
// it carries none), with the message format.
func ioErrorf(err error, format string, a ...any) error {
	k := ErrIO
	var en syscall.Errno
	if errors.As(err, &en) && en != 0 {
		k = kindOfErrno(en)
		if k == ErrIO && en != syscall.EIO {
			// Keep the errno (EACCES, ENOSPC, ...): it is the
			// cause's, and the protocol finds it there.
			return &Error{Kind: &Kind{name: en.Error(), errno: en}, Msg: fmt.Sprintf(format, a...), Err: err}
		}
	}
	return &Error{Kind: k, Msg: fmt.Sprintf(format, a...), Err: err}
}

// storeError turns an error of the branch store into one for the user:
// what failed (what, e.g. "deleting snapshot 1a2b3c4d") and the kind of
// the error, with the fix where the kind has one.
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
// the kind its errno says; other errors (the control file could not be
// reached) pass as they are.
func fromCtl(err error) error {
	var ce *ctl.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	k := kindOfErrno(ce.Errno)
	if k == ErrIO && ce.Errno != syscall.EIO && ce.Errno != 0 {
		k = &Kind{name: ce.Errno.Error(), errno: ce.Errno}
	}
	return &Error{Kind: k, Msg: ce.Error(), Err: ce}
}
