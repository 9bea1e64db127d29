// Package branch owns the persistent metadata of a store, kept in
// badger: the branches (layers) and their entries, the inode number
// allocator, and store-level facts such as the lower directory a store
// belongs to. It is the only package that imports badger; it knows
// nothing of FUSE or of union semantics.
//
// # Store directory
//
//	DIR/lock     flock(LOCK_EX) by the one writer, which writes its pid here
//	DIR/meta/    the badger database
//	DIR/...      anything else belongs to other packages (objects/, ...)
//
// A writable Open takes flock(LOCK_EX|LOCK_NB) on DIR/lock and fails
// with ErrLocked while another process holds it. The lock dies with its
// holder (close or process death), so a crashed daemon never blocks the
// next mount. A ReadOnly Open takes LOCK_SH instead: inspectors may run
// together, but never beside a writer (badger itself allows no reader
// beside a writer).
//
// # Key layout
//
// All keys are plain bytes; fixed-width integers are big-endian.
//
//	format               uint32 store format version (FormatVersion)
//	feature/<name>       an incompatible feature this store uses; Open
//	                     refuses a store with a feature it does not know
//	                     (none exist in format 1)
//	info/<key>           store-level facts (info/lower, ...), raw bytes
//	layer/<name>         layer record: [encoding=1][layer id, uint64]
//	seq/layer            next layer id to hand out, uint64
//	seq/ino              first inode number not yet leased, uint64
//	commit/pending       the timestamp of a split commit in progress
//	e/<id><path>         the entry at path in layer id (8-byte id);
//	                     value: Entry.Encode
//
// A branch name maps to a short numeric layer id, so that renaming a
// branch, or pointing a name at another line of history (restore), is
// one small write and never rewrites entries.
//
// # Paths in keys
//
// A path ("a/b/c", "" for the root, as in Entry) is stored with every
// component preceded by a 0x00 byte instead of separated by '/':
//
//	""       -> e/<id>
//	"a"      -> e/<id>\x00a
//	"a/b"    -> e/<id>\x00a\x00b
//	"a/b/x"  -> e/<id>\x00a\x00b\x00x
//	"a/b-c"  -> e/<id>\x00a\x00b-c
//
// 0x00 sorts below every byte a name can hold (names never contain NUL
// or '/'), so in key order a directory comes first and its whole subtree
// follows it without interruption: "a/b", "a/b/x", then "a/b-c". With
// '/' as the separator "a/b-c" and "a/b.c" would sort between "a/b" and
// "a/b/x" ('-' and '.' are below '/'). Consequences:
//
//   - Layer.Load visits parents before children, depth first, siblings
//     in byte order of their names ("path order" in this package).
//   - Every descendant of directory P, and nothing else, has the key
//     prefix key(P)+"\x00" (for the root: e/<id>\x00); Layer.Children
//     walks the direct children by seeking past each child's subtree
//     (to key(child)+"\x01").
//
// # Commits and timestamps
//
// badger runs in managed mode: this package chooses every commit
// timestamp. Commits are serialized; commit n is written at timestamp
// n and becomes visible when it is complete, by advancing the store's
// read timestamp to n. Every read (Get, Load, ...) reads at the read
// timestamp current when it starts, so it sees whole commits only, and
// a long Load sees one consistent state even while commits go on.
//
// The oldest timestamp still being read (or the latest commit when
// nothing reads) is badger's discard timestamp: compaction keeps the
// newest version at or below it, and every version above it.
//
// # Batch atomicity
//
// A Batch is committed in one badger transaction when it fits. When it
// does not (badger's ErrTxnTooBig: a transaction holds about 15% of a
// memtable, about 13,000 entries at the 8 MiB memtable used here), it is
// split into several transactions that all carry the same timestamp T:
//
//  1. the first part also writes commit/pending = T;
//  2. the remaining parts are written at T; readers still read at T-1
//     and see none of it;
//  3. a final transaction at T+1 deletes commit/pending, and the read
//     timestamp moves to T+1: the whole batch appears at once.
//
// If the process dies between 1 and 3, the next Open finds
// commit/pending = T and rolls the torn batch back before anything else:
// every key that has a version at T is rewritten, at a new timestamp,
// to its value at T-1 (or deleted if it had none), and then
// commit/pending is deleted. The discard timestamp never passes T-1
// while T is pending, so those old versions still exist. Rolling back is
// idempotent: a crash during it is repaired by the next Open the same
// way. If a split commit fails without a crash (an I/O error), the same
// roll-back runs at once; if that fails too, the Store refuses further
// commits until it is reopened.
//
// badger replays its write-ahead log only up to the last complete
// transaction, and its log lives in the page cache (SyncWrites is off):
// a commit that returned survives kill -9 of the process; Sync makes it
// survive a power loss too.
//
// # Inode numbers
//
// AllocIno hands out (1<<63)|n. n comes from blocks of 1024 leased by
// advancing seq/ino in a commit of its own; numbers of a block that were
// never handed out are skipped after a reopen, never reused.
//
// # Snapshots (planned, not built yet)
//
// The layout is chosen so that snapshots need no format change: a
// snapshot will be a key snap/<layer id><name> holding a commit
// timestamp, and reading it is reading e/<id> at that timestamp
// (versioned reads). Creating one is a single small write whatever the
// size of the branch. The discard timestamp will then be the oldest of
// the snapshots and the readers, so badger keeps every version some
// snapshot can see (and, having one discard timestamp, every version
// after the oldest snapshot too, until that snapshot is deleted). A store that holds a snapshot will record
// feature/snapshots, so that an agentfs that does not know snapshots
// (and would let compaction drop their versions) refuses to open it.
// Branches forked from a snapshot get a new layer id; a new layer record
// encoding names their base.
//
// # Locking
//
// Lock order: Store.inoMu, then Store.commitMu, then Store.tsMu; and
// Store.mu (the layer cache), then Store.tsMu. mu and commitMu are never
// held together. badger does its own locking. A Store and its Layers
// are safe for concurrent use; Close must not run concurrently with
// other calls.
package branch
