package branch

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
//	go test -run '^$' -bench 'CreateLayer|ResetTo|DeepRead' ./branch/
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
				if _, err := l.s.CreateLayer(fmt.Sprintf("br%d", i), snap); err != nil {
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

// BenchmarkDeepRead reads a branch of 10,000 entries that is the
// depth-th of a branch of a branch of ... (each changes 100 entries):
// Get of an entry of the bottom level, which every level is asked for,
// and Load of the whole branch, once the flattener has merged the chain
// (flattened). It reports the levels a read goes through ("levels") and
// the slowest and mean branch create of the stack ("create-max-ms",
// "create-mean-ms"): flattening is off the create's path. Run it with
//
//	go test -run '^$' -bench DeepRead ./branch/
func BenchmarkDeepRead(b *testing.B) {
	for _, depth := range []int{1, 10, 16, 32} {
		l := benchLayer(b)
		benchFill(b, l, 10_000, 1)
		var slowest, total time.Duration
		for i := 1; i < depth; i++ {
			snap, err := l.Snapshot("", KindAuto)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if l, err = l.s.CreateLayer(fmt.Sprintf("b%d", i), snap); err != nil {
				b.Fatal(err)
			}
			slowest = max(slowest, time.Since(start))
			total += time.Since(start)
			var batch Batch
			for j := range 100 {
				batch.Put(fmt.Sprintf("src/pkg%03d/file%06d.go", 9, 9000+(i*100+j)%1000), &Entry{Type: TypeFile, Ino: uint64(j), Object: fmt.Sprintf("%016x", j)})
			}
			if err := l.Commit(&batch); err != nil {
				b.Fatal(err)
			}
		}
		flattened(b, l.s)
		levels := 1 + len(l.state.Load().chain)
		report := func(b *testing.B) {
			b.ReportMetric(float64(levels), "levels")
			b.ReportMetric(float64(slowest.Microseconds())/1000, "create-max-ms")
			if depth > 1 {
				b.ReportMetric(float64(total.Microseconds())/1000/float64(depth-1), "create-mean-ms")
			}
		}
		b.Run(fmt.Sprintf("get/depth=%d", depth), func(b *testing.B) {
			i := 0
			for b.Loop() {
				k := i % 8000
				if _, err := l.Get(fmt.Sprintf("src/pkg%03d/file%06d.go", k/1000, k)); err != nil {
					b.Fatal(err)
				}
				i++
			}
			report(b)
		})
		b.Run(fmt.Sprintf("load/depth=%d", depth), func(b *testing.B) {
			for b.Loop() {
				n := 0
				if err := l.Load(func(string, *Entry) error { n++; return nil }); err != nil {
					b.Fatal(err)
				}
				if n != 10_000 {
					b.Fatalf("loaded %d entries, want 10,000", n)
				}
			}
			report(b)
		})
	}
}

// flattened waits for the flattener to be done with s's branches.
func flattened(tb testing.TB, s *Store) {
	tb.Helper()
	if err := s.flattenAll(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkLongSession measures the metadata store's growth in a long
// session that keeps its pre-run snapshot (issue 29): N metadata
// changes (each an overwrite of one of 1,000 entries, one commit each)
// after a snapshot, with and without it. It reports the bytes on disk
// of the database (LSM, value log, memtables' logs) while the store is
// open after the changes ("open-MiB", of which "sst-MiB" in tables and
// "vlog-MiB" in the value log), after Close ("closed-MiB"), and after a
// reopen and a full compaction ("MiB", and per change). The snapshot
// freezes its layer, so every version it does not see can go (see
// "Keeping versions" in the package doc): the size does not grow with
// N. Run it with
//
//	go test -run '^$' -bench LongSession -benchtime 1x ./branch/
func BenchmarkLongSession(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		for _, snap := range []bool{false, true} {
			b.Run(fmt.Sprintf("changes=%d/snapshot=%v", n, snap), func(b *testing.B) {
				for b.Loop() {
					dir := b.TempDir()
					meta := filepath.Join(dir, "meta")
					l, err := openMain(Options{Dir: dir})
					if err != nil {
						b.Fatal(err)
					}
					benchFill(b, l, 1000, 0)
					if snap {
						if _, err := l.Snapshot("pre-run", KindPreRun); err != nil {
							b.Fatal(err)
						}
					}
					var batch Batch
					for i := range n {
						batch.Reset()
						k := i % 1000
						batch.Put(fmt.Sprintf("src/pkg%03d/file%06d.go", k/1000, k), &Entry{Type: TypeFile, Ino: uint64(i), Object: fmt.Sprintf("%016x", i)})
						if err := l.Commit(&batch); err != nil {
							b.Fatal(err)
						}
					}
					if err := l.s.Settle(); err != nil {
						b.Fatal(err)
					}
					mib := func(n int64) float64 { return float64(n) / (1 << 20) }
					b.ReportMetric(mib(diskUsage(b, meta)), "open-MiB")
					b.ReportMetric(mib(diskUsageOf(b, meta, ".sst")), "sst-MiB")
					b.ReportMetric(mib(diskUsageOf(b, meta, ".vlog")), "vlog-MiB")
					start := time.Now()
					closeStore(b, l.s)
					b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "close-ms")
					b.ReportMetric(mib(diskUsage(b, meta)), "closed-MiB")
					if l, err = openMain(Options{Dir: dir}); err != nil {
						b.Fatal(err)
					}
					compactAll(b, l.s)
					closeStore(b, l.s)
					size := diskUsage(b, meta)
					b.ReportMetric(float64(size)/float64(n), "bytes/change")
					b.ReportMetric(mib(size), "MiB")
				}
			})
		}
	}
}

// diskUsageOf returns the bytes the files of dir whose names end with
// suffix take on disk.
func diskUsageOf(tb testing.TB, dir, suffix string) int64 {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			tb.Fatal(err)
		}
		n += info.Sys().(*syscall.Stat_t).Blocks * 512
	}
	return n
}

