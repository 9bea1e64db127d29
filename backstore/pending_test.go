package backstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pendingObject makes an object of size len(data) with no data (sparse)
// and an mtime of its own, and marks it pending under key.
func pendingObject(t *testing.T, s *Store, key string, size int) string {
	t.Helper()
	id, f, err := s.CreateFile(0o444, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	l := s.Loc(id)
	mt := unix.NsecToTimespec(1_600_000_000_123_456_789)
	if err := unix.UtimesNanoAt(l.Dirfd, l.Name, []unix.Timespec{mt, mt}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPending(map[string]string{id: key}); err != nil {
		t.Fatal(err)
	}
	return id
}

// countingSource serves data for key, counting the fetches; its check
// wants the SHA-256 of want (data when nil).
func countingSource(key string, data, want []byte, n *atomic.Int64) Source {
	if want == nil {
		want = data
	}
	return Source{
		Fetch: func(_ context.Context, k string, off int64, w io.Writer) error {
			n.Add(1)
			if k != key {
				return errors.New("unknown key " + k)
			}
			_, err := w.Write(data[off:])
			return err
		},
		Check: checkAgainst(want),
	}
}

// checkAgainst is a Source.Check that wants the SHA-256 of want.
func checkAgainst(want []byte) func(string, []byte) error {
	return func(key string, sum []byte) error {
		if w := sha256.Sum256(want); !bytes.Equal(sum, w[:]) {
			return fmt.Errorf("%s: %w", key, errDamaged)
		}
		return nil
	}
}

var errDamaged = errors.New("the bytes do not hash to their key")

func readObject(t *testing.T, s *Store, open func() (io.ReadCloser, error)) []byte {
	t.Helper()
	f, err := open()
	if err != nil {
		t.Fatalf("opening a pending object: %v", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPendingFilledAtFirstOpen: eight opens at once of a pending object
// fetch it once, all read its bytes, and its attributes stay; OpenRead
// and Clone of another fill it too; a filled object is fetched no more.
func TestPendingFilledAtFirstOpen(t *testing.T) {
	s := hostfsStore(t)
	data := bytes.Repeat([]byte("remote bytes\n"), 10000)
	id := pendingObject(t, s, "k1", len(data))
	before := lstatObj(t, s, id)
	var fetches atomic.Int64
	s.SetSource(countingSource("k1", data, nil, &fetches))
	if !s.Pending(id) {
		t.Fatal("not pending after MarkPending")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			got := readObject(t, s, func() (io.ReadCloser, error) { return s.Open(id, unix.O_RDONLY) })
			if !bytes.Equal(got, data) {
				t.Errorf("read %d bytes, want the %d fetched", len(got), len(data))
			}
		})
	}
	wg.Wait()
	if n := fetches.Load(); n != 1 {
		t.Errorf("fetched %d times, want 1", n)
	}
	after := lstatObj(t, s, id)
	if after.Mtim != before.Mtim || after.Mode != before.Mode || after.Size != before.Size {
		t.Errorf("attributes changed by the fill: mtime %v mode %o size %d, want %v %o %d", after.Mtim, after.Mode, after.Size, before.Mtim, before.Mode, before.Size)
	}
	if s.Pending(id) {
		t.Error("still pending after the fill")
	}
	readObject(t, s, func() (io.ReadCloser, error) { return s.OpenRead(id) })
	if n := fetches.Load(); n != 1 {
		t.Errorf("fetched %d times after another open, want 1", n)
	}

	id2 := pendingObject(t, s, "k1", len(data))
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.OpenRead(id2) }); !bytes.Equal(got, data) {
		t.Errorf("OpenRead of a pending object read %d bytes, want the fetched %d", len(got), len(data))
	}
	id3 := pendingObject(t, s, "k1", len(data))
	clone, err := s.Clone(id3)
	if err != nil {
		t.Fatal(err)
	}
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.OpenRead(clone) }); !bytes.Equal(got, data) {
		t.Errorf("the clone of a pending object holds %d bytes, want the fetched %d", len(got), len(data))
	}
}

