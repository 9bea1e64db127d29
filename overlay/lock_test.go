package overlay

import (
	"testing"
	"time"
)

// TestRlockAside: rlockAside holds fs.mu for reading when it returns,
// waits for a writer (trying, then queueing after rlockAsideSpin), and
// gets the lock once the writer lets go.
func TestRlockAside(t *testing.T) {
	fs := &FS{}
	fs.rlockAside()
	if fs.mu.TryLock() {
		t.Fatal("a writer got fs.mu while rlockAside's reader held it")
	}
	fs.mu.RUnlock()

	for _, hold := range []time.Duration{rlockAsideSpin / 10, 4 * rlockAsideSpin} {
		fs.mu.Lock()
		got := make(chan struct{})
		go func() {
			fs.rlockAside()
			close(got)
		}()
		select {
		case <-got:
			t.Fatalf("rlockAside returned while a writer held fs.mu (writer holding %v)", hold)
		case <-time.After(hold):
		}
		fs.mu.Unlock()
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("rlockAside did not get fs.mu within 10 s of the writer's unlock (writer held it %v)", hold)
		}
		if fs.mu.TryLock() {
			t.Fatal("a writer got fs.mu while rlockAside's reader held it")
		}
		fs.mu.RUnlock()
	}
}
