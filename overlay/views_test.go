package overlay

import (
	"testing"

	"golang.org/x/sys/unix"
)

// lowerView opens a view of e's plain lower tree.
func (e *env) lowerView() *env {
	e.t.Helper()
	v, err := New(Config{Lower: e.lower, Objects: e.bs, Hide: e.hide, HiddenInodes: e.hidden})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if err := v.Close(); err != nil {
			e.t.Errorf("close a view: %v", err)
		}
	})
	return &env{t: e.t, lower: e.lower, bs: e.bs, meta: e.meta, view: v, hide: e.hide, hidden: e.hidden}
}

func TestLowerViewIsLowerAndReadOnly(t *testing.T) {
	e := newEnv(t, map[string]string{"d/f": "lower"})
	e.write("d/f", "upper")
	l := e.lowerView()
	eq(t, "lower view d/f", l.read("d/f"), "lower")
	eq(t, "read-only", l.view.ReadOnly(), true)
	eq(t, "branch view read-only", e.view.ReadOnly(), false)
	f, err := l.view.Open(l.must("d/f"), unix.O_WRONLY)
	if err != unix.EROFS {
		t.Errorf("write open in a lower view: %v, want EROFS", err)
	}
	if f != nil {
		release(t, f)
	}
	if _, _, err := l.view.Mkdir(l.must("d"), "x", 0755, Caller{}); err != unix.EROFS {
		t.Errorf("mkdir in a lower view: %v, want EROFS", err)
	}
	eq(t, "objects left (those of the branch's d/f and d)", e.objectCount(), 3)
}
