package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// MultipartThreshold is the size above which an object is uploaded in
// parts of PartSize, several at once, resumed part by part
// (multipart.go).
// (Variables only for the tests, which make them small.)
var (
	MultipartThreshold int64 = 64 << 20
	PartSize           int64 = 16 << 20
	partsInFlight            = 4
)

// errNoSpace is the error of a fetch into a full disk (not retried).
var errNoSpace = errors.New("no space left")

// errChanged is the error of an object whose bytes changed between
// being hashed and being read for the upload.
var errChanged = errors.New("the object changed while it was pushed")

// putObject uploads o, whose bytes hash to sum, under its key, and
// calls onBytes with the count of each read of it. See the package doc,
// Transfers, for the checks.
func (r *Remote) putObject(ctx context.Context, sum Sum, o Object, onBytes func(int64), ps *PartStats) error {
	f, err := o.Open()
	if err != nil {
		return fmt.Errorf("opening %s: %w", o.Name, err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", o.Name, err)
	}
	key := r.loc.ObjectKey(sum)
	if st.Size() > MultipartThreshold {
		return r.putMultipart(ctx, key, o.Name, sum, f, st.Size(), onBytes, ps)
	}
	h := sha256.New()
	// A plain reader (no ReadAt, no Seek): minio-go reads it once, in
	// order, so that h sees exactly the bytes sent.
	body := io.TeeReader(&countingReader{r: &ctxReader{ctx: ctx, r: f}, on: onBytes}, h)
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}
	size := st.Size()
	info, err := r.client.PutObject(ctx, r.loc.Bucket, key, body, size, opts)
	if err != nil {
		return r.explain(err, key)
	}
	var got Sum
	h.Sum(got[:0])
	if got != sum || info.Size != st.Size() {
		// What was stored is not the content its name says: take it
		// back before anything can name it.
		if rerr := r.client.RemoveObject(context.WithoutCancel(ctx), r.loc.Bucket, key, minio.RemoveObjectOptions{}); rerr != nil {
			return fmt.Errorf("%s: %w (sent %d bytes hashing to %s; removing %s again failed: %v)", o.Name, errChanged, info.Size, got, key, rerr)
		}
		return fmt.Errorf("%s: %w (its bytes hashed to %s before, %s now): push again once it stays still", o.Name, errChanged, sum, got)
	}
	return nil
}

// countingReader reports the count of each read to on.
type countingReader struct {
	r  io.Reader
	on func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && c.on != nil {
		c.on(int64(n))
	}
	return n, err
}

// ObjectPath returns where Fetch puts the object sum in dir:
// dir/ab/abcd….
func ObjectPath(dir string, sum Sum) string {
	h := sum.String()
	return filepath.Join(dir, h[:2], h)
}

// fetchObject downloads the object sum to ObjectPath(dir, sum), through
// a temporary file renamed into place once complete, synced and
// verified, and calls onBytes with the count of each read.
//
// The temporary file is named after the object (.fetch-SUM, beside
// it): a fetch that was interrupted (the process killed, the network
// gone) leaves it, and the next fetch of the object continues it: the
// bytes it holds are hashed again (read locally), and only the rest is
// asked of the server (a ranged GET from its length), appended, and
// hashed on. If the whole does not hash to sum, a continued fetch is
// started again from nothing once (the prefix may be what a crash of
// the machine left), and a fresh one is refused (ErrCorrupt) and its
// file removed. A lock (flock) on the temporary file keeps two
// fetches of one object from writing it at once.
func (r *Remote) fetchObject(ctx context.Context, sum Sum, dir string, onBytes func(int64)) (err error) {
	final := ObjectPath(dir, sum)
	shard := filepath.Dir(final)
	if err := os.MkdirAll(shard, 0o700); err != nil {
		return err
	}
	part := filepath.Join(shard, ".fetch-"+sum.String())
	tmp, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = tmp.Close() }()
	if err := unix.Flock(int(tmp.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", part, err)
	}
	if _, err := os.Lstat(final); err == nil {
		// Another fetch of it finished while this one waited: the
		// file this one opened (made after that one's was renamed) is
		// garbage.
		_ = os.Remove(part)
		return nil
	}
	if err := r.fetchInto(ctx, sum, tmp, final, onBytes); err != nil {
		if errors.Is(err, ErrCorrupt) {
			_ = os.Remove(part)
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return fmt.Errorf("%w: the disk of %s is full: free space and fetch again (what was fetched is kept)", errNoSpace, dir)
		}
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", final, err)
	}
	if err := os.Rename(part, final); err != nil {
		return err
	}
	return syncDir(shard)
}

