package branch

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/agentfs/agentfs/internal/testenv"
)

// smallTxn makes badger transactions hold about 1,600 entries, so that
// a few thousand changes need a split commit.
const smallTxn = 1 << 20

func init() {
	childModes["split-crash"] = childSplitCrash
	childModes["commits"] = childCommits
}

// setHook installs testHookSplitPart for the test.
func setHook(t *testing.T, h func(part int) error) {
	testHookSplitPart = h
	t.Cleanup(func() { testHookSplitPart = nil })
}

// preState commits n entries k/i (ino 1) and old/i, and returns them.
func preState(l *Layer, n int) error {
	var b Batch
	for i := range n {
		b.Put(fmt.Sprintf("k/%05d", i), &Entry{Type: TypeFile, Ino: 1})
		b.Put(fmt.Sprintf("old/%05d", i), &Entry{Type: TypeFile, Ino: 1})
	}
	return l.Commit(&b)
}

// bigChange rewrites k/*, deletes old/* and creates new/*: 3n changes.
func bigChange(n int) *Batch {
	var b Batch
	for i := range n {
		b.Put(fmt.Sprintf("k/%05d", i), &Entry{Type: TypeFile, Ino: 2})
		b.Delete(fmt.Sprintf("old/%05d", i))
		b.Put(fmt.Sprintf("new/%05d", i), &Entry{Type: TypeFile, Ino: 2})
	}
	return &b
}

// checkState verifies that the layer holds exactly preState(n) (before)
// or preState(n) followed by bigChange(n) (after).
func checkState(t *testing.T, l *Layer, n int, after bool) {
	t.Helper()
	paths, m := loadAll(t, l)
	wantIno, wantPfx := uint64(1), "old/"
	if after {
		wantIno, wantPfx = 2, "new/"
	}
	if len(paths) != 2*n {
		t.Errorf("%d entries, want %d (after = %v)", len(paths), 2*n, after)
	}
	bad := 0
	for _, p := range paths {
		if !strings.HasPrefix(p, "k/") && !strings.HasPrefix(p, wantPfx) || m[p].Ino != wantIno {
			bad++
			if bad < 5 {
				t.Errorf("entry %s ino %d, want only k/ and %s entries with ino %d", p, m[p].Ino, wantPfx, wantIno)
			}
		}
	}
	var pending bool
	if err := l.s.view(func(txn *badger.Txn) error {
		_, err := txn.Get(pendingKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		pending = err == nil
		return err
	}); err != nil {
		t.Fatalf("reading %s: %v", pendingKey, err)
	}
	if pending {
		t.Errorf("%s is still set", pendingKey)
	}
}

func TestSplitCommit(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir, memTableSize: smallTxn})
	parts := 0
	setHook(t, func(part int) error {
		if part > 0 {
			parts++
		}
		return nil
	})
	l := mainLayer(t, s)
	const n = 4000
	if err := preState(l, n); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(bigChange(n)); err != nil {
		t.Fatal(err)
	}
	if parts < 4 {
		t.Errorf("%d transactions for two commits of %d and %d changes, want a split", parts, 2*n, 3*n)
	}
	checkState(t, l, n, true)
	closeStore(t, s)
	s = openDir(t, Options{Dir: dir}) // default memtable size: the format does not depend on it
	checkState(t, mainLayer(t, s), n, true)
}

