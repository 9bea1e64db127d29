package ctl

import "fmt"

// Op names a control operation. Numbers are part of the protocol: never
// reuse or renumber one; add new operations in their block.
//
//	1–15     protocol and daemon (fetch, ping, status, unmount)
//	16–31    snapshots (create, list, delete, ...)
//	32–47    branches (create, list, delete, bind, ...)
//	48–63    changes (diff, restore, apply, ...)
type Op uint16

// ReadsFiles reports whether op reads or replaces the data of the
// mount's files (a snapshot, a diff, a restore...), as opposed to
// reporting on the mount or managing names: before one, a mount with a
// writeback cache has the kernel write back what it holds
// (fs.Server.WriteBack).
func (op Op) ReadsFiles() bool {
	switch op {
	case OpFetch, OpPing, OpStatus, OpDaemon, OpSnapshotList, OpTagSet, OpTagDelete,
		OpBranchList, OpBranchBind, OpBranchUnbind, OpBranchCurrent, OpActivity, OpApplyProgress, OpProgress:
		return false
	}
	return true
}

// Operations.
const (
	// OpFetch continues a result too large for one buffer: the request
	// header carries the token and offset, the payload is empty.
	OpFetch Op = 1
	// OpPing answers "pong": the daemon is alive and speaks the protocol.
	OpPing Op = 2
	// OpStatus answers a Status.
	OpStatus Op = 3
	// OpUnmount makes the daemon unmount its mount and exit; it answers
	// an UnmountReply before it starts.
	OpUnmount Op = 4
	// OpDaemon answers a DaemonInfo: which process serves the mount,
	// at no cost (agentfs unmount asks it before OpUnmount; OpStatus
	// counts the store's objects).
	OpDaemon Op = 5

	// OpSnapshotCreate takes a snapshot of the current branch
	// (SnapshotCreateArgs); it answers its SnapshotInfo.
	OpSnapshotCreate Op = 16
	// OpSnapshotList answers a SnapshotList of every snapshot.
	OpSnapshotList Op = 17
	// OpSnapshotDelete deletes a snapshot (SnapshotRef); it answers the
	// deleted snapshot's SnapshotInfo.
	OpSnapshotDelete Op = 18
	// OpTagSet points a tag at a snapshot (TagArgs); it answers the
	// snapshot's SnapshotInfo.
	OpTagSet Op = 19
	// OpTagDelete deletes a tag (TagArgs, Ref empty); it answers the
	// TagArgs of the deleted tag.
	OpTagDelete Op = 20
	// OpGC removes the objects nothing refers to; it answers a GCReply.
	OpGC Op = 21
	// OpFsck checks the store (FsckArgs); it answers a FsckReply.
	OpFsck Op = 22
	// OpSnapshotPrune deletes automatic snapshots by the retention
	// policy or beyond a count (PruneArgs); it answers a PruneReply.
	OpSnapshotPrune Op = 23
	// OpSnapshotShow answers the SnapshotInfo of one snapshot
	// (SnapshotRef), with its root (computed then when no worker
	// computes roots).
	OpSnapshotShow Op = 24
	// OpVerify checks snapshots against their content hashes and
	// roots, or a directory against a snapshot (VerifyArgs); it answers
	// a VerifyReply.
	OpVerify Op = 25

	// OpBranchCreate creates a branch (BranchCreateArgs); it answers
	// its BranchInfo.
	OpBranchCreate Op = 32
	// OpBranchList answers a BranchList of every branch.
	OpBranchList Op = 33
	// OpBranchDelete deletes a branch (BranchArgs); it answers the
	// deleted branch's BranchInfo.
	OpBranchDelete Op = 34
	// OpBranchSwitch makes the mount show a branch (BranchArgs); it
	// answers the BranchInfo of the branch now shown.
	OpBranchSwitch Op = 35
	// OpBranchBind binds a process and its descendants to a branch
	// (BindArgs); it answers a BindInfo.
	OpBranchBind Op = 36
	// OpBranchUnbind ends a process's binding (BindArgs, Branch empty);
	// it answers the BindInfo of the branch it now sees.
	OpBranchUnbind Op = 37
	// OpBranchCurrent answers the BindInfo of a process (BindArgs,
	// Branch empty; Pid 0 for the caller).
	OpBranchCurrent Op = 38

	// OpDiff compares two states (DiffArgs); it answers a DiffReply.
	OpDiff Op = 48
	// OpRestore makes the current branch a snapshot's state
	// (RestoreArgs); it answers a RestoreReply.
	OpRestore Op = 49
	// OpExport writes a snapshot or branch as a directory tree
	// (ExportArgs); it answers an ExportReply.
	OpExport Op = 50
	// OpApply writes a branch's changes into the project (ApplyArgs);
	// it answers an ApplyReply.
	OpApply Op = 51
	// OpApplyProgress answers the ApplyProgress of the apply running,
	// if any (it does not wait for it).
	OpApplyProgress Op = 52
	// OpActivity answers entries of the activity log (ActivityArgs);
	// it answers an ActivityReply.
	OpActivity Op = 53
	// OpProgress answers the Progress of the long operation running
	// (apply, export, gc, fsck, diff, push), if any; it does not wait
	// for it.
	OpProgress Op = 54
	// OpMerge merges a branch into another (MergeArgs); it answers a
	// MergeReply.
	OpMerge Op = 55
	// OpPush sends snapshots (and a session's branches) to a remote
	// (PushArgs); it answers a PushReply.
	OpPush Op = 56
)

