// Package overlay implements the union semantics of agentfs over a
// lower directory (the user's project, which a view only reads) and one
// branch layer (entries in branch, inodes in backstore), without FUSE.
//
// # Model
//
// A path in a view resolves to, in order: the branch's entry for that
// path (an upper inode, or a whiteout that hides the name), else the
// lower file at the parent's lower path plus the name, unless the parent
// is opaque. Every upper inode is a real inode in the backstore (an
// "object"): its mode, owner, times, size and xattrs are the object's
// own, so metadata changes are plain syscalls on the object and
// passthrough I/O updates them natively. A metacopy entry has an object
// that carries the attributes while the data still lives in the lower
// file (chmod, chown, utimens, setxattr and rename of lower files copy
// no data). Directories created in the overlay are opaque; copied-up
// directories carry their lower path as Redirect, so renaming a lower
// or merged directory is a metadata operation. A view may leave lower
// paths out, or show lower directories empty (exclude.go: a view of the
// whole system hides agentfs's own directories and seals the kernel's
// filesystems); files of filesystems mounted inside the lower tree
// show mapped inode numbers (ino.go).
//
// A view given hide rules (Config.Hide) shows no lower file whose
// project path they hide, nor another name of such a file's inode: see
// "Hidden project paths" in hide.go, the one place a lower name is
// judged, and apply_hold.go for what Apply never does to them.
//
// # Nodes
//
// Node is the identity the kernel sees (one FUSE inode): upper nodes are
// keyed by object (hard links share a node), lower-only nodes by lower
// path. A node knows its current parent and name; renames move them,
// unlink detaches them, and an unlinked node keeps its data until the
// last open file and kernel reference are gone.
//
// # Views, comparisons, checks
//
// A view shows a branch, a snapshot (read-only) or the plain lower
// tree (LowerView, read-only); see views.go. Diff and Patch compare two
// views of one lower directory (diff.go, patch.go), PlanMerge and
// ApplyMerge merge one view into another three-way from a third
// (merge.go, merge_text.go, merge_apply.go), Export writes a
// view out as a plain tree (export.go), and Fsck checks a whole store:
// entries against objects and the lower tree, and garbage (fsck.go).
// They read views through Lookup, ReadDir and Getattr, as the kernel
// does (walk.go). LiveObjects lists the objects open nodes hold, which
// garbage collection (backstore.Store.Collect) must spare.
//
// # Who writes the lower directory
//
// The files apply*.go (apply.go, apply_write.go, apply_commit.go,
// apply_links.go, apply_hold.go) are the one writer of the project:
// Apply takes a branch's changes into the lower directory, and only
// `agentfs apply` reaches it (the daemon calls it for ctl.OpApply).
// Every other file of this package opens the lower directory read-only
// and only reads it: through the view's O_PATH descriptor (FS.lowerFd)
// with fstatat, readlinkat and openat O_RDONLY (lookups, reads,
// readdir, copy-up, Diff, Export, Fsck); a change to a lower file's data, mode, owner,
// times or xattrs goes to the object that copy-up makes for it.
// Neither backstore nor branch is given the lower directory. The test
// in lowerwrites_test.go checks this package's source for writes
// through the lower directory outside the apply group (what it checks,
// and what it cannot see, is written there).
//
// # Quotas
//
// A view may have limits on the objects and bytes its branch holds; the
// usage is counted in the in-memory index, and the operation that would
// cross a limit fails with EDQUOT (quota.go).
//
// # Locking
//
// Lock order: FS.gate → Node.copyMu → FS.mu → FS.nodesMu; FS.mu →
// Node.growMu → the quota's mu (quota.go).
// FS.gate (an RWMutex) is held shared by each operation that changes a
// name or its attributes, for its whole run, and exclusively only to
// install or remove a merge's hold of its paths, which such an
// operation touching one of them waits out (gate.go).
// FS.mu (RWMutex) guards the namespace: the upper index, every Node's
// parent/name/entry/unlinked fields, and the persistent layer. Lookups
// and reads take it shared; namespace changes take it exclusive.
// Readers off the requests' path (activity events, reaping at FORGET)
// take FS.mu with rlockAside, which tries instead of queueing: a queued
// reader holds the lock from the writer's unlock until it is scheduled,
// which across CPUs of a virtual machine is long enough to stall the
// next writer (lock.go).
// FS.nodesMu guards the identity tables and reference counts.
// Node.copyMu serializes the data copy of one node's copy-up, which runs
// without FS.mu held so that a large copy-up blocks nobody else.
package overlay
