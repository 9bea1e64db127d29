package main

import (
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// newTestDaemon opens a store for a daemon's control operations,
// without mounting anything.
func newTestDaemon(t *testing.T) *daemon {
	t.Helper()
	d := &daemon{plan: &mountPlan{lower: t.TempDir(), store: t.TempDir(), backstore: "hostfs"}, log: slog.New(slog.DiscardHandler)}
	if err := d.openStore(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	return d
}

// reopenReadOnly closes d's store and opens it again read-only.
func reopenReadOnly(t *testing.T, d *daemon) {
	t.Helper()
	d.close()
	var err error
	if d.meta, err = branch.Open(branch.Options{Dir: d.plan.store, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	if d.objs, err = backstore.Open(backstore.Options{Dir: d.plan.store}); err != nil {
		t.Fatal(err)
	}
	layer, err := d.meta.Layer("main")
	if err != nil {
		t.Fatal(err)
	}
	d.current.Store(layer)
	if d.view, err = overlay.New(overlay.Config{Lower: d.plan.lower, Objects: d.objs, Layer: layer}); err != nil {
		t.Fatal(err)
	}
}

func snapshotIDs(t *testing.T, d *daemon) string {
	t.Helper()
	snaps, err := d.meta.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range snaps {
		ids = append(ids, s.ID)
	}
	return strings.Join(ids, ",")
}

// TestRestoreReadOnlyStore: restore on a store that cannot be written
// is EROFS, says so, and takes no safety snapshot.
func TestRestoreReadOnlyStore(t *testing.T) {
	d := newTestDaemon(t)
	res, err := d.snapshotCreate(ctl.Caller{}, ctl.SnapshotCreateArgs{Label: "x"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.(ctl.SnapshotInfo).ID
	reopenReadOnly(t, d)
	_, err = d.restore(ctl.Caller{}, ctl.RestoreArgs{Ref: id})
	if !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), "read-only") || !strings.Contains(err.Error(), "nothing was restored") {
		t.Errorf("restore on a read-only store: %v, want EROFS saying the store is read-only and nothing was restored", err)
	}
	if got := snapshotIDs(t, d); got != id {
		t.Errorf("snapshots after the refused restore: %s, want only %s", got, id)
	}
}

// TestBranchCreateBadNameTakesNoSnapshot: a refused name leaves no
// snapshot behind (the default --from takes one).
func TestBranchCreateBadNameTakesNoSnapshot(t *testing.T) {
	d := newTestDaemon(t)
	for _, name := range []string{"a/b", "..", "x\ty", "", "-x", "abcd"} {
		_, err := d.branchCreate(ctl.Caller{}, ctl.BranchCreateArgs{Name: name})
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "choose a branch name") {
			t.Errorf("branch create %q: %v, want EINVAL naming the rule", name, err)
		}
	}
	if got := snapshotIDs(t, d); got != "" {
		t.Errorf("snapshots after refused branch names: %s, want none", got)
	}
}
