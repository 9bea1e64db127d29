package mcpserver

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

// addTools registers the tools.
func (t *target) addTools(s *mcp.Server) {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}
	additive := &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}
	mcp.AddTool(s, &mcp.Tool{Name: "status", Annotations: readOnly, Description: `Describe the workspace: the user's project it shows, the branch you see, how many files you changed against the project (created, modified, deleted), your checkpoints, and whether a rewind relaunches you. Cheap; call it first to orient yourself.`}, t.status)
	mcp.AddTool(s, &mcp.Tool{Name: "checkpoint", Annotations: additive, Description: `Take a checkpoint: an instant snapshot of the whole workspace (every file, as it is now) that you can rewind to later. Its cost does not depend on the size of the files. Take one before a risky step (a refactor, a dependency upgrade, deleting files), with a label that says what state it is. Returns its id.`}, t.checkpoint)
	mcp.AddTool(s, &mcp.Tool{Name: "list_checkpoints", Annotations: readOnly, Description: `List the checkpoints (snapshots) of the workspace, oldest first: id, label, kind (manual: taken by a checkpoint call or a person; auto: taken by agentfs when changes settled or after a git commit; pre-run: before the session's command started; safety: taken by a rewind, to undo it), the branch, the time and the tags.`}, t.listCheckpoints)
	mcp.AddTool(s, &mcp.Tool{Name: "changes", Annotations: readOnly, Description: `Show what changed between two states: from (default "lower", the user's project as it is) to (default your branch, as it is now). Either may be a checkpoint id (or a unique prefix of 4+ digits, or a tag), a branch name, or "lower". Lists created, modified and deleted paths (the first 1000; counts has them all); with patch=true also a unified diff of the text files, in the patch field, cut at max_bytes (raise it, or narrow with paths, when the notice says it was cut).`}, t.changes)
	mcp.AddTool(s, &mcp.Tool{Name: "rewind", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}, Description: `Rewind your branch to a checkpoint: every file goes back to what it was at that checkpoint, for every process at once. A safety checkpoint of the state before is taken first; rewinding to it undoes the rewind. With dry_run=true, only list what would change. When the session runs under a supervisor (agentfs run --supervise), the agent's processes (you) are stopped and started again on the rewound files; the result says which happens.`}, t.rewind)
	mcp.AddTool(s, &mcp.Tool{Name: "branch_create", Annotations: additive, Description: `Create a branch: an independent line of changes, starting from a checkpoint (from) or, by default, from the current state of your branch (a checkpoint is taken for it). Work in it with run_in_branch; your own branch is not changed. Cheap.`}, t.branchCreate)
	mcp.AddTool(s, &mcp.Tool{Name: "branch_list", Annotations: readOnly, Description: `List the branches: name, the checkpoint each started from, which one you see (current), which one the mount shows to other processes (default), and how many processes are bound to each.`}, t.branchList)
	mcp.AddTool(s, &mcp.Tool{Name: "run_in_branch", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)}, Description: `Run a shell command (sh -c) with a branch as its view of the workspace, as "agentfs exec -b BRANCH" does: it starts at the workspace's root (for a session served from outside it, in the directory the session's command started in), and it and everything it starts see that branch at the workspace's paths, while your own branch stays as it is. Only the workspace's paths show the branch: when the workspace is a mount of the user's project at another path (agentfs mount), the project's own path still leads to the user's real files, so use paths relative to the workspace. Use it to try a change or run tests in a branch. Returns the exit code and the last output_bytes of its output (stdout and stderr together). Past timeout_seconds the command is killed, with every process of its process group; once it has ended, what it left running in the background is neither waited for nor killed.`}, t.runInBranch)
	mcp.AddTool(s, &mcp.Tool{Name: "merge_branch", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}, Description: `Merge a branch into yours (or into another branch, into): the changes the branch made since the checkpoint both started from are combined with your own, three-way. A file only the branch changed is taken; a text file both changed is merged line by line, and where both changed the same lines it gets conflict markers (<<<<<<< yours, ||||||| base, =======, >>>>>>> theirs) for you to resolve by editing it. Binary files, type changes, a deletion against a change, and renames that collide are conflicts that keep your version; ours or theirs (paths) choose a side for the conflicts at or below them. A safety checkpoint is taken first: rewinding to it undoes the merge. With dry_run=true, only list what it would do.`}, t.mergeBranch)
	mcp.AddTool(s, &mcp.Tool{Name: "activity", Annotations: readOnly, Description: `Read the activity log: every change a program made in the workspace (time, process and its command line, branch, operation, paths), oldest first. Filter by since (a duration back from now such as 10m, or a time), op (create, write, unlink, rename, mkdir, ...), path_prefix, and limit (the newest entries are kept).`}, t.activity)
	if t.opts.AllowApply {
		mcp.AddTool(s, &mcp.Tool{Name: "apply", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}, Description: `Apply the changes of your branch (or of branch) to the user's real project: this writes the user's files, and cannot be undone by a rewind. Only paths changed in the project since your branch changed them are refused (conflicts), unless force. With paths, only those subtrees. Use dry_run=true first to see what it would write.`}, t.apply)
	}
}

