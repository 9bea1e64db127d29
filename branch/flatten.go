package branch

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Background work of a writable store (see "Depth" and "Reclaiming
// space" in the package doc): the flattener, which merges the frozen
// levels of a deep chain into one new level and re-points the chain
// onto it, and the idle compaction.

const (
	// flattenBatch is the most keys of a flattened level written in one
	// commit (the flattener holds the commit lock while it is written,
	// a fraction of a millisecond), and flattenPause the pause between
	// two, in which the commands waiting for the commit lock get it: a
	// command waits for one part at most.
	flattenBatch = 250
	flattenPause = time.Millisecond
	// The idle compaction runs when a whole idleFor went without a
	// commit, and compactAfter commits were made since the last one.
	idleFor      = 2 * time.Second
	compactAfter = 10_000
)

// background is the state of the background goroutine.
type background struct {
	kick chan struct{} // a chain may be too deep
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the goroutine ends
	// mu serializes flattening passes and idle compactions (the
	// goroutine's and tests'). Taken before any other lock of the
	// Store.
	mu sync.Mutex
	// commits counts commits; compacted is its value at the last idle
	// compaction (used by the goroutine only).
	commits   atomic.Uint64
	compacted uint64
	// flattened counts the chains re-pointed onto a flattened level.
	flattened atomic.Uint64
}

// errClosing: Close stopped a flattening pass.
var errClosing = errors.New("store closing")

// testHookFlatten, when set, runs after each commit of a flattened
// level's keys (part 1, 2, ...) and before the re-pointing commit (part
// -1); an error stops the flattening there (the crash test kills the
// process from it).
var testHookFlatten func(part int) error

// startBackground starts the background goroutine of a writable store.
func (s *Store) startBackground() {
	s.bg.kick = make(chan struct{}, 1)
	s.bg.stop = make(chan struct{})
	s.bg.done = make(chan struct{})
	go s.backgroundLoop()
	s.kickFlatten() // a chain may be deep from an earlier run
}

// stopBackground stops the background goroutine and waits for it; a
// flattening pass in progress stops between two commits (what it wrote
// is swept at the next Open).
func (s *Store) stopBackground() {
	if s.bg.stop == nil {
		return
	}
	close(s.bg.stop)
	<-s.bg.done
}

// kickFlatten wakes the flattener: a chain may have grown too deep.
func (s *Store) kickFlatten() {
	if s.bg.kick == nil {
		return
	}
	select {
	case s.bg.kick <- struct{}{}:
	default:
	}
}

func (s *Store) backgroundLoop() {
	defer close(s.bg.done)
	tick := time.NewTicker(idleFor)
	defer tick.Stop()
	seen := s.bg.commits.Load() // at the last tick
	for {
		select {
		case <-s.bg.stop:
			return
		case <-s.bg.kick:
			if err := s.flattenAll(); err != nil && !errors.Is(err, errClosing) {
				s.log.Error("flattening a deep branch", "store", s.dir, "err", err)
			}
		case <-tick.C:
			// Idle: no commit since the last tick.
			if n := s.bg.commits.Load(); n == seen {
				s.compactIdle(n)
			} else {
				seen = n
			}
		}
	}
}

// flattenAll flattens every branch in use whose chain is deeper than
// flattenDepth.
func (s *Store) flattenAll() error {
	s.bg.mu.Lock()
	defer s.bg.mu.Unlock()
	s.mu.Lock()
	layers := slices.Collect(maps.Values(s.layers))
	s.mu.Unlock()
	for _, l := range layers {
		if l.gone.Load() {
			continue
		}
		if err := s.flatten(l, layers); err != nil {
			return fmt.Errorf("branch %q: %w", l.name, err)
		}
	}
	return nil
}

// flatten merges the levels of l's chain but the last into a new layer
// id Z (masks included: the last level may hold what they hide), in
// commits of flattenBatch keys that no read sees (Z is named by
// nothing), then in one small commit gives Z the last level as parent,
// freezes Z, and re-points l's layer id onto Z. What l reads does not
// change: every level merged is read at a fixed timestamp. A crash
// before the last commit leaves l's chain as it was and Z's keys to the
// sweep at the next Open. cached are the Layers whose states to
// refresh. Requires s.bg.mu.
func (s *Store) flatten(l *Layer, cached []*Layer) error {
	st := l.state.Load()
	if 1+len(st.chain) <= flattenAt() {
		return nil
	}
	merge, below := st.chain[:len(st.chain)-1], st.chain[len(st.chain)-1]
	var z uint64
	err := s.update(func(txn *badger.Txn) ([]op, error) {
		id, seqOp, err := nextLayerID(txn)
		z = id
		return []op{seqOp}, err
	})
	if err != nil {
		return err
	}
	parts := 0
	var ops []op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if err := s.apply(ops); err != nil {
			return err
		}
		ops = nil
		parts++
		if testHookFlatten != nil {
			if err := testHookFlatten(parts); err != nil {
				return err
			}
		}
		if err := s.stopping(); err != nil {
			return err
		}
		// Let the commands waiting for the commit lock in.
		time.Sleep(flattenPause)
		return nil
	}
	txns := s.levelTxns(merge)
	defer discardAll(txns)
	for _, kind := range []func(uint64) []byte{layerPrefix, basePrefix} {
		m := newMergeIter(txns, merge, kind, nil)
		m.keepMasks = true
		for m.rewind(); m.valid(); m.next() {
			v, err := m.item().ValueCopy(nil)
			if err == nil && len(ops) >= flattenBatch {
				err = flush()
			}
			if err != nil {
				m.close()
				return err
			}
			ops = append(ops, op{key: append(kind(z), m.suffix()...), val: v})
		}
		m.close()
	}
	if err := flush(); err != nil {
		return err
	}
	if testHookFlatten != nil {
		if err := testHookFlatten(-1); err != nil {
			return err
		}
	}
	return s.transact(func(txn *badger.Txn) ([]op, func(), error) {
		s.pmu.RLock()
		p, ok := s.parents[st.id]
		s.pmu.RUnlock()
		if !ok || p != merge[0] {
			return nil, nil, nil // re-pointed meanwhile: Z goes at the next Open
		}
		zl := level{id: z, ts: s.readTs}
		s.addParent(z, below)
		ops := []op{
			{key: parentKey(z), val: below.encode()},
			{key: frozenKey(z), val: encodeFrozen(zl.ts, 0)},
			{key: parentKey(st.id), val: zl.encode()},
		}
		return ops, func() {
			s.bg.flattened.Add(1)
			s.freeze(z, zl.ts, 0)
			s.addParent(st.id, zl)
			for _, c := range cached {
				cs := c.state.Load()
				if cs.id == st.id || slices.ContainsFunc(cs.chain, func(lv level) bool { return lv.id == st.id }) {
					c.state.Store(&layerState{id: cs.id, chain: s.chainOf(cs.id)})
				}
			}
		}, nil
	})
}

