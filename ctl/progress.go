package ctl

// Payload of OpProgress.

// Progress is the reply of OpProgress: how far the long operation that
// runs on the mount is (one at a time: they hold the operation lock).
// Totals are 0 where the operation cannot know them in advance (an
// export, a gc, a diff, which find their work as they go).
type Progress struct {
	// Running: an operation is under way; the rest is zero when not.
	Running bool `json:"running"`
	// Op is the operation: "apply", "export", "gc", "fsck" or "diff".
	Op string `json:"op,omitempty"`
	// Done of Total items, counted in Unit: "changes", "files",
	// "objects", "branches and snapshots".
	Done  int64  `json:"done"`
	Total int64  `json:"total"`
	Unit  string `json:"unit,omitempty"`
	// Bytes of TotalBytes written, where the operation writes data.
	Bytes      int64 `json:"bytes"`
	TotalBytes int64 `json:"total_bytes"`
}
