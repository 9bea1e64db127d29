package branch

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// Memory budget. The daemon's whole RSS budget is 150 MiB; badger's
// defaults (64 MiB memtables × 5, a 256 MiB block cache) would take it
// all. Entries are small (tens of bytes), so small tables do well.
const (
	memTableSize   = 8 << 20  // ×2 memtables; a transaction holds 15% of one
	blockCacheSize = 8 << 20  // decoded table blocks
	indexCacheSize = 4 << 20  // table indexes and bloom filters
	valueThreshold = 64 << 10 // larger values would go to the value log; entries never are
	valueLogSize   = 16 << 20 // value log file size (holds almost nothing, see valueThreshold)
)

// badgerOptions are the options of the store's badger; flushFailed is
// called when badger reports that it could not write a memtable to a
// table (it retries for ever).
func badgerOptions(o Options, flushFailed func()) badger.Options {
	var bo badger.Options
	if o.InMemory {
		bo = badger.DefaultOptions("").WithInMemory(true)
	} else {
		bo = badger.DefaultOptions(filepath.Join(o.Dir, "meta")).WithReadOnly(o.ReadOnly)
	}
	mt := int64(memTableSize)
	if o.memTableSize > 0 {
		mt = o.memTableSize
	}
	return bo.
		WithLogger(badgerLogger{l: o.Logger, flushFailed: flushFailed}).
		WithMemTableSize(mt).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(2 << 20).
		WithNumCompactors(2).
		WithBlockCacheSize(blockCacheSize).
		WithIndexCacheSize(indexCacheSize).
		WithValueThreshold(min(valueThreshold, mt*15/100/2)).
		WithValueLogFileSize(valueLogSize).
		WithNumVersionsToKeep(1).
		// At Close, level 0 (the memtables just flushed) is compacted
		// into the levels below: the versions no read point sees go
		// (see "Reclaiming space" in the package doc).
		WithCompactL0OnClose(!o.ReadOnly).
		WithSyncWrites(false).
		WithDetectConflicts(false). // commits are serialized (Store.commitMu)
		WithMetricsEnabled(false).
		WithNumGoroutines(2)
}

// badgerLogger sends badger's logging to slog: errors at error level,
// everything else at debug level.
type badgerLogger struct {
	l           *slog.Logger
	flushFailed func() // see badgerOptions; nil for none
}

func (b badgerLogger) log(level slog.Level, f string, a ...any) {
	if b.l != nil && b.l.Enabled(context.Background(), level) {
		b.l.Log(context.Background(), level, "badger: "+strings.TrimSpace(fmt.Sprintf(f, a...)))
	}
}

func (b badgerLogger) Errorf(f string, a ...any) {
	b.log(slog.LevelError, f, a...)
	if b.flushFailed != nil && strings.Contains(f, "error flushing memtable") {
		b.flushFailed()
	}
}
func (b badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelDebug, f, a...) }
func (b badgerLogger) Infof(f string, a ...any)    { b.log(slog.LevelDebug, f, a...) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.log(slog.LevelDebug, f, a...) }