func ptr[T any](v T) *T { return &v }

// Checkpoint is a snapshot as the tools describe it.
type Checkpoint struct {
	ID      string    `json:"id" jsonschema:"the checkpoint's id; a unique prefix of 4 or more digits names it too"`
	Label   string    `json:"label,omitempty"`
	Kind    string    `json:"kind" jsonschema:"manual, auto, pre-run or safety"`
	Branch  string    `json:"branch" jsonschema:"the branch it was taken of"`
	Created time.Time `json:"created"`
	Tags    []string  `json:"tags,omitempty"`
	// SizeAdded is only known in list_checkpoints.
	SizeAdded int64 `json:"size_added,omitempty" jsonschema:"bytes of file contents this checkpoint holds and the one before it did not"`
}

func checkpointOf(s ctl.SnapshotInfo) Checkpoint {
	return Checkpoint{ID: s.ID, Label: s.Label, Kind: s.Kind, Branch: s.Branch, Created: s.Created, Tags: s.Tags, SizeAdded: s.SizeAdded}
}

// Counts count the changes from one state to another.
type Counts struct {
	Created  int   `json:"created"`
	Modified int   `json:"modified"`
	Deleted  int   `json:"deleted"`
	Bytes    int64 `json:"bytes_delta" jsonschema:"the change in the total size of the files"`
}

func countsOf(cs []ctl.Change) Counts {
	var n Counts
	for _, c := range cs {
		n.Bytes += c.SizeDelta
		switch c.Kind {
		case ctl.Created:
			n.Created++
		case ctl.Deleted:
			n.Deleted++
		default:
			n.Modified++
		}
	}
	return n
}

// StatusIn takes nothing.
type StatusIn struct{}

// StatusOut describes the workspace.
type StatusOut struct {
	Project    string `json:"project" jsonschema:"the user's project, which agentfs never writes but through apply"`
	Mountpoint string `json:"mountpoint"`
	Session    bool   `json:"session" jsonschema:"the workspace is an agentfs run session's"`
	Running    bool   `json:"running" jsonschema:"a daemon serves it (false: an ended session, read from its store)"`
	Branch     string `json:"branch" jsonschema:"the branch you see"`
	// MountBranch is the one the mount shows to unbound processes.
	MountBranch string `json:"mount_branch"`
	Supervised  bool   `json:"supervised" jsonschema:"a rewind of the mount's branch stops and relaunches the agent"`
	// Changes count what differs from the project in your branch.
	Changes          Counts      `json:"changes"`
	Checkpoints      int         `json:"checkpoints"`
	LatestCheckpoint *Checkpoint `json:"latest_checkpoint,omitempty"`
}

