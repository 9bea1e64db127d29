package contenthash

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// Problem kinds of a Report.
const (
	// ProblemObjectChanged: an object's contents are not those hashed
	// when a snapshot's root was computed (bit rot, an edit in the
	// store).
	ProblemObjectChanged = "object-changed"
	// ProblemObjectMissing: an object a snapshot names cannot be read.
	ProblemObjectMissing = "object-missing"
	// ProblemProjectChanged: a project file a snapshot shows was
	// changed, while its size and times were not.
	ProblemProjectChanged = "project-changed"
	// ProblemRootChanged: a snapshot's root, computed again, is not the
	// one recorded.
	ProblemRootChanged = "root-changed"
	// ProblemTreeDiffers: a path of a directory checked against a
	// snapshot (VerifyTree) differs from the snapshot's, is missing or
	// is extra.
	ProblemTreeDiffers = "tree-differs"
)

// The reports are the control protocol's (ctl.VerifyReply), which
// every caller of verify answers with.
type (
	// Place is a path in a snapshot.
	Place = ctl.VerifyPlace
	// Problem is one thing Verify or VerifyTree found wrong.
	Problem = ctl.VerifyProblem
	// SnapshotCheck is one snapshot's outcome: its recorded root and
	// the root computed again.
	SnapshotCheck = ctl.VerifySnapshot
	// Report is what Verify or VerifyTree found.
	Report = ctl.VerifyReply
)

// Verify reads again every file of snaps, from the backstore and the
// project, and compares with what was recorded: each object's hash and
// each snapshot's root. A snapshot without a root gets one first (the
// files then are what they are now). Nothing read here is recorded.
func (h *Hasher) Verify(snaps []branch.Snapshot) (Report, error) {
	rep := Report{Snapshots: []SnapshotCheck{}, Problems: []Problem{}}
	fresh := branch.Hashes{Objects: map[string]branch.ObjectHash{}}
	objPlaces := map[string][]Place{}
	missing := map[string]bool{}
	var missingPaths []Place
	type lowerFile struct {
		path  string
		stat  unix.Stat_t
		sum   Digest
		snaps []string
	}
	lowers := map[[2]uint64]*lowerFile{}
	lowerMemo := map[[2]uint64]Digest{}
	for _, snap := range snaps {
		check := SnapshotCheck{ID: snap.ID}
		r, ok, err := h.cfg.Meta.SnapshotRootOf(snap)
		if err != nil {
			return rep, err
		}
		if !ok {
			if r, err = h.compute(snap, false); err != nil {
				return rep, err
			}
			check.ComputedNow = true
		}
		check.Root = Hex(r.Root)
		snapMissing := false
		o := treeOptions{fresh: true, memo: &fresh, lowerMemo: lowerMemo,
			missing: func(e *overlay.WalkEntry, err error) {
				if e.Missing { // no object id known: its path is
					missingPaths = append(missingPaths, Place{Snapshot: snap.ID, Path: e.Path})
				} else {
					missing[e.Object] = true
				}
				snapMissing = true
			}}
		o.visitWalk = func(e *overlay.WalkEntry, sum Digest) {
			if e.Object != "" {
				objPlaces[e.Object] = append(objPlaces[e.Object], Place{Snapshot: snap.ID, Path: e.Path})
				return
			}
			k := [2]uint64{e.LowerStat.Dev, e.LowerStat.Ino}
			lf := lowers[k]
			if lf == nil {
				lf = &lowerFile{path: e.Lower, stat: e.LowerStat, sum: sum}
				lowers[k] = lf
			}
			lf.snaps = append(lf.snaps, snap.ID)
		}
		v, err := h.openSnapshot(snap)
		if err != nil {
			return rep, err
		}
		_, root, _, err := h.tree(v, o)
		if cerr := v.Close(); cerr != nil {
			h.log.Warn("closing a snapshot's view", "id", snap.ID, "err", cerr)
		}
		if err != nil {
			return rep, fmt.Errorf("snapshot %s: %w", snap.ID, err)
		}
		check.Recomputed = Hex(root)
		check.OK = root == r.Root && !snapMissing
		rep.Snapshots = append(rep.Snapshots, check)
	}

	// Objects: what was read against what was recorded.
	ids := make([]string, 0, len(fresh.Objects))
	for id, oh := range fresh.Objects {
		ids = append(ids, id)
		rep.Bytes += oh.Size
	}
	slices.Sort(ids)
	rep.Objects = len(ids)
	recorded, err := h.cfg.Meta.ObjectHashes(ids)
	if err != nil {
		return rep, err
	}
	bad := map[string]bool{} // snapshots with a changed object
	for _, id := range ids {
		want, ok := recorded[id]
		got := fresh.Objects[id]
		if !ok || want.Sum == got.Sum {
			continue
		}
		where := objPlaces[id]
		for _, p := range where {
			bad[p.Snapshot] = true
		}
		rep.Problems = append(rep.Problems, Problem{Kind: ProblemObjectChanged, Object: id, Want: Hex(want.Sum), Got: Hex(got.Sum), Where: where,
			Detail: fmt.Sprintf("object %s holds other contents than when it was hashed (%d bytes then, %d now): changed behind agentfs's back (an edit in the store, or the disk)", id, want.Size, got.Size)})
	}
	for _, id := range sortedKeys(missing) {
		rep.Problems = append(rep.Problems, Problem{Kind: ProblemObjectMissing, Object: id, Where: objPlaces[id],
			Detail: fmt.Sprintf("object %s cannot be read: its file in the store is gone or unreadable (agentfs fsck says more)", id)})
		for _, p := range objPlaces[id] {
			bad[p.Snapshot] = true
		}
	}
	for _, p := range missingPaths {
		rep.Problems = append(rep.Problems, Problem{Kind: ProblemObjectMissing, Snapshot: p.Snapshot, Path: p.Path, Where: []Place{p},
			Detail: fmt.Sprintf("snapshot %s lists %s, but its file in the store is gone (agentfs fsck says more)", p.Snapshot, p.Path)})
		bad[p.Snapshot] = true
	}
	// Project files: changed contents under an unchanged size and times.
	var lowerKeys [][2]uint64
	for k := range lowers {
		lowerKeys = append(lowerKeys, k)
	}
	slices.SortFunc(lowerKeys, func(a, b [2]uint64) int { return strings.Compare(lowers[a].path, lowers[b].path) })
	for _, k := range lowerKeys {
		lf := lowers[k]
		lh, ok, err := h.cfg.Meta.LowerHashOf(k[0], k[1])
		if err != nil {
			return rep, err
		}
		if ok && lh.Size == lf.stat.Size && lh.Mtime == lf.stat.Mtim.Nano() && lh.Ctime == lf.stat.Ctim.Nano() && lh.Sum != lf.sum {
			var where []Place
			for _, s := range lf.snaps {
				where = append(where, Place{Snapshot: s, Path: lf.path})
				bad[s] = true
			}
			rep.Problems = append(rep.Problems, Problem{Kind: ProblemProjectChanged, Path: lf.path, Want: Hex(lh.Sum), Got: Hex(lf.sum), Where: where,
				Detail: fmt.Sprintf("the project's file %s holds other contents than when it was hashed, with the same size and times (an edit that kept them, or the disk)", lf.path)})
		}
	}
	for _, c := range rep.Snapshots {
		if c.Root == c.Recomputed {
			continue
		}
		why := "the project's files (those the snapshot did not copy) changed since the root was computed"
		if bad[c.ID] {
			why = "see the problems of its objects or files above"
		}
		rep.Problems = append(rep.Problems, Problem{Kind: ProblemRootChanged, Snapshot: c.ID, Want: c.Root, Got: c.Recomputed,
			Detail: fmt.Sprintf("snapshot %s: its root computed again is not the one recorded: %s", c.ID, why)})
	}
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}

