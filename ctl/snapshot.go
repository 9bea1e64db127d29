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
