// Package workspace is the control plane of agentfs: the operations on
// a store, as a typed Go API. A Workspace is one store (its branch
// metadata, its backstore, the live view of every branch in use) over
// one project; its methods are what `agentfs snapshot`, `branch`,
// `diff`, `restore`, `merge`, `export`, `apply`, `gc`, `fsck`, `verify`,
// `push` and the binding commands do: the CLI, the daemon's control
// server, the MCP server all call these, and none of them holds rules
// of its own. Pull (pull.go) builds a new store from a session in a
// remote (package remote owns the remote's layout and the transfers).
//
// # Two ways to hold one
//
// Open opens a store in this process, with nothing mounted: the store
// of an ended session, a tool, a test. A daemon opens its store the
// same way, then Attaches its mount (the Mount interface): from then on
// the operations also reach the kernel's caches, the processes bound to
// branches and the branch mounts. Over the control file the daemon
// serves the same object (Register); Client is the typed side a command
// holds, which reaches a daemon or an in-process Workspace alike. An
// operation behaves the same either way, but for what needs a mount
// (binding a process is refused offline with ErrNotMounted).
//
// # Invariants
//
//   - The project (the lower directory) is written by Apply alone, and
//     only through overlay.Apply; every other operation reads it.
//   - An operation that fails changes nothing, except where its error
//     says what it did (a restore's safety snapshot names the way back;
//     an apply says how many paths it wrote before the error).
//   - When an operation that changes the store answers through a Client
//     (a daemon's control server, or Local), its change is durable: the
//     control server settles the metadata (Settle) before it replies. A
//     caller of the methods in its own process calls Settle where it
//     needs the same.
//   - A store opened ReadOnly refuses, before doing anything, every
//     operation that would change it (ErrReadOnly); Close ends the
//     workspace: later operations fail with ErrClosed.
//   - Every branch in use has one live view (Views), so that every
//     process writing a branch writes through the same in-memory index.
//
// # Serialization and lock order
//
// Every operation that reads or changes snapshots and branches holds
// opMu for its whole run, so that operations see each other's effects
// whole: a restore never runs while a branch is being switched or
// deleted, a listing never shows a branch half switched. File
// operations through the mount never take opMu; each view's own lock
// orders them with snapshots, restores and switches. A push is the one
// exception: it holds opMu only while it pins what it sends, then
// hashes and transfers without it (push.go), its objects kept from gc
// by pins (pinMu, taken under opMu or alone).
//
// Lock order: the Mount's rewind lock (a supervised restore's: Mount.
// Rewinding takes it without opMu, the rewind's Done releases it once
// opMu has been released), then Workspace.opMu, then the Mount's own locks (the
// daemon's branch-mount table), then a view's lock (overlay), then the
// branch store's. A restore tells the Mount (Invalidate) from a
// goroutine of its own while it holds the view's lock, and waits for it
// once it has released that lock (restore.go). The Mount never calls
// back into the Workspace. ApplyProgress
// and Status take no lock an operation holds (they are asked while an
// apply runs): Status calls the Mount's Describe and Bindings without
// opMu, so a Mount must be safe to call without it.
//
// # Errors
//
// Every error of an operation is an *Error: a Kind (ErrNotFound,
// ErrInvalid, ErrExists, ErrBusy, ErrReadOnly, ...; test with errors.Is)
// and a message that names the thing and the fix, as the user sees it,
// with the errno the control protocol sends: the kind's, or, for an
// ErrIO of the host's file systems, what the system call said. (Open,
// Close and a Client that cannot reach its daemon return plain errors.)
package workspace
