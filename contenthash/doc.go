// Package contenthash owns the content hashes of agentfs: the SHA-256
// of every regular file's contents in a snapshot, each snapshot's
// Merkle root, the background worker that computes them, and the
// checks against them (Verify, VerifyTree). It reads views through
// overlay.Walk and keeps what it computes in the branch store's hash
// keys (branch/hash.go); it knows nothing of FUSE, the control
// protocol or the command line.
//
// # The Merkle root
//
// The root of a tree (a snapshot's view, or a plain directory such as
// an export of it) commits to every path, its type, its mode, a
// symlink's target and a regular file's contents. It is defined on
// the tree alone, so that any program can recompute it from an
// export (docs/store-format.md, "Content hashes", says the same):
//
//   - Each path has a type letter: d directory, f regular file, l
//     symlink, p fifo, s socket, c character device, b block device;
//     and a mode: its permission bits (st_mode & 07777), written as 4
//     octal digits.
//   - Each path has a node hash (SHA-256, written as 64 lowercase hex
//     digits): a regular file's is the SHA-256 of its contents (what
//     sha256sum prints); a symlink's the SHA-256 of its target's bytes;
//     a fifo's or socket's the SHA-256 of nothing; a device's the
//     SHA-256 of "MAJOR:MINOR" in decimal; a directory's the SHA-256
//     of its children's records, concatenated in the byte order of
//     their names.
//   - A child's record is: type letter, space, mode, space, node hash,
//     space, name, NUL byte ("f 0644 <hex> main.go\x00").
//   - The root is the SHA-256 of "agentfs-merkle-1\n" followed by the
//     record of the top directory with an empty name
//     ("d 0755 <hex> \x00").
//
// Owners, times, xattrs, hard links and inode numbers are not part of
// it: an export made by another user, or copied with cp -r, has the
// same root as long as names, types, modes and contents are the same.
//
// # What is computed when
//
// Taking a snapshot computes nothing: the worker (Hasher.Start) is
// kicked afterwards, and computes the roots of the snapshots that have
// none, oldest first, one at a time, on one goroutine; in a daemon the
// files are read and hashed by a process of its own at the lowest
// priority there is (a session and autogroup of nice 19, SCHED_IDLE,
// the idle I/O class: helper.go), so that it takes only what the
// workloads leave. Hashes are cached: an object's by
// its id (an object a snapshot names never changes: the branch clones
// it before changing it), so a file unchanged since the previous
// snapshot is not read again; a project file's by (dev, ino) with its
// size, mtime and ctime, so it is read once until it changes (kept
// only once it has not changed for 2 seconds: racyWindow), and by every
// store of the user: the user's cache (lowercache.go) keeps them too. Roots,
// object hashes and project file hashes are kept in the store
// (branch.Hashes); an object's hash also indexes it by contents
// (branch.Store.ObjectsWithHash). Root computes a missing root on
// demand (an ended session's store has no worker).
//
// An object still pending (a store started from a remote snapshot, its
// bytes fetched at their first open: backstore/pending.go) has no
// record: its hash is its key, the name of the remote's object
// (Config.PendingSum), taken with its size and mtime of now, so that
// hashing a snapshot, or a push, fetches nothing. Once filled it is
// hashed like any object, from its bytes, here by then.
//
// A snapshot's files that are still the project's are read from the
// project as it is when the root is computed, as every read of a
// snapshot reads them.
//
// # Identical contents
//
// Where the backstore can clone (FICLONE), the worker asks the kernel
// to share the blocks of a newly hashed object with an older object of
// the same contents (FIDEDUPERANGE, which compares the bytes itself and
// shares only what is equal): copies of one file made in the mount
// then take the space of one.
//
// # Locking
//
// Hasher.mu guards the queue state, the single-flight table and the
// caches; it is never held while a file is read or the store is
// written. The worker takes no lock of the workspace's.
package contenthash
