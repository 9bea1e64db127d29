package branch

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
)

// Errors that callers test with errors.Is. Every error returned by this
// package that wraps one of them also names the thing concerned.
var (
	ErrNotFound     = errors.New("not found")
	ErrLocked       = errors.New("store is in use")
	ErrIncompatible = errors.New("incompatible store format")
	ErrReadOnly     = errors.New("store is open read-only")
	ErrInvalidPath  = errors.New("invalid path")
	ErrClosed       = errors.New("store is closed")
	ErrInvalidName  = errors.New("invalid name")
	ErrExists       = errors.New("already exists")
	ErrAmbiguous    = errors.New("ambiguous")
	ErrInUse        = errors.New("in use")
)

// Options configure Open.
type Options struct {
	// Dir is the store directory: badger lives in Dir/meta, the writer
	// lock is Dir/lock. Other files in Dir are left alone.
	Dir string
	// InMemory keeps everything in memory (tests): no Dir, no lock.
	InMemory bool
	// ReadOnly opens an existing store for inspection: no writer lock
	// (a shared one instead), no writes, badger read-only.
	ReadOnly bool
	// Logger receives badger's own logging (at debug level, errors at
	// error level). nil discards it.
	Logger *slog.Logger

	// memTableSize overrides the badger memtable size (tests use a small
	// one to force split commits); 0 means the default.
	memTableSize int64
}

// Store is an open metadata store.
type Store struct {
	db   *badger.DB
	dir  string // for messages; "(in memory)" for in-memory stores
	lock *os.File
	ro   bool
	log  *slog.Logger

	closed atomic.Bool
	// flushFailed is closed when badger reports, once Close began,
	// that it cannot write a memtable (noteFlushFailure).
	flushFailed chan struct{}
	flushOnce   sync.Once

	// mu guards layers.
	mu     sync.Mutex
	layers map[string]*Layer

	// pmu guards parents: every layer id's parent (see "Layers" in the
	// package doc), as in its parent/ key.
	// frozen: layer id → a timestamp above which none of its keys has
	// a version, and succ: layer id → the id its branch went on in (the
	// frozen/ keys; see "Keeping versions").
	pmu     sync.RWMutex
	parents map[uint64]level
	frozen  map[uint64]uint64
	succ    map[uint64]uint64

	// inoMu guards the leased inode block [inoNext, inoEnd).
	inoMu   sync.Mutex
	inoNext uint64
	inoEnd  uint64

	// slotMu guards slots, the device slots known (devslot.go), nil
	// until first asked.
	slotMu sync.Mutex
	slots  map[[2]uint64]uint64

	// commitMu serializes commits and guards nextTs and broken.
	commitMu sync.Mutex
	nextTs   uint64 // timestamp of the next commit
	broken   error  // set when a failed split commit could not be rolled back

	// tsMu guards readTs, readers, snapTs, snapHeld, parentHeld,
	// holdOldest, holdAny, flight, inFlight and lost, and orders
	// SetDiscardTs calls.
	tsMu     sync.Mutex
	readTs   uint64            // every commit at or below it is complete
	readers  map[uint64]int    // read timestamps in use → count
	snapTs   map[string]uint64 // snapshot id → Ts, of every snapshot
	snapHeld map[string]level  // the snapshots whose Ts is held (see "Keeping versions")
	// parentHeld: the parent levels whose Tp is held.
	parentHeld map[level]bool
	holdOldest uint64 // the least Ts or Tp held, when holdAny
	holdAny    bool
	flight     *flight // the last commit handed to badger, until written
	inFlight   int     // commits handed to badger, not yet called back
	lost       error   // set when a commit handed to badger failed

	// bg is the background work (flatten.go).
	bg background

	// ho holds the commits queued for badger when a kick is set (see
	// HandOffWith).
	ho handoffs
}

