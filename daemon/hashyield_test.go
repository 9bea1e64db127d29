package daemon

import (
	"testing"
	"time"
)

// TestHashYield: the hash worker goes on at once when the mount has
// been quiet, waits while operations come, never past hashMaxWait,
// and not at all once told to quit.
func TestHashYield(t *testing.T) {
	d := &Daemon{}
	never := make(chan struct{})
	d.lastOp.Store(time.Now().Add(-time.Hour).UnixNano())
	if n := d.hashWait(never); n != 0 {
		t.Errorf("quiet mount: slept %d times, want 0", n)
	}
	// An operation seen "later than now" (operations all along): the
	// wait ends at hashMaxWait, not before.
	d.lastOp.Store(time.Now().Add(time.Hour).UnixNano())
	start := time.Now()
	if n := d.hashWait(never); n == 0 {
		t.Error("busy mount: did not wait")
	}
	if e := time.Since(start); e < hashMaxWait {
		t.Errorf("busy mount: waited only %v, want hashMaxWait (%v)", e, hashMaxWait)
	}
	quit := make(chan struct{})
	close(quit)
	if n := d.hashWait(quit); n != 0 {
		t.Errorf("told to quit: slept %d times, want 0", n)
	}
	// One operation just now: the worker waits for the quiet period.
	d.lastOp.Store(time.Now().UnixNano())
	start = time.Now()
	if n := d.hashWait(never); n == 0 {
		t.Error("an operation just now: did not wait")
	}
	if e := time.Since(start); e < hashQuiet/2 {
		t.Errorf("an operation just now: waited only %v, want about hashQuiet (%v)", e, hashQuiet)
	}
}