func TestSplitCommitFailureRollsBack(t *testing.T) {
	for _, failAt := range []int{1, 3, -1} {
		t.Run(fmt.Sprint("part", failAt), func(t *testing.T) {
			dir := t.TempDir()
			s := openDir(t, Options{Dir: dir, memTableSize: smallTxn})
			l := mainLayer(t, s)
			const n = 3000
			if err := preState(l, n); err != nil {
				t.Fatal(err)
			}
			injected := errors.New("injected I/O error")
			setHook(t, func(part int) error {
				if part == failAt {
					return injected
				}
				return nil
			})
			if err := l.Commit(bigChange(n)); !errors.Is(err, injected) {
				t.Fatalf("Commit with a failing part %d: %v, want the injected error", failAt, err)
			}
			testHookSplitPart = nil
			checkState(t, l, n, false)
			// The store goes on working.
			var b Batch
			b.Put("k/00000", &Entry{Type: TypeFile, Ino: 1})
			if err := l.Commit(&b); err != nil {
				t.Fatalf("Commit after a rolled-back commit: %v", err)
			}
			closeStore(t, s)
			s = openDir(t, Options{Dir: dir})
			checkState(t, mainLayer(t, s), n, false)
		})
	}
}

// childSplitCrash commits preState, then kills itself (SIGKILL) after
// part BRANCH_TEST_PART of a split commit.
func childSplitCrash(dir string) error {
	l, err := openMain(Options{Dir: dir, memTableSize: smallTxn})
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(os.Getenv("BRANCH_TEST_N"))
	if err := preState(l, n); err != nil {
		return err
	}
	killAt, _ := strconv.Atoi(os.Getenv("BRANCH_TEST_PART"))
	testHookSplitPart = func(part int) error {
		if part == killAt {
			if err := syscall.Kill(os.Getpid(), syscall.SIGKILL); err != nil {
				return fmt.Errorf("killing myself: %w", err)
			}
			time.Sleep(time.Minute)
		}
		return nil
	}
	if err := l.Commit(bigChange(n)); err != nil {
		return err
	}
	fmt.Println("committed")
	return nil
}

func TestCrashDuringSplitCommit(t *testing.T) {
	const n = 3000 // 9,000 changes: about 6 parts
	for _, killAt := range []int{1, 2, 5, -1, 100} {
		t.Run(fmt.Sprint("part", killAt), func(t *testing.T) {
			dir := t.TempDir()
			c := startChild(t, "split-crash", dir, fmt.Sprint("BRANCH_TEST_N=", n), fmt.Sprint("BRANCH_TEST_PART=", killAt))
			out := c.line()
			err := c.cmd.Wait()
			committed := out == "committed"
			if killAt != 100 && (committed || err == nil || !strings.Contains(err.Error(), "killed")) {
				t.Fatalf("child: %q, %v (%s), want it killed", out, err, c.errb)
			}
			if killAt == 100 && !committed {
				t.Fatalf("child: %q, %v (%s), want it to commit", out, err, c.errb)
			}
			// A read-only open either reads the state before the torn
			// commit or asks for a writable open first.
			if r, err := Open(Options{Dir: dir, ReadOnly: true}); err == nil {
				checkState(t, mainLayer(t, r), n, committed)
				closeStore(t, r)
			} else if !strings.Contains(err.Error(), "not closed cleanly") {
				t.Errorf("read-only open after the crash: %v", err)
			}
			var log strings.Builder
			s := openDir(t, Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if got := strings.Contains(log.String(), "rolled back"); got != !committed {
				t.Errorf("reopen logged a roll-back: %v, want %v (log: %s)", got, !committed, log.String())
			}
			l := mainLayer(t, s)
			checkState(t, l, n, committed)
			if err := l.Commit(bigChange(n)); err != nil {
				t.Fatalf("Commit after recovery: %v", err)
			}
			checkState(t, l, n, true)
			closeStore(t, s)
			checkState(t, mainLayer(t, openDir(t, Options{Dir: dir})), n, true)
		})
	}
}

// childCommits commits batch after batch: batch i puts b/<i>/<j> for j
// below batchSize(i) and sets "last" to i. After every other Commit it
// also settles, and then prints "done i": the commits that survive a
// kill must include it (the others need not have been written yet).
func childCommits(dir string) error {
	l, err := openMain(Options{Dir: dir, memTableSize: smallTxn})
	if err != nil {
		return err
	}
	for i := 0; ; i++ {
		var b Batch
		for j := range batchSize(i) {
			b.Put(fmt.Sprintf("b/%06d/%05d", i, j), &Entry{Type: TypeFile, Ino: uint64(i)})
		}
		b.Put("last", &Entry{Type: TypeFile, Ino: uint64(i)})
		if i > 0 {
			b.Delete(fmt.Sprintf("b/%06d/00000", i-1))
			b.Put(fmt.Sprintf("b/%06d/00001", i-1), &Entry{Type: TypeFile, Ino: uint64(i)})
		}
		if err := l.Commit(&b); err != nil {
			return err
		}
		if i%2 == 1 {
			continue
		}
		if err := l.s.Settle(); err != nil {
			return err
		}
		fmt.Printf("done %d\n", i)
	}
}

// batchSize: mostly small batches, every fifth one split.
func batchSize(i int) int {
	if i%5 == 4 {
		return 3000
	}
	return 2 + i%7
}

// TestKillDuringCommits kills a committing child at random points and
// checks that the store holds exactly a prefix of its commits, which
// includes every commit it reported settled.
func TestKillDuringCommits(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t, branchSeedEnv), 0))
	for round := range 4 {
		dir := t.TempDir()
		reported := killAfter(t, rng, "commits", dir, 3+rng.IntN(25))

		s := openDir(t, Options{Dir: dir})
		_, m := loadAll(t, mainLayer(t, s))
		last := int(m["last"].Ino)
		if last < reported {
			t.Errorf("round %d: last complete commit %d, but the child reported %d", round, last, reported)
		}
		for i := 0; i <= last+1; i++ {
			present := 0
			for j := range batchSize(i) {
				if e, ok := m[fmt.Sprintf("b/%06d/%05d", i, j)]; ok && (e.Ino == uint64(i) || j == 1) {
					present++
				}
			}
			want := batchSize(i)
			if i < last {
				want-- // b/i/00000 deleted by commit i+1
			}
			if i == last+1 {
				want = 0
			}
			if present != want {
				t.Errorf("round %d (kill after %d, last %d): batch %d has %d entries, want %d", round, reported, last, i, present, want)
			}
		}
		if _, ok := m[fmt.Sprintf("b/%06d/00001", last)]; !ok {
			t.Errorf("round %d: b/%06d/00001 missing", round, last)
		}
		closeStore(t, s)
	}
}

