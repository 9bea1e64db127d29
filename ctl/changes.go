package ctl

import "unicode/utf8"

// Payloads of the change operations (OpDiff, OpRestore, OpExport).

// RestoreArgs are the arguments of OpRestore.
type RestoreArgs struct {
	Ref string `json:"ref"` // the snapshot (see SnapshotRef)
	// DryRun asks for the changes a restore would make, making none.
	DryRun bool `json:"dry_run,omitempty"`
}

// RestoreReply is the reply of OpRestore.
type RestoreReply struct {
	Snapshot SnapshotInfo `json:"snapshot"` // the snapshot restored
	Branch   string       `json:"branch"`   // the branch it was restored into
	// Safety is the snapshot of the state before the restore (nil for
	// a dry run): restoring it undoes the restore.
	Safety *SnapshotInfo `json:"safety,omitempty"`
	// Changes (a dry run) are the changes the restore would make.
	Changes []Change `json:"changes,omitempty"`
	// Stopped: the session's command runs under a supervisor, which
	// stopped every process of it before the restore (a dry run: would;
	// Deferred: does).
	Stopped bool `json:"stopped,omitempty"`
	// Relaunch: the supervisor starts the command again after the
	// restore (a dry run or Deferred: would, having relaunches left).
	// Stopped without Relaunch: the run ends instead (--max-restarts
	// used up, or the command ended by itself meanwhile).
	Relaunch bool `json:"relaunch,omitempty"`
	// Deferred: the caller is one of the processes a supervised
	// restore stops (a self-rewind), so the restore is carried out
	// after this reply (Safety is not known yet), unless another rewind
	// stops the command first or the run ends first: it is then dropped,
	// and the activity log has a rewind line saying so.
	Deferred bool `json:"deferred,omitempty"`
}

// DiffArgs are the arguments of OpDiff.
type DiffArgs struct {
	// From and To name what to compare: "lower" (the project), a
	// snapshot (id, prefix or tag) or a branch. From defaults to
	// "lower", To to the current branch.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Patch asks for the differences of text files as a unified diff.
	Patch bool `json:"patch,omitempty"`
	// Paths, when given, keep the changes at or below these paths
	// (relative to the mount root), in the list and in the patch.
	Paths []string `json:"paths,omitempty"`
	// MaxBytes, when given, cuts the patch at that many bytes (at most
	// the daemon's own bound, 64 MiB), at the start of a character
	// (CutAtRune), and the daemon stops making it there:
	// DiffReply.PatchTruncated says so. Without it, a patch past the
	// daemon's bound fails the call.
	MaxBytes int `json:"max_bytes,omitempty"`
}

// DiffReply is the reply of OpDiff.
type DiffReply struct {
	From    string   `json:"from"` // what was compared, in words ("branch main")
	To      string   `json:"to"`
	Changes []Change `json:"changes"` // in path order
	// Patch is the unified diff (DiffArgs.Patch).
	Patch string `json:"patch,omitempty"`
	// PatchTruncated: the patch was longer than DiffArgs.MaxBytes and
	// was cut.
	PatchTruncated bool `json:"patch_truncated,omitempty"`
}

// CutAtRune returns s cut to at most n bytes, back to the start of a
// character (utf8.RuneStart) when the cut would split one: the bytes
// kept are left as they are, valid UTF-8 or not.
func CutAtRune(s string, n int) string {
	if n >= len(s) {
		return s
	}
	n = max(n, 0)
	for i := n; i >= 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n] // no character starts near the cut: not UTF-8 there
}

// Change kinds.
const (
	Created     = "created"
	Deleted     = "deleted"
	Modified    = "modified"     // the data differ
	ModeChanged = "mode-changed" // mode, owner or xattrs differ; the data do not
	TypeChanged = "type-changed"
)

// Change is one path that differs between two states.
type Change struct {
	Path string    `json:"path"` // relative to the mount root
	Kind string    `json:"kind"` // Created, Deleted, ...
	Old  *FileInfo `json:"old,omitempty"`
	New  *FileInfo `json:"new,omitempty"`
	// SizeDelta is New.Size - Old.Size (a missing side counts 0).
	SizeDelta int64 `json:"size_delta"`
	// AttrsChanged: a modified file's mode, owner or xattrs changed too.
	AttrsChanged bool `json:"attrs_changed,omitempty"`
	// Hidden: a file of the branch's own at a hidden project path (a
	// hide pattern matches it): apply writes it only with --force.
	Hidden bool `json:"hidden,omitempty"`
}

// FileInfo is one side of a Change.
type FileInfo struct {
	Type   string `json:"type"` // file, dir, symlink, fifo, socket, char, block
	Mode   uint32 `json:"mode"` // permission bits with setuid, setgid and sticky
	Uid    uint32 `json:"uid"`
	Gid    uint32 `json:"gid"`
	Size   int64  `json:"size"` // 0 for directories
	Rdev   uint64 `json:"rdev,omitempty"`
	Target string `json:"target,omitempty"` // symlinks
}

// ExportArgs are the arguments of OpExport.
type ExportArgs struct {
	Ref string `json:"ref"` // "lower", a snapshot or a branch
	// To is the absolute path of the directory to write: it must not
	// exist, or be empty.
	To string `json:"to"`
	// Manifest also writes the tree's hashes and root, as JSON, to
	// To + ".manifest.json" (beside the tree, not in it).
	Manifest bool `json:"manifest,omitempty"`
}

// ExportReply is the reply of OpExport.
type ExportReply struct {
	What string `json:"what"` // what was exported, in words
	To   string `json:"to"`
	// Skipped lists what could not be exported, and why ("path: why").
	Skipped []string `json:"skipped,omitempty"`
	// Manifest is the manifest's path and Root the tree's root, when
	// one was asked for.
	Manifest string `json:"manifest,omitempty"`
	Root     string `json:"root,omitempty"`
}