func (t *target) status(ctx context.Context, _ *mcp.CallToolRequest, _ StatusIn) (*mcp.CallToolResult, StatusOut, error) {
	out, err := call(ctx, t, func(c *workspace.Client) (StatusOut, error) {
		st, err := c.Status()
		if err != nil {
			return StatusOut{}, err
		}
		me, err := c.Current(0)
		if err != nil {
			return StatusOut{}, err
		}
		diff, err := c.Diff(ctl.DiffArgs{To: me.Branch})
		if err != nil {
			return StatusOut{}, err
		}
		snaps, err := c.Snapshots()
		if err != nil {
			return StatusOut{}, err
		}
		out := StatusOut{Project: st.Lower, Mountpoint: st.Mountpoint, Session: st.Session, Running: !st.Offline,
			Branch: me.Branch, MountBranch: st.Branch, Supervised: st.Supervised, Changes: countsOf(diff.Changes),
			Checkpoints: len(snaps.Snapshots)}
		if n := len(snaps.Snapshots); n > 0 {
			cp := checkpointOf(snaps.Snapshots[n-1])
			out.LatestCheckpoint = &cp
		}
		return out, nil
	})
	if err != nil {
		return nil, StatusOut{}, err
	}
	latest := "none"
	if out.LatestCheckpoint != nil {
		latest = fmt.Sprintf("%s (%s)", out.LatestCheckpoint.ID, out.LatestCheckpoint.Label)
	}
	return textResult("project %s, branch %s: %d created, %d modified, %d deleted; %d checkpoints, latest %s",
		out.Project, out.Branch, out.Changes.Created, out.Changes.Modified, out.Changes.Deleted, out.Checkpoints, latest), out, nil
}

// CheckpointIn names a checkpoint.
type CheckpointIn struct {
	Label string `json:"label,omitempty" jsonschema:"what state this is, e.g. 'tests pass before the refactor'"`
}

func (t *target) checkpoint(ctx context.Context, _ *mcp.CallToolRequest, in CheckpointIn) (*mcp.CallToolResult, Checkpoint, error) {
	s, err := call(ctx, t, func(c *workspace.Client) (ctl.SnapshotInfo, error) {
		return c.CreateSnapshot(ctl.SnapshotCreateArgs{Label: in.Label})
	})
	if err != nil {
		return nil, Checkpoint{}, err
	}
	return textResult("took checkpoint %s of branch %s", s.ID, s.Branch), checkpointOf(s), nil
}

// ListIn takes nothing.
type ListIn struct{}

// ListOut lists checkpoints.
type ListOut struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
}

func (t *target) listCheckpoints(ctx context.Context, _ *mcp.CallToolRequest, _ ListIn) (*mcp.CallToolResult, ListOut, error) {
	list, err := call(ctx, t, (*workspace.Client).Snapshots)
	if err != nil {
		return nil, ListOut{}, err
	}
	out := ListOut{Checkpoints: []Checkpoint{}}
	var text strings.Builder
	fmt.Fprintf(&text, "%d checkpoints", len(list.Snapshots))
	for _, s := range list.Snapshots {
		out.Checkpoints = append(out.Checkpoints, checkpointOf(s))
		fmt.Fprintf(&text, "\n%s  %-7s %s  %s", s.ID, s.Kind, s.Created.Format(time.DateTime), s.Label)
	}
	return textResult("%s", text.String()), out, nil
}

// ChangesIn selects a comparison.
type ChangesIn struct {
	From     string   `json:"from,omitempty" jsonschema:"the state to compare from: lower (the user's project; the default), a checkpoint or a branch"`
	To       string   `json:"to,omitempty" jsonschema:"the state to compare to: your branch by default, or a checkpoint, a branch, lower"`
	Paths    []string `json:"paths,omitempty" jsonschema:"only changes at or below these paths, relative to the project root (src, not /src)"`
	Patch    bool     `json:"patch,omitempty" jsonschema:"also a unified diff of the text files"`
	MaxBytes int      `json:"max_bytes,omitempty" jsonschema:"cut the patch past this many bytes (default 65536, at most 8388608)"`
}

// Change is one changed path.
type Change struct {
	Path string `json:"path"`
	Kind string `json:"kind" jsonschema:"created, deleted, modified (the data), mode-changed (mode, owner or xattrs only) or type-changed"`
	Type string `json:"type" jsonschema:"file, dir, symlink, ... (the new one; the old one for a deletion)"`
	// SizeDelta is the new size less the old.
	SizeDelta int64 `json:"size_delta"`
}

