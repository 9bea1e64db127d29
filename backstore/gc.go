package backstore

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// # Garbage collection
//
// The store does not know which objects are in use: the branch store's
// entries refer to them (branch.Store.ReferencedObjects) and the
// overlay's open nodes hold them (overlay.FS.LiveObjects). Collect
// takes both as functions and removes every other object, except the
// young ones: an object changed less than GCOptions.Grace before the
// collection began may belong to an operation in progress that has
// made it but not yet committed the entry naming it (a copy-up, a
// clone), which a reference list read at the start cannot know of.
// The order of the steps makes the rest safe: the references are read
// first (an object a commit names later is young, or named already);
// each candidate's in-use check is made just before it is removed (a
// node holding an unreferenced object was made before the references
// were read, and stays until the kernel forgets it).

// DefaultGCGrace is how long after its last change (ctime) an
// unreferenced object is still spared.
const DefaultGCGrace = time.Minute

// GCOptions configure Collect.
type GCOptions struct {
	// Referenced calls yield with every object that something refers
	// to, repeats allowed (branch.Store.ReferencedObjects).
	Referenced func(yield func(id string) error) error
	// InUse reports whether an open node of a running view holds the
	// object (overlay.FS.LiveObjects). Nil: none does.
	InUse func(id string) bool
	// Grace spares unreferenced objects changed less than Grace before
	// the collection began: 0 means DefaultGCGrace, negative spares
	// none (only for stores nothing is using).
	Grace time.Duration
	// DryRun finds the garbage without removing anything.
	DryRun bool
	// Found, when set, is called with each unreferenced object not in
	// use, after it was removed (or, young or in a dry run, kept).
	// Its error stops the collection.
	Found func(g Garbage) error
	// Progress, when set, is told after each object how many were
	// looked at.
	Progress func(objects int)
}

// Garbage is an object that nothing refers to.
type Garbage struct {
	ID      string    `json:"id"`
	Bytes   int64     `json:"bytes"` // allocated (st_blocks*512)
	Changed time.Time `json:"changed"`
	// Young: changed within the grace period, so kept.
	Young   bool `json:"young,omitempty"`
	Removed bool `json:"removed"`
}

// GCResult sums up a collection.
type GCResult struct {
	Objects int   `json:"objects"` // objects looked at
	Removed int   `json:"removed"`
	Freed   int64 `json:"freed"` // allocated bytes of the removed objects
	Young   int   `json:"young"` // unreferenced but kept: changed within the grace period
	InUse   int   `json:"in_use"`
}

// ListObjects calls fn with every object, spilled ones included, and
// the bytes it allocates (st_blocks*512, as Usage counts them).
// Objects removed while it runs are skipped; an error from fn stops it
// and is returned as is.
func (s *Store) ListObjects(fn func(id string, bytes int64) error) error {
	return s.statObjects(func(id string, st *unix.Stat_t) error {
		return fn(id, st.Blocks*512)
	})
}

// statObjects calls fn with every object and its lstat.
func (s *Store) statObjects(fn func(id string, st *unix.Stat_t) error) error {
	return s.Objects(func(id string) error {
		st, err := s.Lstat(id)
		if errors.Is(err, unix.ENOENT) {
			return nil // removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("object %s: %w", id, err)
		}
		return fn(id, &st)
	})
}

// GC removes the objects that referenced does not name and inUse does
// not hold, sparing those changed in the last DefaultGCGrace (see
// Collect). It returns how many it removed and the bytes they
// allocated.
func (s *Store) GC(referenced func(yield func(id string) error) error, inUse func(id string) bool) (removed int, freed int64, err error) {
	r, err := s.Collect(GCOptions{Referenced: referenced, InUse: inUse})
	return r.Removed, r.Freed, err
}

// Collect finds the objects that nothing refers to or holds and
// removes them (see "Garbage collection" above).
func (s *Store) Collect(o GCOptions) (GCResult, error) {
	var r GCResult
	if o.Referenced == nil {
		return r, fmt.Errorf("backstore: garbage collection without a list of referenced objects")
	}
	grace := o.Grace
	if grace == 0 {
		grace = DefaultGCGrace
	}
	cutoff := time.Now().Add(-max(grace, 0))
	s.beginCollect()
	defer s.endCollect()
	refs := map[string]struct{}{}
	if err := o.Referenced(func(id string) error { refs[id] = struct{}{}; return nil }); err != nil {
		return r, fmt.Errorf("backstore %s: listing referenced objects: %w", s.main.root, err)
	}
	err := s.statObjects(func(id string, st *unix.Stat_t) error {
		r.Objects++
		if o.Progress != nil {
			o.Progress(r.Objects)
		}
		if _, ok := refs[id]; ok {
			return nil
		}
		if o.InUse != nil && o.InUse(id) {
			r.InUse++
			return nil
		}
		g := Garbage{ID: id, Bytes: st.Blocks * 512, Changed: time.Unix(st.Ctim.Unix())}
		switch {
		case !g.Changed.Before(cutoff):
			g.Young = true
			r.Young++
		case !o.DryRun:
			if err := s.Remove(id); err != nil {
				return err
			}
			g.Removed = true
			r.Removed++
			r.Freed += g.Bytes
		}
		if o.Found != nil {
			return o.Found(g)
		}
		return nil
	})
	return r, err
}

// OpenRead opens a regular file object read-only without changing its
// atime (a snapshot may share it), even when its mode denies reading
// to a non-root daemon (as Clone reads it).
func (s *Store) OpenRead(id string) (*os.File, error) {
	l, err := s.loc(id)
	if err != nil {
		return nil, err
	}
	if err := s.ready(id); err != nil {
		return nil, err
	}
	st, err := s.Lstat(id)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", id, err)
	}
	f, err := s.openToClone(l, &st)
	if err != nil {
		return nil, fmt.Errorf("object %s: open: %w", id, err)
	}
	return f, nil
}

// CopyFileData gives dst, a new empty regular file anywhere, the first
// size bytes of src, as CopyUp copies data: FICLONE where it works,
// else data extent by data extent with copy_file_range (SEEK_DATA,
// SEEK_HOLE), so holes stay holes.
func CopyFileData(dst, src *os.File, size int64) error {
	return copyData(dst, src, size)
}
