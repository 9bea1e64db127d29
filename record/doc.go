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
// log's entries (a list, or read one at a time: a long run's log is never
// held whole), the paths the run changed (a diff of the two trees).
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
// directory, inside the project) from the before-tree: HEAD and its
// commit's tree (go-git, from the repository's objects), the index
// (go-git's decoder), the ignore rules (autosnap.Ignore). A regular
// file gets a before-blob when its contents were needed (read, written,
// deleted, or changed) and Git cannot give them back (untracked,
// ignored, outside a repository, tracked and dirty, or in a repository
// the command made); an after-blob
// when it was written or changed, or when its contents were needed and
// Git cannot give them back. Whether contents changed is decided, for
// a path the diff lists (one it does not list did not change, and is
// not read), by a content hash (Options.Hash: SHA-256 by default, a
// function that the store's hashes can replace).
//
// # Bounds
//
// blobs.parquet is written with parquet-go, Snappy-compressed, one
// blob read at a time and a row group flushed whenever the rows
// buffered reach Options.RowGroupBytes: the compressed pages of the
// row group being written wait in files beside blobs.parquet, unlinked
// as they are made, so memory holds one blob and parquet-go's copies of
// it, not a row group (statistics and page bounds of the content column
// are off: they would copy every blob into the page headers and the
// column index). A blob is one Parquet value, written whole into one
// page whose sizes are 32-bit: a file larger than Options.MaxBlobBytes
// (1 GiB by default, under 2 GiB at most) gets no blob, and
// Result.TooLarge names it. Files are hashed by streaming them when the
// Tree is an Opener. blobs.parquet is written first and manifest.json last,
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