// ChangesOut is a comparison.
type ChangesOut struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Counts Counts `json:"counts"`
	// Changes are the first maxListedChanges of them.
	Changes          []Change `json:"changes"`
	ChangesTruncated bool     `json:"changes_truncated,omitempty" jsonschema:"more paths changed than are listed (counts has them all): narrow with paths"`
	Patch            string   `json:"patch,omitempty"`
	// Truncated says the patch was cut at max_bytes; Notice says how
	// to see the rest.
	Truncated bool   `json:"truncated,omitempty" jsonschema:"the patch was cut at max_bytes"`
	Notice    string `json:"notice,omitempty"`
}

// Patch sizes, and how many changes a changes result lists (and its
// text shows).
const (
	defaultPatchBytes = 64 << 10
	maxPatchBytes     = 8 << 20
	maxListedChanges  = 1000
	maxTextChanges    = 100
)

func (t *target) changes(ctx context.Context, _ *mcp.CallToolRequest, in ChangesIn) (*mcp.CallToolResult, ChangesOut, error) {
	limit := in.MaxBytes
	switch {
	case limit < 0 || limit > maxPatchBytes:
		return nil, ChangesOut{}, fmt.Errorf("max_bytes %d: give 1 to %d (0 for %d)", limit, maxPatchBytes, defaultPatchBytes)
	case limit == 0:
		limit = defaultPatchBytes
	}
	rep, err := call(ctx, t, func(c *workspace.Client) (ctl.DiffReply, error) {
		return c.Diff(ctl.DiffArgs{From: in.From, To: in.To, Paths: in.Paths, Patch: in.Patch, MaxBytes: limit})
	})
	if err != nil {
		return nil, ChangesOut{}, err
	}
	out := ChangesOut{From: rep.From, To: rep.To, Counts: countsOf(rep.Changes), Changes: []Change{}, Patch: rep.Patch, Truncated: rep.PatchTruncated}
	if len(out.Patch) > limit {
		// A daemon of an older agentfs sends the whole patch.
		out.Patch, out.Truncated = ctl.CutAtRune(out.Patch, limit), true
	}
	var text strings.Builder
	fmt.Fprintf(&text, "from %s to %s: %d created, %d modified, %d deleted", rep.From, rep.To, out.Counts.Created, out.Counts.Modified, out.Counts.Deleted)
	for i, c := range rep.Changes {
		if i == maxListedChanges {
			out.ChangesTruncated = true
			break
		}
		ch := Change{Path: c.Path, Kind: c.Kind, SizeDelta: c.SizeDelta}
		switch {
		case c.New != nil:
			ch.Type = c.New.Type
		case c.Old != nil:
			ch.Type = c.Old.Type
		}
		out.Changes = append(out.Changes, ch)
		if i < maxTextChanges {
			fmt.Fprintf(&text, "\n%s %s", changeLetter(c.Kind), c.Path)
		}
	}
	if n := len(rep.Changes); n > maxTextChanges {
		fmt.Fprintf(&text, "\n... %d more in the changes field", min(n, maxListedChanges)-maxTextChanges)
	}
	var notices []string
	if out.ChangesTruncated {
		notices = append(notices, fmt.Sprintf("%d paths changed and the first %d are listed: narrow it with paths", len(rep.Changes), maxListedChanges))
	}
	if out.Truncated {
		notices = append(notices, fmt.Sprintf("the patch was cut at %d bytes: raise max_bytes (at most %d), or narrow it with paths", limit, maxPatchBytes))
	}
	out.Notice = strings.Join(notices, "; ")
	if out.Notice != "" {
		fmt.Fprintf(&text, "\n%s", out.Notice)
	}
	if out.Patch != "" {
		// Not repeated here: a client reads it from the result.
		fmt.Fprintf(&text, "\nthe patch (%d bytes) is in the patch field", len(out.Patch))
	}
	return textResult("%s", text.String()), out, nil
}