// TestPendingFetchFails: a fetch that fails half way gives the opener
// an error and leaves the object pending; the next open fetches it
// whole.
func TestPendingFetchFails(t *testing.T) {
	s := hostfsStore(t)
	data := bytes.Repeat([]byte("x"), 100000)
	id := pendingObject(t, s, "k", len(data))
	s.SetSource(Source{Fetch: func(_ context.Context, _ string, _ int64, w io.Writer) error {
		if _, err := w.Write([]byte("half")); err != nil {
			return err
		}
		return errors.New("the network went away")
	}, Check: checkAgainst(data)})
	if _, err := s.Open(id, unix.O_RDONLY); err == nil {
		t.Fatal("open of an object whose fetch failed succeeded")
	}
	if !s.Pending(id) {
		t.Fatal("not pending after a failed fetch")
	}
	var fetches atomic.Int64
	s.SetSource(countingSource("k", data, nil, &fetches))
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.Open(id, unix.O_RDONLY) }); !bytes.Equal(got, data) {
		t.Errorf("after a failed fetch, read %q..., want the whole object", got[:min(8, len(got))])
	}
}

// TestPendingFetchTooLong: a fetch that brings more bytes than the
// object's size fails without growing it, so that a later fetch of the
// right bytes fills it.
func TestPendingFetchTooLong(t *testing.T) {
	s := hostfsStore(t)
	data := []byte("eight b\n")
	id := pendingObject(t, s, "k", len(data))
	var fetches atomic.Int64
	s.SetSource(countingSource("k", []byte("nine b..\n"), data, &fetches))
	if _, err := s.Open(id, unix.O_RDONLY); err == nil {
		t.Fatal("open of an object whose fetch brought too many bytes succeeded")
	}
	if st := lstatObj(t, s, id); st.Size != int64(len(data)) {
		t.Errorf("size after the failed fill = %d, want %d", st.Size, len(data))
	}
	s.SetSource(countingSource("k", data, nil, &fetches))
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.Open(id, unix.O_RDONLY) }); !bytes.Equal(got, data) {
		t.Errorf("read %q, want %q", got, data)
	}
}

// TestPendingSurvivesReopen: the journal keeps pending objects pending
// across a reopen (a crash before the fill), where an open without a
// source fails with ErrPending; once filled, a reopen finds them done.
func TestPendingSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir})
	data := []byte("bytes of a remote\n")
	id := pendingObject(t, s, "k", len(data))
	closeStore(t, s)

	s = openStore(t, Options{Dir: dir})
	if !s.Pending(id) {
		t.Fatal("not pending after a reopen")
	}
	if _, err := s.Open(id, unix.O_RDONLY); !errors.Is(err, ErrPending) {
		t.Errorf("open with no source = %v, want ErrPending", err)
	}
	var fetches atomic.Int64
	s.SetSource(countingSource("k", data, nil, &fetches))
	readObject(t, s, func() (io.ReadCloser, error) { return s.Open(id, unix.O_RDONLY) })
	closeStore(t, s)

	s = openStore(t, Options{Dir: dir})
	if s.Pending(id) {
		t.Error("pending again after a reopen, once filled")
	}
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.Open(id, unix.O_RDONLY) }); !bytes.Equal(got, data) {
		t.Errorf("read %q, want %q", got, data)
	}
}

// gatedSource serves data for key: from off, the bytes up to stop,
// then it waits for gate and serves the rest. It counts the fetches
// and records the offset each started at.
type gatedSource struct {
	data  []byte
	stop  int64
	gate  chan struct{}
	mu    sync.Mutex
	froms []int64
}

