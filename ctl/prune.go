package ctl

// Payloads of OpSnapshotPrune.

// PruneArgs are the arguments of OpSnapshotPrune. Only automatic
// snapshots are ever deleted, never one that a tag names or that a
// branch was created from.
type PruneArgs struct {
	// Keep, when set, keeps the Keep newest automatic snapshots and
	// deletes the others; when nil the mount's retention policy decides
	// (thinning with age, and its count limit).
	Keep *int `json:"keep,omitempty"`
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// PruneReply is the reply of OpSnapshotPrune.
type PruneReply struct {
	// Deleted are the snapshots deleted (or, with DryRun, that would
	// be), oldest first.
	Deleted []SnapshotInfo `json:"deleted"`
	// Kept counts the automatic snapshots that remain (with DryRun:
	// would remain).
	Kept   int  `json:"kept"`
	DryRun bool `json:"dry_run"`
	// Policy describes the rule applied, in words.
	Policy string `json:"policy"`
}
