package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// The daemon's side of the snapshot, branch and change operations
// (ops_snapshot.go, ops_branch.go, ops_changes.go).
//
// # Serialization
//
// Every one of them runs with d.opMu held, so that they see each
// other's effects whole: a restore never runs while a branch is being
// switched or deleted, a listing never shows a branch half switched.
// File operations do not take opMu; the view's own lock orders them
// with snapshots, restores and switches.
//
// # Errors
//
// Each error names the thing and the fix, with the errno of its kind:
// ENOENT for an unknown snapshot, tag or branch, EINVAL for an
// ambiguous id prefix or a bad name, EEXIST, EBUSY for what is in use
// (the current branch, a tagged snapshot), EROFS for a store that cannot
// be written. An operation that fails changes nothing.

// opFunc is an operation that takes arguments of type A.
type opFunc[A any] func(c ctl.Caller, args A) (any, error)

// serialized makes fn an OpFunc that decodes its arguments and runs
// with d.opMu held.
func serialized[A any](d *daemon, op ctl.Op, fn opFunc[A]) ctl.OpFunc {
	return func(c ctl.Caller, raw json.RawMessage) (any, error) {
		var args A
		if err := ctl.DecodeArgs(op, raw, &args); err != nil {
			return nil, err
		}
		d.opMu.Lock()
		defer d.opMu.Unlock()
		return fn(c, args)
	}
}

// noArgs is the argument type of operations that take none.
type noArgs struct{}

// storeError turns an error of the branch store into one for the
// user: what failed (what, e.g. "deleting snapshot 1a2b3c4d") and the
// errno of its kind, with fix appended when the kind has one.
func storeError(err error, what string) error {
	errno := syscall.EIO
	switch {
	case errors.Is(err, branch.ErrReadOnly):
		return ctl.Errorf(syscall.EROFS, "%s: the store is read-only: nothing was changed; mount it writable to change it", what)
	case errors.Is(err, branch.ErrNotFound):
		errno = syscall.ENOENT
	case errors.Is(err, branch.ErrInvalidName), errors.Is(err, branch.ErrAmbiguous):
		errno = syscall.EINVAL
	case errors.Is(err, branch.ErrExists):
		errno = syscall.EEXIST
	case errors.Is(err, branch.ErrInUse):
		errno = syscall.EBUSY
	case errors.Is(err, branch.ErrClosed):
		errno = syscall.ESHUTDOWN
	}
	var en syscall.Errno
	if errno == syscall.EIO && errors.As(err, &en) && en != 0 {
		errno = en
	}
	return ctl.Errorf(errno, "%s: %v", what, err)
}

// resolveSnapshot returns the snapshot that ref names: an id, an
// unambiguous prefix of at least 4 digits, or a tag.
func (d *daemon) resolveSnapshot(ref string) (branch.Snapshot, error) {
	if ref == "" {
		return branch.Snapshot{}, ctl.Errorf(syscall.EINVAL, "no snapshot given: name one by id, id prefix or tag (agentfs snapshot list shows them)")
	}
	snap, err := d.meta.Snapshot(ref)
	switch {
	case err == nil:
		return snap, nil
	case errors.Is(err, branch.ErrAmbiguous):
		var ids []string
		if snaps, lerr := d.meta.Snapshots(); lerr == nil {
			for _, s := range snaps {
				if strings.HasPrefix(s.ID, ref) {
					ids = append(ids, s.ID)
				}
			}
		}
		slices.Sort(ids)
		return branch.Snapshot{}, ctl.Errorf(syscall.EINVAL, "the snapshot id prefix %q is ambiguous: it starts %s: type more digits", ref, strings.Join(ids, " and "))
	case errors.Is(err, branch.ErrNotFound):
		hint := ""
		if isHex(ref) && len(ref) < 4 {
			hint = " (an id prefix needs at least 4 digits)"
		}
		return branch.Snapshot{}, ctl.Errorf(syscall.ENOENT, "no snapshot or tag %q%s: agentfs snapshot list shows the ids and tags", ref, hint)
	}
	return branch.Snapshot{}, storeError(err, fmt.Sprintf("finding snapshot %q", ref))
}

// invalidName is the error for a branch or tag name (kind) that
// branch refused with ErrInvalidName: its reason, and the rule.
func invalidName(err error, kind string) error {
	return ctl.Errorf(syscall.EINVAL, "%s: choose a %s name of 1 to 100 bytes without \"/\" or control characters, not starting with \"-\", and not \".\", \"..\" or 4 to 8 hex digits (those read as snapshot ids)",
		strings.TrimSuffix(err.Error(), ": "+branch.ErrInvalidName.Error()), kind)
}

func isHex(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdef") == ""
}

// snapshotInfo describes snap for a reply.
func snapshotInfo(snap branch.Snapshot, tags map[string]string) ctl.SnapshotInfo {
	info := ctl.SnapshotInfo{ID: snap.ID, Label: snap.Label, Branch: snap.Branch, Kind: snap.Kind, Created: snap.Created, Tags: []string{}}
	for name, id := range tags {
		if id == snap.ID {
			info.Tags = append(info.Tags, name)
		}
	}
	slices.Sort(info.Tags)
	return info
}

// tags returns every tag (name → snapshot id), or none when they
// cannot be read (replies then just show no tags; the error is logged).
func (d *daemon) tags() map[string]string {
	tags, err := d.meta.Tags()
	if err != nil {
		d.log.Warn("listing tags", "err", err)
	}
	return tags
}

// invalidate drops what the kernel cached of the nodes a restore or a
// switch cut loose. No lock of the view may be held.
func (d *daemon) invalidate(stale []overlay.Stale) {
	if srv := d.srv.Load(); srv != nil {
		srv.Invalidate(stale)
	}
	for _, bm := range d.branchMounts {
		bm.srv.Invalidate(stale)
	}
}

// currentBranchKey is the store info key that names the branch a kept
// store shows, so that mounting it again resumes that branch.
const currentBranchKey = "branch"

// resumeBranch returns the branch the store showed when it was last
// mounted (main for a new store, or when that branch is gone).
func (d *daemon) resumeBranch() (*branch.Layer, error) {
	name := "main"
	switch b, err := d.meta.Info(currentBranchKey); {
	case err == nil:
		name = string(b)
	case !errors.Is(err, branch.ErrNotFound):
		return nil, fmt.Errorf("reading the current branch: %w", err)
	}
	l, err := d.meta.Layer(name)
	if errors.Is(err, branch.ErrNotFound) && name != "main" {
		d.log.Warn("the branch the store showed last is gone: showing main", "branch", name)
		l, err = d.meta.Layer("main")
	}
	return l, err
}