// changeLetter marks a change as agentfs diff does.
func changeLetter(kind string) string {
	switch kind {
	case ctl.Created:
		return "A"
	case ctl.Deleted:
		return "D"
	case ctl.Modified:
		return "M"
	case ctl.ModeChanged:
		return "P"
	case ctl.TypeChanged:
		return "T"
	}
	return "?"
}

// RewindIn names the checkpoint to rewind to.
type RewindIn struct {
	Checkpoint string `json:"checkpoint" jsonschema:"the checkpoint: its id, a unique prefix of 4+ digits, or a tag"`
	DryRun     bool   `json:"dry_run,omitempty" jsonschema:"only list what would change"`
}

// RewindOut says what a rewind did (or would do).
type RewindOut struct {
	Checkpoint Checkpoint `json:"checkpoint"`
	Branch     string     `json:"branch" jsonschema:"the branch rewound"`
	// Safety is the checkpoint of the state before (not for a dry run).
	Safety *Checkpoint `json:"safety,omitempty" jsonschema:"the checkpoint of the state before: rewinding to it undoes this rewind"`
	// Changes are what a dry run would change.
	Changes  []Change `json:"changes,omitempty"`
	DryRun   bool     `json:"dry_run,omitempty"`
	Relaunch bool     `json:"relaunch" jsonschema:"the agent's processes are stopped and started again on the rewound files"`
	Note     string   `json:"note"`
}

// selfRewindCaveat is what a self-rewind's answer cannot know yet.
const selfRewindCaveat = "if another rewind stops the agent first, or the run ends first, this rewind is dropped (the activity log says so)"

// rewindNote says, for a model, what a rewind did to the agent's
// processes (or would do): none stopped; stopped and started again;
// or stopped for good (the supervisor's relaunches are used up).
func rewindNote(dryRun, deferred, stopped, relaunch bool) string {
	switch {
	case dryRun && stopped && relaunch:
		return "nothing was changed; a rewind would stop every process of the agent and start it again on the rewound files"
	case dryRun && stopped:
		return "nothing was changed; a rewind would stop every process of the agent for good: the supervisor has no relaunch left (--max-restarts), so the run would end"
	case dryRun:
		return "nothing was changed"
	case deferred && relaunch:
		return "you are one of the agent's processes: in a moment the session's supervisor stops every one of them, you too, rewinds, and starts the agent again on the rewound files, with AGENTFS_RELAUNCH set; " + selfRewindCaveat
	case deferred:
		return "you are one of the agent's processes: in a moment the session's supervisor stops every one of them, you too, and rewinds; it has no relaunch left (--max-restarts), so the run then ends; " + selfRewindCaveat
	case stopped && relaunch:
		return "the session's supervisor stopped every process of the agent before the rewind and starts the agent again on the rewound files"
	case stopped:
		return "the session's supervisor stopped every process of the agent before the rewind; it has no relaunch left (--max-restarts, or the agent had ended), so the run ends"
	}
	return "no process is stopped: programs still running keep the files they have open, and see the rewound files from their next open"
}

func (t *target) rewind(ctx context.Context, _ *mcp.CallToolRequest, in RewindIn) (*mcp.CallToolResult, RewindOut, error) {
	out, err := call(ctx, t, func(c *workspace.Client) (RewindOut, error) {
		st, err := c.Status()
		if err != nil {
			return RewindOut{}, err
		}
		me, err := c.Current(0)
		if err != nil {
			return RewindOut{}, err
		}
		supervised := st.Supervised && me.Branch == st.Branch
		rep, err := c.Restore(ctl.RestoreArgs{Ref: in.Checkpoint, DryRun: in.DryRun})
		if err != nil {
			return RewindOut{}, err
		}
		out := RewindOut{DryRun: in.DryRun, Relaunch: rep.Relaunch}
		stopped := rep.Stopped
		if in.DryRun && supervised && !rep.Stopped {
			// A daemon that does not say: the supervisor would.
			stopped, out.Relaunch = true, true
		}
		out.Note = rewindNote(in.DryRun, rep.Deferred, stopped, out.Relaunch)
		out.Checkpoint, out.Branch = checkpointOf(rep.Snapshot), rep.Branch
		if rep.Safety != nil {
			s := checkpointOf(*rep.Safety)
			out.Safety = &s
		}
		for _, ch := range rep.Changes {
			out.Changes = append(out.Changes, Change{Path: ch.Path, Kind: ch.Kind, SizeDelta: ch.SizeDelta})
		}
		return out, nil
	})
	if err != nil {
		return nil, RewindOut{}, err
	}
	if out.DryRun {
		return textResult("rewinding branch %s to %s would change %d paths; %s", out.Branch, out.Checkpoint.ID, len(out.Changes), out.Note), out, nil
	}
	if out.Safety == nil {
		return textResult("rewinding branch %s to checkpoint %s: %s", out.Branch, out.Checkpoint.ID, out.Note), out, nil
	}
	return textResult("rewound branch %s to checkpoint %s; to undo: rewind to %s; %s", out.Branch, out.Checkpoint.ID, out.Safety.ID, out.Note), out, nil
}

