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
	// Current marks the branch the caller sees: the one it is bound
	// to, else the one the mount shows (Default).
	Current bool `json:"current"`
	// Default marks the branch the mount shows to unbound processes.
	Default bool `json:"default"`
	// Bound counts the processes bound to it.
	Bound int `json:"bound"`
}

// BindArgs name a process and, for OpBranchBind, a branch.
type BindArgs struct {
	// Pid is the process (thread group id); 0 means the caller.
	Pid    int    `json:"pid"`
	Branch string `json:"branch,omitempty"`
	// Namespace (OpBranchBind) asks for a branch mount: the process
	// will bind it over the mountpoint in a mount namespace of its own
	// (agentfs exec), so that the mount root need not depend on the
	// caller. The daemon may refuse it (BindInfo.MountDir empty): the
	// process is then bound through the root.
	Namespace bool `json:"namespace,omitempty"`
}

// BindInfo says which branch a process sees at the mount.
type BindInfo struct {
	Pid    int    `json:"pid"`
	Branch string `json:"branch"`
	// BoundBy is the pid of the process whose binding decides (the
	// process itself or its nearest bound ancestor); 0 when none is
	// bound and the process sees the mount's branch.
	BoundBy int `json:"bound_by"`
	// Command is the process's command line, when known.
	Command string `json:"command,omitempty"`
	// Namespaced: the binding is through a branch mount in the
	// process's own mount namespace; MountDir is that branch mount
	// (the reply of a Namespace bind).
	Namespaced bool   `json:"namespaced,omitempty"`
	MountDir   string `json:"mount_dir,omitempty"`
}

// BranchList is the reply of OpBranchList, sorted by name.
type BranchList struct {
	Branches []BranchInfo `json:"branches"`
}