// fetchInto makes tmp hold the object sum: it continues what tmp holds
// (see fetchObject), and refuses an object that does not hash to sum.
func (r *Remote) fetchInto(ctx context.Context, sum Sum, tmp *os.File, final string, onBytes func(int64)) error {
	h := sha256.New()
	have, err := io.Copy(h, &ctxReader{ctx: ctx, r: io.NewSectionReader(tmp, 0, 1<<62)})
	if err != nil {
		return fmt.Errorf("reading %s: %w", tmp.Name(), err)
	}
	w := &offsetWriter{f: tmp, off: have}
	err = r.readObjectFrom(ctx, sum, have, io.MultiWriter(w, h), onBytes)
	if err == nil {
		var got Sum
		h.Sum(got[:0])
		if got == sum {
			return nil
		}
		err = r.corrupt(sum, got)
	}
	if have == 0 || !errors.Is(err, ErrCorrupt) && !errors.Is(err, errBeyondEnd) {
		return err
	}
	// The prefix kept from before was not the object's: start again.
	onBytes(-(w.off - have))
	if err := tmp.Truncate(0); err != nil {
		return err
	}
	return r.fetchInto(ctx, sum, tmp, final, onBytes)
}

// errBeyondEnd is the error of a ranged read that starts past the end
// of the object.
var errBeyondEnd = errors.New("the range starts past the end of the object")

// offsetWriter writes to a file from off on, in order.
type offsetWriter struct {
	f   *os.File
	off int64
}

func (w *offsetWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

// readObjectFrom copies the object sum from byte from on to w (a
// ranged GET when from > 0): errBeyondEnd when the object is shorter
// than from, nil with nothing copied when it is exactly from bytes.
func (r *Remote) readObjectFrom(ctx context.Context, sum Sum, from int64, w io.Writer, onBytes func(int64)) error {
	key := r.loc.ObjectKey(sum)
	opts := minio.GetObjectOptions{}
	if from > 0 {
		st, err := r.client.StatObject(ctx, r.loc.Bucket, key, minio.StatObjectOptions{})
		if err != nil {
			return r.explain(err, key)
		}
		switch {
		case st.Size < from:
			return errBeyondEnd
		case st.Size == from:
			return nil
		}
		if err := opts.SetRange(from, 0); err != nil {
			return err
		}
	}
	obj, err := r.client.GetObject(ctx, r.loc.Bucket, key, opts)
	if err != nil {
		return r.explain(err, key)
	}
	defer func() { _ = obj.Close() }()
	if _, err := io.Copy(w, &countingReader{r: obj, on: onBytes}); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return err // the local side: a full disk, ...
		}
		return r.explain(err, key)
	}
	return nil
}

// corrupt is the error of the object sum read back as bytes hashing to
// got.
func (r *Remote) corrupt(sum, got Sum) error {
	return fmt.Errorf("%w: %s of %s holds bytes that hash to %s, not to its name: the remote's copy is damaged; push the snapshot again from a machine that has it",
		ErrCorrupt, r.loc.ObjectKey(sum), r.describe(), got)
}

// ReadObject copies the object sum to w and checks that what it read
// hashes to sum: ErrCorrupt, naming the key, when it does not (w has
// then received bytes that must not be used).
func (r *Remote) ReadObject(ctx context.Context, sum Sum, w io.Writer, onBytes func(int64)) error {
	h := sha256.New()
	if err := r.readObjectFrom(ctx, sum, 0, io.MultiWriter(w, h), onBytes); err != nil {
		return err
	}
	var got Sum
	h.Sum(got[:0])
	if got != sum {
		return r.corrupt(sum, got)
	}
	return nil
}

// syncDir fsyncs a directory, so that the names made in it survive a
// crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// headLimit is the count of sums above which Missing lists the shards
// the sums fall in rather than asking for each object.
const headLimit = 64

