// Package difftest is a seeded, randomized differential tester for
// filesystems: it applies the same sequence of operations to several
// directory trees ("roots") that start as identical copies of a
// generated lower tree, compares every result and, periodically, the
// whole trees, and on the first difference shrinks the case to a
// minimal one and prints it.
//
// # Roots
//
// The reference is a plain directory on a native filesystem: the
// truth for contents and, where the two references agree, for errnos.
// The roots under test are compared with it: agentfs, and the kernel's
// overlayfs (mounted with index=on so that copy-up keeps hard links, as
// a plain directory does). When agentfs is tested, overlayfs runs
// alongside as a witness: where the plain directory and agentfs both
// fail an op with different errnos, agentfs may fail as overlayfs does.
// The root's own tree and the package's unit tests need no FUSE: two
// plain directories must never differ.
//
// # Operations
//
// open (O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY, O_NOFOLLOW in
// combinations; the fd kept in one of a few slots), pwrite, write,
// pread, lseek, ftruncate, fstat, fsync and close on the slots; and on
// paths: write and read whole files, truncate, unlink, mkdir, rmdir,
// rename (plain, RENAME_NOREPLACE, RENAME_EXCHANGE; files and
// directories, lower, merged and new ones), symlink, readlink, link,
// chmod, lchown, utimensat, the user.* and trusted.* xattr calls,
// mknod (fifo, socket), lstat and readdir. Paths come from the names
// that exist in the reference (lower names preferred), new names from
// a small set so that they collide, and odd paths (through a file, a
// missing directory, with a trailing slash). About one op in seven
// runs with fsuid/fsgid 1000, so that permission checks apply.
//
// # What is compared
//
// After each op: the errno, the return value, the data read (file
// bytes, link target, xattr value or list, directory listing) and the
// stat fields below. At every full-tree check: the names and types
// (readdir), and per name: mode, size (not for directories), nlink,
// uid, gid, rdev, mtime (see below), file contents, symlink target,
// every xattr, and which names share an inode. Each tree is also
// checked against itself: d_ino equals st_ino, d_type matches the
// mode, no name is listed twice.
//
// Times: every time the test sets (the lower tree's and utimensat's
// explicit ones) lies before ExplicitTimeLimit (2011); times the
// filesystem sets lie after it ("now"). An explicit time must match to
// the nanosecond; a "now" time must be "now" on both sides: a root
// whose mtime changed when the reference's did not, or the other way
// round, differs.
//
// Never compared: st_dev and raw st_ino values (roots are different
// filesystems; inode identity is compared as link groups), atime (FUSE
// and the native filesystems apply relatime differently), ctime (cannot
// be set), st_blocks and st_blksize, and the st_size of directories
// (filesystem specific).
//
// # Allowed differences
//
// Known, documented differences of a root from the reference, by
// allowance ID. A root's Profile lists the ones it may show; agentfs
// may show only those that no FUSE filesystem can avoid.
//
//	ID                 root       difference                                   handling
//	rename-dir-exdev   overlayfs  rename(2) of a lower or merged directory     the harness then moves the tree as mv(1)
//	                              fails with EXDEV (no redirect_dir); agentfs  does (mkdir, link, unlink) so that the
//	                              must rename it (docs/semantics.md,           root can go on being compared
//	                              checklist ★12)
//	unlinked-nlink     overlayfs  fstat of an open lower file after unlink     accepted for st_nlink 1 where the
//	                              reports st_nlink 1 (the lower inode's)       reference has 0
//	failed-rename-     overlayfs  renaming an opaque directory over a non-     the harness gives the parents the
//	mtime                         empty one fails with ENOTEMPTY but changes   reference's mtime again after a failed
//	                              the mtime of the source's parent             rename
//	dir-nlink-1        overlayfs  a merged directory reports st_nlink 1        accepted for directories only
//	dino-hardlink      overlayfs  after link(2) of a copied-up or lower file,  accepted for non-directories (also
//	                              readdir's d_ino of a name (the upper inode)  once the link count is back to 1)
//	                              differs from its st_ino (the origin's)
//	fifo-mtime         overlayfs, writing to a fifo does not change the mtime  accepted for fifos whose reference mtime
//	                   agentfs    that stat shows (overlayfs: the real inode's is "now" and the root's is explicit
//	                              is not updated; FUSE: the kernel updates the
//	                              mtime in its inode without telling the
//	                              daemon, as go-fuse's loopback shows too)
//
// # Shrinking
//
// On a difference the run stops, and the case (lower tree and ops up
// to the failing one) is replayed on fresh roots: delta debugging
// removes chunks of ops, then single ops, then lower-tree entries,
// keeping each removal after which a difference with the same
// signature (op kind and result classes, or tree field) still shows.
// The report gives the seed, the minimal lower tree and the minimal
// ops with each root's result.
package difftest
