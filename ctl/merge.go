package ctl

// Payloads of OpMerge.

// MergeArgs are the arguments of OpMerge.
type MergeArgs struct {
	Branch string `json:"branch"` // the branch merged in (theirs)
	// Into is the branch merged into (ours); "" is the caller's.
	Into string `json:"into,omitempty"`
	// Base names the common state to merge from (a snapshot, or
	// "lower"); "" finds the snapshot both branches come from.
	Base string `json:"base,omitempty"`
	// DryRun asks what the merge would do, doing nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Ours and Theirs are paths whose conflicts (at or below them) keep
	// Into's version or take Branch's.
	Ours   []string `json:"ours,omitempty"`
	Theirs []string `json:"theirs,omitempty"`
}

// MergeReply is the reply of OpMerge.
type MergeReply struct {
	Branch string `json:"branch"`
	Into   string `json:"into"`
	// Base is what the merge compared both sides with: "lower", or a
	// snapshot id (BaseSnapshot then describes it).
	Base         string        `json:"base"`
	BaseSnapshot *SnapshotInfo `json:"base_snapshot,omitempty"`
	// Safety is the snapshot of Into before the merge (nil for a dry
	// run): restoring it undoes the merge.
	Safety *SnapshotInfo `json:"safety,omitempty"`
	// Changes are what the merge did (a dry run: would do) to Into.
	Changes   []MergeChange   `json:"changes"`
	Conflicts []MergeConflict `json:"conflicts"`
	// Unresolved counts the conflicts --ours and --theirs did not
	// resolve.
	Unresolved int `json:"unresolved"`
}

// MergeChange is one path a merge changes: Action is take (Branch's
// version written), delete, attrs (Branch's mode and owner), merge (both
// sides' lines combined) or conflict (written with conflict markers).
type MergeChange struct {
	Path   string `json:"path"`
	Action string `json:"action"`
}

// MergeConflict is one path both branches changed in ways the merge
// cannot combine: Kind is content (markers written), binary, type,
// delete, rename or mode.
type MergeConflict struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	Detail  string `json:"detail"`
	Markers bool   `json:"markers,omitempty"`
	// Resolved is "ours" or "theirs" when --ours or --theirs chose.
	Resolved string `json:"resolved,omitempty"`
}
