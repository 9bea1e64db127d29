package ctl

// Payloads of OpApply and OpApplyProgress.

// ApplyArgs are the arguments of OpApply.
type ApplyArgs struct {
	// Branch is the branch whose changes to apply; the current one
	// when empty.
	Branch string `json:"branch,omitempty"`
	// Paths select subtrees, relative to the mount root ("." for all);
	// every change when empty. A path without a change at or below it
	// is an error (ENOENT).
	Paths []string `json:"paths,omitempty"`
	// DryRun answers what would be done and writes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Force applies conflicts too.
	Force bool `json:"force,omitempty"`
}

// ApplyItem is one change of an apply.
type ApplyItem struct {
	Path string `json:"path"` // relative to the mount root
	Kind string `json:"kind"` // as Change.Kind
	Type string `json:"type"` // the file type written (or removed)
	// Reason says why a conflict or a skipped change was not applied.
	Reason string `json:"reason,omitempty"`
	// Bytes of data written (or to write, in a dry run).
	Bytes int64 `json:"bytes"`
	// Implied: a directory made because a selected path needs it.
	Implied bool `json:"implied,omitempty"`
	// Hide: a conflict of the hide patterns; Forced: --force applies
	// it (a file of the branch's own at a hidden path), else nothing
	// does (apply never changes a hidden project file).
	Hide   bool `json:"hide,omitempty"`
	Forced bool `json:"forced,omitempty"`
}

// ApplyReply is the reply of OpApply.
type ApplyReply struct {
	Branch string `json:"branch"`
	Lower  string `json:"lower"` // the project written to
	DryRun bool   `json:"dry_run,omitempty"`
	// Applied are the changes written (a dry run: to write).
	Applied []ApplyItem `json:"applied"`
	// Conflicts were not applied: the project changed at their paths
	// since the branch first changed them (--force writes them).
	Conflicts []ApplyItem `json:"conflicts"`
	// Skipped were not applied because another change was not, or the
	// project or the view changed while the apply ran.
	Skipped []ApplyItem `json:"skipped"`
	Bytes   int64       `json:"bytes"` // data bytes written (to write)
}

// ApplyProgress is the reply of OpApplyProgress.
type ApplyProgress struct {
	Running    bool  `json:"running"`
	Done       int   `json:"done"`  // changes written
	Total      int   `json:"total"` // changes to write
	Bytes      int64 `json:"bytes"`
	TotalBytes int64 `json:"total_bytes"`
}
