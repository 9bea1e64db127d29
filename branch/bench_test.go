package branch

import (
	"fmt"
	"testing"
)

// BenchmarkCommitOne commits one entry per batch, as a namespace
// operation of the overlay does.
func BenchmarkCommitOne(b *testing.B) {
	l := benchLayer(b)
	var batch Batch
	i := 0
	for b.Loop() {
		batch.Reset()
		batch.Put(fmt.Sprintf("dir/file%08d", i), &Entry{Type: TypeFile, Ino: uint64(i), Object: "0123456789abcdef"})
		if err := l.Commit(&batch); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkCommitParallel commits one entry per batch from several
// goroutines (commits are serialized).
func BenchmarkCommitParallel(b *testing.B) {
	l := benchLayer(b)
	b.RunParallel(func(pb *testing.PB) {
		ino, _ := l.s.AllocIno()
		i := 0
		for pb.Next() {
			var batch Batch
			batch.Put(fmt.Sprintf("%x/file%08d", ino, i), &Entry{Type: TypeFile, Ino: uint64(i)})
			if err := l.Commit(&batch); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func BenchmarkGet(b *testing.B) {
	l := benchLayer(b)
	var batch Batch
	for i := range 10000 {
		batch.Put(fmt.Sprintf("dir/file%05d", i), &Entry{Type: TypeFile, Ino: uint64(i)})
	}
	if err := l.Commit(&batch); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if _, err := l.Get(fmt.Sprintf("dir/file%05d", i%10000)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func benchLayer(b *testing.B) *Layer {
	l, err := openMain(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { closeStore(b, l.s) })
	return l
}

// BenchmarkSnapshot takes snapshots of a branch of 1,000 and of 100,000
// entries: the cost must not depend on the number (one small commit and
// a sync). Run it with
//
//	go test -run '^$' -bench Snapshot ./branch/
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			l := benchLayer(b)
			var batch Batch
			for i := range n {
				batch.Put(fmt.Sprintf("src/pkg%03d/file%05d.go", i/1000, i), &Entry{Type: TypeFile, Ino: uint64(i), Object: fmt.Sprintf("%016x", i)})
				if batch.Len() == 10_000 || i == n-1 {
					if err := l.Commit(&batch); err != nil {
						b.Fatal(err)
					}
					batch.Reset()
				}
			}
			for b.Loop() {
				if _, err := l.Snapshot("", KindAuto); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchFill commits n entries to l, in batches of 10,000.
func benchFill(b *testing.B, l *Layer, n, gen int) {
	b.Helper()
	var batch Batch
	for i := range n {
		batch.Put(fmt.Sprintf("src/pkg%03d/file%06d.go", i/1000, i), &Entry{Type: TypeFile, Ino: uint64(i), Object: fmt.Sprintf("%08x%08x", gen, i)})
		if batch.Len() == 10_000 || i == n-1 {
			if err := l.Commit(&batch); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
}

// BenchmarkCreateLayer creates branches from a snapshot of 5,000 and of
// 100,000 entries: the store's part of agentfs branch create (issue
// 29: at most 1 ms in the daemon, whatever the number). Run it with
//
//	go test -run '^$' -bench 'CreateLayer|ResetTo|DeepGet' ./branch/
func BenchmarkCreateLayer(b *testing.B) {
	for _, n := range []int{5_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			l := benchLayer(b)
			benchFill(b, l, n, 1)
			snap, err := l.Snapshot("", KindAuto)
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				if _, err := l.s.CreateLayer(fmt.Sprintf("b%d", i), snap); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkResetTo resets a branch of n entries, n/2 of which changed
// since the snapshot, to that snapshot and back: the store's part of
// agentfs restore.
func BenchmarkResetTo(b *testing.B) {
	for _, n := range []int{5_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			l := benchLayer(b)
			benchFill(b, l, n, 1)
			a, err := l.Snapshot("", KindAuto)
			if err != nil {
				b.Fatal(err)
			}
			benchFill(b, l, n/2, 2)
			c, err := l.Snapshot("", KindAuto)
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				to := a
				if i%2 == 1 {
					to = c
				}
				if err := l.ResetTo(to); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
