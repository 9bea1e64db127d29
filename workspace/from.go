package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/contenthash"
	"github.com/agentfs/agentfs/remote"
)

// # Starting from a remote snapshot
//
// `agentfs mount --from REMOTE/SNAPSHOT` starts a private store from a
// snapshot pushed to a remote (StartFrom): main gets the snapshot's
// changes over this machine's project, written through the overlay as
// pull writes them, but each regular file gets its size and attributes
// and no data, its object pending in the backstore
// (backstore/pending.go) on the file's SHA-256. A new file's object is
// deferred, too (backstore/deferred.go): given out, all in one journal
// write, before the entries name them, its inode made only when
// something needs it, so that the start makes no inode per file.
// Listings, attributes and xattr reads need nothing fetched or made;
// the first open of a file makes and fetches its object,
// checked against the SHA-256, before any descriptor is handed out, and
// the backstore keeps it. A fetch that fails fails that open (EIO), and
// the next open tries again.
//
// The start records no content hashes: a pending object's hash is its
// key, which the hash worker takes (pendingSum), so that a snapshot's
// root, or a push, fetches nothing.
//
// A read-only open streams the object: it returns at once, and each
// read waits only for the range it reads (backstore/fill.go,
// overlay.File); the object becomes the store's only once every byte is
// there and hashes to its name, so nothing half fetched is ever taken
// for a complete file, across a crash too: the next mount of a kept
// store goes on from the fetch's last checkpoint.
//
// A store started so records where from in STORE/from (written once
// main holds the snapshot): {"remote": NAME, "snapshot": ID}. Every
// Open of such a store can fetch its pending objects: the remote is
// opened (by its name in this user's remotes) at the first fetch, so a
// store whose files were all read mounts with the remote out of reach.
// A kept store (--store) is started at its first mount --from, and at
// the next mounts, with or without --from, goes on (CheckFromStore).

// OpenRemoteSnapshot opens the remote and reads the snapshot document
// that from (REMOTE/SNAPSHOT) names: its compact form where the remote
// has one (remote/compact.go). The check of the bucket and the read of
// the document are sent together: a mount waits for one round trip, not
// two; an error of the check (no bucket, credentials refused) is the one
// reported.
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
	checked := make(chan error, 1)
	go func() { checked <- r.Check(ctx) }()
	doc, err := r.GetSnapshotDoc(ctx, id)
	if cerr := <-checked; cerr != nil {
		return nil, nil, cerr
	}
	if err != nil {
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
	w.objs.SetSource(remoteSource(r))
	_, err := locked(w, func() (struct{}, error) {
		start := time.Now()
		im := newImporter(true)
		// One object per new file, given out ahead and made at its
		// first use (backstore/deferred.go): journaled before any
		// entry names it.
		var files []backstore.Deferred
		var paths []string
		for _, c := range doc.Changes {
			if d, ok := im.deferOf(c); ok {
				files, paths = append(files, d), append(paths, c.Path)
			}
		}
		// An agentfs that knows no deferred objects must not open
		// the store (its fsck --repair would delete their entries).
		if len(files) > 0 {
			if err := w.meta.RequireFeature(branch.FeatureDeferredObjects); err != nil {
				return struct{}{}, fmt.Errorf("starting from snapshot %s: %w", doc.ID, err)
			}
		}
		ids, err := w.objs.Defer(files)
		if err != nil {
			return struct{}{}, fmt.Errorf("starting from snapshot %s: %w", doc.ID, err)
		}
		im.deferred = make(map[string]string, len(ids))
		for i, id := range ids {
			im.deferred[paths[i]] = id
		}
		deferred := time.Since(start)
		if err := im.write(w.view, doc); err != nil {
			return struct{}{}, fmt.Errorf("starting from snapshot %s: %w", doc.ID, err)
		}
		// The files the project held (kept, not new) took none.
		unused := make([]string, 0, len(im.deferred))
		for _, id := range im.deferred {
			unused = append(unused, id)
		}
		if err := w.objs.Drop(unused); err != nil {
			return struct{}{}, err
		}
		wrote := time.Since(start)
		if err := w.objs.MarkPending(im.pending); err != nil {
			return struct{}{}, err
		}
		// A file's content hash is its object's name, and while it is
		// pending the hash worker takes it from there (pendingSum):
		// hashing a snapshot fetches nothing, and the start records no
		// hashes.
		marked := time.Since(start)
		if _, err := im.markConflicts(w.view, doc); err != nil {
			return struct{}{}, err
		}
		w.log.Info("starting from a remote snapshot: timings", "defer_seconds", deferred.Seconds(), "write_seconds", (wrote - deferred).Seconds(), "pending_seconds", (marked - wrote).Seconds(),
			"conflicts_seconds", (time.Since(start) - marked).Seconds())
		if err := w.writeFrom(fromRecord{Remote: r.Name(), Snapshot: doc.ID}); err != nil {
			return struct{}{}, err
		}
		w.log.Info("started from a remote snapshot", "snapshot", doc.ID, "changes", len(doc.Changes), "pending", len(im.pending), "deferred", len(ids)-len(unused),
			"seconds", time.Since(start).Seconds())
		return struct{}{}, nil
	})
	return err
}

