package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/contenthash"
	"github.com/agentfs/agentfs/ctl"
)

// # Content hashes
//
// The content hashes and Merkle roots of snapshots are package
// contenthash's; the workspace holds one Hasher per store. Its worker
// runs only while a mount is attached (and not turned off with
// Options.NoHash): it is kicked after every snapshot an operation
// takes, and computes the roots missing, off every file operation's
// path. A store opened without a mount (an ended session's) runs no
// worker: ShowSnapshot and Verify compute what is missing on demand.

// Hashes is the store's content hashes: the roots, the objects by
// contents (for remote storage, which addresses objects by SHA-256).
func (w *Workspace) Hashes() *contenthash.Hasher { return w.hashes }

// rootInfo fills the root fields of info for snap; with compute, a
// root not computed yet is computed now.
func (w *Workspace) rootInfo(info *ctl.SnapshotInfo, snap branch.Snapshot, compute bool) error {
	r, status, err := w.hashes.Recorded(snap)
	if err != nil {
		return err
	}
	if status != contenthash.Computed && compute {
		if r, _, err = w.hashes.Root(snap, true); err != nil {
			return err
		}
		status = contenthash.Computed
	}
	info.RootStatus = string(status)
	if status == contenthash.Computed {
		info.Root, info.Files, info.Bytes = contenthash.Hex(r.Root), r.Files, r.Bytes
	}
	return nil
}

// ShowSnapshot describes the snapshot ref names, with its root: the
// recorded one, or "pending" while the mount's worker has not got to
// it; with no worker running, it is computed now.
func (w *Workspace) ShowSnapshot(c ctl.Caller, ref string) (ctl.SnapshotInfo, error) {
	return locked(w, func() (ctl.SnapshotInfo, error) {
		snap, err := w.resolveSnapshot(ref)
		if err != nil {
			return ctl.SnapshotInfo{}, err
		}
		info := snapshotInfo(snap, w.tags())
		_, status, err := w.hashes.Recorded(snap)
		if err == nil {
			err = w.rootInfo(&info, snap, status == contenthash.Off || status == contenthash.Failed)
		}
		if err != nil {
			return ctl.SnapshotInfo{}, hashError(err, fmt.Sprintf("computing the root of snapshot %s", snap.ID))
		}
		return info, nil
	})
}

// Verify reads again the files of the snapshots a.Refs name (every
// snapshot without any) and compares them with their recorded hashes
// and roots; with a.Tree, it checks that directory against the one
// snapshot named instead. Problems are in the reply (OK false), not
// an error.
func (w *Workspace) Verify(c ctl.Caller, a ctl.VerifyArgs) (ctl.VerifyReply, error) {
	return locked(w, func() (ctl.VerifyReply, error) {
		var snaps []branch.Snapshot
		if len(a.Refs) == 0 && a.Tree == "" {
			var err error
			if snaps, err = w.meta.Snapshots(); err != nil {
				return ctl.VerifyReply{}, storeError(err, "listing snapshots")
			}
		}
		for _, ref := range a.Refs {
			snap, err := w.resolveSnapshot(ref)
			if err != nil {
				return ctl.VerifyReply{}, err
			}
			snaps = append(snaps, snap)
		}
		progress, end := w.startProgress("verify", "snapshots")
		defer end()
		var rep contenthash.Report
		var err error
		if a.Tree != "" {
			if len(snaps) != 1 {
				return ctl.VerifyReply{}, errorf(ErrInvalid, "verify --tree %s: name the one snapshot to check it against (agentfs verify --tree DIR ID)", a.Tree)
			}
			if st, serr := os.Stat(a.Tree); serr != nil || !st.IsDir() {
				return ctl.VerifyReply{}, errorf(ErrInvalid, "verify --tree %s: not a directory: give the directory an export wrote", a.Tree)
			}
			rep, err = w.hashes.VerifyTree(snaps[0], a.Tree)
		} else {
			rep, err = w.hashes.Verify(snaps)
		}
		progress.set(int64(len(rep.Snapshots)), int64(len(snaps)), rep.Bytes, 0)
		w.log.Info("verify", "snapshots", len(snaps), "tree", a.Tree, "problems", len(rep.Problems), "err", err, "pid", c.Pid)
		if err != nil {
			return ctl.VerifyReply{}, hashError(err, "verifying")
		}
		return rep, nil
	})
}

// hashError is the error of computing hashes: what failed, as the
// store or the files said.
func hashError(err error, what string) error {
	var we *Error
	if errors.As(err, &we) {
		return err
	}
	if errors.Is(err, branch.ErrNotFound) {
		return errorf(ErrNotFound, "%s: %v", what, err)
	}
	return eioErrorf(err, "%s: %v", what, err)
}

// writeManifest writes the manifest of the view just exported beside
// the tree (to + ".manifest.json"), and returns its path and root: a
// snapshot's, or, for a view read live, the tree's.
// opMu is held.
func (w *Workspace) writeManifest(v refView, to string) (string, string, error) {
	var m contenthash.Manifest
	var err error
	if v.snap != nil {
		m, err = w.hashes.SnapshotManifest(*v.snap)
	} else {
		// A branch or the project is read live: what the tree holds
		// is what was read at export, which a program writing since
		// may have changed in the view. The manifest is the tree's.
		m, err = contenthash.HashDir(to, true)
	}
	if err != nil {
		return "", "", err
	}
	path := to + ".manifest.json"
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", "", err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return path, m.Root, err
}
