// Package record writes a record of one command's run in the
// agent-snapshot bundle format, the interchange format of an existing
// ptrace-based tracing tool: a directory with manifest.json (the
// command, its exit status, the Git repositories it observed, and one
// record per observed path: its operations, its state before and
// after, its Git classification) and blobs.parquet (the contents the
// states need, keyed "before:/abs/path" and "after:/abs/path"), so
// that tools built for that format read agentfs sessions unchanged.
//
// It owns the format and the rules that fill it; it is handed what to
// record (Input): the before-state and the after-state as two read-only
// trees (the pre-run snapshot and the end of the run, which package
// session opens through workspace), the operations as the activity
// log's entries, the paths the run changed (a diff of the two trees).
// It knows nothing of sessions, stores, FUSE or the CLI.
//
// # Observed paths
//
// A path is recorded when the activity log names it (Ops maps each
// operation of the log to the format's read, write, existence,
// directory and delete) or when it differs between the two trees (a
// path below a renamed directory, or one whose entries the log dropped:
// write or delete). Paths inside a .git directory are never recorded,
// nor are paths Options.Hidden names (the one filter point for hidden
// paths: nothing of them reaches the manifest or the blobs).
//
// # Contents captured
//
// Git classification reads each repository (a directory holding a .git
// directory, inside the project) from the before-tree: HEAD, the index
// (go-git's decoder), the ignore rules (autosnap.Ignore). A regular
// file gets a before-blob when its contents were needed (read, written,
// deleted, or changed) and Git cannot give them back (untracked,
// ignored, outside a repository, or tracked and dirty); an after-blob
// when it was written or changed, or when its contents were needed and
// Git cannot give them back. Whether contents changed is decided by a
// content hash (Options.Hash: SHA-256 by default, a function that the
// store's hashes can replace).
//
// # Bounds
//
// blobs.parquet is written with parquet-go, Snappy-compressed, one
// blob read at a time and a row group flushed whenever the rows
// buffered reach Options.RowGroupBytes: memory holds at most one row
// group plus one blob (statistics and page bounds of the content column
// are off: they would copy every blob into the page headers and the
// column index). blobs.parquet is written first and manifest.json last,
// so a bundle with a manifest is whole; a Write that fails removes what
// it wrote.
//
// # Before-states read through
//
// A snapshot of a branch reads the project's unchanged files through,
// so a before-state is the project's file as it is when the record is
// made: Options.BeforeTime names the time of the before-state, and
// Result.Stale the paths whose ctime is later (the project changed
// since; the caller says so).
package record
