package fs

import (
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// served collects the file handles a releaser served.
type served struct {
	mu  sync.Mutex
	fhs []uint64
}

func (s *served) serve(in *fuse.ReleaseIn) {
	s.mu.Lock()
	s.fhs = append(s.fhs, in.Fh)
	s.mu.Unlock()
}

func (s *served) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.fhs)
}

// waitServed waits until n RELEASEs were served, failing after 10 s (a
// releaser that missed a wake-up never serves them).
func (s *served) waitServed(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("served %d of %d RELEASEs after 10 s", s.count(), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestReleaserServesInOrder(t *testing.T) {
	var s served
	r := newReleaser(s.serve, releaseLinger)
	for i := range 2000 {
		r.push(&fuse.ReleaseIn{Fh: uint64(i)})
		if i%100 == 0 {
			time.Sleep(2 * releaseLinger) // let it sleep now and then
		}
	}
	r.close()
	if len(s.fhs) != 2000 {
		t.Fatalf("served %d RELEASEs, want 2000", len(s.fhs))
	}
	for i, fh := range s.fhs {
		if fh != uint64(i) {
			t.Fatalf("RELEASE %d served as number %d: order lost", fh, i)
		}
	}
}

// A push after the releaser went to sleep must wake it.
func TestReleaserWakesAfterSleeping(t *testing.T) {
	var s served
	r := newReleaser(s.serve, releaseLinger)
	defer r.close()
	for i := range 20 {
		r.push(&fuse.ReleaseIn{Fh: uint64(i)})
		s.waitServed(t, i+1)
		waitParked(t, r)
	}
}

// waitParked waits until the releaser sleeps, failing after 10 s.
func waitParked(t *testing.T, r *releaser) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		parked := r.parked
		r.mu.Unlock()
		if parked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("releaser still awake 10 s after its last RELEASE")
		}
		time.Sleep(releaseLinger)
	}
}

func TestReleaserConcurrentPushes(t *testing.T) {
	var s served
	r := newReleaser(s.serve, releaseLinger)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				r.push(&fuse.ReleaseIn{Fh: uint64(g*5000 + i)})
				if i%500 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	s.waitServed(t, 20000) // before close: every push was seen
	r.close()
	seen := make(map[uint64]bool, 20000)
	for _, fh := range s.fhs {
		if seen[fh] {
			t.Fatalf("RELEASE %d served twice", fh)
		}
		seen[fh] = true
	}
	if len(seen) != 20000 {
		t.Fatalf("served %d distinct RELEASEs, want 20000", len(seen))
	}
}

func TestReleaserCloseWhileSleeping(t *testing.T) {
	var s served
	r := newReleaser(s.serve, releaseLinger)
	waitParked(t, r)
	done := make(chan struct{})
	go func() { r.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("close of a sleeping releaser did not return in 10 s")
	}
	r.close() // a second close returns too
}

// On one CPU the releaser sleeps as soon as its queue is empty.
func TestReleaserNoLingerOnOneCPU(t *testing.T) {
	if got := lingerFor(1); got != 0 {
		t.Errorf("lingerFor(1) = %v, want 0", got)
	}
	if got := lingerFor(2); got != releaseLinger {
		t.Errorf("lingerFor(2) = %v, want %v", got, releaseLinger)
	}
	var s served
	r := newReleaser(s.serve, 0)
	defer r.close()
	r.push(&fuse.ReleaseIn{Fh: 1})
	s.waitServed(t, 1)
	waitParked(t, r)
	r.push(&fuse.ReleaseIn{Fh: 2})
	s.waitServed(t, 2)
}

// A RELEASE pushed after close is still served.
func TestReleaserPushAfterClose(t *testing.T) {
	var s served
	r := newReleaser(s.serve, releaseLinger)
	r.push(&fuse.ReleaseIn{Fh: 1})
	r.close()
	r.push(&fuse.ReleaseIn{Fh: 2})
	if len(s.fhs) != 2 || s.fhs[1] != 2 {
		t.Fatalf("served %v after close, want [1 2]", s.fhs)
	}
}

// TestReleaserSettle: settle returns only once every RELEASE pushed
// before it was served, the one the releaser is serving included.
func TestReleaserSettle(t *testing.T) {
	var s served
	started, unblock := make(chan struct{}), make(chan struct{})
	r := newReleaser(func(in *fuse.ReleaseIn) {
		if in.Fh == 1 {
			close(started)
			<-unblock // the releaser's turn is held here
		}
		s.serve(in)
	}, releaseLinger)
	defer r.close()
	r.push(&fuse.ReleaseIn{Fh: 1})
	<-started
	r.push(&fuse.ReleaseIn{Fh: 2})
	settled := make(chan struct{})
	go func() {
		r.settle()
		close(settled)
	}()
	select {
	case <-settled:
		t.Fatal("settle returned while a RELEASE pushed before it was being served")
	case <-time.After(50 * time.Millisecond):
	}
	close(unblock)
	<-settled
	if n := s.count(); n != 2 {
		t.Fatalf("settle returned with %d of 2 RELEASEs served", n)
	}
}

// TestReleaserSide: a kick has the side job run on the releaser's
// goroutine, lingering or parked, and after close in the kicker's.
func TestReleaserSide(t *testing.T) {
	var s served
	r := newReleaser(s.serve, releaseLinger)
	var mu sync.Mutex
	runs := 0
	ran := make(chan struct{}, 100)
	r.setSide(func() {
		mu.Lock()
		runs++
		mu.Unlock()
		ran <- struct{}{}
	})
	waitRun := func(what string) {
		t.Helper()
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatalf("the side job did not run within 10 s of a kick %s", what)
		}
	}
	r.kickSide()
	waitRun("while lingering")
	for range 5 {
		waitParked(t, r)
		r.kickSide()
		waitRun("while parked")
	}
	r.push(&fuse.ReleaseIn{Fh: 1}) // RELEASEs go on being served beside it
	s.waitServed(t, 1)
	r.close()
	r.kickSide()
	select {
	case <-ran:
	default:
		t.Fatal("a kick after close did not run the side job at once")
	}
	mu.Lock()
	defer mu.Unlock()
	if runs != 7 {
		t.Errorf("the side job ran %d times for 7 kicks", runs)
	}
}
