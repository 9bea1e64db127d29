package workspace

import (
	"encoding/json"

	"github.com/agentfs/agentfs/ctl"
)

// Client calls a workspace's operations: those of a daemon over its
// control file (Dial), or those of a Workspace in this process (Local).
// The caller is the process that holds the Client. Errors are *Error
// values, as the Workspace's own (errors.Is with the kinds works).
type Client struct {
	c     *ctl.Client
	local bool
}

// Dial connects to the daemon of the mount whose root is root.
func Dial(root string) (*Client, error) {
	c, err := ctl.Dial(root)
	if err != nil {
		return nil, err
	}
	return &Client{c: c}, nil
}

// NewClient makes a Client of a control client (one that reaches a
// session's daemon through /proc/PID/root, for instance).
func NewClient(c *ctl.Client) *Client { return &Client{c: c} }

// Local serves w's operations to this process through a control server
// of its own, as a daemon would: name says what it is in errors
// ("session 20261127-..."), closeFn runs at Close. unmount, when not
// nil, answers OpUnmount (an ended session has nothing to unmount).
func Local(w *Workspace, name string, unmount ctl.OpFunc, closeFn func() error) *Client {
	s := ctl.NewServer(uint32(Self().Uid), w.log)
	w.Register(s)
	s.Handle(ctl.OpPing, func(ctl.Caller, json.RawMessage) (any, error) { return "pong", nil })
	if unmount != nil {
		s.Handle(ctl.OpUnmount, unmount)
	}
	return &Client{c: ctl.NewLocalClient(name, s, Self(), closeFn), local: true}
}

// Ctl is the control client, for operations of the daemon itself
// (ping, unmount) and for commands that speak the protocol directly.
func (c *Client) Ctl() *ctl.Client { return c.c }

// Root is the mount root the client reaches ("" for a local one).
func (c *Client) Root() string {
	if c.local {
		return ""
	}
	return c.c.Root()
}

// Name says what the client reaches, for messages: a mount root, or
// what Local was given ("session 20261127-...").
func (c *Client) Name() string { return c.c.Root() }

// Close closes the connection (or the local workspace).
func (c *Client) Close() error { return c.c.Close() }

// do runs op with args and decodes its reply.
func do[R any](c *Client, op ctl.Op, args any) (R, error) {
	var r R
	err := c.c.Do(op, args, &r)
	return r, fromCtl(err)
}

// Status describes the mount (or the store of an ended session).
func (c *Client) Status() (ctl.Status, error) { return do[ctl.Status](c, ctl.OpStatus, nil) }

// CreateSnapshot is Workspace.CreateSnapshot.
func (c *Client) CreateSnapshot(a ctl.SnapshotCreateArgs) (ctl.SnapshotInfo, error) {
	return do[ctl.SnapshotInfo](c, ctl.OpSnapshotCreate, a)
}

// Snapshots is Workspace.Snapshots.
func (c *Client) Snapshots() (ctl.SnapshotList, error) {
	return do[ctl.SnapshotList](c, ctl.OpSnapshotList, nil)
}

// SnapshotsWith is Workspace.SnapshotsWith.
func (c *Client) SnapshotsWith(a ctl.SnapshotListArgs) (ctl.SnapshotList, error) {
	return do[ctl.SnapshotList](c, ctl.OpSnapshotList, a)
}

// ShowSnapshot is Workspace.ShowSnapshot.
func (c *Client) ShowSnapshot(ref string) (ctl.SnapshotInfo, error) {
	return do[ctl.SnapshotInfo](c, ctl.OpSnapshotShow, ctl.SnapshotRef{Ref: ref})
}

// Verify is Workspace.Verify.
func (c *Client) Verify(a ctl.VerifyArgs) (ctl.VerifyReply, error) {
	return do[ctl.VerifyReply](c, ctl.OpVerify, a)
}

// DeleteSnapshot is Workspace.DeleteSnapshot.
func (c *Client) DeleteSnapshot(ref string) (ctl.SnapshotInfo, error) {
	return do[ctl.SnapshotInfo](c, ctl.OpSnapshotDelete, ctl.SnapshotRef{Ref: ref})
}

// SetTag is Workspace.SetTag.
func (c *Client) SetTag(name, ref string) (ctl.SnapshotInfo, error) {
	return do[ctl.SnapshotInfo](c, ctl.OpTagSet, ctl.TagArgs{Name: name, Ref: ref})
}

// DeleteTag is Workspace.DeleteTag.
func (c *Client) DeleteTag(name string) (ctl.TagArgs, error) {
	return do[ctl.TagArgs](c, ctl.OpTagDelete, ctl.TagArgs{Name: name})
}

