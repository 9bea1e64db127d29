// Package fs is the FUSE face of agentfs: it serves the kernel's
// requests from the overlay views, through go-fuse's raw protocol API.
//
// # Node identity
//
// Every kernel node id names one overlay.Node, and every overlay.Node
// belongs to exactly one branch view (one overlay.FS per branch in use).
// The mount root (node id 1) is the only node shared by all views: its
// lookups, attributes and listing depend on the calling process's branch
// (views.go: a process bound to a branch, or a descendant of one, sees
// that branch; others the mount's). While any process is bound, the
// root's entries and attributes get zero lifetimes, so the kernel asks
// at every walk through the root, with the walking process as the
// caller; the root's listing is never served from the kernel's cache
// (see Directories). Everything below the root is
// branch-qualified and cached with long timeouts, so nothing the kernel
// cached for one branch can be served to a process in another: data,
// attributes, listings and mmaps are per kernel inode, and no kernel
// inode is in two branches.
//
// # Directories
//
// agentfs keeps no state per open directory and answers OPENDIR with
// ENOSYS: the kernel then opens directories without asking (no OPENDIR
// or RELEASEDIR round trip per directory a walk opens) and keeps each
// listing in the directory's page cache until the directory changes.
// Offsets are indexes into a listing kept per node, made anew at each
// read from offset 0. The root's listing depends on the caller: its
// offsets carry the view's tag, and its cached pages are dropped before
// the empty read that marks a cache complete, so the kernel never
// serves it from its cache (Server.listing).
//
// # After a restore
//
// Invalidate tells the kernel what a Reload or a Restore changed. After
// a Restore, on a kernel that takes FUSE_EXPIRE_ONLY (Linux 6.2), the
// changed names are only expired (expire.go): the kernel looks each up
// again at its next use and drops what it cached below it then, so the
// restore's cost in the kernel grows with the names that changed, not
// with what the kernel cached below them. Only names the kernel may
// hold are named: those of the nodes it references, and the negative
// entries recorded (a name made through the mount leaves the record),
// or every changed name of the kept directories when a node it was
// given with several links is cut loose; they are written a batch to a
// system call (fuseuring.Writer). Otherwise names are dropped, and a
// directory with many changed names whole. A restore calls Invalidate
// from a goroutine of its own while it updates the view's index, the
// view's lock held (workspace.restoreLocked): a notification may wait
// for a LOOKUP in flight in its directory, which waits for that lock,
// so nothing Invalidate waits for may wait for the restore.
//
// # Locking
//
// Lock order: binder.mu → binder.cacheMu; releaser.turn → releaser.mu,
// and releaser.turn → whatever serving a RELEASE takes (it is held
// while releases are served); Server.mu, Server.negMu, inode.mu,
// binder.rootMu and releaser.mu are taken alone. None is held while
// the kernel is notified.
//
// # Passthrough
//
// A kernel inode has one backing file at a time. agentfs registers
// backing files only for backstore objects, never for lower files: a
// read-only open of a lower file is served through the page cache
// (FOPEN_KEEP_CACHE) by the daemon, which follows the node to its upper
// copy after a copy-up, so a descriptor opened before a copy-up sees the
// writes made after it, and no write can ever reach a lower file through
// a reused backing id. An inode with cached opens never gets a
// passthrough open (the kernel refuses to mix the two), and vice versa.
// A READ of 64 KiB or more of a project file range that the lower file
// system does not cache is read from the disk with O_DIRECT
// (overlay.File.ReadFromDisk), so that the mount's page cache is the only
// one to hold it; any other READ of 64 KiB or more is answered by
// splicing the file's pages into the reply (spliceRead), from a
// duplicate of the handle's descriptor, so one copy is made instead of
// two; READs are at most 512 KiB (max_read), so that each fits a pipe.
//
// # Writeback cache
//
// Without passthrough (Options.WritebackCache; the kernel grants not
// both), the kernel gathers writes in its page cache and sends them in
// WRITEs of up to max_write when it writes back: at close (before
// RELEASE, so a closed file is whole in agentfs), fsync, syncfs, memory
// pressure or after 30 s. What changes with it:
//
//   - The kernel keeps its own size and times of a regular file it
//     knows, and takes none from agentfs. A change it did not make needs
//     a new inode: Reload cuts every node loose, and the lower watcher
//     cuts loose a project file changed from outside
//     (overlay.FS.CutLooseLower) before it drops the name. Such nodes
//     keep their pages (dropInode): dropping dirty pages would have the
//     kernel write them back, and wait, on the notifying thread. The
//     watcher drops only the name inotify reported, so names of files
//     with several links live linkedTimeout, not an hour.
//   - Writes reach agentfs later than write(2) returns. Before a
//     control request that reads the files (a snapshot, a diff, an
//     apply) and before an automatic snapshot, Server.WriteBack fsyncs
//     every inode open for writing through the mount, which waits for
//     the kernel's WRITEs (syncfs does not, on FUSE); the daemon runs it
//     on every mount it serves (Options.WriteBackAll). The fsync takes
//     a write-back error off the file's pages: the writer's fsync still
//     reports it, its close may not. A WRITE carries no
//     caller: activity reports a write at the open, as with
//     passthrough.
//   - The kernel reads pages through any handle, write-only ones too
//     (overlay files opened for writing are read-write), and computes
//     O_APPEND offsets itself (agentfs writes at the offsets given).
//   - FLUSH is answered ENOSYS, so the kernel stops sending it.
//
// # Transport
//
// With Options.IOURing, where the kernel grants FUSE over io_uring at
// INIT, requests come through fs/fuseuring's per-CPU queues instead of
// /dev/fuse: Init starts the queues (the kernel holds every request
// until each has an entry), and ringHandler (ring.go) decodes each
// request for the same RawFileSystem methods go-fuse calls. Most are
// answered on the queue's thread, on the caller's CPU; a RELEASE is
// answered at once and served by the releaser (release.go), one
// goroutine on a thread of its own that serves them in order (the
// kernel waits for neither);
// FSYNC, FALLOCATE, COPY_FILE_RANGE, READs from the disk and the
// control file's IOCTLs are served on goroutines (the kernel's readahead
// sends several READs at once; side by side they keep the disk busy). FORGET and INTERRUPT still come over
// /dev/fuse, and notifications go there. Over io_uring READ replies are
// copied into the queue's buffer, not spliced.
//
// # Activity
//
// With Options.Activity set, each successful change (and, with
// Options.ActivityReads, each lookup, open for reading and listing) is
// reported as an Event naming the caller, the branch and the paths, from
// the view of the node it went to (activity.go). Reporting never waits.
package fs