// MergeIn names the branch to merge and where.
type MergeIn struct {
	Branch string   `json:"branch" jsonschema:"the branch whose changes are merged in"`
	Into   string   `json:"into,omitempty" jsonschema:"the branch merged into (default: yours)"`
	DryRun bool     `json:"dry_run,omitempty" jsonschema:"only list what the merge would do"`
	Ours   []string `json:"ours,omitempty" jsonschema:"paths whose conflicts (at or below them) keep the target's version; . is everything"`
	Theirs []string `json:"theirs,omitempty" jsonschema:"paths whose conflicts (at or below them) take the branch's version; . is everything"`
}

// MergeStep is one path a merge changes.
type MergeStep struct {
	Path   string `json:"path"`
	Action string `json:"action" jsonschema:"take (the branch's version written), delete, attrs, merge (lines combined) or conflict (written with markers)"`
}

// MergeOut is what a merge did.
type MergeOut struct {
	Branch     string              `json:"branch"`
	Into       string              `json:"into"`
	Base       string              `json:"base" jsonschema:"the checkpoint both sides were compared with, or lower (the project)"`
	Safety     *Checkpoint         `json:"safety,omitempty" jsonschema:"the checkpoint of the target before the merge: rewinding to it undoes the merge"`
	DryRun     bool                `json:"dry_run,omitempty"`
	Changes    []MergeStep         `json:"changes"`
	Conflicts  []ctl.MergeConflict `json:"conflicts"`
	Unresolved int                 `json:"unresolved" jsonschema:"conflicts left for you to resolve"`
}

func (t *target) mergeBranch(ctx context.Context, _ *mcp.CallToolRequest, in MergeIn) (*mcp.CallToolResult, MergeOut, error) {
	rep, err := call(ctx, t, func(c *workspace.Client) (ctl.MergeReply, error) {
		return c.Merge(ctl.MergeArgs{Branch: in.Branch, Into: in.Into, DryRun: in.DryRun, Ours: in.Ours, Theirs: in.Theirs})
	})
	if err != nil {
		return nil, MergeOut{}, err
	}
	out := MergeOut{Branch: rep.Branch, Into: rep.Into, Base: rep.Base, DryRun: in.DryRun, Conflicts: rep.Conflicts, Unresolved: rep.Unresolved}
	if rep.Safety != nil {
		s := checkpointOf(*rep.Safety)
		out.Safety = &s
	}
	for _, c := range rep.Changes {
		out.Changes = append(out.Changes, MergeStep{Path: c.Path, Action: c.Action})
	}
	verb := "merged"
	if in.DryRun {
		verb = "merging would change (nothing changed yet)"
	}
	msg := fmt.Sprintf("%s branch %s into %s: %d paths changed, %d conflicts left", verb, rep.Branch, rep.Into, len(rep.Changes), rep.Unresolved)
	if out.Safety != nil {
		msg += "; to undo: rewind to " + out.Safety.ID
	}
	return textResult("%s", msg), out, nil
}

// BranchCreateIn names a new branch.
type BranchCreateIn struct {
	Name string `json:"name" jsonschema:"the branch's name: 1 to 100 bytes, no '/', not 4 to 8 hex digits"`
	From string `json:"from,omitempty" jsonschema:"the checkpoint it starts from (default: a checkpoint of your branch taken now)"`
}

