package overlay

import (
	"testing"
	"time"
)

// TestRlockAside: rlockAside holds FS.mu for reading when it returns,
// waits for a writer (trying, then queueing after rlockAsideSpin), and
// gets the lock once the writer lets go.
func TestRlockAside(t *testing.T) {
	v := &FS{}
	v.rlockAside()
	if v.mu.TryLock() {
		t.Fatal("a writer got FS.mu while rlockAside's reader held it")
	}
	v.mu.RUnlock()

	for _, hold := range []time.Duration{rlockAsideSpin / 10, 4 * rlockAsideSpin} {
		v.mu.Lock()
		got := make(chan struct{})
		go func() {
			v.rlockAside()
			close(got)
		}()
		select {
		case <-got:
			t.Fatalf("rlockAside returned while a writer held FS.mu (writer holding %v)", hold)
		case <-time.After(hold):
		}
		v.mu.Unlock()
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("rlockAside did not get FS.mu within 10 s of the writer's unlock (writer held it %v)", hold)
		}
		if v.mu.TryLock() {
			t.Fatal("a writer got FS.mu while rlockAside's reader held it")
		}
		v.mu.RUnlock()
	}
}
