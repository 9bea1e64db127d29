package remote

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultParallel is how many objects a transfer moves at once.
const DefaultParallel = 8

// Phase names what a transfer is doing.
type Phase string

// The phases, in the order a push or a pull goes through them.
const (
	PhaseHashing    Phase = "hashing"
	PhaseChecking   Phase = "checking"
	PhaseUploading  Phase = "uploading"
	PhasePublishing Phase = "publishing"
	PhaseFetching   Phase = "fetching"
)

// Progress is where a transfer stands. Objects and Bytes count what the
// phase has to move; Skipped and SkippedBytes what it found already
// there (on the remote for a push, locally for a fetch) and does not
// move.
type Progress struct {
	Phase        Phase `json:"phase"`
	Objects      int   `json:"objects"`
	ObjectsDone  int   `json:"objects_done"`
	Bytes        int64 `json:"bytes"`
	BytesDone    int64 `json:"bytes_done"`
	Skipped      int   `json:"skipped"`
	SkippedBytes int64 `json:"skipped_bytes"`
}

// ProgressFunc receives a transfer's progress, one call at a time.
type ProgressFunc func(Progress)

// tracker keeps a transfer's progress and reports every change of it.
type tracker struct {
	mu sync.Mutex
	p  Progress
	fn ProgressFunc
}

func newTracker(fn ProgressFunc) *tracker { return &tracker{fn: fn} }

// update changes the progress under the lock and reports it.
func (t *tracker) update(f func(p *Progress)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(&t.p)
	if t.fn != nil {
		t.fn(t.p)
	}
}

func (t *tracker) bytes(n int64) { t.update(func(p *Progress) { p.BytesDone += n }) }

// forEach calls fn for 0..n-1 on at most parallel goroutines, and
// returns the first error. After an error no new call starts, and the
// calls under way finish (what they move is not lost to a resume); the
// caller's cancellation of ctx reaches them all.
func forEach(ctx context.Context, n, parallel int, fn func(ctx context.Context, i int) error) error {
	if parallel < 1 {
		parallel = DefaultParallel
	}
	var (
		mu    sync.Mutex
		first error
	)
	stop := make(chan struct{})
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(parallel, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						close(stop)
					}
					mu.Unlock()
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-stop:
			break feed
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// attempts is how often a transfer of one object is started before its
// error is reported; the waits between grow from retryWait.
const attempts = 4

var retryWait = 250 * time.Millisecond

// withRetry calls fn until it succeeds, fails with a permanent error,
// or has been called attempts times, waiting longer each time (with
// jitter). undo is called after each failed attempt, to take back what
// it counted.
func withRetry(ctx context.Context, fn func() error, undo func()) error {
	wait := retryWait
	var err error
	for i := range attempts {
		if err = fn(); err == nil || permanent(err) {
			return err
		}
		if undo != nil {
			undo()
		}
		if i == attempts-1 {
			break
		}
		d := wait/2 + rand.N(wait)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return err
		}
		wait *= 2
	}
	return fmt.Errorf("%w (tried %d times)", err, attempts)
}