// TestPipelinedCommits: Commit returns before badger writes, yet every
// read sees every Commit that returned, and Settle, Sync and a reopen
// find all of them.
func TestPipelinedCommits(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	l := mainLayer(t, s)
	for i := range 500 {
		var b Batch
		b.Put(fmt.Sprintf("f%04d", i), &Entry{Type: TypeFile, Ino: uint64(i + 1)})
		if i > 0 {
			b.Delete(fmt.Sprintf("f%04d", i-1))
		}
		if err := l.Commit(&b); err != nil {
			t.Fatal(err)
		}
		e, err := l.Get(fmt.Sprintf("f%04d", i))
		if err != nil || e.Ino != uint64(i+1) {
			t.Fatalf("Get right after Commit %d: %+v, %v", i, e, err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	_, m := loadAll(t, mainLayer(t, openDir(t, Options{Dir: dir})))
	if len(m) != 1 || m["f0499"].Ino != 500 {
		t.Errorf("after reopen: %v, want f0499 alone", m)
	}
}

// TestCommitLostAfterHandOver: a commit badger fails to write after
// Commit returned fails the store: Settle, Sync and later commits say
// so and name the fix; what was written before stays.
func TestCommitLostAfterHandOver(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, Options{Dir: dir})
	l := mainLayer(t, s)
	put := func(name string) error { return putOne(l, name) }
	if err := put("kept"); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(); err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected write error")
	testHookWritten = func(uint64) error { return injected }
	t.Cleanup(func() { testHookWritten = nil })
	if err := put("lost"); err != nil {
		t.Fatalf("Commit = %v, want nil (the failure comes after the hand-over)", err)
	}
	err := s.Settle()
	if err == nil || !strings.Contains(err.Error(), "injected write error") || !strings.Contains(err.Error(), "remount") {
		t.Fatalf("Settle after a lost commit = %v, want the error and the fix", err)
	}
	testHookWritten = nil
	if err := s.Sync(); err == nil {
		t.Error("Sync after a lost commit succeeded")
	}
	if err := put("later"); err == nil {
		t.Error("Commit after a lost commit succeeded")
	}
	if _, err := l.Get("kept"); err != nil {
		t.Errorf("Get kept: %v", err)
	}
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), "injected write error") {
		t.Errorf("Close after a lost commit = %v, want the error", err)
	}
}

