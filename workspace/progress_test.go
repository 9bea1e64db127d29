package workspace

import (
	"testing"

	"github.com/agentfs/agentfs/ctl"
)

// TestProgressRecord: Progress says what the operation running set;
// ApplyProgress (the old op) answers it for an apply only; nothing is
// running once it ended.
func TestProgressRecord(t *testing.T) {
	w := &Workspace{}
	if p := w.Progress(); p.Running {
		t.Fatalf("Progress with nothing running = %+v", p)
	}
	tr, end := w.startProgress("apply", "changes")
	tr.set(3, 10, 300, 1000)
	want := ctl.Progress{Running: true, Op: "apply", Unit: "changes", Done: 3, Total: 10, Bytes: 300, TotalBytes: 1000}
	if p := w.Progress(); p != want {
		t.Errorf("Progress = %+v, want %+v", p, want)
	}
	if p, want := w.ApplyProgress(), (ctl.ApplyProgress{Running: true, Done: 3, Total: 10, Bytes: 300, TotalBytes: 1000}); p != want {
		t.Errorf("ApplyProgress = %+v, want %+v", p, want)
	}
	end()
	tr, end = w.startProgress("gc", "objects")
	tr.set(42, 0, 0, 0)
	if p := w.ApplyProgress(); p.Running {
		t.Errorf("ApplyProgress during a gc = %+v, want nothing running", p)
	}
	if p := w.Progress(); p.Op != "gc" || p.Done != 42 {
		t.Errorf("Progress during a gc = %+v", p)
	}
	end()
	if p := w.Progress(); p.Running {
		t.Errorf("Progress after the end = %+v", p)
	}
}
