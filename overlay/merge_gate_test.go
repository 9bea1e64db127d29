package overlay

import (
	"testing"

	"golang.org/x/sys/unix"
)

// createIn creates file name in directory dir of e's view.
func createIn(e *env, dir, name string) error {
	n, f, _, err := e.view.Create(e.must(dir), name, unix.O_WRONLY, 0o644, Caller{})
	if err == nil {
		e.view.release(n)
		err = f.Release()
	}
	return err
}

// TestMergeHoldsOffChanges: a program's change of a path a merge
// changes, made while the merge applies (after its check, before its
// first change: mergeCheckedHook), waits for the merge and is kept,
// instead of being written over or removed by it unseen; a change of
// another path goes on meanwhile. The change runs on its own
// goroutine; the hook returns once it has finished or is about to wait
// for the merge (changeWaitHook), so that the outcome never depends on
// timing.
func TestMergeHoldsOffChanges(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change is the program's change; held whether it must wait
		// for the merge; check tells, after the merge and the change
		// are done, whether the change was kept.
		change func(e *env) error
		held   bool
		check  func(t *testing.T, e *env)
	}{
		{"unlink of a file theirs changed", func(e *env) error {
			return e.view.Unlink(e.view.root, "keep")
		}, true, func(t *testing.T, e *env) {
			eq(t, "keep exists", e.exists("keep"), false)
		}},
		{"create in a directory theirs deleted", func(e *env) error {
			return createIn(e, "d", "new")
		}, true, func(t *testing.T, e *env) {
			// Made (it fails once the merge has removed d), so the
			// merge must not have removed it unseen.
			eq(t, "d/new exists", e.exists("d/new"), true)
		}},
		{"rename of the directory above a path theirs changed", func(e *env) error {
			return e.view.Rename(e.view.root, "src", e.view.root, "moved", 0)
		}, true, func(t *testing.T, e *env) {
			eq(t, "moved/a", e.read("moved/a"), "changed in theirs")
		}},
		{"create of another path", func(e *env) error {
			return createIn(e, "src", "other")
		}, false, func(t *testing.T, e *env) {
			eq(t, "src/other exists", e.exists("src/other"), true)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMergeEnv(t, map[string]string{"keep": "k", "d/x": "x", "src/a": "a"})
			m.theirs.put("keep", "changed in theirs")
			m.theirs.put("src/a", "changed in theirs")
			m.theirs.remove("d")
			p := m.planAgainstSafety(t)

			done, waiting := make(chan error, 1), make(chan struct{})
			waited := false
			changeWaitHook = func() { close(waiting) }
			mergeCheckedHook = func() {
				go func() { done <- tc.change(m.ours) }()
				select {
				case err := <-done:
					done <- err // finished inside the merge: nothing held it
				case <-waiting:
					waited = true
				}
			}
			t.Cleanup(func() { changeWaitHook, mergeCheckedHook = nil, nil })
			_, applyErr := m.ours.view.ApplyMerge(p)
			changeErr := <-done
			mergeCheckedHook, changeWaitHook = nil, nil
			if applyErr != nil {
				t.Fatalf("ApplyMerge: %v", applyErr)
			}
			if waited != tc.held {
				t.Errorf("the change waited for the merge: %v, want %v", waited, tc.held)
			}
			if changeErr == nil {
				tc.check(t, m.ours)
			} else if !tc.held {
				t.Errorf("the change of a path the merge does not change: %v", changeErr)
			}
			if tc.name != "unlink of a file theirs changed" {
				eq(t, "keep", m.ours.read("keep"), "changed in theirs")
			}
		})
	}
}
