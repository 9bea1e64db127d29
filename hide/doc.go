// Package hide owns the hide rules of a mount: the gitignore-style
// patterns whose project paths (secrets: .env, *.pem, secrets/) do not
// exist in the view, and the lower inodes those paths name.
//
// # Rules
//
// Rules are patterns in layers, one layer per source: the user's
// configuration file, the project's (.agentfs.conf), and the command
// line (--hide). Within a layer the patterns are read as one gitignore
// file at the project's root (the last pattern that matches a path
// decides, "!" takes a path back, a path inside a hidden directory is
// hidden whatever the patterns say of it); the matching is autosnap's
// (go-git's patterns asked one path at a time, as git does). Across
// layers a path is hidden when any layer hides it: a later layer can
// add to what is hidden, never take back what another hides, so a
// project (which an agent may have edited) cannot weaken the user's
// patterns, and neither can the command line.
//
// A path is a project path: relative to the lower root, '/'-separated,
// as the lower directory names it (a directory renamed in the view
// keeps its lower path, so its hidden files stay hidden).
//
// Rules are fixed once made: a mount records them in its store
// (Marshal), and every later command on the store reads them back
// (Unmarshal), so that diff, apply and export of an ended session use
// the same rules.
//
// # Hidden inodes
//
// A hard link gives a lower file several names, and a hidden name's
// contents must not show through a visible one. Inodes records the
// inodes of the lower regular files that hidden paths name: a scan of
// the project when it is made, and every hidden regular file seen after
// (Saw). A regular lower file with more than one link whose inode is
// recorded is hidden under every name. The set only grows: a false
// positive hides a visible file, never the reverse.
//
// # Locking
//
// Rules is immutable and safe for concurrent use. Inodes.mu guards the
// set alone; nothing is called with it held.
package hide