// VerifyTree checks the plain directory tree dir (an export, a copy)
// against snap: their roots, and, when they differ, each path.
func (h *Hasher) VerifyTree(snap branch.Snapshot, dir string) (Report, error) {
	rep := Report{Snapshots: []SnapshotCheck{}, Problems: []Problem{}, Tree: dir}
	r, ok, err := h.Root(snap, true)
	if err != nil {
		return rep, err
	}
	if !ok {
		return rep, fmt.Errorf("snapshot %s: no root", snap.ID)
	}
	dm, err := HashDir(dir, true)
	if err != nil {
		return rep, err
	}
	rep.TreeRoot = dm.Root
	check := SnapshotCheck{ID: snap.ID, Root: Hex(r.Root), Recomputed: dm.Root, OK: dm.Root == Hex(r.Root)}
	rep.Snapshots = append(rep.Snapshots, check)
	if check.OK {
		rep.OK = true
		rep.Bytes = dm.Bytes
		return rep, nil
	}
	sm, err := h.SnapshotManifest(snap)
	if err != nil {
		return rep, err
	}
	if sm.Root != check.Root {
		rep.Problems = append(rep.Problems, Problem{Kind: ProblemRootChanged, Snapshot: snap.ID, Want: check.Root, Got: sm.Root,
			Detail: fmt.Sprintf("snapshot %s itself no longer has the root recorded: agentfs verify %s says why", snap.ID, snap.ID)})
	}
	rep.Problems = append(rep.Problems, diffManifests(snap.ID, sm, dm)...)
	rep.OK = false
	return rep, nil
}

// diffManifests lists the paths where tree got differs from snapshot
// manifest want (directories only by type and mode: their hashes
// differ whenever something inside does).
func diffManifests(snap string, want, got Manifest) []Problem {
	byPath := map[string]Entry{}
	for _, e := range got.Entries {
		byPath[e.Path] = e
	}
	var out []Problem
	seen := map[string]bool{}
	for _, w := range want.Entries {
		seen[w.Path] = true
		g, ok := byPath[w.Path]
		switch {
		case !ok:
			out = append(out, Problem{Kind: ProblemTreeDiffers, Snapshot: snap, Path: w.Path, Want: w.SHA256,
				Detail: fmt.Sprintf("%s: in the snapshot, missing from the tree", display(w.Path))})
		case g.Type != w.Type || g.Mode != w.Mode:
			out = append(out, Problem{Kind: ProblemTreeDiffers, Snapshot: snap, Path: w.Path, Want: w.SHA256, Got: g.SHA256,
				Detail: fmt.Sprintf("%s: type and mode %s %s in the snapshot, %s %s in the tree", display(w.Path), w.Type, w.Mode, g.Type, g.Mode)})
		case w.Type != "d" && g.SHA256 != w.SHA256:
			out = append(out, Problem{Kind: ProblemTreeDiffers, Snapshot: snap, Path: w.Path, Want: w.SHA256, Got: g.SHA256,
				Detail: fmt.Sprintf("%s: other contents than the snapshot's", display(w.Path))})
		}
	}
	for _, g := range got.Entries {
		if !seen[g.Path] {
			out = append(out, Problem{Kind: ProblemTreeDiffers, Snapshot: snap, Path: g.Path, Got: g.SHA256,
				Detail: fmt.Sprintf("%s: in the tree, not in the snapshot", display(g.Path))})
		}
	}
	return out
}

func display(p string) string {
	if p == "" {
		return "the top directory"
	}
	return p
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// isMissing reports whether err means an object's file is gone.
func isMissing(err error) bool {
	return errors.Is(err, unix.ENOENT)
}
