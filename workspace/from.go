package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agentfs/agentfs/remote"
)

// # Starting from a remote snapshot
//
// `agentfs mount --from REMOTE/SNAPSHOT` starts a private store from a
// snapshot pushed to a remote (StartFrom): main gets the snapshot's
// changes over this machine's project, written through the overlay as
// pull writes them, but each regular file is made with its size and
// attributes and no data, its object pending in the backstore
// (backstore/pending.go) on the file's SHA-256. Listings and attributes
// need nothing fetched; the first open of a file fetches its object,
// checked against the SHA-256, before any descriptor is handed out, and
// the backstore keeps it. A fetch that fails fails that open (EIO), and
// the next open tries again.

// OpenRemoteSnapshot opens the remote and reads the snapshot document
// that from (REMOTE/SNAPSHOT) names.
func OpenRemoteSnapshot(ctx context.Context, from string) (*remote.Remote, *remote.SnapshotDoc, error) {
	name, id, ok := strings.Cut(from, "/")
	if !ok || name == "" || id == "" {
		return nil, nil, fmt.Errorf("--from %q: want REMOTE/SNAPSHOT (agentfs remote ls REMOTE lists the snapshots)", from)
	}
	cfg, err := remote.Find(name)
	if err != nil {
		return nil, nil, err
	}
	r, err := remote.Open(cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := r.Check(ctx); err != nil {
		return nil, nil, err
	}
	doc := &remote.SnapshotDoc{}
	if err := r.GetDoc(ctx, remote.KindSnapshot, id, doc); err != nil {
		if errors.Is(err, remote.ErrNotFound) {
			return nil, nil, fmt.Errorf("the remote %s has no snapshot %q: agentfs remote ls %s lists them", name, id, name)
		}
		return nil, nil, err
	}
	if doc.Format != remote.Format {
		return nil, nil, fmt.Errorf("snapshot %s in the remote has format %d, which this agentfs (format %d) does not read: use a newer agentfs", id, doc.Format, remote.Format)
	}
	return r, doc, nil
}

// StartFrom gives w's main branch the state of doc, a snapshot of r,
// with its files' data pending (see above). w must be new: main
// unchanged, nothing mounted yet.
func (w *Workspace) StartFrom(r *remote.Remote, doc *remote.SnapshotDoc) error {
	w.objs.SetFetcher(func(ctx context.Context, key string, out io.Writer) error {
		sum, err := remote.ParseSum(key)
		if err != nil {
			return err
		}
		return r.ReadObject(ctx, sum, out, nil)
	})
	_, err := locked(w, func() (struct{}, error) {
		im := &importer{lazy: true, asRoot: os.Geteuid() == 0}
		if err := im.write(w.view, doc); err != nil {
			return struct{}{}, fmt.Errorf("starting from snapshot %s: %w", doc.ID, err)
		}
		if err := w.objs.MarkPending(im.pending); err != nil {
			return struct{}{}, err
		}
		if _, err := im.markConflicts(w.view, doc); err != nil {
			return struct{}{}, err
		}
		w.log.Info("started from a remote snapshot", "snapshot", doc.ID, "changes", len(doc.Changes), "pending", len(im.pending))
		return struct{}{}, nil
	})
	return err
}
