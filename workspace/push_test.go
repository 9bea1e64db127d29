package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/internal/s3test"
	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/remote"
)

// TestPushPull pushes a session's store to a real S3 server and pulls
// it into a new store over another copy of the project, in this
// process: the pulled store shows the same files, has the snapshot, and
// names as a conflict the one path whose project file differs. The
// push hashes through Options.Hasher what the store's hashes do not
// know: each file once, however many documents name it.
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
	// hasher read them once, and the project's a.txt and c.txt (bases)
	// once.
	if rep.Sent != 3 || !slices.Equal(rep.Snapshots, []string{snap.ID}) || !slices.Equal(rep.Branches, []string{"main"}) {
		t.Errorf("Push = %+v, want 3 objects sent, snapshot %s, branch main", rep, snap.ID)
	}
	if n := hashed.Load(); n != 5 {
		t.Errorf("the Hasher was asked %d times, want 5 (3 files and 2 bases, each once for the snapshot and main)", n)
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
	w2 := openPulled(t, store, other)
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

// pushSpec is the remote of srv's bucket bkt, prefix acme.
func pushSpec(srv *s3test.Server) ctl.RemoteSpec {
	return ctl.RemoteSpec{Name: "team", URL: "s3://bkt/acme", Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey}
}

// TestPushAsksTheHashStore: a push takes the SHA-256 of the objects
// the store's content hashes know without reading them (here the
// hashes computed for the snapshot's root), reads the others, and
// records what it read, so that a second push reads no object again.
func TestPushAsksTheHashStore(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	w := newWorkspace(t, map[string]string{"a.txt": "hello\n", "b.txt": "bye\n"})
	writeFile(t, w.view, "a.txt", "changed\n")
	writeFile(t, w.view, "new.txt", "new\n")
	snap, err := w.CreateSnapshot(ctl.Caller{}, ctl.SnapshotCreateArgs{Label: "hashed"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.meta.Snapshot(snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Hashes().Root(s, true); err != nil {
		t.Fatal(err)
	}
	writeFile(t, w.view, "later.txt", "written after the snapshot\n")
	args := ctl.PushArgs{Remote: pushSpec(srv), Session: &ctl.PushSession{ID: "s-1", Project: w.opts.Lower, State: "ended"}}
	rep, err := w.Push(ctl.Caller{}, args)
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	// Known: a.txt's and new.txt's objects (the root's). Read:
	// later.txt's object, and the project's a.txt (a base: recorded
	// only once it has not changed for 2 seconds).
	if rep.Known != 2 || rep.Hashed != 2 || rep.Sent != 3 {
		t.Errorf("first push: %d known, %d hashed, %d sent; want 2 known, 2 hashed (later.txt, the project's a.txt), 3 sent", rep.Known, rep.Hashed, rep.Sent)
	}
	rep, err = w.Push(ctl.Caller{}, args)
	if err != nil {
		t.Fatalf("second Push: %v", err)
	}
	if rep.Known != 3 || rep.Hashed != 1 || rep.HashedBytes != int64(len("hello\n")) || rep.Sent != 0 || rep.Skipped != 3 {
		t.Errorf("second push: %d known, %d hashed (%d bytes), %d sent, %d skipped; want 3 known, only the project's a.txt hashed (6 bytes), 0 sent, 3 skipped",
			rep.Known, rep.Hashed, rep.HashedBytes, rep.Sent, rep.Skipped)
	}
}

// TestPushPinsItsObjects holds a push while it reads (the hasher waits):
// meanwhile a snapshot is taken, the pushed snapshot is deleted and
// garbage is collected, all of which take opMu, so the push holds it
// not; gc leaves the object the push sends, and the push completes.
func TestPushPinsItsObjects(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	w := newWorkspace(t, map[string]string{"a.txt": "hello\n"})
	writeFile(t, w.view, "a.txt", "pushed\n")
	snap, err := w.CreateSnapshot(ctl.Caller{}, ctl.SnapshotCreateArgs{Label: "to push"})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, w.view, "a.txt", "changed after\n") // the branch now has its own object
	reading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.opts.Hasher = func(ctx context.Context, o remote.Object) (remote.Sum, error) {
		once.Do(func() { close(reading) })
		<-release
		return remote.ReadHash(ctx, o)
	}
	type result struct {
		rep ctl.PushReply
		err error
	}
	done := make(chan result)
	go func() {
		rep, err := w.Push(ctl.Caller{}, ctl.PushArgs{Remote: pushSpec(srv), Refs: []string{snap.ID}})
		done <- result{rep, err}
	}()
	<-reading
	if _, err := w.CreateSnapshot(ctl.Caller{}, ctl.SnapshotCreateArgs{Label: "during the push"}); err != nil {
		t.Errorf("snapshot during the push: %v", err)
	}
	if _, err := w.DeleteSnapshot(ctl.Caller{}, snap.ID); err != nil {
		t.Errorf("deleting the pushed snapshot during the push: %v", err)
	}
	gc, err := w.GC(ctl.Caller{}, ctl.GCArgs{Grace: time.Nanosecond})
	if err != nil {
		t.Errorf("gc during the push: %v", err)
	}
	close(release)
	res := <-done
	if res.err != nil || res.rep.Sent != 1 {
		t.Fatalf("Push = %+v, %v; want 1 object sent (a.txt)", res.rep, res.err)
	}
	gc2, err := w.GC(ctl.Caller{}, ctl.GCArgs{Grace: time.Nanosecond})
	if err != nil || gc2.Removed < 1 {
		t.Errorf("gc after the push: %+v, %v; want the object the push pinned removed now (gc during: %+v)", gc2, err, gc)
	}
	sum := sha256.Sum256([]byte("pushed\n"))
	if got, err := os.ReadFile(srv.ObjectFile("bkt", "acme/objects/sha256/"+hex.EncodeToString(sum[:2])[:2]+"/"+hex.EncodeToString(sum[:]))); err != nil || string(got) != "pushed\n" {
		t.Errorf("the server holds %q (%v), want the pushed contents", got, err)
	}
}

// TestPushPullHardLinks: files hard-linked together in a pushed
// snapshot (two names made in the view, a third name of a project
// file) arrive hard-linked after a pull, with their contents; the
// document names the later names' link and still their object.
func TestPushPullHardLinks(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	files := map[string]string{"p.txt": "project file\n"}
	w := newWorkspace(t, files)
	writeFile(t, w.view, "a.txt", "linked\n")
	link := func(from, to string) {
		t.Helper()
		n, _, err := w.view.Lookup(w.view.Root(), from)
		if err != nil {
			t.Fatal(err)
		}
		defer w.view.Forget(n, 1)
		if _, err := w.view.Link(n, w.view.Root(), to); err != nil {
			t.Fatalf("link %s %s: %v", from, to, err)
		}
	}
	link("a.txt", "b.txt")
	link("p.txt", "q.txt")
	if _, err := w.CreateSnapshot(ctl.Caller{}, ctl.SnapshotCreateArgs{Label: "links"}); err != nil {
		t.Fatal(err)
	}
	spec := pushSpec(srv)
	if _, err := w.Push(ctl.Caller{}, ctl.PushArgs{Remote: spec, Session: &ctl.PushSession{ID: "s-1", Project: w.opts.Lower, State: "ended"}}); err != nil {
		t.Fatalf("Push: %v", err)
	}
	r, err := remote.OpenWith(remote.Config{Name: "team", URL: spec.URL, Endpoint: spec.Endpoint},
		remote.Credentials{AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	_, docs, err := ReadSessionDocs(context.Background(), r, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range docs {
		links := map[string]string{}
		for _, c := range d.Changes {
			if c.Link != "" {
				links[c.Path] = c.Link
				if c.Object == "" {
					t.Errorf("%s: %s has a link and no object", name, c.Path)
				}
			}
		}
		// p.txt is no change (its contents are the project's): it is
		// added after the changes, as another name of q.txt.
		if want := map[string]string{"b.txt": "a.txt", "p.txt": "q.txt"}; !maps.Equal(links, want) {
			t.Errorf("%s: links %v, want %v", name, links, want)
		}
	}
	other := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(other, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store := filepath.Join(t.TempDir(), "store")
	if _, err := Pull(context.Background(), PullOptions{Remote: r, Session: "s-1", Store: store, Project: other, Objects: t.TempDir()}); err != nil {
		t.Fatalf("Pull: %v", err)
	}
	w2 := openPulled(t, store, other)
	list, err := w2.Snapshots()
	if err != nil || len(list.Snapshots) == 0 {
		t.Fatalf("pulled snapshots: %+v, %v", list, err)
	}
	snapView, err := w2.openRefLocked(list.Snapshots[len(list.Snapshots)-1].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer snapView.close()
	for what, v := range map[string]*overlay.FS{"main": w2.view, "the snapshot": snapView.fs} {
		for _, pair := range [][2]string{{"a.txt", "b.txt"}, {"p.txt", "q.txt"}} {
			sa, err1 := v.StatPath(pair[0])
			sb, err2 := v.StatPath(pair[1])
			if err1 != nil || err2 != nil || sa.Ino != sb.Ino || sa.Nlink != 2 {
				t.Errorf("%s: %s (ino %d, nlink %d, %v) and %s (ino %d, %v) are not one file of 2 links",
					what, pair[0], sa.Ino, sa.Nlink, err1, pair[1], sb.Ino, err2)
			}
		}
		if got, _ := readFile(t, v, "b.txt"); got != "linked\n" {
			t.Errorf("%s: b.txt = %q, want %q", what, got, "linked\n")
		}
	}
}

// openPulled opens the store a pull built over project, closed at the
// end of the test.
func openPulled(t *testing.T, store, project string) *Workspace {
	t.Helper()
	w, err := Open(Options{Store: store, Lower: project, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	return w
}

// TestPushPinsLiveBranch pushes a session whose branch a mount serves
// (a fake one): the push pins the branch with a snapshot of its own,
// so a write to the branch while the push reads does not reach what is
// pushed (the branch's state when the push began), and the pin is
// deleted when the push ends.
func TestPushPinsLiveBranch(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	w := newWorkspace(t, map[string]string{"a.txt": "hello\n"})
	w.opts.NoHash = true
	w.Attach(&fakeMount{shown: w.View(), bound: map[int]*overlay.FS{}})
	writeFile(t, w.view, "a.txt", "as pushed\n")
	reading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.opts.Hasher = func(ctx context.Context, o remote.Object) (remote.Sum, error) {
		once.Do(func() { close(reading) })
		<-release
		return remote.ReadHash(ctx, o)
	}
	done := make(chan error)
	go func() {
		_, err := w.Push(ctl.Caller{}, ctl.PushArgs{Remote: pushSpec(srv), Session: &ctl.PushSession{ID: "s-1", Project: w.opts.Lower, State: "running"}})
		done <- err
	}()
	select {
	case <-reading:
	case err := <-done:
		t.Fatalf("Push ended before it read: %v", err)
	}
	writeFile(t, w.view, "a.txt", "written during the push\n")
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Push: %v", err)
	}
	sum := sha256.Sum256([]byte("as pushed\n"))
	h := hex.EncodeToString(sum[:])
	if got, err := os.ReadFile(srv.ObjectFile("bkt", "acme/objects/sha256/"+h[:2]+"/"+h)); err != nil || string(got) != "as pushed\n" {
		t.Errorf("the server holds %q (%v) for the branch's a.txt, want what it held when the push began", got, err)
	}
	list, err := w.Snapshots()
	if err != nil || len(list.Snapshots) != 0 {
		t.Errorf("snapshots after the push: %+v (%v), want none (the pin deleted)", list.Snapshots, err)
	}
	if got, _ := readFile(t, w.view, "a.txt"); got != "written during the push\n" {
		t.Errorf("the branch's a.txt = %q after the push, want what was written during it", got)
	}
}