// pendingSum is the SHA-256 of pending object id's bytes: its key, the
// name of an object of the remote the store started from (see
// remoteSource).
func (w *Workspace) pendingSum(id string) (contenthash.Digest, bool) {
	key, ok := w.objs.PendingKey(id)
	if !ok {
		return contenthash.Digest{}, false
	}
	sum, err := remote.ParseSum(key)
	if err != nil {
		return contenthash.Digest{}, false
	}
	return contenthash.Digest(sum), true
}

// remoteSource is the backstore's source of pending objects' bytes:
// the objects of r, a key being an object's SHA-256.
func remoteSource(r *remote.Remote) backstore.Source {
	return backstore.Source{
		Fetch: func(ctx context.Context, key string, off int64, out io.Writer) error {
			sum, err := remote.ParseSum(key)
			if err != nil {
				return err
			}
			return r.ReadObjectFrom(ctx, sum, off, out)
		},
		Check: func(key string, got []byte) error {
			sum, err := remote.ParseSum(key)
			if err != nil {
				return err
			}
			return r.CheckObject(sum, got)
		},
	}
}

// fromName is the record of the remote snapshot a store started from,
// in the store directory.
const fromName = "from"

// fromRecord is the content of STORE/from.
type fromRecord struct {
	Remote   string `json:"remote"`
	Snapshot string `json:"snapshot"`
}

func (f fromRecord) String() string { return f.Remote + "/" + f.Snapshot }

// readFrom reads STORE/from: ok false when the store has none.
func readFrom(store string) (fromRecord, bool, error) {
	var rec fromRecord
	b, err := os.ReadFile(filepath.Join(store, fromName))
	if errors.Is(err, os.ErrNotExist) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Remote == "" || rec.Snapshot == "" {
		return rec, false, fmt.Errorf("%s is not the record of a remote snapshot (%v): the store is damaged", filepath.Join(store, fromName), err)
	}
	return rec, true, nil
}

// CheckFromStore says what mount --from REMOTE/SNAPSHOT (from) does
// with the store directory store: start it (true: the store is new) or
// go on with it (false: it was started from that snapshot); an error
// for a store that holds anything else.
func CheckFromStore(store, from string) (bool, error) {
	rec, ok, err := readFrom(store)
	if err != nil {
		return false, err
	}
	if ok {
		if rec.String() != from {
			return false, fmt.Errorf("the store %s was started from %s, not %s: drop --from to mount it, or give --from a new --store directory", store, rec, from)
		}
		return false, nil
	}
	if _, err := os.Stat(filepath.Join(store, "meta")); err == nil {
		return false, fmt.Errorf("the store %s already holds a view that was not started from a remote snapshot (or whose start was cut short): --from starts a new store; give it an empty --store directory", store)
	}
	return true, nil
}

// writeFrom records in w's store that it started from rec.
func (w *Workspace) writeFrom(rec fromRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	p := filepath.Join(w.opts.Store, fromName)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = f.Sync()
		_ = f.Close()
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		return fmt.Errorf("recording the remote snapshot the store started from: %w", err)
	}
	return nil
}

// openFromSource gives w's backstore the source of its pending objects
// when its store started from a remote snapshot: the remote named in
// the record, opened at the first fetch.
func (w *Workspace) openFromSource() error {
	rec, ok, err := readFrom(w.opts.Store)
	if err != nil || !ok {
		return err
	}
	var (
		mu  sync.Mutex
		src *backstore.Source
	)
	get := func() (*backstore.Source, error) {
		mu.Lock()
		defer mu.Unlock()
		if src != nil {
			return src, nil
		}
		cfg, err := remote.Find(rec.Remote)
		if err != nil {
			return nil, fmt.Errorf("the store started from %s: %w", rec, err)
		}
		r, err := remote.Open(cfg)
		if err != nil {
			return nil, err
		}
		s := remoteSource(r)
		src = &s
		return src, nil
	}
	w.objs.SetSource(backstore.Source{
		Fetch: func(ctx context.Context, key string, off int64, out io.Writer) error {
			s, err := get()
			if err != nil {
				return err
			}
			return s.Fetch(ctx, key, off, out)
		},
		Check: func(key string, sum []byte) error {
			s, err := get()
			if err != nil {
				return err
			}
			return s.Check(key, sum)
		},
	})
	return nil
}
