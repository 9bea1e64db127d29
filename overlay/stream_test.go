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
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	me := Caller{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}
	pending := func(name, key string) *Node {
		n, f, _, err := v.Create(v.Root(), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644, me)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(f.Fd(), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		release(t, f)
		if err := e.bs.MarkPending(map[string]string{v.ObjectID(n): key}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n, n2 := pending("big", "k"), pending("big2", "k2")
	const first = 64 << 10
	gate := make(chan struct{})
	started := make(chan struct{}) // the fetch of k2 began
	e.bs.SetSource(backstore.Source{
		Fetch: func(ctx context.Context, key string, off int64, w io.Writer) error {
			if key == "k2" {
				close(started)
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
			_, err := w.Write(data[off:])
			return err
		},
		Check: func(_ string, sum []byte) error {
			if want := sha256.Sum256(data); !bytes.Equal(sum, want[:]) {
				return errors.New("damaged")
			}
			return nil
		},
	})
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
