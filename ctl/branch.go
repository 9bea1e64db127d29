package ctl

import "time"

// Payloads of the branch operations (OpBranchCreate ... OpBranchSwitch).

// BranchCreateArgs are the arguments of OpBranchCreate.
type BranchCreateArgs struct {
	Name string `json:"name"`
	// From is the snapshot the branch starts from (a SnapshotRef's
	// Ref); empty for a snapshot of the current branch taken for it.
	From string `json:"from,omitempty"`
}

// BranchArgs name a branch.
type BranchArgs struct {
	Name string `json:"name"`
}

// BranchInfo describes a branch.
type BranchInfo struct {
	Name string `json:"name"`
	// Origin is the id of the snapshot it was created from; empty for
	// main.
	Origin string `json:"origin"`
	// Created is zero when unknown (main).
	Created time.Time `json:"created"`
	// Current marks the branch the mount shows.
	Current bool `json:"current"`
}

// BranchList is the reply of OpBranchList, sorted by name.
type BranchList struct {
	Branches []BranchInfo `json:"branches"`
}
