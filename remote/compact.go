package remote

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"

	minio "github.com/minio/minio-go/v7"
)

// # Compact snapshot documents
//
// A snapshot's document is written twice: in Go's gob encoding
// (encoding/gob, of the type SnapshotDoc) at
// PREFIX/compact/snapshots/ID.gob, then as the JSON document
// (snapshots/ID.json), which stays the reference: listings read it, and
// so does every agentfs that does not know the compact one. The compact
// one is what a mount --from and a pull read (GetSnapshotDoc): the
// changes of ten thousand files decode from gob in a tenth of the time
// they take from JSON, and a mount waits for them. Written just before the JSON, it holds the same
// document, unless a push was cut between the two, when it holds the
// newer one (its objects are all in the remote: documents come last).
//
// gob is self-describing: a field a later SnapshotDoc adds is skipped by
// an older reader, and one it drops is left zero, as with the JSON;
// Format says the same as in the JSON document.

// compactDir holds the compact documents below the prefix.
const compactDir = "compact"

// CompactDocKey returns the key of the compact form of the snapshot
// document named name: PREFIX/compact/snapshots/NAME.gob.
func (l Location) CompactDocKey(name string) string {
	return l.key(compactDir + "/" + string(KindSnapshot) + "/" + name + ".gob")
}

// putCompactDoc writes the compact form of snapshot document d.
func (r *Remote) putCompactDoc(ctx context.Context, name string, d *SnapshotDoc) error {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(d); err != nil {
		return fmt.Errorf("encoding snapshot document %s: %w", name, err)
	}
	key := r.loc.CompactDocKey(name)
	_, err := r.client.PutObject(ctx, r.loc.Bucket, key, bytes.NewReader(b.Bytes()), int64(b.Len()), minio.PutObjectOptions{
		ContentType:      "application/octet-stream",
		DisableMultipart: true,
	})
	return r.explain(err, key)
}

// GetSnapshotDoc reads the snapshot document named name: its compact
// form when the remote has one that decodes, else the JSON document
// (pushed by an agentfs older than the compact form); ErrNotFound if it
// has neither.
func (r *Remote) GetSnapshotDoc(ctx context.Context, name string) (*SnapshotDoc, error) {
	if err := checkDocName(name); err != nil {
		return nil, err
	}
	d := &SnapshotDoc{}
	obj, err := r.client.GetObject(ctx, r.loc.Bucket, r.loc.CompactDocKey(name), minio.GetObjectOptions{})
	if err == nil {
		// Decoded as it arrives.
		err = gob.NewDecoder(io.LimitReader(obj, docLimit)).Decode(d)
		_ = obj.Close()
	}
	switch {
	case err == nil:
		return d, nil
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return nil, err
	}
	// None, or one that does not decode: the JSON says what is wrong, if
	// anything.
	d = &SnapshotDoc{}
	if err := r.GetDoc(ctx, KindSnapshot, name, d); err != nil {
		return nil, err
	}
	return d, nil
}
