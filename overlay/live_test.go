package overlay

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

func (e *env) liveObjects() []string {
	e.t.Helper()
	var ids []string
	if err := e.view.LiveObjects(func(id string) error { ids = append(ids, id); return nil }); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// TestLiveObjects: an unlinked open file and a node cut loose by a
// Reload hold their objects until they are released and forgotten.
func TestLiveObjects(t *testing.T) {
	e := newEnv(t, map[string]string{"d/f": "lower"})
	r := e.view.Root()
	n, f, _, err := e.view.Create(r, "tmp", unix.O_RDWR, 0644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	tmpObj := n.object
	if err := e.view.Unlink(r, "tmp"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(e.liveObjects(), tmpObj) {
		t.Error("the object of an unlinked open file is not live")
	}
	release(t, f)
	e.view.Forget(n, 1)
	if slices.Contains(e.liveObjects(), tmpObj) {
		t.Error("the object of a released, forgotten unlinked file is still live")
	}

	e.write("d/f", "upper")
	old := e.must("d/f")
	obj := old.object
	rf, err := e.view.Open(old, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	var b branch.Batch
	if err := e.view.layer.Load(func(p string, _ *branch.Entry) error { b.Delete(p); return nil }); err != nil {
		t.Fatalf("load the layer: %v", err)
	}
	if err := e.view.layer.Commit(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Reload(); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(e.liveObjects(), obj) {
		t.Error("the object of a stale open node is not live")
	}
	release(t, rf)
	if !slices.Contains(e.liveObjects(), obj) {
		t.Error("a stale node the kernel still holds lost its object")
	}
	e.view.Forget(old, 1<<30)
	if slices.Contains(e.liveObjects(), obj) {
		t.Error("a forgotten stale node's object is still live")
	}
	if _, err := e.bs.Lstat(obj); err != nil {
		t.Errorf("a stale node's object was removed when forgotten (gc's job): %v", err)
	}
}
