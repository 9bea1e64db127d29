// Package backstore owns the bytes and attributes of upper inodes.
//
// Every upper inode of the overlay — regular file, directory, symlink,
// fifo, socket or device node — is a real inode here, named by an
// object id (a deferred regular file gets its inode at its first use:
// see "Pending objects"). Its mode, owner, times, size and xattrs are the inode's
// own: the overlay reads them with lstat and changes them with
// fd-relative syscalls (fchmodat, fchownat, utimensat, xattr calls) on
// the object's [Loc], and the kernel does I/O on object files directly
// (FUSE passthrough). The package knows nothing of paths in the
// overlay, branches or reference counts; it makes, copies, finds and
// removes objects.
//
// # Layout
//
// Objects live in a flat, sharded namespace, never nested:
//
//	Dir/objects/ab/ab0123456789cdef     hostfs
//	Dir/ramdisk/ab/ab0123456789cdef     ramdisk (a tmpfs mounted here)
//	Dir/spill/ab/ab0123456789cdef       ramdisk, objects too big for it
//
// Beside the shards, the main part's root holds the open marker
// (Crashed). Idle objects, made ahead or emptied for reuse (pool.go),
// lie in the shards like objects, but are none.
//
// An object id is 16 lowercase hex characters from crypto/rand; its
// first two characters name its shard. Creation uses O_EXCL, mkdirat,
// symlinkat or mknodat, which fail on a collision, and then retries
// with a new id. A shard is made with the first object that belongs in
// it. The store keeps an O_PATH dirfd of every shard open from Open (or
// from its making) to Close, so every syscall on an object is
// fd-relative with a 16-byte name, whatever the length of Dir.
//
// # Kinds
//
// "hostfs" keeps objects in Dir/objects. Opening an existing Dir
// reopens its objects: a kept store can be mounted again later.
//
// "ramdisk" mounts a tmpfs of RamdiskSize bytes at Dir/ramdisk (as
// root; a tmpfs already mounted there, left by a daemon that died, is
// adopted with its objects). Where mounting is not permitted it uses a
// fresh private directory /dev/shm/agentfs-* instead, reported as Mode
// "shm"; its size is then that of /dev/shm. Objects whose size is known
// at creation to exceed SpillThreshold (CopyUp, Clone) are created in
// Dir/spill on disk. The store remembers which ids are spilled (an
// in-memory set that Open rebuilds from Dir/spill), so Loc, Open,
// Lstat and Remove find an object in either part. A full tmpfs gives
// ENOSPC to whoever writes; nothing else breaks.
//
// # Attributes
//
// CopyUp, CopyAttrs and Clone apply attributes in this order: owner
// (only when running as root), xattrs, mode, and the atime and mtime
// last, with nanoseconds, so that nothing afterwards disturbs them.
// The owner comes first because chown clears setuid, setgid and
// security.capability; xattrs come before the mode so that a read-only
// mode does not stop a non-root daemon from setting user.* xattrs, and
// the final chmod fixes the mode bits whatever a POSIX ACL xattr did to
// them. Xattrs the target refuses (EPERM, EOPNOTSUPP, EACCES) are
// skipped quietly; a non-root daemon copies only user.* xattrs, and
// security.selinux is never copied (the backstore's own label stands).
// A symlink has no mode of its own, so chmod is skipped for it, and
// nothing ever follows a symlink object.
//
// # Errors
//
// Errors carry the object id or the step that failed and wrap the
// errno: callers test them with errors.Is(err, unix.ENOSPC). [Store.Lstat]
// is the exception: it is on the path of every getattr and returns the
// bare errno of fstatat.
//
// # Crash safety
//
// An object is complete before its id is returned: a failed CopyUp or
// Clone removes its partial object, and the reflink probe uses
// unnamed (O_TMPFILE) files. A crash can therefore leave only objects
// that nothing refers to, which [Store.Collect] removes given the
// caller's list of referenced objects (see gc.go). Idle objects
// (pool.go) that a crash leaves behind are such objects too: the next
// Open reports the crash (Crashed), for the caller to collect them.
//
// # Pending objects
//
// An object may be pending: a sparse file with its size and attributes
// whose bytes are fetched (from a remote) at its first use, in place,
// by one fill per object that hashes them as they come. Open, OpenRead
// and Clone hand out a descriptor only once the object is complete and
// checked; OpenStream hands one out at once, with a Stream that says
// which leading bytes are there (a reader waits for its range; the last
// byte waits for the check). A fill whose Streams are all closed, and
// that no caller needs whole, stops (checkpointed, the object still
// pending) until the next use. A journal (Dir/pending) keeps the object
// pending across a crash or a reopen until it is complete, with
// checkpoints a fill resumes from. See pending.go and fill.go.
//
// A pending object may also be deferred: given out by Defer with its
// attributes and no inode, which is made (atomically: O_TMPFILE, then
// linked under its id) at its first use — Loc, the opens, Clone and
// the attribute copies make it; Lstat, Objects, Remove and Collect
// answer from its record, kept in memory and in the journal. A mount
// started from a remote snapshot of many files thus makes no inode
// for a file that is never used. See deferred.go.
//
// # Locking
//
// A Store is safe for concurrent use. Store.mu guards the set of
// spilled ids and nothing else; it is never held across a syscall. The
// pool has a lock of its own (pool.go), never held with Store.mu. A
// part's mu serializes the making of its shards and is taken under
// neither. pendMu guards the pending objects (deferred ones included)
// and the fills under way,
// taken alone and never across a syscall or a fetch; a fill's own mu
// (its progress) is taken alone too. jmu (the order of one object's
// journal lines) is taken before pendMu, and held across the journal's
// write. Close stops the fills and waits for them.
// Everything else is fixed between Open and Close, or is the kernel's
// business.
package backstore