// Missing returns the sums the remote lacks, in the order given.
func (r *Remote) Missing(ctx context.Context, sums []Sum, parallel int) ([]Sum, error) {
	have := make(map[Sum]bool, len(sums))
	var mu sync.Mutex
	if len(sums) <= headLimit {
		err := forEach(ctx, len(sums), parallel, func(ctx context.Context, i int) error {
			key := r.loc.ObjectKey(sums[i])
			_, err := r.client.StatObject(ctx, r.loc.Bucket, key, minio.StatObjectOptions{})
			if err != nil {
				err = r.explain(err, key)
				if errors.Is(err, ErrNotFound) {
					return nil
				}
				return err
			}
			mu.Lock()
			have[sums[i]] = true
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, err
		}
	} else {
		shards := map[string]bool{}
		for _, s := range sums {
			shards[s.String()[:2]] = true
		}
		list := make([]string, 0, len(shards))
		for s := range shards {
			list = append(list, s)
		}
		sort.Strings(list)
		err := forEach(ctx, len(list), parallel, func(ctx context.Context, i int) error {
			prefix := r.loc.shardPrefix(list[i])
			for o := range r.client.ListObjects(ctx, r.loc.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
				if o.Err != nil {
					return r.explain(o.Err, prefix)
				}
				s, err := ParseSum(strings.TrimPrefix(o.Key, prefix))
				if err != nil {
					continue // not an object of this layout
				}
				mu.Lock()
				have[s] = true
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var missing []Sum
	for _, s := range sums {
		if !have[s] {
			missing = append(missing, s)
		}
	}
	return missing, nil
}

// PutDoc writes the document of kind named name: v as JSON. A snapshot
// document (a *SnapshotDoc) is written in its compact form first
// (compact.go).
func (r *Remote) PutDoc(ctx context.Context, kind Kind, name string, v any) error {
	if err := checkDocName(name); err != nil {
		return err
	}
	var meta map[string]string
	if kind == KindSnapshot {
		var d *SnapshotDoc
		switch v := v.(type) {
		case *SnapshotDoc:
			d = v
		case SnapshotDoc:
			d = &v
		}
		if d != nil {
			sum, err := r.putCompactDoc(ctx, name, d)
			if err != nil {
				return err
			}
			meta = map[string]string{compactSumMeta: sum.String()}
		}
	}
	b, err := json.MarshalIndent(v, "", "\t")
	if err != nil {
		return err
	}
	return r.putSmall(ctx, r.loc.DocKey(kind, name), append(b, '\n'), meta)
}

// putSmall writes a small object in one request, with the user
// metadata meta (x-amz-meta-*) when not nil.
func (r *Remote) putSmall(ctx context.Context, key string, b []byte, meta map[string]string) error {
	_, err := r.client.PutObject(ctx, r.loc.Bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{
		ContentType:      "application/json",
		DisableMultipart: true,
		UserMetadata:     meta,
	})
	return r.explain(err, key)
}

// GetDoc reads the document of kind named name into v: ErrNotFound if
// the remote has none.
func (r *Remote) GetDoc(ctx context.Context, kind Kind, name string, v any) error {
	if err := checkDocName(name); err != nil {
		return err
	}
	key := r.loc.DocKey(kind, name)
	b, err := r.getSmall(ctx, key)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s of %s: %v", key, r.describe(), err)
	}
	return nil
}

// docLimit bounds what getSmall reads: a document larger than this is
// no document of agentfs's.
const docLimit = 1 << 30

func (r *Remote) getSmall(ctx context.Context, key string) ([]byte, error) {
	obj, err := r.client.GetObject(ctx, r.loc.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, r.explain(err, key)
	}
	defer func() { _ = obj.Close() }()
	b, err := io.ReadAll(io.LimitReader(obj, docLimit))
	if err != nil {
		return nil, r.explain(err, key)
	}
	return b, nil
}

// ListDocs returns the names of the documents of kind, sorted.
func (r *Remote) ListDocs(ctx context.Context, kind Kind) ([]string, error) {
	prefix := r.loc.key(string(kind)) + "/"
	var names []string
	for o := range r.client.ListObjects(ctx, r.loc.Bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if o.Err != nil {
			return nil, r.explain(o.Err, prefix)
		}
		if name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, prefix), ".json"); ok && checkDocName(name) == nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// marker is the document at MarkerKey.
type marker struct {
	Format int `json:"format"`
}

// checkMarker reads the marker: whether the prefix is an agentfs
// remote (false when it has no marker yet), refusing a format newer
// than this agentfs reads.
func (r *Remote) checkMarker(ctx context.Context) (bool, error) {
	key := r.loc.MarkerKey()
	b, err := r.getSmall(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil {
		return false, fmt.Errorf("%s of %s is no marker of an agentfs remote (%v): give the remote a prefix of its own", key, r.describe(), err)
	}
	if m.Format != Format {
		return false, fmt.Errorf("%s is a remote of format %d, which this agentfs (format %d) does not read: use a newer agentfs", r.describe(), m.Format, Format)
	}
	return true, nil
}

// ensureMarker writes the marker if the remote has none.
func (r *Remote) ensureMarker(ctx context.Context) error {
	ok, err := r.checkMarker(ctx)
	if err != nil || ok {
		return err
	}
	b, err := json.Marshal(marker{Format: Format})
	if err != nil {
		return err
	}
	return r.putSmall(ctx, r.loc.MarkerKey(), append(b, '\n'), nil)
}
