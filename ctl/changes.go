package ctl

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
}
