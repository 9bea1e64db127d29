package autosnap

import (
	"sync"
	"time"
)

// Runner drives a Scheduler with the real clock: Add queues a change
// without waiting (it is called on the FUSE path), one goroutine feeds
// the scheduler and calls take with each snapshot that falls due, one
// at a time. Changes that find the queue full are counted per branch
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
			r.s.Add(c)
			r.addLost(c.Time)
		case <-timer.C:
			for _, d := range r.s.Take(time.Now()) {
				r.take(d)
			}
		case <-r.stop:
			timer.Stop()
			return
		}
		timer.Stop()
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