var opNames = map[Op]string{
	OpFetch:   "fetch",
	OpPing:    "ping",
	OpStatus:  "status",
	OpUnmount: "unmount",
	OpDaemon:  "daemon",

	OpSnapshotCreate: "snapshot create",
	OpSnapshotList:   "snapshot list",
	OpSnapshotDelete: "snapshot delete",
	OpTagSet:         "tag",
	OpTagDelete:      "tag delete",
	OpGC:             "gc",
	OpFsck:           "fsck",
	OpSnapshotPrune:  "snapshot prune",
	OpSnapshotShow:   "snapshot show",
	OpVerify:         "verify",

	OpBranchCreate:  "branch create",
	OpBranchList:    "branch list",
	OpBranchDelete:  "branch delete",
	OpBranchSwitch:  "branch switch",
	OpBranchBind:    "branch bind",
	OpBranchUnbind:  "branch unbind",
	OpBranchCurrent: "branch current",

	OpDiff:    "diff",
	OpRestore: "restore",
	OpExport:  "export",

	OpApply:         "apply",
	OpApplyProgress: "apply progress",
	OpActivity:      "activity",
	OpProgress:      "progress",
	OpMerge:         "merge",
	OpPush:          "push",
}

func (op Op) String() string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("op%d", uint16(op))
}

// Status is the reply of OpStatus.
type Status struct {
	Version    string `json:"version"` // the daemon's agentfs version
	Pid        int    `json:"pid"`     // the daemon's pid
	Owner      uint32 `json:"owner"`   // uid of the mount owner
	Lower      string `json:"lower"`
	Mountpoint string `json:"mountpoint"`
	Store      string `json:"store"`
	// Branch is the branch the mount shows to unbound processes.
	Branch string `json:"branch"`
	// Bindings are the processes bound to a branch, by pid.
	Bindings []BindInfo `json:"bindings"`
	// Ephemeral stores are private directories deleted at unmount.
	Ephemeral bool `json:"ephemeral"`
	// Offline: no daemon; the store of an ended session was opened by
	// the command itself (Pid 0, nothing mounted).
	Offline bool `json:"offline,omitempty"`
	// Session: the store is an agentfs run session's.
	Session bool `json:"session,omitempty"`
	// Supervised: the session's command runs under a supervisor
	// (agentfs run --supervise): a restore of the branch the mount
	// shows stops every process of the command, restores, and starts
	// the command again.
	Supervised bool `json:"supervised,omitempty"`
	// Trace says whether the commands of the mount's processes are
	// traced (agentfs log --exec): "on: whose", or "off: why".
	Trace string `json:"trace,omitempty"`

	Backstore   string `json:"backstore"`      // hostfs | ramdisk
	BackingMode string `json:"backstore_mode"` // dir | tmpfs | shm
	BackingRoot string `json:"backstore_root"`
	SizeLimit   int64  `json:"ramdisk_size,omitempty"`
	Reflink     bool   `json:"reflink"` // copy-up and clones use FICLONE

	// Passthrough is whether the kernel does the I/O of upper files
	// directly on their backing files; IOMode says it in words.
	Passthrough bool   `json:"passthrough"`
	IOMode      string `json:"io_mode"`
	// WritebackCache is whether the kernel gathers writes in its page
	// cache before it sends them (without passthrough).
	WritebackCache bool `json:"writeback_cache"`
	// Transport says how FUSE requests reach the daemon: "io_uring (N
	// queues)" or "/dev/fuse" (and why, when io_uring was not used).
	Transport string `json:"transport"`
	// Reads is the number of READ requests the daemon has served: the
	// reads the kernel did not pass through (files of the project, and
	// every file without passthrough), from the disk or into the page
	// cache. ReadsSpliced were answered by splicing the file's pages
	// into the reply (one copy less). ReadsFromDisk were read from the
	// disk with O_DIRECT: a range of a project file that the lower file
	// system did not cache, which then is cached once, by the mount.
	Reads         uint64 `json:"reads"`
	ReadsSpliced  uint64 `json:"reads_spliced"`
	ReadsFromDisk uint64 `json:"reads_from_disk"`

	// BranchFiles and BranchBytes are what the branch the mount shows
	// holds in the backstore: the objects its entries name, and the
	// bytes of its files' data (overlay's quotas). MaxFiles and
	// MaxBytes are its limits (0: none); past one, the operation that
	// would cross it fails with EDQUOT.
	BranchFiles int64 `json:"branch_files"`
	BranchBytes int64 `json:"branch_bytes"`
	MaxFiles    int64 `json:"max_files"`
	MaxBytes    int64 `json:"max_bytes"`
	// OpenForWriting is the number of the branch's files open for
	// writing (or passed through): a snapshot clones their objects
	// rather than sharing them. The kernel reports a close to the
	// daemon after close(2) returns, so a file just closed may still
	// be counted for a moment.
	OpenForWriting int `json:"open_for_writing"`

	Objects int64 `json:"objects"`        // upper objects in the backstore
	Bytes   int64 `json:"bytes"`          // bytes they occupy
	FsFree  int64 `json:"backstore_free"` // free bytes where they live

	// Hide are the hide patterns of the mount (the store's): the project
	// paths they match do not exist in the view.
	Hide []HidePattern `json:"hide"`
}

// HidePattern is one hide pattern and where it came from: "user" (the
// user's configuration file), "project" (the project's .agentfs.conf)
// or "flag" (--hide).
type HidePattern struct {
	Pattern string `json:"pattern"`
	From    string `json:"from"`
}

// DaemonInfo is the reply of OpDaemon.
type DaemonInfo struct {
	Pid     int    `json:"pid"`     // the daemon's pid
	Version string `json:"version"` // the daemon's agentfs version
}

// UnmountReply is the reply of OpUnmount.
type UnmountReply struct {
	// Pid is the daemon's pid: the client waits for it to exit.
	Pid int `json:"pid"`
}