func (g *gatedSource) source() Source {
	return Source{
		Fetch: func(ctx context.Context, _ string, off int64, w io.Writer) error {
			g.mu.Lock()
			g.froms = append(g.froms, off)
			g.mu.Unlock()
			if off < g.stop {
				if _, err := w.Write(g.data[off:g.stop]); err != nil {
					return err
				}
				off = g.stop
				select {
				case <-g.gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			for off < int64(len(g.data)) { // as a network brings them: in pieces
				end := min(off+4096, int64(len(g.data)))
				if _, err := w.Write(g.data[off:end]); err != nil {
					return err
				}
				off = end
			}
			return nil
		},
		Check: checkAgainst(g.data),
	}
}

func (g *gatedSource) starts() []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int64(nil), g.froms...)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// TestPendingStreams: OpenStream of a pending object returns before its
// bytes are all here, and a read of the first bytes waits only for them;
// the last byte waits for the check; a concurrent Open shares the one
// fetch and returns once the object is complete; the object's times stay.
func TestPendingStreams(t *testing.T) {
	s := hostfsStore(t)
	data := randomBytes(1 << 20)
	id := pendingObject(t, s, "k", len(data))
	before := lstatObj(t, s, id)
	g := &gatedSource{data: data, stop: 64 << 10, gate: make(chan struct{})}
	s.SetSource(g.source())
	f, st, err := s.OpenStream(id)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if st == nil {
		t.Fatal("OpenStream of a pending object gave no stream")
	}
	if err := st.Wait(64 << 10); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 64<<10)
	if _, err := f.ReadAt(head, 0); err != nil || !bytes.Equal(head, data[:64<<10]) {
		t.Fatalf("the first 64 KiB read while the rest is not fetched: %v, or other bytes", err)
	}
	if st.Ready(int64(len(data))) || st.Done() || !s.Pending(id) {
		t.Errorf("Ready(all) %v, Done %v, Pending %v while the fetch waits: want false, false, true", st.Ready(int64(len(data))), st.Done(), s.Pending(id))
	}
	if st.Ready(64<<10 + 1) {
		t.Error("Ready past what was fetched")
	}
	opened := make(chan error, 1)
	go func() {
		o, err := s.Open(id, unix.O_RDONLY)
		if err == nil {
			_ = o.Close()
		}
		opened <- err
	}()
	close(g.gate)
	if err := <-opened; err != nil {
		t.Fatalf("Open beside the stream: %v", err)
	}
	if err := st.Wait(int64(len(data))); err != nil {
		t.Fatal(err)
	}
	all := make([]byte, len(data))
	if _, err := f.ReadAt(all, 0); err != nil || !bytes.Equal(all, data) {
		t.Errorf("the whole object read through the stream's descriptor: %v, or other bytes", err)
	}
	if starts := g.starts(); len(starts) != 1 {
		t.Errorf("fetched %d times (%v), want once", len(starts), starts)
	}
	if s.Pending(id) || !st.Done() {
		t.Error("pending after the fill")
	}
	after := lstatObj(t, s, id)
	if after.Mtim != before.Mtim || after.Size != before.Size {
		t.Errorf("the fill changed mtime %v size %d, want %v %d", after.Mtim, after.Size, before.Mtim, before.Size)
	}
	_, st2, err := s.OpenStream(id)
	if err != nil || st2 != nil {
		t.Errorf("OpenStream of a complete object: stream %v, %v; want none", st2, err)
	}
}

