package overlay

import (
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
)

// BenchmarkSmallFileChurn creates, writes (1 KiB), releases, unlinks
// and forgets new files in a new directory, one at a time, on an
// on-disk store as the daemon uses, and reports each step's mean time:
// the daemon's share of the small-files workload, without FUSE. After
// the first file, every new file takes the object the last unlink
// recycled.
//
//	go test -run '^$' -bench SmallFileChurn -benchtime 5000x ./overlay/
func BenchmarkSmallFileChurn(b *testing.B) {
	lower := b.TempDir()
	bs, err := backstore.Open(backstore.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := bs.Close(); err != nil {
			b.Errorf("close the backstore: %v", err)
		}
	}()
	meta, err := branch.Open(branch.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := meta.Close(); err != nil {
			b.Errorf("close the branch store: %v", err)
		}
	}()
	layer, err := meta.Layer("main")
	if err != nil {
		b.Fatal(err)
	}
	v, err := New(Config{Lower: lower, Objects: bs, Layer: layer, AllocIno: meta.AllocIno})
	if err != nil {
		b.Fatal(err)
	}
	c := Caller{}
	dir, _, err := v.Mkdir(v.Root(), "d", 0o755, c)
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1024)
	i := 0
	var tc, tw, tr, tu, tf time.Duration
	defer func() {
		n := time.Duration(i)
		b.ReportMetric(float64(tc/n), "create-ns")
		b.ReportMetric(float64(tw/n), "write-ns")
		b.ReportMetric(float64(tr/n), "release-ns")
		b.ReportMetric(float64(tu/n), "unlink-ns")
		b.ReportMetric(float64(tf/n), "forget-ns")
	}()
	for b.Loop() {
		name := "f" + strconv.Itoa(i)
		i++
		t0 := time.Now()
		n, f, _, err := v.Create(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644, c)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := f.WriteAt(data, 0); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		release(b, f)
		t3 := time.Now()
		if err := v.Unlink(dir, name); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		v.Forget(n, 1)
		t5 := time.Now()
		tc += t1.Sub(t0)
		tw += t2.Sub(t1)
		tr += t3.Sub(t2)
		tu += t4.Sub(t3)
		tf += t5.Sub(t4)
	}
}
