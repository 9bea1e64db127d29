package branch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	badger "github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// FormatVersion is the store format this build reads and writes.
const FormatVersion = 1

// Errors that callers test with errors.Is.
var (
	ErrNotFound     = errors.New("not found")
	ErrLocked       = errors.New("store is locked")
	ErrIncompatible = errors.New("incompatible store format")
	ErrReadOnly     = errors.New("store is read-only")
)

// Options configure Open.
type Options struct {
	Dir      string // badger lives in Dir/meta, the lock is Dir/lock
	InMemory bool   // tests: no files, no lock
	ReadOnly bool   // inspect without the writer lock
	Logger   *slog.Logger
}

// Store is an open metadata store.
type Store struct {
	db   *badger.DB
	dir  string
	lock *os.File
	ino  *badger.Sequence
	ro   bool

	mu     sync.Mutex
	layers map[string]*Layer
}

// Open opens (creating if needed) the store.
func Open(o Options) (*Store, error) {
	s := &Store{dir: o.Dir, ro: o.ReadOnly, layers: map[string]*Layer{}}
	var bo badger.Options
	if o.InMemory {
		bo = badger.DefaultOptions("").WithInMemory(true)
	} else {
		if err := os.MkdirAll(o.Dir, 0700); err != nil {
			return nil, fmt.Errorf("store %s: %w", o.Dir, err)
		}
		if !o.ReadOnly {
			if err := s.takeLock(); err != nil {
				return nil, err
			}
		}
		bo = badger.DefaultOptions(filepath.Join(o.Dir, "meta")).WithReadOnly(o.ReadOnly)
	}
	bo = bo.WithLogger(badgerLogger{o.Logger}).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithBlockCacheSize(8 << 20).
		WithIndexCacheSize(4 << 20).
		WithValueLogFileSize(64 << 20).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithSyncWrites(false).
		WithDetectConflicts(false)
	db, err := badger.Open(bo)
	if err != nil {
		s.unlock()
		return nil, fmt.Errorf("store %s: opening metadata: %w", o.Dir, err)
	}
	s.db = db
	if err := s.checkFormat(); err != nil {
		s.Close()
		return nil, err
	}
	if !o.ReadOnly {
		if s.ino, err = db.GetSequence([]byte("seq/ino"), 1024); err != nil {
			s.Close()
			return nil, fmt.Errorf("store %s: %w", o.Dir, err)
		}
		if _, err := s.ensureLayer("main"); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) takeLock() error {
	p := filepath.Join(s.dir, "lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0600)
	if err != nil {
		return fmt.Errorf("store %s: %w", s.dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(p)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "another process"
		} else {
			holder = "pid " + holder
		}
		return fmt.Errorf("store %s is in use by %s: unmount the other mount first, or use another --store: %w", s.dir, holder, ErrLocked)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	s.lock = f
	return nil
}

func (s *Store) unlock() {
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}

func (s *Store) checkFormat() error {
	var found uint32
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte("format"))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			if len(v) != 4 {
				return fmt.Errorf("format key has %d bytes", len(v))
			}
			found = binary.BigEndian.Uint32(v)
			return nil
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		if s.ro {
			return fmt.Errorf("store %s has no metadata: %w", s.dir, ErrNotFound)
		}
		return s.db.Update(func(txn *badger.Txn) error {
			v := binary.BigEndian.AppendUint32(nil, FormatVersion)
			return txn.Set([]byte("format"), v)
		})
	}
	if err != nil {
		return fmt.Errorf("store %s: reading the format version: %w", s.dir, err)
	}
	if found != FormatVersion {
		age := "a newer"
		if found < FormatVersion {
			age = "an older"
		}
		return fmt.Errorf("store %s has format version %d, this agentfs reads version %d: it was written by %s agentfs; use that version, or start a new store: %w",
			s.dir, found, FormatVersion, age, ErrIncompatible)
	}
	return nil
}

// SetFormatVersionForTest rewrites the store's format version, so that
// tests can check how an incompatible store is refused.
func (s *Store) SetFormatVersionForTest(v uint32) error {
	return s.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte("format"), binary.BigEndian.AppendUint32(nil, v))
	})
}

// Close closes the store and releases the writer lock.
func (s *Store) Close() error {
	var err error
	if s.ino != nil {
		s.ino.Release()
		s.ino = nil
	}
	if s.db != nil {
		err = s.db.Close()
		s.db = nil
	}
	s.unlock()
	return err
}

// Sync makes every committed change durable.
func (s *Store) Sync() error { return s.db.Sync() }

// AllocIno returns a new inode number, never handed out before in this
// store: (1<<63) | n.
func (s *Store) AllocIno() (uint64, error) {
	if s.ino == nil {
		return 0, ErrReadOnly
	}
	n, err := s.ino.Next()
	if err != nil {
		return 0, err
	}
	return 1<<63 | (n + 1), nil
}

// SetInfo records a store-level fact.
func (s *Store) SetInfo(key string, val []byte) error {
	if s.ro {
		return ErrReadOnly
	}
	return s.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte("info/"+key), val)
	})
}

// Info returns a store-level fact, ErrNotFound when unset.
func (s *Store) Info(key string) ([]byte, error) {
	var out []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte("info/" + key))
		if err != nil {
			return err
		}
		out, err = it.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("info %q: %w", key, ErrNotFound)
	}
	return out, err
}

type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) log(level slog.Level, f string, a ...any) {
	if b.l != nil {
		b.l.Log(nil, level, "badger: "+strings.TrimSpace(fmt.Sprintf(f, a...)))
	}
}
func (b badgerLogger) Errorf(f string, a ...any)   { b.log(slog.LevelError, f, a...) }
func (b badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a...) }
func (b badgerLogger) Infof(f string, a ...any)    { b.log(slog.LevelDebug, f, a...) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.log(slog.LevelDebug, f, a...) }
