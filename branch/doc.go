// Package branch owns the persistent metadata of a store, in badger:
// the branches (layers) and their entries, the inode number allocator,
// and store-level facts such as the lower directory a store belongs to.
//
// # Key layout
//
//	format            uint32 store format version (FormatVersion)
//	info/<key>        store-level facts (e.g. info/lower)
//	layer/<name>      the id of the branch called name (8 bytes)
//	e/<id>/<path>     the entry at path in branch id (path "" is the root)
//	seq/ino           badger sequence behind AllocIno
//
// Layers are named through an id so that renaming a branch, or pointing
// a name at another line of history (restore), never rewrites entries.
//
// # Invariants
//
// A Batch is committed in one badger transaction: after a crash either
// all of it or none of it is there. Only one process writes a store at
// a time (a flock on Dir/lock); the lock dies with its holder, so a
// crashed daemon never blocks the next mount.
//
// # Locking
//
// Store.mu guards the layer cache; badger does its own locking.
package branch
