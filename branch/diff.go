package branch

import (
	"cmp"
	"errors"
	"iter"
)

// Source is a set of entries that Diff compares: a Layer or a View.
type Source interface {
	// Load calls fn with every entry in path order (see Layer.Load),
	// and returns fn's error as is.
	Load(fn func(path string, e *Entry) error) error
}

var (
	_ Source = (*Layer)(nil)
	_ Source = (*View)(nil)
)

// Diff calls fn, in path order, for every path whose entry differs
// between a and b: ea is a's entry and eb b's, nil where one has none.
// Entries that differ only in Epoch are the same (Epoch records which
// objects may be shared, not what they hold). a and b are read side by
// side, each as one consistent state, never held in memory whole. An
// error from fn stops Diff and is returned as is.
func Diff(a, b Source, fn func(path string, ea, eb *Entry) error) error {
	next, stop := pull(b)
	defer stop()
	var (
		pb string
		eb *Entry // nil: b is exhausted
	)
	advance := func() error {
		var err error
		pb, eb, err = next()
		return err
	}
	if err := advance(); err != nil {
		return err
	}
	err := a.Load(func(pa string, ea *Entry) error {
		for eb != nil && comparePaths(pb, pa) < 0 {
			if err := fn(pb, nil, eb); err != nil {
				return err
			}
			if err := advance(); err != nil {
				return err
			}
		}
		if eb == nil || pb != pa {
			return fn(pa, ea, nil)
		}
		if !sameEntry(ea, eb) {
			if err := fn(pa, ea, eb); err != nil {
				return err
			}
		}
		return advance()
	})
	for err == nil && eb != nil {
		if err = fn(pb, nil, eb); err == nil {
			err = advance()
		}
	}
	return err
}

// sameEntry compares entries but for Epoch.
func sameEntry(a, b *Entry) bool {
	x, y := *a, *b
	x.Epoch, y.Epoch = 0, 0
	return x == y
}

var errStopped = errors.New("stopped")

// pull turns src.Load into a pull iterator: next returns the next path
// and entry, a nil entry at the end, or Load's error. stop ends Load
// early.
func pull(src Source) (next func() (string, *Entry, error), stop func()) {
	var loadErr error
	pnext, pstop := iter.Pull2(func(yield func(string, *Entry) bool) {
		loadErr = src.Load(func(p string, e *Entry) error {
			if !yield(p, e) {
				return errStopped
			}
			return nil
		})
	})
	next = func() (string, *Entry, error) {
		p, e, ok := pnext()
		if !ok {
			return "", nil, loadErr // Load has returned
		}
		return p, e, nil
	}
	return next, pstop
}

// comparePaths orders paths as their keys sort ("path order", see
// "Paths in keys" in the package doc): byte by byte with '/' below
// every other byte.
func comparePaths(a, b string) int {
	for i := range min(len(a), len(b)) {
		ca, cb := a[i], b[i]
		if ca == '/' {
			ca = 0
		}
		if cb == '/' {
			cb = 0
		}
		if ca != cb {
			return cmp.Compare(ca, cb)
		}
	}
	return cmp.Compare(len(a), len(b))
}