// Branch describes a branch.
type Branch struct {
	Name    string    `json:"name"`
	Origin  string    `json:"origin,omitempty" jsonschema:"the checkpoint it started from"`
	Created time.Time `json:"created,omitempty"`
	Current bool      `json:"current" jsonschema:"the branch you see"`
	Default bool      `json:"default" jsonschema:"the branch the mount shows to unbound processes"`
	Bound   int       `json:"bound" jsonschema:"processes bound to it"`
}

func branchOf(b ctl.BranchInfo) Branch {
	return Branch{Name: b.Name, Origin: b.Origin, Created: b.Created, Current: b.Current, Default: b.Default, Bound: b.Bound}
}

func (t *target) branchCreate(ctx context.Context, _ *mcp.CallToolRequest, in BranchCreateIn) (*mcp.CallToolResult, Branch, error) {
	b, err := call(ctx, t, func(c *workspace.Client) (ctl.BranchInfo, error) {
		return c.CreateBranch(ctl.BranchCreateArgs{Name: in.Name, From: in.From})
	})
	if err != nil {
		return nil, Branch{}, err
	}
	return textResult("created branch %s from checkpoint %s", b.Name, b.Origin), branchOf(b), nil
}

// BranchListIn takes nothing.
type BranchListIn struct{}

// BranchListOut lists branches.
type BranchListOut struct {
	Branches []Branch `json:"branches"`
}

func (t *target) branchList(ctx context.Context, _ *mcp.CallToolRequest, _ BranchListIn) (*mcp.CallToolResult, BranchListOut, error) {
	list, err := call(ctx, t, (*workspace.Client).Branches)
	if err != nil {
		return nil, BranchListOut{}, err
	}
	out := BranchListOut{Branches: []Branch{}}
	var names []string
	for _, b := range list.Branches {
		out.Branches = append(out.Branches, branchOf(b))
		mark := ""
		if b.Current {
			mark = " (yours)"
		}
		names = append(names, b.Name+mark)
	}
	return textResult("%d branches: %s", len(names), strings.Join(names, ", ")), out, nil
}

// ActivityIn selects entries of the activity log.
type ActivityIn struct {
	Since      string `json:"since,omitempty" jsonschema:"a duration back from now (10m, 2h) or a time (15:04, 2006-01-02 15:04:05, RFC 3339)"`
	Op         string `json:"op,omitempty" jsonschema:"one operation: create, write, unlink, rename, mkdir, rmdir, link, symlink, setattr, ..."`
	PathPrefix string `json:"path_prefix,omitempty" jsonschema:"only paths at or below this one, relative to the project root (src, not /src)"`
	Limit      int    `json:"limit,omitempty" jsonschema:"at most this many entries, the newest (default 100, at most 100000)"`
}

// defaultActivityLimit is how many entries activity returns unless
// asked for another number.
const defaultActivityLimit = 100

// relativePath cleans p, a path relative to the workspace's root ("":
// the root), by the rule the workspace applies to the paths of changes
// and apply, with the same message: an absolute path, or one that
// leaves the root, is refused.
func relativePath(op, p string) (string, error) {
	c := path.Clean(p)
	if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") || strings.IndexByte(c, 0) >= 0 {
		return "", fmt.Errorf("%s: %q is not a path inside the mount (relative to its root)", op, p)
	}
	if c == "." {
		c = ""
	}
	return c, nil
}

// ActivityOut lists entries.
type ActivityOut struct {
	Entries   []ctl.ActivityEntry `json:"entries"`
	Truncated bool                `json:"truncated,omitempty" jsonschema:"more entries matched; the oldest were left out"`
}

