package remote

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
)

// Object is a local object that a push may send: Name names it in
// messages (a backstore id, a path), and Open opens its bytes.
type Object struct {
	Name string
	Open func() (*os.File, error)
}

// A Hasher returns the SHA-256 of an object's bytes. ReadHash computes
// it by reading them; a store that keeps the hashes of its objects
// hands its own, which must be the hash of the bytes Open reads (a
// push that reads other bytes refuses the object).
type Hasher func(ctx context.Context, o Object) (Sum, error)

// ReadHash is the Hasher that reads the object.
func ReadHash(ctx context.Context, o Object) (Sum, error) {
	f, err := o.Open()
	if err != nil {
		return Sum{}, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, &ctxReader{ctx: ctx, r: f}); err != nil {
		return Sum{}, fmt.Errorf("hashing %s: %w", o.Name, err)
	}
	var s Sum
	h.Sum(s[:0])
	return s, nil
}

// ctxReader is a reader that stops when its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
