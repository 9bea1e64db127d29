package autosnap

import (
	"sync"
	"time"
)

// Runner drives a Scheduler, and Commands when the exec trace is on,
// with the real clock: Add queues a change without waiting (it is
// called on the FUSE path), AddCommand what the trace saw (on its
// goroutine, which no traced program waits for); one goroutine feeds
// both (in batches while programs are busy) and calls take with each
// snapshot that falls due, one at a time. Changes that find the queue
// full are counted per branch and still make a snapshot due
// (Change.Lost); commands that find it full are dropped (a build that
// ends then makes no snapshot).
type Runner struct {
	s     *Scheduler
	c     *Commands // nil: no command triggers
	take  func(Due)
	queue chan Change
	cmds  chan Command
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	lostMu sync.Mutex
	lost   map[string]int
}

// runnerQueue is the number of changes that may wait for the runner.
const runnerQueue = 8192

// Start starts a runner that calls take with each due snapshot; c,
// when not nil, adds the command triggers.
func Start(s *Scheduler, c *Commands, take func(Due)) *Runner {
	if c != nil {
		c.init() // IsBuild reads the patterns from now on
	}
	r := &Runner{s: s, c: c, take: take, queue: make(chan Change, runnerQueue), cmds: make(chan Command, runnerQueue),
		stop: make(chan struct{}), done: make(chan struct{}), lost: map[string]int{}}
	go r.run()
	return r
}

// IsBuild reports whether argv runs a build the build trigger counts
// (the caller then finds its branch for Command.Branch). Safe from any
// goroutine.
func (r *Runner) IsBuild(argv []string) bool { return r.c != nil && r.c.IsBuild(argv) }

// AddCommand queues what the exec trace saw; it never blocks. Without
// command triggers it does nothing.
func (r *Runner) AddCommand(c Command) {
	if r.c == nil {
		return
	}
	select {
	case r.cmds <- c:
	default:
	}
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
		if next, ok := r.next(); ok {
			timer.Reset(time.Until(next))
		}
		select {
		case c := <-r.queue:
			timer.Stop()
			r.add(c)
			r.drain()
			if !r.pause() {
				return
			}
		case c := <-r.cmds:
			timer.Stop()
			r.c.Add(c)
			r.drain()
		case <-timer.C:
			// What was queued meanwhile first: a change that came
			// before the due time belongs in the snapshot (or delays
			// it), whichever of the two select saw first.
			r.drain()
			r.takeDue(time.Now())
		case <-r.stop:
			timer.Stop()
			return
		}
	}
}

// next is when the next snapshot falls due, of either kind.
func (r *Runner) next() (time.Time, bool) {
	next, ok := r.s.Next()
	if r.c != nil {
		if t, cok := r.c.Next(); cok && (!ok || t.Before(next)) {
			next, ok = t, true
		}
	}
	return next, ok
}

// takeDue takes the snapshots due at now: a build's or an idle
// period's first (it holds the changes pending on its branch, which
// then need no snapshot of their own), then the scheduler's (a git
// snapshot labelled with the command, when the trace saw it).
func (r *Runner) takeDue(now time.Time) {
	if r.c != nil {
		for _, d := range r.c.Take(now) {
			if d.Branch != "" {
				r.s.Supersede(d.Branch)
			}
			r.take(d)
		}
	}
	for _, d := range r.s.Take(now) {
		if r.c != nil && d.Kind == KindGit {
			d.Command, _ = r.c.GitCommand(now)
		}
		r.take(d)
	}
}

// add hands a change to the scheduler, and to the idle trigger.
func (r *Runner) add(c Change) {
	r.s.Add(c)
	if r.c != nil {
		r.c.Change(c.Time, c.Branch)
	}
}

// drain hands every queued change and command on, then the changes
// that did not fit.
func (r *Runner) drain() {
	for {
		select {
		case c := <-r.queue:
			r.add(c)
		case c := <-r.cmds:
			r.c.Add(c)
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
		r.add(Change{Time: now, Branch: b, Lost: n})
		delete(r.lost, b)
	}
}
