package backstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"

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

// countingFetcher serves data for key, counting the fetches.
func countingFetcher(key string, data []byte, n *atomic.Int64) Fetcher {
	return func(_ context.Context, k string, w io.Writer) error {
		n.Add(1)
		if k != key {
			return errors.New("unknown key " + k)
		}
		_, err := w.Write(data)
		return err
	}
}

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
	s.SetFetcher(countingFetcher("k1", data, &fetches))
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
	s.SetFetcher(func(_ context.Context, _ string, w io.Writer) error {
		if _, err := w.Write([]byte("half")); err != nil {
			return err
		}
		return errors.New("the network went away")
	})
	if _, err := s.Open(id, unix.O_RDONLY); err == nil {
		t.Fatal("open of an object whose fetch failed succeeded")
	}
	if !s.Pending(id) {
		t.Fatal("not pending after a failed fetch")
	}
	var fetches atomic.Int64
	s.SetFetcher(countingFetcher("k", data, &fetches))
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
	s.SetFetcher(countingFetcher("k", []byte("nine b..\n"), &fetches))
	if _, err := s.Open(id, unix.O_RDONLY); err == nil {
		t.Fatal("open of an object whose fetch brought too many bytes succeeded")
	}
	if st := lstatObj(t, s, id); st.Size != int64(len(data)) {
		t.Errorf("size after the failed fill = %d, want %d", st.Size, len(data))
	}
	s.SetFetcher(countingFetcher("k", data, &fetches))
	if got := readObject(t, s, func() (io.ReadCloser, error) { return s.Open(id, unix.O_RDONLY) }); !bytes.Equal(got, data) {
		t.Errorf("read %q, want %q", got, data)
	}
}

// TestPendingSurvivesReopen: the journal keeps pending objects pending
// across a reopen (a crash before the fill), where an open without a
// fetcher fails with ErrPending; once filled, a reopen finds them done.
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
		t.Errorf("open with no fetcher = %v, want ErrPending", err)
	}
	var fetches atomic.Int64
	s.SetFetcher(countingFetcher("k", data, &fetches))
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
