package branch

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// queued is how many commits wait to be handed to badger.
func (s *Store) queued() int {
	s.ho.mu.Lock()
	defer s.ho.mu.Unlock()
	return len(s.ho.q)
}

// waitParkedIn waits until a goroutine is parked (blocked, not running
// nor runnable) in the function named fn ("pkg.(*T).method(", as stack
// traces write it): a barrier for a goroutine that must have reached a
// point where it waits. It fails the test after a generous bound.
func waitParkedIn(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			header, _, _ := strings.Cut(g, "\n")
			if strings.Contains(g, fn) && !strings.Contains(header, "[running]") && !strings.Contains(header, "[runnable]") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine parked in %s after 30 s:\n%s", fn, stacks)
		}
	}
}

// TestHandOff: with a kick, a commit is queued and kicked, not handed
// over; a read hands over what is queued first and sees it; HandOver
// hands over in order (commits racing it included), and Close hands
// over what is left, so a reopen finds it.
func TestHandOff(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	l := mainLayer(t, s)
	var kicks atomic.Int32
	s.HandOffWith(func() { kicks.Add(1) })

	// Fewer than maxInFlight: the next one would wait for them, and
	// so hand them over.
	const n = maxInFlight - 2
	for i := range n {
		if err := putOne(l, fmt.Sprintf("q%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if k, q := kicks.Load(), s.queued(); k != n || q != n {
		t.Fatalf("after %d commits: %d kicks, %d queued; want %d and %d", n, k, q, n, n)
	}
	if _, err := l.Get(fmt.Sprintf("q%03d", n-1)); err != nil {
		t.Fatalf("Get of the last queued commit: %v (a read must hand over what is queued)", err)
	}
	if q := s.queued(); q != 0 {
		t.Errorf("%d commits still queued after a read", q)
	}

	// A kick that hands over from another goroutine, as the mount's
	// releaser does, racing the commits: each commit renames the one
	// file, so a commit handed over out of order leaves two.
	var handed []uint64 // guarded by the store's hand-over turn
	testHookHandedOver = func(ts uint64) { handed = append(handed, ts) }
	t.Cleanup(func() { testHookHandedOver = nil })
	var wg sync.WaitGroup
	s.HandOffWith(func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.HandOver()
		}()
	})
	for i := range 300 {
		var b Batch
		b.Put(fmt.Sprintf("r%03d", i), &Entry{Type: TypeFile, Ino: uint64(i + 1)})
		if i > 0 {
			b.Delete(fmt.Sprintf("r%03d", i-1))
		}
		if err := l.Commit(&b); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if err := s.Settle(); err != nil {
		t.Fatal(err)
	}
	_, m := loadAll(t, l)
	var r []string
	for name := range m {
		if name[0] == 'r' {
			r = append(r, name)
		}
	}
	if len(r) != 1 || m["r299"].Ino != 300 {
		t.Errorf("after 300 renames handed over from other goroutines: %v, want r299 alone", r)
	}
	testHookHandedOver = nil
	if len(handed) != 300 {
		t.Errorf("%d commits handed over, want 300", len(handed))
	}
	for i := 1; i < len(handed); i++ {
		if handed[i] <= handed[i-1] {
			t.Fatalf("commit at %d handed to badger after the one at %d", handed[i], handed[i-1])
		}
	}

	// Left queued at Close: Close hands it over.
	s.HandOffWith(func() {})
	if err := putOne(l, "last"); err != nil {
		t.Fatal(err)
	}
	if q := s.queued(); q != 1 {
		t.Fatalf("%d queued, want 1", q)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, m = loadAll(t, mainLayer(t, openDir(t, Options{Dir: dir})))
	if _, ok := m["last"]; !ok {
		t.Error("a commit queued at Close is missing after a reopen")
	}
	if _, ok := m["q010"]; !ok {
		t.Error("q010 is missing after a reopen")
	}
}

// TestHandOffSplitCommit: a commit too big for one transaction, made
// while smaller ones wait in the queue, reaches badger after them: its
// changes win.
func TestHandOffSplitCommit(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir, memTableSize: smallTxn})
	l := mainLayer(t, s)
	const n = 4000
	if err := preState(l, n); err != nil {
		t.Fatal(err)
	}
	s.HandOffWith(func() {}) // nothing hands over but the store itself
	var b Batch
	b.Put("gone", &Entry{Type: TypeFile, Ino: 1})
	if err := l.Commit(&b); err != nil {
		t.Fatal(err)
	}
	big := bigChange(n)
	big.Delete("gone")
	if err := l.Commit(big); err != nil {
		t.Fatal(err)
	}
	checkState(t, l, n, true)
	if _, err := l.Get("gone"); err == nil {
		t.Error("a name the split commit deleted is there: the queued commit before it was handed over after it")
	}
	closeStore(t, s)
	l = mainLayer(t, openDir(t, Options{Dir: dir}))
	checkState(t, l, n, true)
	if _, err := l.Get("gone"); err == nil {
		t.Error("after a reopen, a name the split commit deleted is there")
	}
}

// TestSettleRacingCommit: with nobody handing over but the waiters (as
// when the mount's releaser itself waits, in a RELEASE that reaps an
// object), a Settle that comes while a commit is made returns. A commit
// was made the one in flight before it was queued: a Settle between the
// two handed over nothing and then waited for it for ever
// (TestBindIsolation hung in CI so, about one run in ten). The race is
// made to happen every time: the commit, once in flight and before it
// is queued, lets Settle run until it waits inside Store.wait (for the
// hand-over's lock as the store is now; for the commit, as it was).
func TestSettleRacingCommit(t *testing.T) {
	s := openDir(t, Options{Dir: t.TempDir()})
	l := mainLayer(t, s)
	s.HandOffWith(func() {})
	defer s.HandOffWith(nil)
	settled := make(chan error, 1)
	testHookInFlight = func() {
		testHookInFlight = nil
		go func() { settled <- s.Settle() }()
		waitParkedIn(t, "branch.(*Store).wait(")
	}
	t.Cleanup(func() { testHookInFlight = nil })
	if err := putOne(l, "f"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-settled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Settle during a commit did not return: it waits for a commit nobody hands over")
	}
}
