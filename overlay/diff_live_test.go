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
			if f, err := e.view.Open(e.must("d/"+name), unix.O_WRONLY|unix.O_TRUNC); err == nil {
				f.WriteAt([]byte(fmt.Sprint(i)), 0)
				f.Release()
			}
			e.view.Unlink(d, fmt.Sprintf("n%d", (i+10)%20))
			if _, f, _, err := e.view.Create(d, fmt.Sprintf("n%d", i%20), unix.O_RDWR, 0644, Caller{}); err == nil {
				f.Release()
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
