package overlay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
)

// TestOpenStreamsPendingObject: a read-only open of a file whose object
// is pending returns before the object is fetched, reads the bytes that
// arrived, is no passthrough candidate, and reports the whole file as
// data; a write open waits for the whole object without holding the
// view's lock (a mkdir meanwhile is not held up); once fetched, the
// file reads whole.
func TestOpenStreamsPendingObject(t *testing.T) {
	e := newEnv(t, nil)
	v := e.view
	data := streamBytes(1 << 20)
	me := Caller{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}
	n, n2 := pendingFile(t, e, "big", "k", len(data)), pendingFile(t, e, "big2", "k2", len(data))
	const first = 64 << 10
	gate := make(chan struct{})
	started := make(chan struct{}) // the fetch of k2 began
	e.bs.SetSource(heldSource(data, first, gate, func(key string, _ int64) {
		if key == "k2" {
			close(started)
		}
	}, nil))
	opened := false
	defer func() {
		if !opened {
			close(gate)
		}
	}()
	r, err := v.Open(n, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, r)
	head := make([]byte, first)
	if _, err := r.ReadAt(head, 0); err != nil || !bytes.Equal(head, data[:first]) {
		t.Fatalf("the first 64 KiB while the rest is not fetched: %v, or other bytes", err)
	}
	if !r.Streaming() || r.Upper() || r.Ready(0, len(data)) {
		t.Errorf("while fetching: Streaming %v, Upper %v, Ready(all) %v; want true, false, false", r.Streaming(), r.Upper(), r.Ready(0, len(data)))
	}
	if pos, err := r.Lseek(100, unix.SEEK_HOLE); err != nil || pos != int64(len(data)) {
		t.Errorf("SEEK_HOLE while fetching = %d, %v; want the size %d", pos, err, len(data))
	}
	wrote := make(chan error, 1)
	go func() {
		w, err := v.Open(n2, unix.O_RDWR)
		if err == nil {
			err = w.Release()
		}
		wrote <- err
	}()
	<-started // the write open waits for the fetch now
	made := make(chan error, 1)
	go func() { _, _, err := v.Mkdir(v.Root(), "d", 0o755, me); made <- err }()
	select {
	case err := <-made:
		if err != nil {
			t.Errorf("mkdir beside a write open waiting for a fetch: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("a mkdir waited for a write open that waits for a fetch")
	}
	close(gate)
	opened = true
	if err := <-wrote; err != nil {
		t.Fatalf("the write open once fetched: %v", err)
	}
	all := make([]byte, len(data))
	if _, err := r.ReadAt(all, 0); err != nil || !bytes.Equal(all, data) {
		t.Errorf("the whole file once fetched: %v, or other bytes", err)
	}
	if r.Streaming() || !r.Upper() {
		t.Errorf("once fetched: Streaming %v, Upper %v; want false, true", r.Streaming(), r.Upper())
	}
}

// TestReleaseStopsFetch: a file released while its object is still
// being fetched, by its only reader, stops the fetch (the source sees
// its context cancelled, and the object stays pending); the next open
// goes on from where it stopped and reads the file whole.
func TestReleaseStopsFetch(t *testing.T) {
	e := newEnv(t, nil)
	v := e.view
	data := streamBytes(1 << 20)
	n := pendingFile(t, e, "big", "k", len(data))
	obj := v.ObjectID(n)
	const first = 64 << 10
	ended := make(chan error, 2) // each fetch's end
	froms := make(chan int64, 2) // each fetch's start
	gate := make(chan struct{})  // held until the second fetch
	e.bs.SetSource(heldSource(data, first, gate, func(_ string, off int64) { froms <- off }, func(err error) { ended <- err }))
	r, err := v.Open(n, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, first)
	if _, err := r.ReadAt(head, 0); err != nil || !bytes.Equal(head, data[:first]) {
		t.Fatalf("the first 64 KiB: %v, or other bytes", err)
	}
	release(t, r)
	select {
	case err := <-ended:
		if err == nil {
			t.Error("the fetch ended without an error after its only reader was released")
		}
	case <-time.After(20 * time.Second):
		close(gate)
		t.Fatal("the fetch went on after its only reader was released")
	}
	if !e.bs.Pending(obj) {
		t.Fatal("the object is not pending after its fetch stopped")
	}
	close(gate)
	r, err = v.Open(n, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, r)
	all := make([]byte, len(data))
	if _, err := r.ReadAt(all, 0); err != nil || !bytes.Equal(all, data) {
		t.Errorf("the file read whole after its fetch stopped: %v, or other bytes", err)
	}
	if a, b := <-froms, <-froms; a != 0 || b != first {
		t.Errorf("the fetches started at %d and %d, want 0 and %d (where the first stopped)", a, b, first)
	}
}

// pendingFile makes a file of size bytes, name in the root of e's view,
// whose object is pending on key.
func pendingFile(t *testing.T, e *env, name, key string, size int) *Node {
	t.Helper()
	v := e.view
	me := Caller{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}
	n, f, _, err := v.Create(v.Root(), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644, me)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(f.Fd(), int64(size)); err != nil {
		t.Fatal(err)
	}
	release(t, f)
	if err := e.bs.MarkPending(map[string]string{v.ObjectID(n): key}); err != nil {
		t.Fatal(err)
	}
	return n
}

// heldSource serves data for any key: its first bytes at once, the
// rest once gate is closed (a fetch stopped meanwhile ends with its
// context's error). started, when set, is told the key and offset of
// each fetch as it starts; ended, when set, how each ends.
func heldSource(data []byte, first int64, gate <-chan struct{}, started func(key string, off int64), ended func(error)) backstore.Source {
	return backstore.Source{
		Fetch: func(ctx context.Context, key string, off int64, w io.Writer) (err error) {
			if started != nil {
				started(key, off)
			}
			if ended != nil {
				defer func() { ended(err) }()
			}
			if off < first {
				if _, err := w.Write(data[off:first]); err != nil {
					return err
				}
				off = first
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			_, err = w.Write(data[off:])
			return err
		},
		Check: func(_ string, sum []byte) error {
			if want := sha256.Sum256(data); !bytes.Equal(sum, want[:]) {
				return errors.New("damaged")
			}
			return nil
		},
	}
}

// streamBytes returns n bytes that repeat no short pattern.
func streamBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}
