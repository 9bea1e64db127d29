// Package daemon is one serving mount: it opens the store (a
// workspace.Workspace), mounts its view with the FUSE server (fs),
// serves the workspace's operations over the control file, keeps the
// activity log and takes automatic snapshots, mounts branches for
// namespaced processes, and ends cleanly: by umount from outside, by
// the unmount control operation, or by SIGTERM/SIGINT/SIGHUP.
//
// It also holds what agentfs keeps about running mounts outside them:
// private stores (mounts without --store) and the registry of mounts
// that lets `agentfs unmount` clean up after a daemon that died
// (paths.go, registry.go, unmount.go), and the start of a daemon
// process from the CLI (start.go).
//
// # Life of a daemon
//
//	validate the request (Validate): nothing is created for a bad one
//	make a private store if there is none; open the store
//	  (workspace.Open), attach the daemon to it (workspace.Mount)
//	open the activity log, start automatic snapshots
//	mount, write the registry entry, report "ready" to the parent
//	serve until unmounted
//	detach the branch mounts, stop the activity log, close the
//	  workspace, move a private store aside for a remover process to
//	  delete (trash.go), remove the registry entry
//
// Nothing in the exit grows with what the store holds but closing the
// workspace (what is committed and not yet written, badger's memtable):
// the deletion of a private store, which took longer than unmount waits
// at 200,000 objects, is left to a process at the lowest priority that
// outlives the daemon. The registry entry goes last, so that a daemon
// that dies while it closes leaves it for agentfs unmount to clean up
// after.
//
// Unmounting waits a little for the mount to become idle (the client of
// the unmount operation still holds the control file open for a
// moment), then detaches it lazily; if processes keep the detached
// mount alive, the daemon ends their connection after DetachGrace
// (through fusectl, or by exiting): the user asked for the mount to go
// away.
//
// # Lock order
//
// The workspace's operation lock (workspace.Workspace serializes its
// operations and calls the daemon, as its workspace.Mount, with it
// held), then Daemon.mu (the branch mounts). The daemon never calls the
// workspace with mu held. Neither is taken by a file operation: the
// FUSE server resolves callers and serves requests on its own locks.
// Daemon.mu is taken briefly by control requests (the write-back of a
// writeback-cache mount lists the branch mounts), never across a wait
// for the kernel: Retire and Invalidate notify the branch mounts after
// they let it go, so a branch mount detached meanwhile just answers the
// notification with an error, which is logged.
package daemon
