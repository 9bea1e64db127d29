package workspace

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/contenthash"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/remote"
)

// The hashes of what a push sends: see "The hashes" in push.go.

// hashSources sets the sum of every source: the store's record, else
// read (through Options.Hasher when set), parallel at a time; what it
// reads itself it records (contenthash.Hasher.Learn).
func (w *Workspace) hashSources(ctx context.Context, srcs []*pushSource, parallel int, reply *ctl.PushReply, progress *progressTracker) error {
	var unknown []*pushSource
	for _, src := range srcs {
		var sum contenthash.Digest
		var ok bool
		var err error
		if src.object != "" {
			sum, ok, err = w.hashes.KnownObject(src.object)
		} else {
			var st unix.Stat_t
			if err = unix.Lstat(src.view.LowerPath(src.lower), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				sum, ok, err = w.hashes.KnownProjectFile(&st)
			}
		}
		if err != nil {
			w.log.Debug("push: a recorded hash could not be read: reading the file", "file", src.name, "err", err)
		}
		if ok {
			src.sum = remote.Sum(sum)
			reply.Known++
			continue
		}
		unknown = append(unknown, src)
	}
	var mu sync.Mutex
	learned := contenthash.Learned{Objects: map[string]contenthash.LearnedFile{}}
	byName := make(map[string]*pushSource, len(unknown)) // a source's name is its own
	for _, src := range unknown {
		byName[src.name] = src
	}
	hash := w.opts.Hasher
	if hash == nil {
		hash = func(ctx context.Context, o remote.Object) (remote.Sum, error) {
			src := byName[o.Name]
			f, err := o.Open()
			if err != nil {
				return remote.Sum{}, err
			}
			defer func() { _ = f.Close() }()
			lf := contenthash.LearnedFile{Start: time.Now()}
			if err := unix.Fstat(int(f.Fd()), &lf.Before); err != nil {
				return remote.Sum{}, err
			}
			h := sha256.New()
			n, err := copyUntilDone(ctx, h, f)
			if err != nil {
				return remote.Sum{}, fmt.Errorf("hashing %s: %w", o.Name, err)
			}
			if err := unix.Fstat(int(f.Fd()), &lf.After); err != nil {
				return remote.Sum{}, err
			}
			h.Sum(lf.Sum[:0])
			mu.Lock()
			reply.HashedBytes += n
			if src.object != "" {
				learned.Objects[src.object] = lf
			} else {
				learned.Project = append(learned.Project, lf)
			}
			mu.Unlock()
			return remote.Sum(lf.Sum), nil
		}
	}
	objs := make([]remote.Object, len(unknown))
	for i, src := range unknown {
		objs[i] = src.toObject()
	}
	sums, err := remote.HashAll(ctx, objs, hash, parallel, func(p remote.Progress) {
		progress.set(int64(p.ObjectsDone), int64(p.Objects), 0, 0)
	})
	reply.Hashed = len(unknown)
	if err != nil {
		return err
	}
	for i, src := range unknown {
		src.sum = sums[i]
	}
	if err := w.hashes.Learn(learned); err != nil {
		// Only what the next push reads again.
		w.log.Warn("push: recording the hashes read", "err", err)
	}
	return nil
}

// copyUntilDone copies r to w, stopping when ctx is done.
func copyUntilDone(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		m, err := r.Read(buf)
		if m > 0 {
			if _, werr := w.Write(buf[:m]); werr != nil {
				return n, werr
			}
			n += int64(m)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