// Prune is Workspace.Prune.
func (c *Client) Prune(a ctl.PruneArgs) (ctl.PruneReply, error) {
	return do[ctl.PruneReply](c, ctl.OpSnapshotPrune, a)
}

// GC is Workspace.GC.
func (c *Client) GC(a ctl.GCArgs) (ctl.GCReply, error) { return do[ctl.GCReply](c, ctl.OpGC, a) }

// Fsck is Workspace.Fsck.
func (c *Client) Fsck(a ctl.FsckArgs) (ctl.FsckReply, error) {
	return do[ctl.FsckReply](c, ctl.OpFsck, a)
}

// CreateBranch is Workspace.CreateBranch.
func (c *Client) CreateBranch(a ctl.BranchCreateArgs) (ctl.BranchInfo, error) {
	return do[ctl.BranchInfo](c, ctl.OpBranchCreate, a)
}

// Branches is Workspace.Branches.
func (c *Client) Branches() (ctl.BranchList, error) {
	return do[ctl.BranchList](c, ctl.OpBranchList, nil)
}

// DeleteBranch is Workspace.DeleteBranch.
func (c *Client) DeleteBranch(name string) (ctl.BranchInfo, error) {
	return do[ctl.BranchInfo](c, ctl.OpBranchDelete, ctl.BranchArgs{Name: name})
}

// SwitchBranch is Workspace.SwitchBranch.
func (c *Client) SwitchBranch(name string) (ctl.BranchInfo, error) {
	return do[ctl.BranchInfo](c, ctl.OpBranchSwitch, ctl.BranchArgs{Name: name})
}

// Bind is Workspace.Bind.
func (c *Client) Bind(a ctl.BindArgs) (ctl.BindInfo, error) {
	return do[ctl.BindInfo](c, ctl.OpBranchBind, a)
}

// Unbind is Workspace.Unbind.
func (c *Client) Unbind(pid int) (ctl.BindInfo, error) {
	return do[ctl.BindInfo](c, ctl.OpBranchUnbind, ctl.BindArgs{Pid: pid})
}

// Current is Workspace.Current.
func (c *Client) Current(pid int) (ctl.BindInfo, error) {
	return do[ctl.BindInfo](c, ctl.OpBranchCurrent, ctl.BindArgs{Pid: pid})
}

// Diff is Workspace.Diff.
func (c *Client) Diff(a ctl.DiffArgs) (ctl.DiffReply, error) {
	return do[ctl.DiffReply](c, ctl.OpDiff, a)
}

// Restore is Workspace.Restore.
func (c *Client) Restore(a ctl.RestoreArgs) (ctl.RestoreReply, error) {
	return do[ctl.RestoreReply](c, ctl.OpRestore, a)
}

// Merge is Workspace.Merge.
func (c *Client) Merge(a ctl.MergeArgs) (ctl.MergeReply, error) {
	return do[ctl.MergeReply](c, ctl.OpMerge, a)
}

// Push is Workspace.Push.
func (c *Client) Push(a ctl.PushArgs) (ctl.PushReply, error) {
	return do[ctl.PushReply](c, ctl.OpPush, a)
}

// Export is Workspace.Export.
func (c *Client) Export(a ctl.ExportArgs) (ctl.ExportReply, error) {
	return do[ctl.ExportReply](c, ctl.OpExport, a)
}

// Apply is Workspace.Apply.
func (c *Client) Apply(a ctl.ApplyArgs) (ctl.ApplyReply, error) {
	return do[ctl.ApplyReply](c, ctl.OpApply, a)
}

// Progress is Workspace.Progress.
func (c *Client) Progress() (ctl.Progress, error) {
	return do[ctl.Progress](c, ctl.OpProgress, nil)
}

// ApplyProgress is Workspace.ApplyProgress.
func (c *Client) ApplyProgress() (ctl.ApplyProgress, error) {
	return do[ctl.ApplyProgress](c, ctl.OpApplyProgress, nil)
}

// Activity is Workspace.Activity.
func (c *Client) Activity(a ctl.ActivityArgs) (ctl.ActivityReply, error) {
	return do[ctl.ActivityReply](c, ctl.OpActivity, a)
}

// Ping checks that the daemon (or the local workspace) answers.
func (c *Client) Ping() error {
	_, err := do[string](c, ctl.OpPing, nil)
	return err
}

// Unmount asks the daemon to unmount and exit; it answers the
// daemon's pid, to wait for.
func (c *Client) Unmount() (ctl.UnmountReply, error) {
	return do[ctl.UnmountReply](c, ctl.OpUnmount, nil)
}