func (t *target) activity(ctx context.Context, _ *mcp.CallToolRequest, in ActivityIn) (*mcp.CallToolResult, ActivityOut, error) {
	since, err := activity.ParseSince(in.Since, time.Now())
	if err != nil {
		return nil, ActivityOut{}, fmt.Errorf("since %q: %v", in.Since, err)
	}
	limit := in.Limit
	switch {
	case limit < 0 || limit > workspace.MaxActivityLimit:
		return nil, ActivityOut{}, fmt.Errorf("limit %d: give 1 to %d (0 for %d)", limit, workspace.MaxActivityLimit, defaultActivityLimit)
	case limit == 0:
		limit = defaultActivityLimit
	}
	prefix, err := relativePath("activity", in.PathPrefix)
	if err != nil {
		return nil, ActivityOut{}, err
	}
	rep, err := call(ctx, t, func(c *workspace.Client) (ctl.ActivityReply, error) {
		return c.Activity(ctl.ActivityArgs{Since: since, Op: in.Op, PathPrefix: prefix, Limit: limit})
	})
	if err != nil {
		return nil, ActivityOut{}, err
	}
	var text strings.Builder
	fmt.Fprintf(&text, "%d entries", len(rep.Entries))
	for _, e := range rep.Entries {
		p := e.Path
		if e.Path2 != "" {
			p += " -> " + e.Path2
		}
		fmt.Fprintf(&text, "\n%s %s %s  (%s)", e.Time.Local().Format("15:04:05.000"), e.Op, p, e.Command)
	}
	return textResult("%s", text.String()), ActivityOut{Entries: rep.Entries, Truncated: rep.Truncated}, nil
}

// ApplyIn selects what to apply.
type ApplyIn struct {
	Branch string   `json:"branch,omitempty" jsonschema:"the branch whose changes to apply (default: yours)"`
	Paths  []string `json:"paths,omitempty" jsonschema:"only these subtrees, relative to the project root (src, not /src)"`
	DryRun bool     `json:"dry_run,omitempty" jsonschema:"only list what would be written"`
	Force  bool     `json:"force,omitempty" jsonschema:"also overwrite paths the user changed in the project since (conflicts)"`
}

// ApplyItem is one change of an apply.
type ApplyItem struct {
	Path   string `json:"path"`
	Kind   string `json:"kind"`
	Reason string `json:"reason,omitempty"`
}

// ApplyOut says what an apply wrote (or would write) and left.
type ApplyOut struct {
	Project   string      `json:"project"`
	DryRun    bool        `json:"dry_run,omitempty"`
	Applied   []ApplyItem `json:"applied"`
	Conflicts []ApplyItem `json:"conflicts" jsonschema:"not applied: the project changed there since your branch did (force overwrites them)"`
	Skipped   []ApplyItem `json:"skipped" jsonschema:"not applied because another change was not"`
	Bytes     int64       `json:"bytes"`
}

func applyItems(items []ctl.ApplyItem) []ApplyItem {
	out := []ApplyItem{}
	for _, it := range items {
		out = append(out, ApplyItem{Path: it.Path, Kind: it.Kind, Reason: it.Reason})
	}
	return out
}

func (t *target) apply(ctx context.Context, _ *mcp.CallToolRequest, in ApplyIn) (*mcp.CallToolResult, ApplyOut, error) {
	rep, err := call(ctx, t, func(c *workspace.Client) (ctl.ApplyReply, error) {
		return c.Apply(ctl.ApplyArgs{Branch: in.Branch, Paths: in.Paths, DryRun: in.DryRun, Force: in.Force})
	})
	if err != nil {
		return nil, ApplyOut{}, err
	}
	out := ApplyOut{Project: rep.Lower, DryRun: rep.DryRun, Applied: applyItems(rep.Applied), Conflicts: applyItems(rep.Conflicts),
		Skipped: applyItems(rep.Skipped), Bytes: rep.Bytes}
	verb := "applied"
	if rep.DryRun {
		verb = "would apply"
	}
	text := fmt.Sprintf("%s %d changes to %s (%d bytes); %d conflicts, %d skipped", verb, len(out.Applied), out.Project, out.Bytes, len(out.Conflicts), len(out.Skipped))
	if n := len(out.Conflicts); n > 0 {
		text += fmt.Sprintf(": %d paths changed in the project since your branch changed them; look at them, and call apply with force=true only if the user wants them overwritten", n)
	}
	return textResult("%s", text), out, nil
}
