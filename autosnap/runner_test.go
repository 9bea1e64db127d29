package autosnap

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunnerTakesDueSnapshots(t *testing.T) {
	got := make(chan Due, 1)
	r := Start(&Scheduler{Quiet: 20 * time.Millisecond}, nil, func(d Due) {
		select {
		case got <- d:
		default:
		}
	})
	defer r.Stop()
	r.Add(Change{Time: time.Now(), Branch: "main", Paths: []string{"a"}})
	r.Add(Change{Time: time.Now(), Branch: "main", Paths: []string{"b"}})
	select {
	case d := <-got:
		if !slices.Equal(d.Paths, []string{"a", "b"}) {
			t.Errorf("due paths = %v, want [a b]", d.Paths)
		}
	case <-time.After(30 * time.Second): // a guard against a hang, not a timing check
		t.Fatal("no snapshot became due")
	}
}

func TestRunnerCountsWhatDoesNotFit(t *testing.T) {
	taking, block := make(chan struct{}, 1), make(chan struct{})
	var counted atomic.Int64
	r := Start(&Scheduler{Quiet: 10 * time.Millisecond}, nil, func(d Due) {
		select {
		case taking <- struct{}{}:
		default:
		}
		<-block
		counted.Add(int64(d.More))
	})
	defer r.Stop()
	// While the runner takes the first snapshot it does not read its
	// queue: overfill it then.
	r.Add(Change{Time: time.Now(), Branch: "main", Paths: []string{"first"}})
	guard := time.After(30 * time.Second) // against a hang, not a timing check
	select {
	case <-taking:
	case <-guard:
		t.Fatal("the first snapshot never became due")
	}
	for range runnerQueue + 3 {
		r.Add(Change{Time: time.Now(), Branch: "main", Paths: []string{"y"}})
	}
	close(block)
	for counted.Load() == 0 {
		select {
		case <-guard:
			t.Fatal("no snapshot counted the changes that did not fit")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if got := counted.Load(); got != 3 {
		t.Errorf("counted %d changes that did not fit, want 3", got)
	}
}