// TestCommitLostBeforeAWrittenOne: badger calls back in no order; a
// commit written after one that failed is neither reported settled nor
// published.
func TestCommitLostBeforeAWrittenOne(t *testing.T) {
	s := openDir(t, Options{Dir: t.TempDir()})
	l := mainLayer(t, s)
	put := func(name string) error { return putOne(l, name) }
	if err := put("first"); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(); err != nil {
		t.Fatal(err)
	}
	failing := s.nextTs
	injected := errors.New("injected write error")
	testHookWritten = func(ts uint64) error {
		if ts == failing {
			time.Sleep(50 * time.Millisecond) // called back after the next one
			return injected
		}
		return nil
	}
	t.Cleanup(func() { testHookWritten = nil })
	if err := put("lost"); err != nil {
		t.Fatal(err)
	}
	if err := put("after"); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(); !errors.Is(err, injected) && (err == nil || !strings.Contains(err.Error(), injected.Error())) {
		t.Fatalf("Settle = %v, want the lost commit's error", err)
	}
	for _, name := range []string{"lost", "after"} {
		if _, err := l.Get(name); err == nil {
			t.Errorf("%s is visible after the commit before it was lost", name)
		}
	}
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), injected.Error()) {
		t.Errorf("Close after a lost commit = %v, want the error", err)
	}
}

// TestCommitsInFlightBounded: however fast commits come, at most
// maxInFlight wait to be written.
func TestCommitsInFlightBounded(t *testing.T) {
	s := openDir(t, Options{Dir: t.TempDir()})
	l := mainLayer(t, s)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	testHookWritten = func(uint64) error { <-release; return nil }
	// Before the store closes; the hook is cleared only once every
	// callback that reads it has run.
	t.Cleanup(func() {
		free()
		if err := s.Settle(); err != nil {
			t.Errorf("Settle: %v", err)
		}
		testHookWritten = nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 3 * maxInFlight {
			if err := putOne(l, fmt.Sprintf("f%d", i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	inFlight := func() int {
		s.tsMu.Lock()
		defer s.tsMu.Unlock()
		return s.inFlight
	}
	// Badger writes nothing until release: the commits pile up to the
	// bound, and then Commit waits. (The deadline is against a hang,
	// not a timing check.)
	deadline := time.Now().Add(30 * time.Second)
	for inFlight() < maxInFlight && time.Now().Before(deadline) {
		select {
		case <-done:
			t.Fatalf("all %d commits returned while badger was held: no bound", 3*maxInFlight)
		case <-time.After(time.Millisecond):
		}
	}
	if n := inFlight(); n != maxInFlight {
		t.Fatalf("%d commits in flight while badger was held, want %d: Commit waits for badger", n, maxInFlight)
	}
	select {
	case <-done:
		t.Fatalf("all %d commits returned while badger was held: no bound", 3*maxInFlight)
	case <-time.After(20 * time.Millisecond):
	}
	if n := inFlight(); n != maxInFlight {
		t.Errorf("%d commits in flight while badger was held, want at most %d", n, maxInFlight)
	}
	free()
	<-done
}

// putOne commits one file entry at name.
func putOne(l *Layer, name string) error {
	var b Batch
	b.Put(name, &Entry{Type: TypeFile, Ino: 7})
	return l.Commit(&b)
}
