package workspace

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/internal/s3test"
	"github.com/agentfs/agentfs/remote"
)

// TestPushPull pushes a session's store to a real S3 server and pulls
// it into a new store over another copy of the project, in this
// process: the pulled store shows the same files, has the snapshot, and
// names as a conflict the one path whose project file differs. The
// push hashes through Options.Hasher (where the store's own hashes
// plug in): once per object read.
func TestPushPull(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	spec := ctl.RemoteSpec{Name: "team", URL: "s3://bkt/acme", Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey}
	files := map[string]string{"a.txt": "hello\n", "b.txt": "bye\n", "c.txt": "same\n"}
	w := newWorkspace(t, files)
	var hashed atomic.Int64
	w.opts.Hasher = func(ctx context.Context, o remote.Object) (remote.Sum, error) {
		hashed.Add(1)
		return remote.ReadHash(ctx, o)
	}
	writeFile(t, w.view, "a.txt", "changed\n")
	writeFile(t, w.view, "c.txt", "changed too\n")
	writeFile(t, w.view, "new.txt", "new\n")
	snap, err := w.CreateSnapshot(ctl.Caller{}, ctl.SnapshotCreateArgs{Label: "after"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := w.Push(ctl.Caller{}, ctl.PushArgs{Remote: spec, Session: &ctl.PushSession{ID: "s-1", Project: w.opts.Lower, State: "ended"}})
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	// Objects: the three files (the snapshot and main share them); the
	// hasher also read them for main, and the project's a.txt and c.txt
	// (bases) twice.
	if rep.Sent != 3 || !slices.Equal(rep.Snapshots, []string{snap.ID}) || !slices.Equal(rep.Branches, []string{"main"}) {
		t.Errorf("Push = %+v, want 3 objects sent, snapshot %s, branch main", rep, snap.ID)
	}
	if n := hashed.Load(); n != 10 {
		t.Errorf("the Hasher was asked %d times, want 10 (3 files and 2 bases, for the snapshot and for main)", n)
	}

	other := t.TempDir()
	for name, content := range files {
		if name == "c.txt" {
			content = "edited here\n"
		}
		if err := os.WriteFile(filepath.Join(other, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := remote.OpenWith(remote.Config{Name: "team", URL: spec.URL, Endpoint: spec.Endpoint},
		remote.Credentials{AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(t.TempDir(), "store")
	res, err := Pull(context.Background(), PullOptions{Remote: r, Session: "s-1", Store: store, Project: other, Objects: t.TempDir()})
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if len(res.Snapshots) != 1 || res.Fetched.Fetched != 3 || !slices.Equal(res.Conflicts, []string{"c.txt"}) {
		t.Errorf("Pull = %+v, want one snapshot, 3 objects, the conflict c.txt", res)
	}
	w2, err := Open(Options{Store: store, Lower: other, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w2.Close(); err != nil {
			t.Error(err)
		}
	}()
	for name, want := range map[string]string{"a.txt": "changed\n", "b.txt": "bye\n", "c.txt": "changed too\n", "new.txt": "new\n"} {
		if got, _ := readFile(t, w2.view, name); got != want {
			t.Errorf("pulled %s = %q, want %q", name, got, want)
		}
	}
	list, err := w2.Snapshots()
	if err != nil || len(list.Snapshots) != 1 || list.Snapshots[0].Label != "after" || list.Snapshots[0].ID != res.Snapshots[snap.ID] {
		t.Errorf("pulled snapshots = %+v (%v), want one, %s, labelled after", list.Snapshots, err, res.Snapshots[snap.ID])
	}
}
