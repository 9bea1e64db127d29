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
//	                     (feature/snapshots, see "Keeping versions")
//	info/<key>           store-level facts (info/lower, info/hide, ...), raw bytes
//	layer/<name>         layer record (see "Layer records")
//	seq/layer            next layer id to hand out, uint64
//	seq/ino              first inode number not yet leased, uint64
//	dev/<dev><high>      the slot of a (device, inode range) pair of
//	                     lower files on other filesystems (devslot.go)
//	commit/pending       the timestamp of a split commit in progress
//	e/<id><path>         the entry at path in layer id (8-byte id);
//	                     value: Entry.Encode
//	snap/<snap id>       snapshot record (see "Snapshots"); the id is 8
//	                     lowercase hex digits
//	tag/<name>           a tag: the id of the snapshot it names
//	base/<id><path>      what lower path looked like when layer id first
//	                     shadowed it (see "Bases" in base.go)
//	hash/o/<object id>   the SHA-256 of an object's data (hash.go)
//	hash/c/<sha256><obj> the objects by contents, an index (hash.go)
//	hash/l/<dev><ino>    the SHA-256 of a project file (hash.go)
//	hash/s/<snap id>     a snapshot's Merkle root (hash.go)
//	parent/<id>          the parent of layer id: [1][parent layer id,
//	                     uint64][Tp, uint64] (see "Layers")
//	frozen/<id>          layer id is frozen: [1][F, uint64][successor
//	                     layer id, uint64]: none of its keys has a
//	                     version above F; its branch went on in the
//	                     successor (0: none) (see "Keeping versions")
//
// A branch name maps to a short numeric layer id, so that renaming a
// branch is one small write and never rewrites entries. Layer ids are
// never reused, not even after DeleteLayer: a snapshot names its layer
// by id and outlives it.
//
// # Layer records
//
// The value of layer/<name>, in the lowest encoding that holds it (a
// store that never took a snapshot keeps encoding 1, which agentfs
// builds older than snapshots read):
//
//	encoding 1: [1][layer id, uint64]
//	encoding 2: [2][layer id, uint64][epoch, uint64][created, int64 Unix
//	            ns, 0 if unknown][uvarint len(origin)][origin snapshot id]
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
// Layer.Commit does not wait for badger: it hands the transaction to
// badger's writer and returns (a badger commit costs two or three
// goroutine wakeups, about 20 µs, which every create, unlink and rename
// of the mount would otherwise wait for). With HandOffWith it does not
// even hand it over: it queues it, in timestamp order, for another
// thread to hand over (waking badger's writer is itself a wakeup of
// another thread; handoff.go), and whatever reads or waits hands over
// what is queued first. badger writes transactions in the order they
// were handed over; its callbacks come in no order, so
// each waits for the one of the commit before it, and a commit counts
// as written (and the read timestamp moves to it) only once every
// commit before it is. At most maxInFlight commits wait to be written:
// the next one waits for them (when badger's flushes stall). Whatever
// reads settles first: it waits until every commit handed over so far
// is written, so a read always sees every Commit that returned. So does
// Settle, which callers use before a side effect that must not precede
// the commit (removing an object whose last entry the commit deleted),
// and Sync. A commit that fails once handed over (badger could not
// write its log) fails the store: nothing after it is published, and
// Settle, Sync and every later commit return the error; the store must
// be reopened, and then holds neither the failed commit nor, perhaps,
// some of those handed over with or after it (badger fails a whole
// batch, and may have written later ones). badger fails this way only
// when it cannot make a file, where it often stops the process anyway.
//
// badger's discard timestamp is the oldest of: the read timestamp, the
// oldest timestamp still being read, and the oldest held snapshot's or
// parent's (see "Keeping versions").
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
// a commit that is written (Settle returned) survives kill -9 of the
// process; Sync makes it survive a power loss too. A commit that
// returned but was not written yet when the process died is lost, as a
// change to a native file that nobody fsync'ed is lost in a power
// failure.
//
// # Inode numbers
//
// AllocIno hands out (1<<63)|n. n comes from blocks of 1024 leased by
// advancing seq/ino in a commit of its own; numbers of a block that were
// never handed out are skipped after a reopen, never reused.
//
// # Snapshots
//
// A snapshot is a timestamp of one layer: the record snap/<id> names a
// layer id and a commit timestamp Ts, and the snapshot's entries are
// that layer's e/<layer id> keys read at Ts. Nothing is copied: badger
// keeps the versions a snapshot sees (see "Keeping versions"), and
// objects are shared by name (see "Epochs").
//
// Layer.Snapshot takes Ts = the read timestamp, i.e. the last complete
// commit, while no commit runs (it holds the commit lock): a snapshot
// holds every commit that returned before Snapshot was called and none
// that started after it returned. It freezes the branch's layer id:
// the branch goes on in a new layer id whose parent is (layer id, Ts)
// (or the level below, when the layer holds no key of its own; see
// "Layers"), and nothing writes the old id again. It commits (at a
// timestamp above Ts) the record, the layer record with the new id and
// the epoch raised, the new id's parent key, frozen/<old id> = (Ts, new
// id), and feature/snapshots the first time, and calls Sync: one small
// commit, whatever the number of entries or the size of files. A
// Commit that raced with it is retried on the new id, as after ResetTo.
// The record (encoding 1):
//
//	[1][layer id, uint64][Ts, uint64][epoch, uint64][created, int64 Unix ns]
//	then uvarint-length-prefixed strings: branch name, kind, label
//
// Snapshot ids are 8 lowercase hex digits drawn at random (32 bits),
// redrawn while one collides with an existing snapshot. Users may type
// an unambiguous prefix of at least 4 digits, or a tag (Store.Snapshot).
// Snapshots are listed in the order they were taken, which is the order
// of their Ts (each snapshot is a commit of its own, so no two share
// one).
//
// Invariants:
//
//   - A snapshot never changes: no commit writes at or below a published
//     timestamp, and compaction keeps the version of every key that Ts
//     sees for as long as the snapshot exists.
//   - A snapshot outlives its branch: DeleteLayer deletes the entries at
//     a new timestamp, and the snapshot still reads them at Ts.
//   - Every entry has Epoch <= its layer's epoch (the overlay writes
//     the current epoch; CreateLayer and ResetTo give the layer an
//     epoch above the snapshot's, which is above every entry it reads
//     through), so a snapshot's entries have Epoch <= the
//     record's Epoch, and the same commit raises the layer's epoch past
//     it.
//   - A tagged snapshot cannot be deleted: a tag pins it (so pruning
//     automatic snapshots never takes a tagged one). Delete its tags
//     first.
//
// Store.SnapshotView reads a snapshot as a Layer reads its branch (Get,
// Load, Children). Each read registers Ts as a read in progress, after
// checking that the snapshot still exists, so deleting a snapshot while
// it is being read is safe; reads after the deletion fail with
// ErrNotFound.
//
// # Keeping versions
//
// badger runs with NumVersionsToKeep = 1 and a discard timestamp D set
// by this package. A compaction keeps every version above D and, of the
// versions at or below D, only the newest, and not even that one when
// it is a deletion (levelsController.subcompact in badger's levels.go;
// memtables never drop versions). A read at t >= D therefore sees what
// it saw when t was written: the newest version at or below t is either
// above D, or the newest at or below D, which is kept.
//
// Frozen layers. A read at t of a layer id that has no version above
// t (the layer is frozen at F <= t: frozen/<id>) sees the newest
// version of each key, which compaction keeps whatever D is. So a
// snapshot, or a parent, that reads a layer frozen at or below its
// timestamp needs nothing held. Every snapshot freezes the layer it
// reads (see "Snapshots"), and every parent names a snapshot's level or
// a level below one, or a flattened level, frozen when made (see
// "Depth"): none of them holds D. A snapshot or parent of a layer that
// is not frozen at its timestamp (taken by an agentfs before frozen
// layers, which kept writing the layer) is held: D stays at or below
// its timestamp while it exists.
//
// D is the oldest of the read timestamp, the reads in progress, and
// the held snapshots' Ts and parents' Tp. It never decreases: a read or
// a snapshot starts at the current read timestamp, and a View's read at
// an existing snapshot's Ts, both at least D (or frozen). At Open,
// badger's D is 0 (it discards nothing) until start has loaded every
// frozen key, snapshot and parent, so a reopen never lets a compaction
// run without them. A snapshot is held from before its commit until
// the commit is done and the layer frozen (freeze).
//
// So compaction drops every overwritten version that no snapshot sees
// (overwritten between two snapshots, or after the newest), and the
// deletions below D: a long session over a pre-run snapshot keeps the
// branch's newest versions and the snapshot's, whatever the number of
// changes (see "Reclaiming space" for when badger compacts).
//
// An agentfs before frozen layers ignores frozen/ keys and holds every
// snapshot, which is safe: it only keeps more.
//
// # Reclaiming space
//
// badger compacts on its own as it writes (level 0 into the levels
// below when level 0 holds 2 tables), applying D. Besides, a background
// goroutine (flatten.go) compacts the levels into one (badger's
// Flatten, then value log GC) when the store was idle for a whole
// 2-second tick after at least 10,000 commits, and Close compacts level
// 0 (the memtables it flushes) into the levels below. The size on disk
// is thus at most the live entries, what the snapshots see, badger's
// two memtables' logs and a few level-0 tables.
//
// Where badger cannot write a memtable to a table (the disk full, the
// store's directory gone), it logs the error and retries for ever, and
// its Close never returns: Close stops waiting for it once badger has
// reported that, and returns an error. Every commit is in badger's log
// by then (Close settles first), which the next Open replays, as after
// a crash; the store's lock stays held until the process exits.
//
// Masks: a deletion in a layer with a parent (after a branch's first
// snapshot, every layer has one) writes a mask without looking down the
// chain. Before the idle compaction, the goroutine deletes the masks of
// each Layer in use that hide nothing (no level of its chain holds the
// key: a file made and deleted since the last snapshot), in commits of
// 250 keys that check the key is still a mask of the layer the branch
// writes (pruneMasks), so masks do not pile up with every name ever
// deleted.
//
// A store that holds, or held, a snapshot has feature/snapshots: an
// agentfs that knows no snapshots would move D past them, so it must
// refuse the store (and the layer records and entries written since
// use encodings it would not read anyway).
//
// # Epochs
//
// Each layer has an epoch, a counter starting at 0 kept in its layer
// record and cached in memory (Layer.Epoch). Snapshot and ResetTo raise
// it. Entry.Epoch is the layer epoch in which the entry's object was
// created or last cloned (the overlay sets it): an entry with Epoch <
// Layer.Epoch() may name an object a snapshot also names, so the
// overlay clones the object before changing it, and records the clone
// with the current epoch. Entries with Epoch 0 encode as before
// snapshots existed (see encode.go).
//
// # Layers
//
// Branches from snapshots, restore and deletion.
//
// A layer id may have a parent: the key parent/<id> names another
// layer id P and a timestamp Tp, and the layer's entries are its own
// e/<id> keys laid over P's entries read at Tp (which are P's own keys
// at Tp laid over P's parent, and so on: a chain of levels). A parent
// is written in the commit that makes the layer id; it is always a
// snapshot's (layer, Ts), a level below one, or a flattened level, so
// what a level reads never changes. Only the flattener rewrites a
// parent key, onto a level that reads the same (see "Depth"). Reading
// through the chain:
//
//   - Get looks the key up level by level, top first; the first level
//     that has the key answers.
//   - Load and Children merge the levels' iterators in key order; at a
//     key that several levels hold, the topmost wins.
//   - In a layer with a parent, a deleted entry cannot just be deleted
//     (the parent's would show through): Commit writes a mask instead,
//     the one-byte value 0xff, which reads as "no entry here" and hides
//     the levels below. Bases (base/<id>) are layered the same way,
//     masks included. A layer without a parent (main, and every layer
//     of a store from before layers) deletes as before.
//
// CreateLayer makes a new layer id whose parent is the snapshot's
// (layer, Ts), with epoch snapshot epoch + 1 (every entry it reads
// through names an object the snapshot shares: see "Epochs"), and
// records the snapshot as its origin: one small commit, whatever the
// number of entries.
//
// Layer.ResetTo re-points instead of rewriting: the branch gets a new
// layer id, whose parent is the snapshot's (layer, Ts), with epoch
// max(epoch, snapshot epoch) + 1, in one small commit that writes the
// parent key and the layer record. The Layer switches to the new id
// when the commit is done (a Commit that raced with it is retried on
// the new id). The old id is frozen: nothing writes it again; the
// snapshots that name it still read it, and the layers that have it as
// parent. Layer.ResetToKeeping also takes, in the same commit, a
// snapshot of the old id as it was (a restore's safety snapshot: the
// record and frozen/<old id> with no successor, so that Lineage does
// not count it as taken since the restore): a crash leaves the branch
// either reset with its safety snapshot or as it was without one.
//
// What a restore changes. Layer.Difference names the paths that may
// differ between the layer as it is and a snapshot, with the snapshot's
// entries, without reading every entry: the two chains share a layer id
// (a branch reads through the level its last snapshot froze; a branch
// and its origin share the origin's level), and what differs is the
// keys of the levels above that id on either side, and the keys of that
// id with a version between the two timestamps it is read at (a walk of
// its keys, which reads the values only of those, and of those only the
// version the snapshot sees; the versions are there, as both timestamps
// are held). The snapshot's entries at the keys above the shared level
// come from one iterator over the snapshot's chain walked beside those
// keys in key order (a step to a near key, a seek to a far one), not
// from a lookup each; the paths come out once each, in path order
// (difference.go). The overlay updates its index with those alone.
//
// Depth. A level costs a lookup (Get) or an iterator (Load, Children).
// Every snapshot of a branch that changed since its last one adds a
// level (the frozen one); a branch of a branch adds one. Two rules
// bound the chain:
//
//   - A level that holds no key of its own at its timestamp reads as
//     its parent, so Snapshot, CreateLayer and ResetTo skip it when they
//     choose a parent (a snapshot without changes since the last, or
//     a restore of a snapshot taken right after a restore, adds no
//     level).
//   - The flattener (flatten.go), a background goroutine woken when a
//     chain of a Layer in use grows past flattenDepth (8) levels, merges
//     the levels of the chain but the last into a new layer id Z
//     (masks included: the last level may hold what they hide), in
//     commits of 250 keys a millisecond apart that no read sees
//     (nothing names Z; a command waits for one such commit at most),
//     then, in one small commit, gives Z the last level as parent,
//     freezes Z, and re-points the branch's layer id onto Z, if its
//     parent is still what was merged. The branch then reads 3 levels,
//     and the same entries: every level merged is read at a fixed
//     timestamp. The commands that deepen a chain stay one small
//     commit. A crash before the last commit leaves the chain as it
//     was, and Z's keys to the sweep at the next Open. The levels that
//     no longer lie in the chain stay readable until the store reopens
//     (a read that began before reads them; holds are only dropped at
//     Open).
//
// So a branch in use reads through at most flattenDepth levels, plus
// those added while a flattening runs; the cost of flattening is the
// keys of the levels merged (what changed since the chain's last
// level), off the commands' path.
//
// Keeping parents readable: a parent's Tp is held as a snapshot's Ts
// is, unless its layer is frozen at or below Tp (see "Keeping
// versions"), from the commit that writes the parent key for as long
// as the store is open; Open holds the parents of the live layer ids
// only. A layer id is live while a branch or a snapshot
// names it, or it is the parent of a live layer id. Open deletes the
// keys of the ids that are not (an id a ResetTo left that no snapshot
// names, or whose last snapshot was deleted): one commit, split when
// big.
//
// DeleteLayer deletes a branch's record and its own entries and bases
// (one commit, split when big); its parent key stays while a snapshot
// names the id. Making sure no process still uses the branch is the
// caller's job. "main" cannot be deleted. A deleted Layer's methods
// fail with ErrNotFound.
//
// A store with a parent key has feature/layers, written with the first
// one: an agentfs that knows no layers would read a layered branch as
// its own keys only.
//
// # Names
//
// Branch and tag names follow one rule (checkName): 1 to 100 bytes of
// valid UTF-8, no control characters, no '/', not "." or "..", no
// leading '-', and not 4 to 8 characters all in [0-9a-f], which would
// read as a snapshot id or id prefix. Because of that last rule a
// snapshot reference (Store.Snapshot) is an id or id prefix exactly when
// it is 4 to 8 lowercase hex digits, and a tag otherwise.
//
// # Garbage collection
//
// Store.ReferencedObjects names every object that a branch or a
// snapshot shows. It reads all versions of all entries once: for each
// key, the version visible at each read point of its layer (the
// current read timestamp for a live branch, the Ts of each of its
// snapshots, the Tp at which a level of a branch's or snapshot's chain
// is read), skipping versions no read point sees, so an object shared
// by many snapshots at one path is named once. A read point of a level
// below the top of a chain sees a key only if no level above it in
// that chain holds the key (an entry or a mask): a lookup in each, for
// each distinct stack of levels above (so an object that a branch
// deleted after its last snapshot, and no snapshot shows, is garbage
// once that snapshot is deleted). A layer id that is not live has no
// read point: its entries name nothing.
//
// # Locking
//
// Lock order: the flattener's Store.bg.mu first (held for a whole
// flattening pass, which takes every lock below), then Store.inoMu (or
// Store.slotMu, never both), then
// Store.commitMu, then the hand-off
// queue's mu (handoffs), then Store.tsMu; handoffs.turn, then its mu; and
// Store.mu (the layer cache), then Store.tsMu. mu and commitMu are never
// held together. Store.pmu (the parents) is taken after mu or
// commitMu, and nothing is taken while it is held. tsMu also guards the in-memory set of snapshot
// timestamps. A wait for badger to write a commit may hold any lock
// but tsMu (badger's callbacks take tsMu and nothing else), including
// Store.mu, inoMu, slotMu, commitMu and the callers' own locks. badger does its
// own locking. A Store and its Layers are safe for concurrent use;
// Close must not run concurrently with other calls.
package branch
