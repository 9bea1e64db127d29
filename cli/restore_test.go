package cli

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestHoldSignal: a SIGTERM that comes while it is held does not end
// the process, and release says it came; without one, release says
// none came.
func TestHoldSignal(t *testing.T) {
	h := holdSignal(syscall.SIGTERM)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		h.release()
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(h.ch) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			h.release()
			t.Fatal("the SIGTERM sent was not delivered in 10s")
		}
	}
	if !h.release() {
		t.Error("release after a SIGTERM came says none came")
	}
	if holdSignal(syscall.SIGTERM).release() {
		t.Error("release with no SIGTERM says one came")
	}
}
