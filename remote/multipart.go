package remote

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
)

// # Multipart uploads, resumed part by part
//
// An object above MultipartThreshold goes up as a multipart upload of
// parts of PartSize, partsInFlight at once, through minio-go's Core
// API rather than its PutObject, so that an upload that was
// interrupted (the push killed, the network gone) continues from the
// parts the server holds: the next push finds the upload the server
// still has for the object's key (ListMultipartUploads), lists its
// parts (ListObjectParts), and sends only the parts that are missing
// or differ.
//
// The object's bytes are read once, in order, by one reader: each part
// is hashed into the object's SHA-256 as it is read, and its MD5 is
// compared with the ETag of the part the server holds (an S3 part's
// ETag is the MD5 of its bytes): a part that matches is not sent
// again; one that does not (or a server whose ETags are no MD5s) is
// sent. A part that is sent carries its MD5 (Content-MD5) and its
// SHA-256 (SigV4's payload hash), which the server checks before it
// keeps it. So the object is completed (CompleteMultipartUpload) only
// when what the server holds, part by part, is the bytes read, and
// those hash to the object's name; otherwise the upload is aborted and
// the push fails, naming the object (errChanged), as for a small one.

// PartStats counts the parts of the multipart uploads of a push.
type PartStats struct {
	Sent, Kept int // parts uploaded; parts the server held already
}

// core is the client's Core API (the S3 calls one by one).
func (r *Remote) core() minio.Core { return minio.Core{Client: r.client} }

// openUpload returns the id of the multipart upload the server holds
// for key (the newest, when several) and its parts by number, or ""
// when it holds none.
func (r *Remote) openUpload(ctx context.Context, key string) (string, map[int]minio.ObjectPart, error) {
	c := r.core()
	var id string
	var newest minio.ObjectMultipartInfo
	keyMarker, idMarker := "", ""
	for {
		res, err := c.ListMultipartUploads(ctx, r.loc.Bucket, key, keyMarker, idMarker, "", 1000)
		if err != nil {
			return "", nil, r.explain(err, key)
		}
		for _, u := range res.Uploads {
			if u.Key == key && (id == "" || u.Initiated.After(newest.Initiated)) {
				id, newest = u.UploadID, u
			}
		}
		if !res.IsTruncated || (res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker) {
			break
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
	if id == "" {
		return "", nil, nil
	}
	parts := map[int]minio.ObjectPart{}
	marker := 0
	for {
		res, err := c.ListObjectParts(ctx, r.loc.Bucket, key, id, marker, 1000)
		if err != nil {
			err = r.explain(err, key)
			if errors.Is(err, ErrNotFound) { // completed or aborted since it was listed
				return "", nil, nil
			}
			return "", nil, err
		}
		for _, p := range res.ObjectParts {
			parts[p.PartNumber] = p
		}
		if !res.IsTruncated || res.NextPartNumberMarker <= marker {
			break
		}
		marker = res.NextPartNumberMarker
	}
	return id, parts, nil
}

// putMultipart uploads f (size bytes, named name), whose bytes hash to
// sum, under key as a multipart upload, resuming the one the server
// holds for key. onBytes is called with the size of each part sent or
// found on the server, once it is.
func (r *Remote) putMultipart(ctx context.Context, key, name string, sum Sum, f *os.File, size int64, onBytes func(int64), ps *PartStats) error {
	c := r.core()
	id, have, err := r.openUpload(ctx, key)
	if err != nil {
		return err
	}
	if id == "" {
		if id, err = c.NewMultipartUpload(ctx, r.loc.Bucket, key, minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
			return r.explain(err, key)
		}
	}
	n := int((size + PartSize - 1) / PartSize)
	type part struct {
		num int
		buf []byte
		md5 [md5.Size]byte
		sha [sha256.Size]byte
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	free := make(chan []byte, partsInFlight+1)
	for range partsInFlight + 1 {
		free <- make([]byte, PartSize)
	}
	work := make(chan part)
	var (
		mu    sync.Mutex
		first error
		done  = make([]minio.CompletePart, n)
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			cancel()
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range partsInFlight {
		wg.Go(func() {
			for p := range work {
				op, err := c.PutObjectPart(ctx, r.loc.Bucket, key, id, p.num, bytes.NewReader(p.buf), int64(len(p.buf)),
					minio.PutObjectPartOptions{Md5Base64: base64.StdEncoding.EncodeToString(p.md5[:]), Sha256Hex: hex.EncodeToString(p.sha[:])})
				if err != nil {
					fail(r.explain(err, key))
				} else {
					done[p.num-1] = minio.CompletePart{PartNumber: p.num, ETag: op.ETag}
					mu.Lock()
					ps.Sent++
					mu.Unlock()
					onBytes(int64(len(p.buf)))
				}
				free <- p.buf[:cap(p.buf)]
			}
		})
	}
	whole := sha256.New()
	var read int64
	for i := 1; i <= n && ctx.Err() == nil; i++ {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
		}
		if buf == nil {
			break
		}
		want := min(PartSize, size-read)
		m, err := io.ReadFull(&ctxReader{ctx: ctx, r: f}, buf[:want])
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = fmt.Errorf("%s: %w (it holds %d bytes, not %d)", name, errChanged, read+int64(m), size)
			}
			fail(err)
			free <- buf
			break
		}
		read += int64(m)
		p := part{num: i, buf: buf[:m], md5: md5.Sum(buf[:m])}
		whole.Write(p.buf)
		if old, ok := have[i]; ok && old.Size == int64(m) && strings.Trim(old.ETag, `"`) == hex.EncodeToString(p.md5[:]) {
			done[i-1] = minio.CompletePart{PartNumber: i, ETag: old.ETag}
			mu.Lock()
			ps.Kept++
			mu.Unlock()
			onBytes(int64(m))
			free <- buf
			continue
		}
		p.sha = sha256.Sum256(p.buf)
		select {
		case work <- p:
		case <-ctx.Done():
			free <- buf
		}
	}
	close(work)
	wg.Wait()
	if first != nil {
		// The parts that arrived stay on the server: the next push
		// resumes from them.
		return first
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var got Sum
	whole.Sum(got[:0])
	if extra, _ := f.Read(make([]byte, 1)); got != sum || extra > 0 {
		// What the parts hold is not the content the key names: take
		// the upload back before anything can name it.
		if aerr := c.AbortMultipartUpload(context.WithoutCancel(ctx), r.loc.Bucket, key, id); aerr != nil {
			return fmt.Errorf("%s: %w (its bytes hashed to %s before, %s now; aborting the upload of %s failed: %v)", name, errChanged, sum, got, key, aerr)
		}
		return fmt.Errorf("%s: %w (its bytes hashed to %s before, %s now): push again once it stays still", name, errChanged, sum, got)
	}
	sort.Slice(done, func(i, j int) bool { return done[i].PartNumber < done[j].PartNumber })
	if _, err := c.CompleteMultipartUpload(ctx, r.loc.Bucket, key, id, done, minio.PutObjectOptions{}); err != nil {
		return r.explain(err, key)
	}
	return nil
}