// compactIdle runs when the store has been idle for a while after many
// commits: it makes badger compact its levels into one, which drops
// the versions below the discard timestamp that no read point sees
// (see "Reclaiming space" in the package doc).
func (s *Store) compactIdle(n uint64) {
	if n-s.bg.compacted < compactAfter {
		return
	}
	s.bg.mu.Lock()
	defer s.bg.mu.Unlock()
	s.bg.compacted = n
	s.mu.Lock()
	layers := slices.Collect(maps.Values(s.layers))
	s.mu.Unlock()
	for _, l := range layers {
		if err := s.pruneMasks(l); err != nil && !errors.Is(err, errClosing) {
			s.log.Warn("pruning the masks of a branch", "store", s.dir, "branch", l.name, "err", err)
		}
	}
	if err := s.db.Flatten(1); err != nil {
		s.log.Warn("compacting the metadata", "store", s.dir, "err", err)
	}
	for s.db.RunValueLogGC(0.5) == nil {
	}
}

// pruneMasks deletes the masks of l's layer id that hide nothing: no
// level of its chain holds the key (a file made and deleted since the
// last snapshot). A deletion in a layer with a parent writes a mask
// without looking down the chain (a lookup per level on every unlink);
// this drops the needless ones, so that they do not pile up with the
// names ever deleted. In commits of flattenBatch keys, each checking
// that the branch still writes that layer id and that the key is still
// a mask. Requires s.bg.mu.
func (s *Store) pruneMasks(l *Layer) error {
	st := l.state.Load()
	if l.gone.Load() || len(st.chain) == 0 {
		return nil
	}
	var masks [][]byte
	err := s.view(func(txn *badger.Txn) error {
		for _, kind := range []func(uint64) []byte{layerPrefix, basePrefix} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: kind(st.id)})
			for it.Rewind(); it.Valid(); it.Next() {
				if isMask(it.Item()) {
					masks = append(masks, it.Item().KeyCopy(nil))
				}
			}
			it.Close()
		}
		return nil
	})
	if err != nil || len(masks) == 0 {
		return err
	}
	txns := s.levelTxns(st.chain)
	defer discardAll(txns)
	// hides reports whether a level of the chain holds key (of st.id).
	hides := func(key []byte) (bool, error) {
		kind, n := layerPrefix, len(entryPfx)+8
		if bytes.HasPrefix(key, basePfx) {
			kind, n = basePrefix, len(basePfx)+8
		}
		for i, lv := range st.chain {
			_, err := txns[i].Get(append(kind(lv.id), key[n:]...))
			if err == nil {
				return true, nil
			}
			if !errors.Is(err, badger.ErrKeyNotFound) {
				return false, err
			}
		}
		return false, nil
	}
	for len(masks) > 0 {
		batch := masks[:min(len(masks), flattenBatch)]
		masks = masks[len(batch):]
		err := s.update(func(txn *badger.Txn) ([]op, error) {
			if l.gone.Load() || l.state.Load().id != st.id {
				return nil, errLayerMoved
			}
			var ops []op
			for _, k := range batch {
				item, err := txn.Get(k)
				if errors.Is(err, badger.ErrKeyNotFound) {
					continue
				}
				if err != nil {
					return nil, err
				}
				if !isMask(item) {
					continue
				}
				h, err := hides(k)
				if err != nil {
					return nil, err
				}
				if !h {
					ops = append(ops, op{key: k, del: true})
				}
			}
			return ops, nil
		})
		if errors.Is(err, errLayerMoved) {
			return nil // frozen by a snapshot, or reset: leave it
		}
		if err != nil {
			return err
		}
		if err := s.stopping(); err != nil {
			return err
		}
		time.Sleep(flattenPause)
	}
	return nil
}

// stopping returns errClosing once Close asked the background work to
// stop.
func (s *Store) stopping() error {
	select {
	case <-s.bg.stop:
		return errClosing
	default:
		return nil
	}
}