// TestPendingStreamRefused: a stream of bytes that do not hash to their
// key fails at the last byte with the check's error; the object stays
// pending, holding no data, its times kept; the next open fetches from
// the start.
func TestPendingStreamRefused(t *testing.T) {
	s := hostfsStore(t)
	data := randomBytes(256 << 10)
	id := pendingObject(t, s, "k", len(data))
	before := lstatObj(t, s, id)
	bad := bytes.Clone(data)
	bad[len(bad)/2] ^= 1
	var fetches atomic.Int64
	s.SetSource(countingSource("k", bad, data, &fetches))
	_, st, err := s.OpenStream(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Wait(int64(len(data))); !errors.Is(err, errDamaged) {
		t.Fatalf("the stream's end = %v, want the check's error", err)
	}
	if !s.Pending(id) {
		t.Error("not pending after a refused fill")
	}
	if after := lstatObj(t, s, id); after.Mtim != before.Mtim || after.Blocks != 0 {
		t.Errorf("after a refused fill: mtime %v, %d blocks; want %v and none", after.Mtim, after.Blocks, before.Mtim)
	}
	g := &gatedSource{data: data, gate: make(chan struct{})}
	s.SetSource(g.source())
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.Open(id, unix.O_RDONLY) }); !bytes.Equal(got, data) {
		t.Error("after a refused fill, the next open read other bytes")
	}
	if starts := g.starts(); !slices.Equal(starts, []int64{0}) {
		t.Errorf("the fetch after a refused one started at %v, want [0]", starts)
	}
}

// TestPendingResumes: a fill stopped by the network goes on from where
// it stopped at the next open (a ranged fetch), and one stopped by a
// closing store (a daemon's end) from its checkpoint after a reopen,
// with the object's times kept; a resumed fill whose local bytes were
// damaged since is fetched once more from the start.
func TestPendingResumes(t *testing.T) {
	old := checkpointEvery
	checkpointEvery = 16 << 10
	t.Cleanup(func() { checkpointEvery = old })
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir})
	data := randomBytes(1 << 20)
	id := pendingObject(t, s, "k", len(data))
	before := lstatObj(t, s, id)

	const cut = 100_000
	s.SetSource(Source{Fetch: func(_ context.Context, _ string, off int64, w io.Writer) error {
		if _, err := w.Write(data[off:cut]); err != nil {
			return err
		}
		return errors.New("the network went away")
	}, Check: checkAgainst(data)})
	if _, err := s.Open(id, unix.O_RDONLY); err == nil {
		t.Fatal("open of an object whose fetch failed succeeded")
	}
	g := &gatedSource{data: data, stop: 300_000, gate: make(chan struct{})}
	s.SetSource(g.source())
	_, st, err := s.OpenStream(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Wait(300_000); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s) // stops the fill waiting at the gate
	if starts := g.starts(); !slices.Equal(starts, []int64{cut}) {
		t.Errorf("the fetch after a failed one started at %v, want [%d]", starts, cut)
	}

	s = openStore(t, Options{Dir: dir})
	g2 := &gatedSource{data: data, gate: make(chan struct{})}
	s.SetSource(g2.source())
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.OpenRead(id) }); !bytes.Equal(got, data) {
		t.Error("the resumed fill read other bytes")
	}
	if starts := g2.starts(); !slices.Equal(starts, []int64{300_000}) {
		t.Errorf("after a reopen the fetch started at %v, want [300000] (the checkpoint at the stop)", starts)
	}
	if after := lstatObj(t, s, id); after.Mtim != before.Mtim {
		t.Errorf("mtime after a resumed fill = %v, want %v", after.Mtim, before.Mtim)
	}

	// Damaged local bytes before the resume point: fetched again whole.
	id2 := pendingObject(t, s, "k", len(data))
	g3 := &gatedSource{data: data, stop: 200_000, gate: make(chan struct{})}
	s.SetSource(g3.source())
	_, st, err = s.OpenStream(id2)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Wait(200_000); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	l := filepath.Join(dir, "objects", id2[:2], id2)
	if err := os.Chmod(l, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(l, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("damage"), 1000); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	s = openStore(t, Options{Dir: dir})
	g4 := &gatedSource{data: data, gate: make(chan struct{})}
	s.SetSource(g4.source())
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.OpenRead(id2) }); !bytes.Equal(got, data) {
		t.Error("a resumed fill over damaged local bytes read other bytes")
	}
	if starts := g4.starts(); !slices.Equal(starts, []int64{200_000, 0}) {
		t.Errorf("over damaged local bytes the fetches started at %v, want [200000 0]", starts)
	}
}

