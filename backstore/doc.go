// Package backstore owns the bytes and attributes of upper inodes.
//
// Every upper inode of the overlay — regular file, directory, symlink,
// fifo, socket or device node — is a real inode here, named by an object
// id. Its mode, owner, times, size and xattrs are the inode's own: the
// overlay reads them with lstat and changes them with fd-relative
// syscalls on the object, and the kernel does I/O on object files
// directly (FUSE passthrough). Objects live in a flat, sharded
// namespace (objects/ab/abcdef0123456789), never nested, so that object
// names stay short and no path comes near PATH_MAX.
//
// # Kinds
//
// hostfs keeps objects in Dir/objects. ramdisk mounts a size-limited
// tmpfs at Dir/ramdisk (as root; otherwise a private directory under
// /dev/shm) and puts objects whose size is known at creation to exceed
// the spill threshold (copy-ups, clones) in Dir/spill on disk.
//
// # Invariants
//
// An object is created complete before anyone refers to it; a failed
// CopyUp or Clone removes its partial object, so the only garbage a
// crash can leave is unreferenced objects, which gc removes. Errors
// keep their errno: a full backstore gives ENOSPC.
//
// # Locking
//
// Store.mu guards the set of spilled ids; everything else is immutable
// after Open or is the kernel's business.
package backstore
