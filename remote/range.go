package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/minio/minio-go/v7"
)

// # Reading an object from an offset
//
// A lazy mount (workspace/from.go) streams an object into its pending
// file as a reader reads it, and resumes a fill that stopped from where
// it stopped: ReadObjectFrom sends the bytes from an offset, with a
// ranged GET, and goes on from where a broken response stopped with
// another ranged GET (retried with backoff as the transfers are, the
// count of attempts starting again whenever bytes arrived; a response
// that brings nothing for idleTimeout is given up and asked again). It does not
// hash: its caller hashes what it writes, and asks CheckObject once it
// has every byte.

// errLocal wraps an error of the writer a read is copied to: the local
// side (a full disk, a fill that refuses more bytes), never retried.
type errLocal struct{ err error }

func (e errLocal) Error() string { return e.err.Error() }
func (e errLocal) Unwrap() error { return e.err }

// idleTimeout is how long a response may bring no byte before it is
// given up and asked for again from where it stopped: a server or a
// link that stalls must not hang a reader of a lazy mount for ever.
var idleTimeout = time.Minute

// errIdle is the error of a response given up for bringing nothing.
var errIdle = errors.New("the server sent nothing for a while")

// readBuffer is the size of the reads ReadObjectFrom copies with: each
// write to w is at most this.
const readBuffer = 256 << 10

// ReadObjectFrom copies the bytes of the object sum from offset off to
// its end to w, each once and in order, unchecked (see above).
func (r *Remote) ReadObjectFrom(ctx context.Context, sum Sum, off int64, w io.Writer) error {
	key := r.loc.ObjectKey(sum)
	buf := make([]byte, readBuffer)
	wait := retryWait
	failed := 0
	for {
		start := off
		err := r.readRange(ctx, key, &off, w, buf)
		if err == nil {
			return nil
		}
		var local errLocal
		if errors.As(err, &local) {
			return local.err
		}
		if permanent(err) || ctx.Err() != nil {
			return err
		}
		if off > start {
			failed, wait = 0, retryWait // bytes came: the link works
		}
		if failed++; failed == attempts {
			return fmt.Errorf("%w (tried %d times)", err, attempts)
		}
		select {
		case <-time.After(wait/2 + rand.N(wait)):
		case <-ctx.Done():
			return err
		}
		wait *= 2
	}
}

// readRange GETs key from *off on and copies it to w, moving *off past
// every byte written.
func (r *Remote) readRange(ctx context.Context, key string, off *int64, w io.Writer, buf []byte) error {
	opts := minio.GetObjectOptions{}
	if *off > 0 {
		if err := opts.SetRange(*off, 0); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(idleTimeout, func() { cancel(errIdle) })
	defer idle.Stop()
	explain := func(err error) error {
		if ctx.Err() == nil && errors.Is(context.Cause(rctx), errIdle) {
			return fmt.Errorf("%s: %w (%v): asking again", key, errIdle, idleTimeout)
		}
		return r.explain(err, key)
	}
	obj, err := r.client.GetObject(rctx, r.loc.Bucket, key, opts)
	if err != nil {
		return explain(err)
	}
	defer func() { _ = obj.Close() }()
	for {
		n, rerr := obj.Read(buf)
		if n > 0 {
			idle.Reset(idleTimeout)
			if _, werr := w.Write(buf[:n]); werr != nil {
				return errLocal{werr}
			}
			*off += int64(n)
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return explain(rerr)
		}
	}
}

// CheckObject says whether got, the SHA-256 of the bytes read of the
// object sum, is sum: ErrCorrupt, naming the key, when it is not.
func (r *Remote) CheckObject(sum Sum, got []byte) error {
	var g Sum
	if len(got) != len(g) {
		return fmt.Errorf("%w: a hash of %d bytes for %s", ErrCorrupt, len(got), r.loc.ObjectKey(sum))
	}
	copy(g[:], got)
	if g != sum {
		return fmt.Errorf("%w: %s of %s holds bytes that hash to %s, not to its name: the remote's copy is damaged; push the snapshot again from a machine that has it",
			ErrCorrupt, r.loc.ObjectKey(sum), r.describe(), g)
	}
	return nil
}