// tapSource serves data in chunks, each let through by a token sent on
// tokens, or all of them once open is closed. It counts the bytes its
// writer took, records the offset each fetch started at, and the most
// fetches it served at once.
type tapSource struct {
	data   []byte
	chunk  int
	tokens chan struct{}
	open   chan struct{}

	served atomic.Int64
	mu     sync.Mutex
	froms  []int64
	active int
	most   int
}

func newTap(data []byte, chunk int) *tapSource {
	return &tapSource{data: data, chunk: chunk, tokens: make(chan struct{}), open: make(chan struct{})}
}

func (g *tapSource) source() Source {
	return Source{
		Fetch: func(ctx context.Context, _ string, off int64, w io.Writer) error {
			g.mu.Lock()
			g.froms = append(g.froms, off)
			g.active++
			g.most = max(g.most, g.active)
			g.mu.Unlock()
			defer func() {
				g.mu.Lock()
				g.active--
				g.mu.Unlock()
			}()
			for off < int64(len(g.data)) {
				select {
				case <-g.tokens:
				case <-g.open:
				case <-ctx.Done():
					return ctx.Err()
				}
				end := min(off+int64(g.chunk), int64(len(g.data)))
				n, err := w.Write(g.data[off:end])
				g.served.Add(int64(n))
				if err != nil {
					return err
				}
				off = end
			}
			return nil
		},
		Check: checkAgainst(g.data),
	}
}

func (g *tapSource) starts() ([]int64, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int64(nil), g.froms...), g.most
}

