package autosnap

import (
	"sync"
	"time"
)

// Runner drives a Scheduler with the real clock: Add queues a change
// without waiting (it is called on the FUSE path), one goroutine feeds
// the scheduler (in batches while programs are busy) and calls take
// with each snapshot that falls due, one at a time. Changes that find the queue full are counted per branch
// and still make a snapshot due (Change.Lost).
type Runner struct {
	s     *Scheduler
	take  func(Due)
	queue chan Change
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	lostMu sync.Mutex
	lost   map[string]int
}

// runnerQueue is the number of changes that may wait for the runner.
const runnerQueue = 8192

// Start starts a runner that calls take with each due snapshot.
func Start(s *Scheduler, take func(Due)) *Runner {
	r := &Runner{s: s, take: take, queue: make(chan Change, runnerQueue),
		stop: make(chan struct{}), done: make(chan struct{}), lost: map[string]int{}}
	go r.run()
	return r
}

// Add queues a change; it never blocks.
func (r *Runner) Add(c Change) {
	select {
	case r.queue <- c:
	default:
		r.lostMu.Lock()
		r.lost[c.Branch]++
		r.lostMu.Unlock()
	}
}

// Stop ends the runner; pending changes are dropped (a snapshot being
// taken is finished first).
func (r *Runner) Stop() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// batchInterval is how long the runner lets changes gather after it
// read some: while programs are busy it wakes once per batch, not once
// per change. Due times come from the changes' own times, so reading
// them late delays nothing but the snapshot (by at most this much).
const batchInterval = 20 * time.Millisecond

func (r *Runner) run() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if next, ok := r.s.Next(); ok {
			timer.Reset(time.Until(next))
		}
		select {
		case c := <-r.queue:
			timer.Stop()
			r.s.Add(c)
			r.drain()
			if !r.pause() {
				return
			}
		case <-timer.C:
			for _, d := range r.s.Take(time.Now()) {
				r.take(d)
			}
		case <-r.stop:
			timer.Stop()
			return
		}
	}
}

// drain hands every queued change to the scheduler, then those that
// did not fit.
func (r *Runner) drain() {
	for {
		select {
		case c := <-r.queue:
			r.s.Add(c)
		default:
			r.addLost(time.Now())
			return
		}
	}
}

// pause waits batchInterval; false when the runner is stopped meanwhile.
func (r *Runner) pause() bool {
	t := time.NewTimer(batchInterval)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stop:
		return false
	}
}

// addLost hands the changes the queue could not take to the scheduler.
func (r *Runner) addLost(now time.Time) {
	r.lostMu.Lock()
	defer r.lostMu.Unlock()
	for b, n := range r.lost {
		r.s.Add(Change{Time: now, Branch: b, Lost: n})
		delete(r.lost, b)
	}
}
