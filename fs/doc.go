// Package fs is the FUSE face of agentfs: it serves the kernel's
// requests from the overlay views, through go-fuse's raw protocol API.
//
// # Node identity
//
// Every kernel node id names one overlay.Node, and every overlay.Node
// belongs to exactly one branch view. The mount root (node id 1) is the
// only node shared by all views: its lookups, attributes and listing
// depend on the calling process's branch, so they are never cached
// (zero entry and attribute timeouts). Everything below the root is
// branch-qualified and cached with long timeouts, so nothing the kernel
// cached for one branch can be served to a process in another.
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
//
// # Activity
//
// With Options.Activity set, each successful change (and, with
// Options.ActivityReads, each lookup, open for reading and listing) is
// reported as an Event naming the caller, the branch and the paths, from
// the view of the node it went to (activity.go). Reporting never waits.
package fs