// TestPendingFillStopsWithItsReaders: a fill whose readers all closed
// stops within a chunk of the source's (the fetch ends, what arrived is
// checkpointed, the object stays pending and shows none of it as
// complete); the next open goes on from there, not from the start; a
// reader that closes while another opens at once leaves one fill at a
// time; a caller that needs the whole object keeps the fill going after
// the last reader closed; the object ends whole and right. A file
// opened again within stopAfter of its last close finds its fill still
// going.
func TestPendingFillStopsWithItsReaders(t *testing.T) {
	oldCk, oldStop := checkpointEvery, stopAfter
	checkpointEvery, stopAfter = 256<<10, 0
	t.Cleanup(func() { checkpointEvery, stopAfter = oldCk, oldStop })
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir})
	const chunk = 64 << 10
	data := randomBytes(4 << 20)
	id := pendingObject(t, s, "k", len(data))
	g := newTap(data, chunk)
	s.SetSource(g.source())

	// A reader reads the first 1 MiB and closes.
	f, st, err := s.OpenStream(id)
	if err != nil {
		t.Fatal(err)
	}
	for range (1 << 20) / chunk {
		g.tokens <- struct{}{}
	}
	if err := st.Wait(1 << 20); err != nil {
		t.Fatal(err)
	}
	first := st.current()
	// Closed and opened again within stopAfter: the same fill goes on.
	stopAfter = time.Hour
	_ = f.Close()
	st.Close()
	f, st, err = s.OpenStream(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.current() != first {
		t.Fatal("a file opened again right after its last close got another fill")
	}
	stopAfter = 0
	_ = f.Close()
	st.Close()
	st.Close() // idempotent
	at := g.served.Load()
	// The fetch must end without the source giving more: offer it chunks
	// until it ends, and count what its writer takes meanwhile.
	offered := 0
	for stopped := false; !stopped; {
		select {
		case g.tokens <- struct{}{}:
			if offered++; offered == 32 {
				t.Error("the fetch went on after its last reader closed")
				close(g.open)
				<-first.done
				stopped = true
			}
		case <-first.done:
			stopped = true
		}
	}
	if after := g.served.Load() - at; after > chunk {
		t.Errorf("%d bytes fetched after the last reader closed, want at most %d", after, chunk)
	}
	if !s.Pending(id) {
		t.Fatal("not pending after its fill stopped")
	}
	stoppedAt := g.served.Load()
	if b, _ := os.ReadFile(filepath.Join(dir, pendingName)); !bytes.Contains(b, fmt.Appendf(nil, "%s k %d ", id, stoppedAt)) {
		t.Errorf("the journal has no checkpoint at %d, where the fill stopped:\n%s", stoppedAt, b)
	}

	// Opened again: the fill goes on from where it stopped. Its reader
	// closes while a second reader opens: the second gets a fill that
	// waits for the stopping one, and goes on from where it stopped.
	f, st, err = s.OpenStream(id)
	if err != nil {
		t.Fatal(err)
	}
	g.tokens <- struct{}{}
	if err := st.Wait(stoppedAt + chunk); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	st.Close()
	f2, st2, err := s.OpenStream(id)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f2.Close() }()
	g.tokens <- struct{}{}
	if err := st2.Wait(stoppedAt + 2*chunk); err != nil {
		t.Fatal(err)
	}
	// A caller that needs the whole object (a copy-up, a push) joins;
	// the last reader closes: the fill goes on for it.
	whole := make(chan error, 1)
	go func() { whole <- s.Fetched(id) }()
	for !s.wantsWhole(id) {
		runtime.Gosched()
	}
	st2.Close()
	close(g.open)
	if err := <-whole; err != nil {
		t.Fatalf("the fill a caller needed whole, after the last reader closed: %v", err)
	}
	if s.Pending(id) {
		t.Error("pending after the fill a caller needed whole")
	}
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.OpenRead(id) }); !bytes.Equal(got, data) {
		t.Error("the object filled in three fills holds other bytes")
	}
	starts, most := g.starts()
	if len(starts) != 3 || starts[0] != 0 || starts[1] != stoppedAt || starts[2] != stoppedAt+chunk {
		t.Errorf("the fetches started at %v, want [0 %d %d]", starts, stoppedAt, stoppedAt+chunk)
	}
	if most != 1 {
		t.Errorf("%d fetches of one object at once, want 1", most)
	}
	if n := g.served.Load(); n > int64(len(data))+chunk {
		t.Errorf("%d bytes fetched for an object of %d, want at most a chunk more", n, len(data))
	}
}

// wantsWhole reports whether a caller waits for the whole object id.
func (s *Store) wantsWhole(id string) bool {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	return s.wants[id] > 0
}

// TestPendingRemovedWhileItsFillStops: an object removed while its
// fill stops (the source slow to see it) is not made pending again by
// the stopped fill's checkpoint: after a reopen it is not pending.
func TestPendingRemovedWhileItsFillStops(t *testing.T) {
	old := stopAfter
	stopAfter = 0
	t.Cleanup(func() { stopAfter = old })
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir})
	data := randomBytes(1 << 20)
	id := pendingObject(t, s, "k", len(data))
	cont := make(chan struct{})
	s.SetSource(Source{Fetch: func(_ context.Context, _ string, off int64, w io.Writer) error {
		if _, err := w.Write(data[:100_000]); err != nil {
			return err
		}
		<-cont // a source that does not heed its context
		_, err := w.Write(data[100_000:200_000])
		return err
	}, Check: checkAgainst(data)})
	f, st, err := s.OpenStream(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Wait(100_000); err != nil {
		t.Fatal(err)
	}
	fl := st.current()
	_ = f.Close()
	st.Close()
	if err := s.Remove(id); err != nil {
		t.Fatal(err)
	}
	close(cont)
	<-fl.done
	closeStore(t, s)
	s = openStore(t, Options{Dir: dir})
	if s.Pending(id) || s.PendingCount() != 0 {
		b, _ := os.ReadFile(filepath.Join(dir, pendingName))
		t.Errorf("a removed object is pending after a reopen; the journal:\n%s", b)
	}
}