// HashAll returns the sums of objs through hash, parallel goroutines
// at a time (DefaultParallel when 0), reporting PhaseHashing.
func HashAll(ctx context.Context, objs []Object, hash Hasher, parallel int, progress ProgressFunc) ([]Sum, error) {
	if hash == nil {
		hash = ReadHash
	}
	t := newTracker(progress)
	t.update(func(p *Progress) { *p = Progress{Phase: PhaseHashing, Objects: len(objs)} })
	sums := make([]Sum, len(objs))
	err := forEach(ctx, len(objs), parallel, func(ctx context.Context, i int) error {
		s, err := hash(ctx, objs[i])
		if err != nil {
			return err
		}
		sums[i] = s
		t.update(func(p *Progress) { p.ObjectsDone++ })
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sums, nil
}

// Upload is an object to push with its sum.
type Upload struct {
	Sum    Sum
	Object Object
}

// Doc is a document to publish.
type Doc struct {
	Kind  Kind
	Name  string
	Value any
}

// PushStats says what a push moved.
type PushStats struct {
	Objects      int   // distinct objects (by sum) the documents need
	Sent         int   // objects uploaded
	SentBytes    int64 // their bytes
	Skipped      int   // objects the remote already had
	SkippedBytes int64
	Docs         int // documents written
	// Parts of the large objects' multipart uploads: sent, and found
	// on the server from an interrupted push (not sent again).
	Parts PartStats
}

// Push uploads the objects of ups that the remote lacks (one per sum),
// parallel at a time (DefaultParallel when 0), then writes docs in
// their order. It reports PhaseChecking, PhaseUploading and
// PhasePublishing. An error leaves the documents not yet written
// unwritten: pushing again resumes.
func (r *Remote) Push(ctx context.Context, ups []Upload, docs []Doc, parallel int, progress ProgressFunc) (PushStats, error) {
	var st PushStats
	if err := r.Check(ctx); err != nil {
		return st, err
	}
	if err := r.ensureMarker(ctx); err != nil {
		return st, err
	}
	t := newTracker(progress)
	bySum := map[Sum]Object{}
	var sums []Sum
	for _, u := range ups {
		if _, ok := bySum[u.Sum]; !ok {
			bySum[u.Sum] = u.Object
			sums = append(sums, u.Sum)
		}
	}
	st.Objects = len(sums)
	t.update(func(p *Progress) { *p = Progress{Phase: PhaseChecking, Objects: len(sums)} })
	missing, err := r.Missing(ctx, sums, parallel)
	if err != nil {
		return st, err
	}
	sizes := make(map[Sum]int64, len(sums))
	var total, skippedBytes int64
	lacks := make(map[Sum]bool, len(missing))
	for _, s := range missing {
		lacks[s] = true
	}
	for _, s := range sums {
		fi, err := statObject(bySum[s])
		if err != nil {
			return st, err
		}
		sizes[s] = fi
		if lacks[s] {
			total += fi
		} else {
			skippedBytes += fi
		}
	}
	st.Skipped, st.SkippedBytes = len(sums)-len(missing), skippedBytes
	t.update(func(p *Progress) {
		*p = Progress{Phase: PhaseUploading, Objects: len(missing), Bytes: total, Skipped: st.Skipped, SkippedBytes: skippedBytes}
	})
	var partsMu sync.Mutex
	err = forEach(ctx, len(missing), parallel, func(ctx context.Context, i int) error {
		s := missing[i]
		var sent atomic.Int64
		var ps PartStats
		err := withRetry(ctx, func() error {
			return r.putObject(ctx, s, bySum[s], func(n int64) { sent.Add(n); t.bytes(n) }, &ps)
		}, func() { n := sent.Swap(0); t.bytes(-n) })
		partsMu.Lock()
		st.Parts.Sent += ps.Sent
		st.Parts.Kept += ps.Kept
		partsMu.Unlock()
		if err != nil {
			return err
		}
		t.update(func(p *Progress) { p.ObjectsDone++ })
		return nil
	})
	if err != nil {
		return st, err
	}
	st.Sent, st.SentBytes = len(missing), total
	t.update(func(p *Progress) { *p = Progress{Phase: PhasePublishing, Objects: len(docs)} })
	for _, d := range docs {
		err := withRetry(ctx, func() error { return r.PutDoc(ctx, d.Kind, d.Name, d.Value) }, nil)
		if err != nil {
			return st, err
		}
		st.Docs++
		t.update(func(p *Progress) { p.ObjectsDone++ })
	}
	return st, nil
}

// statObject returns the size of o.
func statObject(o Object) (int64, error) {
	f, err := o.Open()
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", o.Name, err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", o.Name, err)
	}
	return fi.Size(), nil
}

// FetchStats says what a fetch moved.
type FetchStats struct {
	Fetched      int
	FetchedBytes int64
	Skipped      int // objects dir already had
}

// Fetch downloads the objects sums names that dir lacks into dir
// (ObjectPath), parallel at a time (DefaultParallel when 0), checking
// each, and reports PhaseFetching (Bytes counts what was read). An
// object already in dir is taken as complete: only a verified object
// is ever renamed to its name. An error leaves the objects fetched
// until then: fetching again resumes.
func (r *Remote) Fetch(ctx context.Context, sums []Sum, dir string, parallel int, progress ProgressFunc) (FetchStats, error) {
	var st FetchStats
	if err := r.Check(ctx); err != nil {
		return st, err
	}
	seen := map[Sum]bool{}
	var need []Sum
	for _, s := range sums {
		if seen[s] {
			continue
		}
		seen[s] = true
		if _, err := os.Lstat(ObjectPath(dir, s)); err == nil {
			st.Skipped++
			continue
		}
		need = append(need, s)
	}
	t := newTracker(progress)
	t.update(func(p *Progress) { *p = Progress{Phase: PhaseFetching, Objects: len(need), Skipped: st.Skipped} })
	var mu sync.Mutex
	err := forEach(ctx, len(need), parallel, func(ctx context.Context, i int) error {
		var got int64
		err := withRetry(ctx, func() error {
			return r.fetchObject(ctx, need[i], dir, func(n int64) { got += n; t.bytes(n) })
		}, nil) // what an attempt fetched is kept, and continued (fetchObject)
		if err != nil {
			return err
		}
		mu.Lock()
		st.Fetched++
		st.FetchedBytes += got
		mu.Unlock()
		t.update(func(p *Progress) { p.ObjectsDone++; p.Bytes += got })
		return nil
	})
	return st, err
}
