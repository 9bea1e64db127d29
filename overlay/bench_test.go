package overlay

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
)

// The benchmarks of Diff and Export run on a view of 10,000 files of
// 1 KiB in 100 directories, with a native tool on the same tree beside
// each for a ratio:
//
//	go test -run '^$' -bench 'Diff|Export|StoreChecks' -benchtime 5x ./overlay/
//
// On a disk the export figures follow the filesystem's writeback more
// than this code; TMPDIR=/dev/shm keeps everything on tmpfs, which
// shows the overhead over cp -a.

const (
	benchDirs  = 100
	benchFiles = 100 // per directory
)

// benchEnv builds the 10,000-file lower tree.
func benchEnv(b *testing.B) *env {
	files := map[string]string{}
	data := strings.Repeat("x", 1023) + "\n"
	for i := range benchDirs {
		for j := range benchFiles {
			files[fmt.Sprintf("d%02d/f%02d", i, j)] = data
		}
	}
	return newEnv(b, files)
}

// writeEvery writes one file in every step files of each directory.
func (e *env) writeEvery(step int) {
	for i := range benchDirs {
		for j := 0; j < benchFiles; j += step {
			e.write(fmt.Sprintf("d%02d/f%02d", i, j), "changed\n")
		}
	}
}

func benchDiff(b *testing.B, a, v *FS, want int) {
	b.Helper()
	n := 0
	for b.Loop() {
		n = 0
		if err := Diff(a, v, func(Change) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	if n != want {
		b.Fatalf("%d changes, want %d", n, want)
	}
	b.ReportMetric(float64(n), "changes")
}

func BenchmarkDiff(b *testing.B) {
	b.Run("lower-to-branch/1%-modified", func(b *testing.B) {
		e := benchEnv(b)
		e.writeEvery(100)
		benchDiff(b, e.lowerView().view, e.view, benchDirs)
	})
	b.Run("lower-to-branch/all-modified", func(b *testing.B) {
		e := benchEnv(b)
		e.writeEvery(1)
		benchDiff(b, e.lowerView().view, e.view, benchDirs*benchFiles)
	})
	b.Run("lower-to-branch/all-created", func(b *testing.B) {
		e := benchEnv(b)
		r := e.view.Root()
		for i := range benchDirs {
			d, _, err := e.view.Mkdir(r, fmt.Sprintf("n%02d", i), 0755, Caller{})
			if err != nil {
				b.Fatal(err)
			}
			for j := range benchFiles {
				_, f, _, err := e.view.Create(d, fmt.Sprintf("f%02d", j), unix.O_RDWR, 0644, Caller{})
				if err != nil {
					b.Fatal(err)
				}
				writeAt(b, f, []byte("new\n"), 0)
				release(b, f)
			}
		}
		benchDiff(b, e.lowerView().view, e.view, benchDirs*(benchFiles+1))
	})
	b.Run("lower-to-branch/all-dirs-renamed", func(b *testing.B) {
		e := benchEnv(b)
		r := e.view.Root()
		for i := range benchDirs {
			if err := e.view.Rename(r, fmt.Sprintf("d%02d", i), r, fmt.Sprintf("m%02d", i), 0); err != nil {
				b.Fatal(err)
			}
		}
		benchDiff(b, e.lowerView().view, e.view, 2*benchDirs*(benchFiles+1))
	})
	b.Run("snapshot-to-branch/none-since", func(b *testing.B) {
		e := benchEnv(b)
		e.writeEvery(1)
		snap, err := e.view.Snapshot("", branch.KindManual)
		if err != nil {
			b.Fatal(err)
		}
		benchDiff(b, e.snapView(snap).view, e.view, 0)
	})
	b.Run("native-diff-rq/1%-modified", func(b *testing.B) {
		e := benchEnv(b)
		e.writeEvery(100)
		to := filepath.Join(b.TempDir(), "branch")
		if err := Export(e.view, to); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			out, err := exec.Command("diff", "-rq", e.lower, to).Output()
			if n := strings.Count(string(out), "\n"); n != benchDirs {
				b.Fatalf("diff -rq: %d lines, %v", n, err)
			}
		}
	})
}

func benchExport(b *testing.B, v *FS) {
	b.Helper()
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		if err := Export(v, filepath.Join(dir, fmt.Sprint(i))); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(benchDirs*benchFiles)*float64(b.N)/b.Elapsed().Seconds(), "files/s")
}

func BenchmarkExport(b *testing.B) {
	b.Run("branch/unchanged", func(b *testing.B) {
		benchExport(b, benchEnv(b).view)
	})
	b.Run("branch/all-modified", func(b *testing.B) {
		e := benchEnv(b)
		e.writeEvery(1)
		benchExport(b, e.view)
	})
	b.Run("native-cp-a", func(b *testing.B) {
		e := benchEnv(b)
		dir := b.TempDir()
		i := 0
		for b.Loop() {
			if out, err := exec.Command("cp", "-a", e.lower, filepath.Join(dir, fmt.Sprint(i))).CombinedOutput(); err != nil {
				b.Fatalf("cp -a: %v: %s", err, out)
			}
			i++
		}
		b.ReportMetric(float64(benchDirs*benchFiles)*float64(b.N)/b.Elapsed().Seconds(), "files/s")
	})
}

// BenchmarkStoreChecks times Fsck and garbage collection of a store
// whose branch and one snapshot name 10,000 file objects.
func BenchmarkStoreChecks(b *testing.B) {
	e := benchEnv(b)
	e.writeEvery(1)
	if _, err := e.view.Snapshot("", branch.KindManual); err != nil {
		b.Fatal(err)
	}
	b.Run("fsck", func(b *testing.B) {
		for b.Loop() {
			r, err := Fsck(FsckOptions{Objects: e.bs, Meta: e.meta, Lower: e.lower, InUse: func(string) bool { return false }})
			if err != nil || !r.Clean() {
				b.Fatalf("%v\n%s", err, r)
			}
		}
	})
	b.Run("gc", func(b *testing.B) {
		for b.Loop() {
			r, err := e.bs.Collect(backstore.GCOptions{Referenced: e.meta.ReferencedObjects, InUse: func(string) bool { return false }})
			if err != nil || r.Removed != 0 || r.Objects < benchDirs*benchFiles {
				b.Fatalf("%+v, %v", r, err)
			}
		}
	})
}
