package overlay

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// BenchmarkRestore times FS.Restore (branch.Layer.Difference, the
// branch's ResetTo and the update of the index and of the nodes; no
// safety snapshot, no kernel to notify) of a difference of n files
// shaped as agentfs-bench's restore rows make it: snapshot A holds n
// files in directories of 1,000; then half of them are rewritten and
// n/2 new ones made in new directories, and the kernel knows a node of
// every file and directory, as after those writes through a mount.
// Each timed restore goes to A, the untimed one back to the changed
// state. cpu-ns/path is the process's CPU time (all threads: the
// garbage collector's too) per path, steadier than the time on a
// loaded machine. The entries are written to the store directly, with made-up
// objects (nothing timed reads an object). Run it with
//
//	go test -run '^$' -bench Restore -count 5 ./overlay/
func BenchmarkRestore(b *testing.B) {
	for _, n := range []int{5_000, 100_000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			e := newEnv(b, nil)
			benchEntries(b, e, 0, n, 1)
			a, err := e.view.Snapshot("A", branch.KindManual)
			if err != nil {
				b.Fatal(err)
			}
			benchEntries(b, e, 0, n/2, 2)
			benchEntries(b, e, n, n+n/2, 2)
			changed, err := e.view.Snapshot("changed", branch.KindManual)
			if err != nil {
				b.Fatal(err)
			}
			benchKnowAll(b, e, n+n/2)
			var cpu time.Duration // the process's CPU time in the timed restores
			for b.Loop() {
				before := cpuTime(b)
				if _, err := e.view.Restore(a); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime(b) - before
				b.StopTimer()
				if _, err := e.view.Restore(changed); err != nil {
					b.Fatal(err)
				}
				benchKnowAll(b, e, n+n/2)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/path")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/path")
		})
	}
}

// benchEntries writes the entries of files i in [from, to), generation
// gen, to the view's branch (directories of 1,000 files, as
// agentfs-bench's changePath), and reloads the view.
func benchEntries(b *testing.B, e *env, from, to, gen int) {
	b.Helper()
	l := e.view.Layer()
	var batch branch.Batch
	for i := from; i < to; i++ {
		if i%1000 == 0 || i == from {
			batch.Put(fmt.Sprintf("d%03d", i/1000), &branch.Entry{Type: branch.TypeDir, Ino: uint64(1<<40 + i/1000), Object: fmt.Sprintf("d%07x%08x", gen, i/1000), Epoch: l.Epoch()})
		}
		batch.Put(fmt.Sprintf("d%03d/f%06d", i/1000, i), &branch.Entry{Type: branch.TypeFile, Ino: uint64(1<<41 + i), Object: fmt.Sprintf("f%07x%08x", gen, i), Epoch: l.Epoch()})
		if batch.Len() >= 10_000 || i == to-1 {
			if err := l.Commit(&batch); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	if _, err := e.view.Reload(); err != nil {
		b.Fatal(err)
	}
	benchForgetStale(e)
}

// benchKnowAll gives the kernel a node of files 0 to n-1 and of their
// directories, as a mount's lookups do (without the stat of a Lookup,
// which the made-up objects would fail), and forgets the nodes a
// restore cut loose, as the kernel does once told.
func benchKnowAll(b *testing.B, e *env, n int) {
	b.Helper()
	v := e.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	var dir *Node
	for i := range n {
		if i%1000 == 0 {
			name := fmt.Sprintf("d%03d", i/1000)
			r, err := v.resolveLocked(v.root, name)
			if err != nil || !r.exists() {
				b.Fatalf("lookup %s: %v", name, err)
			}
			dir = v.nodeForLocked(v.root, name, &r, true)
		}
		name := fmt.Sprintf("f%06d", i)
		r, err := v.resolveLocked(dir, name)
		if err != nil || !r.exists() {
			b.Fatalf("lookup %s: %v", name, err)
		}
		v.nodeForLocked(dir, name, &r, true)
	}
	benchForgetStale(e)
}

// benchForgetStale forgets the nodes a reload or restore cut loose.
func benchForgetStale(e *env) {
	e.view.nodesMu.Lock()
	clear(e.view.staleNodes)
	e.view.nodesMu.Unlock()
}

// cpuTime returns the CPU time the process has used (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
