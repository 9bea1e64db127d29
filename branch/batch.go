package branch

import (
	"errors"
	"fmt"
)

// Batch collects entry changes for one atomic Commit. A later change
// to a path replaces an earlier one. The zero Batch is empty and ready
// to use; a Batch may be reused after Reset. It is not safe for
// concurrent use.
type Batch struct {
	ops   map[string]*Entry // nil value: delete
	order []string          // paths in first-change order
	// bases are the base changes (see "Bases" in base.go), as ops.
	bases     map[string]*Base // nil value: delete
	baseOrder []string
	err       error // first invalid change, reported by Commit
}

// Put records e at path. The batch keeps a copy of e.
func (b *Batch) Put(path string, e *Entry) {
	if e == nil {
		if b.err == nil {
			b.err = fmt.Errorf("put %q: nil entry", path)
		}
		return
	}
	c := *e
	b.set(path, &c)
}

// Delete removes the entry at path (nothing if there is none).
func (b *Batch) Delete(path string) { b.set(path, nil) }

func (b *Batch) set(path string, e *Entry) {
	if b.ops == nil {
		b.ops = map[string]*Entry{}
	}
	if _, ok := b.ops[path]; !ok {
		b.order = append(b.order, path)
	}
	b.ops[path] = e
}

// SetBase records base as the base of path (see "Bases" in base.go),
// committed with the entries. The batch keeps a copy.
func (b *Batch) SetBase(path string, base *Base) {
	if base == nil {
		if b.err == nil {
			b.err = fmt.Errorf("base of %q: nil", path)
		}
		return
	}
	c := *base
	b.setBase(path, &c)
}

// DeleteBase removes the base of path (nothing if there is none).
func (b *Batch) DeleteBase(path string) { b.setBase(path, nil) }

func (b *Batch) setBase(path string, base *Base) {
	if b.bases == nil {
		b.bases = map[string]*Base{}
	}
	if _, ok := b.bases[path]; !ok {
		b.baseOrder = append(b.baseOrder, path)
	}
	b.bases[path] = base
}

// Len is the number of paths the batch changes (entries and bases).
func (b *Batch) Len() int { return len(b.order) + len(b.baseOrder) }

// Reset empties the batch.
func (b *Batch) Reset() { *b = Batch{} }

// Commit applies all puts and deletes of b atomically: after it
// returns nil every change is visible (once written, which Store.Settle
// waits for, it survives the death of the process; Store.Sync makes it
// survive a power loss), and no reader, nor a crash, ever sees a part
// of it. On error nothing is applied. There is
// no limit on the size of a batch (see "Batch atomicity" in the package
// doc). b is left unchanged.
func (l *Layer) Commit(b *Batch) error {
	if b.err != nil {
		return fmt.Errorf("branch %q: %w", l.name, b.err)
	}
	if b.Len() == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		st := l.state.Load()
		ops, err := b.opsFor(l, st)
		if err != nil {
			return err
		}
		err = l.s.write(func() error {
			if l.gone.Load() {
				return errLayerGone
			}
			// A flattening re-points the chain (a new state, the same
			// id): the ops still hold. A Snapshot or ResetTo moves
			// the branch to a new layer id.
			if cur := l.state.Load(); cur.id != st.id || (len(cur.chain) > 0) != (len(st.chain) > 0) {
				return errLayerMoved
			}
			return nil
		}, ops)
		if errors.Is(err, errLayerMoved) && attempt < 3 {
			continue // a Snapshot or ResetTo moved the branch to a new layer id
		}
		if err != nil {
			return fmt.Errorf("branch %q: %w", l.name, err)
		}
		return nil
	}
}

// errLayerMoved: a Snapshot or ResetTo gave the branch a new layer id
// while a Commit built its keys.
var errLayerMoved = errors.New("the branch was reset meanwhile: commit again")

// opsFor returns b's ops for layer state st: in a layer with a parent, a
// deletion is a mask (see "Layers" in the package doc).
func (b *Batch) opsFor(l *Layer, st *layerState) ([]op, error) {
	ops := make([]op, 0, b.Len())
	del := func(key []byte) op {
		if len(st.chain) > 0 {
			return op{key: key, val: maskValue}
		}
		return op{key: key, del: true}
	}
	for _, p := range b.order {
		if err := checkPath(p); err != nil {
			return nil, fmt.Errorf("branch %q: %w", l.name, err)
		}
		key := appendPath(layerPrefix(st.id), p)
		if e := b.ops[p]; e != nil {
			ops = append(ops, op{key: key, val: e.Encode()})
		} else {
			ops = append(ops, del(key))
		}
	}
	for _, p := range b.baseOrder {
		if err := checkPath(p); err != nil {
			return nil, fmt.Errorf("branch %q: base: %w", l.name, err)
		}
		key := appendPath(basePrefix(st.id), p)
		if base := b.bases[p]; base != nil {
			ops = append(ops, op{key: key, val: base.Encode()})
		} else {
			ops = append(ops, del(key))
		}
	}
	return ops, nil
}

// Settle waits until every commit of the store so far is written (see
// Store.Settle).
func (l *Layer) Settle() error { return l.s.Settle() }
