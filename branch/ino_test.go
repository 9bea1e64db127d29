package branch

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func init() { childModes["alloc"] = childAlloc }

func TestAllocInoUniqueUnderConcurrency(t *testing.T) {
	both(t, func(t *testing.T, s *Store) {
		const workers, each = 8, 3000
		got := make([][]uint64, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				prev := uint64(0)
				for range each {
					ino, err := s.AllocIno()
					if err != nil {
						t.Error(err)
						return
					}
					if ino <= prev {
						t.Errorf("AllocIno = %#x after %#x in one goroutine, want increasing", ino, prev)
					}
					prev = ino
					got[w] = append(got[w], ino)
				}
			})
		}
		wg.Wait()
		seen := map[uint64]bool{}
		for _, inos := range got {
			for _, ino := range inos {
				if ino&(1<<63) == 0 {
					t.Fatalf("AllocIno = %#x, want the high bit set", ino)
				}
				if seen[ino] {
					t.Fatalf("AllocIno handed out %#x twice", ino)
				}
				seen[ino] = true
			}
		}
		if len(seen) != workers*each {
			t.Errorf("%d distinct inode numbers, want %d", len(seen), workers*each)
		}
	})
}

func TestAllocInoAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	var max uint64
	for round := range 3 {
		s := openDir(t, Options{Dir: dir})
		for i := range 1500 { // crosses a lease boundary
			ino, err := s.AllocIno()
			if err != nil {
				t.Fatal(err)
			}
			if ino <= max {
				t.Fatalf("round %d alloc %d: AllocIno = %#x, not above %#x from before", round, i, ino, max)
			}
			max = ino
		}
		closeStore(t, s)
	}
}

// childAlloc prints inode numbers until it is killed.
func childAlloc(dir string) error {
	s, err := Open(Options{Dir: dir})
	if err != nil {
		return err
	}
	for {
		ino, err := s.AllocIno()
		if err != nil {
			return err
		}
		fmt.Println(ino)
	}
}

func TestAllocInoAfterKill(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, "alloc", dir)
	var max uint64
	for range 3000 {
		line := c.line()
		ino, err := strconv.ParseUint(strings.TrimSpace(line), 10, 64)
		if err != nil {
			t.Fatalf("child said %q: %v (%s)", line, err, c.errb)
		}
		max = ino
	}
	c.kill(t)
	s := openDir(t, Options{Dir: dir})
	ino, err := s.AllocIno()
	if err != nil {
		t.Fatal(err)
	}
	if ino <= max {
		t.Errorf("AllocIno after the allocator was killed = %#x, not above %#x it handed out", ino, max)
	}
}