// diskUsage returns the bytes the files below dir take on disk.
func diskUsage(tb testing.TB, dir string) int64 {
	tb.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// BenchmarkDifference names what differs between a branch and snapshot
// A, as agentfs restore A does first: A holds n entries, then n/2 of
// them were rewritten and n/2 new ones made (in other directories), and
// a snapshot taken (restore's safety snapshot). ns/path is per path
// named, cpu-ns/path the process's CPU time per path. The rows with
// changed=10 rewrite 5 and make 5 of 100,000 instead: what naming a
// few paths costs in a large branch. Run it with
//
//	go test -run '^$' -bench Difference ./branch/
func BenchmarkDifference(b *testing.B) {
	for _, c := range []struct{ n, changed int }{{5_000, 5_000}, {100_000, 100_000}, {100_000, 10}} {
		b.Run(fmt.Sprintf("entries=%d/changed=%d", c.n, c.changed), func(b *testing.B) {
			n := c.n
			l := benchLayer(b)
			benchFill(b, l, n, 1)
			a, err := l.Snapshot("", KindAuto)
			if err != nil {
				b.Fatal(err)
			}
			var batch Batch
			for i := range c.changed / 2 {
				batch.Put(fmt.Sprintf("src/pkg%03d/file%06d.go", i/1000, i), &Entry{Type: TypeFile, Ino: uint64(i), Object: fmt.Sprintf("%08x%08x", 2, i)})
				j := n + i
				batch.Put(fmt.Sprintf("src/new%03d/file%06d.go", j/1000, j), &Entry{Type: TypeFile, Ino: uint64(j), Object: fmt.Sprintf("%08x%08x", 2, j)})
				if batch.Len() >= 10_000 || i == c.changed/2-1 {
					if err := l.Commit(&batch); err != nil {
						b.Fatal(err)
					}
					batch.Reset()
				}
			}
			if _, err := l.Snapshot("", KindAuto); err != nil {
				b.Fatal(err)
			}
			paths := 0
			var cpu time.Duration
			for b.Loop() {
				paths = 0
				before := benchCPU(b)
				ok, err := l.Difference(a, func(string, *Entry) { paths++ })
				if err != nil || !ok {
					b.Fatalf("Difference: %v, %v", ok, err)
				}
				cpu += benchCPU(b) - before
			}
			if paths != c.changed {
				b.Fatalf("Difference named %d paths, want %d", paths, c.changed)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(paths), "ns/path")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(paths), "cpu-ns/path")
		})
	}
}

// benchCPU returns the CPU time the process has used (user and
// system, all threads): steadier than the time on a loaded machine.
func benchCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
