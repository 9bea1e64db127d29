package overlay

import (
	"fmt"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDiffWhileChanging diffs a branch while it changes (for the race
// detector): Diff must neither fail nor leave kernel references.
func TestDiffWhileChanging(t *testing.T) {
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("d/f%d", i)] = "lower"
	}
	e := newEnv(t, files)
	l := e.lowerView()
	d := e.must("d")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("f%d", i%20)
			// In a goroutine: Errorf, not Fatalf.
			if f, err := e.view.Open(e.must("d/"+name), unix.O_WRONLY|unix.O_TRUNC); err == nil {
				if _, err := f.WriteAt([]byte(fmt.Sprint(i)), 0); err != nil {
					t.Errorf("write d/%s: %v", name, err)
				}
				release(t, f)
			}
			// n%d is made 10 rounds before it is removed: the first 10
			// rounds find nothing to remove.
			if err := e.view.Unlink(d, fmt.Sprintf("n%d", (i+10)%20)); err != nil && (i >= 10 || err != unix.ENOENT) {
				t.Errorf("unlink d/n%d (round %d): %v", (i+10)%20, i, err)
			}
			if _, f, _, err := e.view.Create(d, fmt.Sprintf("n%d", i%20), unix.O_RDWR, 0644, Caller{}); err == nil {
				release(t, f)
			}
		}
	}()
	refs := kernelRefs(e.view)
	for range 50 {
		if err := Diff(l.view, e.view, func(Change) error { return nil }); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	if got := kernelRefs(e.view); got < refs {
		t.Errorf("kernel references %d after the diffs, %d before", got, refs)
	}
}
