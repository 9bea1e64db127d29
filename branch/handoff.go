package branch

import "sync"

// handoffs queues commits for badger's writer, in timestamp order,
// when the store has a kick (HandOffWith).
//
// Why: handing a transaction to badger sends it to badger's writer
// goroutine, and waking that goroutine wakes an idle thread of the Go
// runtime, usually on another CPU: on a virtual machine 3 µs at the
// median and 20 µs at the 90th percentile, paid by every create, unlink
// and rename on the thread that answers the kernel (perf: futex_wake
// under runtime.wakep under badger's sendToWriteCh). Queued instead, the
// commit is handed over by a thread off that path (the mount's
// releaser), which is awake anyway while files are being closed.
//
// Locking: turn is held while a batch is taken from q and handed over,
// so that batches reach badger in the order they were queued (and
// commits, queued under Store.commitMu, in timestamp order); mu guards q
// and kick, and is held while a commit is made the one in flight and
// queued (Store.tsMu is taken under it, nothing else).
type handoffs struct {
	turn sync.Mutex
	mu   sync.Mutex
	q    []queuedCommit
	kick func()
}

// queuedCommit is a commit at ts waiting to be handed over by commit.
type queuedCommit struct {
	ts     uint64
	commit func()
}

// testHookInFlight, when set, runs once a commit is the one in flight
// and before it is queued (tests of Settle racing a commit).
var testHookInFlight func()

// testHookHandedOver, when set, runs as each commit is handed to badger
// (tests of the order).
var testHookHandedOver func(ts uint64)

// HandOffWith makes the store queue each commit for badger instead of
// handing it over in the committing goroutine, and call kick after
// queueing one; kick must see that HandOver runs soon, off the caller's
// path, and must not block. A read, Settle, Sync and Close hand over
// what is queued themselves first, so nothing is ever read or waited for
// before it was handed over. HandOffWith(nil) hands over what is queued
// and goes back to handing each commit over at once.
//
// A queued commit counts as made: a kill -9 before it is handed over
// loses it, as it loses one handed over and not yet written (see
// "Commits and timestamps" in the package doc).
func (s *Store) HandOffWith(kick func()) {
	s.ho.mu.Lock()
	s.ho.kick = kick
	s.ho.mu.Unlock()
	if kick == nil {
		s.HandOver()
	}
}

// HandOver hands every queued commit to badger, in order.
func (s *Store) HandOver() {
	s.ho.turn.Lock()
	defer s.ho.turn.Unlock()
	s.ho.mu.Lock()
	q := s.ho.q
	s.ho.q = nil
	s.ho.mu.Unlock()
	for _, c := range q {
		if testHookHandedOver != nil {
			testHookHandedOver(c.ts)
		}
		c.commit()
	}
}

// handOffLocked queues commit (at ts) and kicks, or, without a kick,
// hands it over at once, after whatever a HandOver in progress still
// hands over. Requires s.commitMu (commits are queued in timestamp
// order) and s.ho.mu, which it releases.
func (s *Store) handOffLocked(ts uint64, commit func()) {
	s.ho.q = append(s.ho.q, queuedCommit{ts, commit})
	kick := s.ho.kick
	s.ho.mu.Unlock()
	if kick != nil {
		kick()
		return
	}
	s.HandOver()
}
