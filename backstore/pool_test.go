package backstore

import (
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openFds counts this process's open file descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// waitPoolFull waits until the pool of s holds poolSize files.
func waitPoolFull(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(s.pool.fds) < poolSize {
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %d files after 20 s, want %d", len(s.pool.fds), poolSize)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPool: file objects made from the pool have their id, mode and
// owner, are listed and collected like any other, and the pool's
// unnamed files are neither listed nor left open by Close.
func TestPool(t *testing.T) {
	for _, kind := range []string{"hostfs", "ramdisk"} {
		t.Run(kind, func(t *testing.T) {
			before := openFds(t)
			s, err := Open(Options{Kind: kind, Dir: t.TempDir(), RamdiskSize: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			uid, gid := testOwner()
			// The first file starts the pool.
			ids := map[string]bool{newFile(t, s, 0600, nil): true}
			waitPoolFull(t, s)
			for i := 0; i < 2*poolSize; i++ {
				mode := uint32(0640 | i&1<<11) // every other one setgid
				used := s.pool.used.Load()
				id, f, err := s.CreateFile(mode, uid, gid)
				if err != nil {
					t.Fatalf("CreateFile: %v", err)
				}
				if i == 0 && s.pool.used.Load() != used+1 {
					t.Errorf("CreateFile with a full pool did not take a file from it")
				}
				if ids[id] {
					t.Fatalf("id %s handed out twice", id)
				}
				ids[id] = true
				st := lstatObj(t, s, id)
				wantModeOwner(t, fmt.Sprintf("CreateFile(%o) #%d", mode, i), st, unix.S_IFREG|mode, uid, gid)
				if st.Nlink != 1 {
					t.Errorf("object %s: nlink %d, want 1", id, st.Nlink)
				}
				if _, err := f.WriteString(id); err != nil {
					t.Errorf("write to %s: %v", id, err)
				}
				f.Close()
				if b, err := os.ReadFile(objPath(s, id)); err != nil || string(b) != id {
					t.Errorf("object %s holds %q (%v), want its id", id, b, err)
				}
			}
			listed := 0
			if err := s.Objects(func(id string) error {
				if !ids[id] {
					t.Errorf("Objects lists %s, which CreateFile never returned", id)
				}
				listed++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if listed != len(ids) {
				t.Errorf("Objects lists %d objects, want the %d made (pooled files are no objects)", listed, len(ids))
			}
			r, err := s.Collect(GCOptions{Referenced: func(func(string) error) error { return nil }, Grace: -1})
			if err != nil {
				t.Fatal(err)
			}
			if r.Removed != len(ids) || r.Objects != len(ids) {
				t.Errorf("Collect of an unreferenced store: %d objects, %d removed; want %d and %d", r.Objects, r.Removed, len(ids), len(ids))
			}
			if id := newFile(t, s, 0600, nil); id == "" {
				t.Error("no object after a collection")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if after := openFds(t); after != before {
				t.Errorf("%d fds open after Close, %d before Open: the pool leaks", after, before)
			}
		})
	}
}

// TestPoolCloseBeforeUse: a store closed before it made a file, or
// closed twice, starts no goroutine and leaves nothing open.
func TestPoolCloseBeforeUse(t *testing.T) {
	before := openFds(t)
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if s.pool.started {
		t.Error("Close started the pool")
	}
	if after := openFds(t); after != before {
		t.Errorf("%d fds open after Close, %d before Open", after, before)
	}
}