// Open opens the store, creating it (and Dir) if needed. A new store
// has the branch "main".
func Open(o Options) (*Store, error) {
	s := &Store{dir: o.Dir, ro: o.ReadOnly, log: o.Logger, layers: map[string]*Layer{}, readers: map[uint64]int{}, snapTs: map[string]uint64{}, snapHeld: map[string]level{}, parentHeld: map[level]bool{}, parents: map[uint64]level{}, frozen: map[uint64]uint64{}, succ: map[uint64]uint64{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.InMemory && o.ReadOnly:
		return nil, errors.New("store: an in-memory store cannot be opened read-only")
	case o.InMemory:
		s.dir = "(in memory)"
	case o.Dir == "":
		return nil, errors.New("store: no directory given")
	case o.ReadOnly:
		if err := s.lockShared(); err != nil {
			return nil, err
		}
	default:
		if err := os.MkdirAll(o.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("store %s: %w", o.Dir, err)
		}
		if err := s.lockExclusive(); err != nil {
			return nil, err
		}
	}
	if !o.InMemory && !o.ReadOnly {
		if err := s.dropEmptyMemtables(); err != nil {
			s.unlock()
			return nil, err
		}
	}
	s.flushFailed = make(chan struct{})
	db, err := badger.OpenManaged(badgerOptions(o, s.noteFlushFailure))
	if err != nil {
		s.unlock()
		// badger flattens its errors into text: errors.Is cannot see this one.
		if o.ReadOnly && strings.Contains(err.Error(), badger.ErrTruncateNeeded.Error()) {
			return nil, fmt.Errorf("store %s was not closed cleanly and cannot be read until it is recovered: mount it (or open it writable) once, then retry: %w", s.dir, err)
		}
		return nil, fmt.Errorf("store %s: opening the metadata in %s: %w", s.dir, s.metaDir(), err)
	}
	s.db = db
	if err := s.start(); err != nil {
		_ = s.Close() // undoing the open: the caller gets err
		return nil, err
	}
	if !s.ro {
		s.startBackground()
	}
	return s, nil
}

// dropEmptyMemtables removes the empty memtable files (NNNNN.mem of
// size 0) that a crash right after badger created one leaves: badger
// then refuses to open ("while opening fid: N err: Create a new file").
// An empty memtable holds no entries, so nothing is lost. Requires the
// writer lock.
func (s *Store) dropEmptyMemtables() error {
	ents, err := os.ReadDir(s.metaDir())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("store %s: %w", s.dir, err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".mem") || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil || info.Size() != 0 {
			continue
		}
		p := filepath.Join(s.metaDir(), e.Name())
		s.log.Warn("removing an empty memtable left by a crash", "file", p)
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("store %s: removing the empty memtable %s left by a crash: %w", s.dir, p, err)
		}
	}
	return nil
}

// Close closes the store and releases the writer lock. It is safe to
// call more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.stopBackground()
	var err error
	if s.db != nil {
		if !s.ro {
			err = s.settle()
		}
		// badger's Close writes its memtables to tables, and retries
		// for ever when it cannot (the disk full, the store's directory
		// gone): then Close gives up on it. Every commit is in badger's
		// log by now (settle), which the next Open replays, as after a
		// crash; badger still holds the store's files, so the lock
		// stays until the process exits.
		closed := make(chan error, 1)
		go func() { closed <- s.db.Close() }()
		select {
		case cerr := <-closed:
			if cerr != nil {
				err = fmt.Errorf("store %s: closing: %w", s.dir, cerr)
			}
		case <-s.flushFailed:
			return fmt.Errorf("store %s: closing: badger cannot write its tables (its errors are in the log); what was committed is in its log, replayed at the next open; the store stays locked until this process exits", s.dir)
		}
	}
	s.unlock()
	return err
}

// noteFlushFailure is called by badger's logger when badger could not
// write a memtable: while the store closes, Close stops waiting for
// badger.
func (s *Store) noteFlushFailure() {
	if s.closed.Load() {
		s.flushOnce.Do(func() { close(s.flushFailed) })
	}
}

// Settle waits until every change committed so far is written: it
// then survives the death of the process (see "Commits and timestamps"
// in the package doc).
func (s *Store) Settle() error {
	if err := s.usable(); err != nil {
		return err
	}
	return s.settle()
}

// Sync makes every committed change durable (it survives a power loss,
// not only the death of the process).
func (s *Store) Sync() error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.settle(); err != nil {
		return err
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("store %s: sync: %w", s.dir, err)
	}
	return nil
}

// usable returns an error when the store is closed.
func (s *Store) usable() error {
	if s.closed.Load() {
		return fmt.Errorf("store %s: %w", s.dir, ErrClosed)
	}
	return nil
}

// writable returns an error when the store may not be written.
func (s *Store) writable() error {
	if err := s.usable(); err != nil {
		return err
	}
	if s.ro {
		return fmt.Errorf("store %s: %w", s.dir, ErrReadOnly)
	}
	return nil
}

// SetInfo records a store-level fact.
func (s *Store) SetInfo(key string, val []byte) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.apply([]op{{key: infoKey(key), val: append([]byte{}, val...)}}); err != nil {
		return fmt.Errorf("info %q: %w", key, err)
	}
	return nil
}

// DeleteInfo removes a store-level fact (none there is no error).
func (s *Store) DeleteInfo(key string) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.apply([]op{{key: infoKey(key), del: true}}); err != nil {
		return fmt.Errorf("info %q: %w", key, err)
	}
	return nil
}

// Info returns a store-level fact; ErrNotFound when unset.
func (s *Store) Info(key string) ([]byte, error) {
	var out []byte
	err := s.view(func(txn *badger.Txn) error {
		var err error
		out, err = getValue(txn, infoKey(key))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("info %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("info %q: %w", key, err)
	}
	return out, nil
}

// getValue returns a copy of the value at key (badger.ErrKeyNotFound if
// there is none).
func getValue(txn *badger.Txn, key []byte) ([]byte, error) {
	item, err := txn.Get(key)
	if err != nil {
		return nil, err
	}
	return item.ValueCopy(nil)
}
