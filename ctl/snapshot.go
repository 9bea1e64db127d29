package ctl

import "time"

// Payloads of the snapshot operations (OpSnapshotCreate ... OpFsck).

// SnapshotCreateArgs are the arguments of OpSnapshotCreate.
type SnapshotCreateArgs struct {
	Label string `json:"label,omitempty"`
	// Branch is the branch to take it of; empty for the caller's.
	Branch string `json:"branch,omitempty"`
	// Kind is "" (manual), "pre-run" (agentfs run, before the command
	// starts) or "post-run" (after it ended).
	Kind string `json:"kind,omitempty"`
	// IfChanged takes it only if the branch changed since its newest
	// snapshot that retention keeps (not an automatic one; without
	// one, since the project); the reply has an empty ID when it did
	// not.
	IfChanged bool `json:"if_changed,omitempty"`
}

// SnapshotRef names a snapshot: an id, an unambiguous id prefix of at
// least 4 digits, or a tag.
type SnapshotRef struct {
	Ref string `json:"ref"`
}

// SnapshotInfo describes a snapshot.
type SnapshotInfo struct {
	ID      string    `json:"id"`
	Label   string    `json:"label"`
	Branch  string    `json:"branch"` // the branch it was taken of
	Kind    string    `json:"kind"`   // manual, auto, git, build, idle, safety, pre-run or post-run
	Created time.Time `json:"created"`
	// SizeAdded (OpSnapshotList only) is the allocated size of the
	// files whose contents the snapshot holds and its predecessor does
	// not: the snapshot taken before it of the same branch or, for a
	// branch's first, the snapshot the branch was created from.
	SizeAdded int64    `json:"size_added"`
	Tags      []string `json:"tags"` // sorted
	// Root is the snapshot's Merkle root (64 hex digits) once it is
	// computed; RootStatus says where it stands: "computed", "pending"
	// (the mount's hash worker has not got to it yet), "off" (no
	// worker runs) or "failed" (the worker could not compute it; its
	// log says why): agentfs snapshot show and agentfs verify compute
	// it then. Files and Bytes count the tree's paths and file bytes.
	Root       string `json:"root,omitempty"`
	RootStatus string `json:"root_status,omitempty"`
	Files      int64  `json:"files,omitempty"`
	Bytes      int64  `json:"bytes,omitempty"`
}

// SnapshotListArgs are the arguments of OpSnapshotList.
type SnapshotListArgs struct {
	// WaitRoots computes the roots not computed yet before answering
	// (agentfs run, for the session record's chain of roots).
	WaitRoots bool `json:"wait_roots,omitempty"`
}

// VerifyArgs are the arguments of OpVerify.
type VerifyArgs struct {
	// Refs are the snapshots to check (ids, prefixes or tags); none:
	// every snapshot.
	Refs []string `json:"refs,omitempty"`
	// Tree is a directory to check against the one snapshot of Refs
	// (its root and each path) instead of the store.
	Tree string `json:"tree,omitempty"`
}

// VerifyReply is the reply of OpVerify.
type VerifyReply struct {
	Snapshots []VerifySnapshot `json:"snapshots"`
	Problems  []VerifyProblem  `json:"problems"`
	Objects   int              `json:"objects"` // objects read
	Bytes     int64            `json:"bytes"`   // bytes read
	Tree      string           `json:"tree,omitempty"`
	TreeRoot  string           `json:"tree_root,omitempty"`
	OK        bool             `json:"ok"`
}

// VerifySnapshot is one snapshot's outcome: its recorded root and the
// root computed again (from the store, or from the tree).
type VerifySnapshot struct {
	ID          string `json:"id"`
	Root        string `json:"root"`
	Recomputed  string `json:"recomputed"`
	ComputedNow bool   `json:"computed_now,omitempty"`
	OK          bool   `json:"ok"`
}

// VerifyProblem is one thing verify found wrong: Kind is
// object-changed, object-missing, project-changed, root-changed or
// tree-differs; Where names the paths of an object in each snapshot.
type VerifyProblem struct {
	Kind     string        `json:"kind"`
	Snapshot string        `json:"snapshot,omitempty"`
	Object   string        `json:"object,omitempty"`
	Path     string        `json:"path,omitempty"`
	Want     string        `json:"want,omitempty"`
	Got      string        `json:"got,omitempty"`
	Where    []VerifyPlace `json:"where,omitempty"`
	Detail   string        `json:"detail"`
}

// VerifyPlace is a path in a snapshot.
type VerifyPlace struct {
	Snapshot string `json:"snapshot"`
	Path     string `json:"path"`
}

// SnapshotList is the reply of OpSnapshotList, in the order the
// snapshots were taken.
type SnapshotList struct {
	Snapshots []SnapshotInfo `json:"snapshots"`
}

// TagArgs are the arguments of OpTagSet and OpTagDelete (Ref unused).
type TagArgs struct {
	Name string `json:"name"`
	Ref  string `json:"ref,omitempty"`
}

// GCArgs are the arguments of OpGC.
type GCArgs struct {
	// Grace spares unreferenced objects changed less than this long
	// ago (they may belong to a change in progress); 0: the daemon's
	// default (a minute).
	Grace time.Duration `json:"grace_ns,omitempty"`
}

// GCReply is the reply of OpGC.
type GCReply struct {
	Objects int   `json:"objects"` // objects looked at
	Removed int   `json:"removed"` // objects removed
	Freed   int64 `json:"freed"`   // allocated bytes of the removed objects
	// Young counts the unreferenced objects kept because they changed
	// within the grace period; InUse those that open files still hold.
	Young int           `json:"young"`
	InUse int           `json:"in_use"`
	Grace time.Duration `json:"grace_ns"`
}

// FsckArgs are the arguments of OpFsck.
type FsckArgs struct {
	Repair bool `json:"repair,omitempty"`
}

// FsckReply is the reply of OpFsck.
type FsckReply struct {
	Branches  int           `json:"branches"`
	Snapshots int           `json:"snapshots"`
	Entries   int           `json:"entries"` // entries checked
	Objects   int           `json:"objects"` // objects in the backstore
	Problems  []FsckProblem `json:"problems"`
	Garbage   []FsckGarbage `json:"garbage"`
	Repair    bool          `json:"repair"`
	// Report says all of it in words, as agentfs fsck prints it.
	Report string `json:"report"`
}

// FsckProblem is an entry that does not agree with the objects or the
// project.
type FsckProblem struct {
	Branch   string `json:"branch,omitempty"`
	Snapshot string `json:"snapshot,omitempty"` // for a snapshot's entry
	Path     string `json:"path"`
	Kind     string `json:"kind"` // missing-object, wrong-type, origin-gone
	Object   string `json:"object,omitempty"`
	Detail   string `json:"detail"`
	Repair   string `json:"repair,omitempty"` // what --repair did; "" for nothing
}

// FsckGarbage is an object nothing refers to.
type FsckGarbage struct {
	ID      string `json:"id"`
	Bytes   int64  `json:"bytes"`
	Young   bool   `json:"young,omitempty"` // changed lately: kept, may be in use
	Removed bool   `json:"removed,omitempty"`
}

// Failed reports whether the check leaves something wrong: a problem
// not repaired, or garbage neither young nor removed.
func (r *FsckReply) Failed() bool {
	for _, p := range r.Problems {
		if p.Repair == "" {
			return true
		}
	}
	for _, g := range r.Garbage {
		if !g.Young && !g.Removed {
			return true
		}
	}
	return false
}
