package activity

import (
	"os"
	"testing"
	"time"
)

// BenchmarkRecord is the cost of Record on the FUSE path, for a caller
// already known (the writer drains the queue meanwhile).
func BenchmarkRecord(b *testing.B) {
	l, err := Open(Options{Dir: b.TempDir(), MaxBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := l.Close(); err != nil {
			b.Errorf("closing the log: %v", err)
		}
	}()
	e := Entry{Time: time.Now(), Tid: os.Getpid(), Uid: 0, Branch: "main", Op: "create", Path: "src/pkg/file.go"}
	l.Record(e) // resolve the caller once
	b.ResetTimer()
	for range b.N {
		l.Record(e)
	}
}

// BenchmarkRecordAndWrite is the whole cost of an entry: Record, and
// the writer's recheck of the caller, encoding and appending.
func BenchmarkRecordAndWrite(b *testing.B) {
	l, err := Open(Options{Dir: b.TempDir(), MaxBytes: 1 << 30, Queue: b.N + 1})
	if err != nil {
		b.Fatal(err)
	}
	e := Entry{Time: time.Now(), Tid: os.Getpid(), Uid: 0, Branch: "main", Op: "create", Path: "src/pkg/file.go"}
	b.ResetTimer()
	for range b.N {
		l.Record(e)
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	if n := l.drops.Load(); n > 0 {
		b.Fatalf("%d entries dropped", n)
	}
}

// BenchmarkRecheck is what the writer spends checking the caller of an
// entry that comes alone (a run of one).
func BenchmarkRecheck(b *testing.B) {
	c := newProcCache("/proc")
	tid := uint32(os.Getpid())
	info := c.lookup(tid)
	b.ResetTimer()
	for range b.N {
		c.recheck(tid, info)
	}
}
