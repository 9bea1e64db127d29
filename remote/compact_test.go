package remote

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestCompactSnapshotDoc pushes a snapshot document: the remote holds
// its compact form beside the JSON (which listings alone see), and
// GetSnapshotDoc reads the compact one without a GET of the JSON while
// the JSON names it; the JSON when it does not: rewritten by an older
// agentfs (no twin named), a damaged compact document, none at all.
func TestCompactSnapshotDoc(t *testing.T) {
	srv, r := openTest(t)
	ctx := context.Background()
	uid := uint32(1000)
	doc := &SnapshotDoc{Format: Format, ID: "0badcafe", Created: time.Unix(1700000000, 5).UTC(), Branch: "main", Kind: "manual",
		Pushed: time.Unix(1700000001, 0).UTC(), Bytes: 6,
		Changes: []Change{
			{Path: "d", Kind: "created", Type: "dir", Mode: 0o755, Mtime: 1},
			{Path: "d/a", Kind: "modified", Type: "file", Mode: 0o644, Uid: uid, Gid: uid, Size: 6, Mtime: 2,
				Object: "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
				Xattrs: map[string][]byte{"user.x": []byte("1")}, Base: &Base{Type: "file", Size: 3, Object: "ab"}},
			{Path: "d/b", Kind: "created", Type: "file", Mode: 0o644, Size: 6, Mtime: 2, Object: "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03", Link: "d/a"},
			{Path: "gone", Kind: "deleted"},
		}}
	if _, err := r.Push(ctx, nil, []Doc{{Kind: KindSnapshot, Name: doc.ID, Value: doc}}, 0, nil); err != nil {
		t.Fatalf("Push: %v", err)
	}
	if got, want := srv.Objects(t, bucket, "team/compact/"), []string{r.loc.CompactDocKey(doc.ID)}; !slices.Equal(got, want) {
		t.Errorf("compact documents = %q, want %q", got, want)
	}
	if names, err := r.ListDocs(ctx, KindSnapshot); err != nil || !slices.Equal(names, []string{doc.ID}) {
		t.Errorf("ListDocs = %q, %v; want [%s]", names, err, doc.ID)
	}
	jsonGets := func() int { return srv.Requests(t, "GetObject", "team/snapshots/") }
	got, err := r.GetSnapshotDoc(ctx, doc.ID)
	if err != nil || !reflect.DeepEqual(got, doc) {
		t.Fatalf("GetSnapshotDoc = %+v, %v; want %+v", got, err, doc)
	}
	if n := jsonGets(); n != 0 {
		t.Errorf("GetSnapshotDoc of a document with its twin read the JSON (%d GETs)", n)
	}

	// An older agentfs pushes the document again, changed, as JSON
	// alone: the compact one left is no twin of it.
	other := *doc
	other.Label = "pushed again"
	b, err := json.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.putSmall(ctx, r.loc.DocKey(KindSnapshot, doc.ID), b, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := r.GetSnapshotDoc(ctx, doc.ID); err != nil || got.Label != other.Label {
		t.Errorf("GetSnapshotDoc after a push of the JSON alone = label %q, %v; want the JSON's %q", got.Label, err, other.Label)
	}

	// Pushed again with both, then the compact one damaged, then gone.
	if err := r.PutDoc(ctx, KindSnapshot, doc.ID, other); err != nil {
		t.Fatal(err)
	}
	compact := srv.ObjectFile(bucket, r.loc.CompactDocKey(doc.ID))
	fromJSON := jsonGets()
	if got, err := r.GetSnapshotDoc(ctx, doc.ID); err != nil || got.Label != other.Label || jsonGets() != fromJSON {
		t.Errorf("GetSnapshotDoc = label %q, %v, %d GETs of the JSON; want %q from the compact twin", got.Label, err, jsonGets()-fromJSON, other.Label)
	}
	for _, damage := range []func() error{
		func() error { return os.WriteFile(compact, []byte("not gob"), 0o644) },
		func() error { return os.Remove(compact) },
	} {
		if err := damage(); err != nil {
			t.Fatal(err)
		}
		if got, err := r.GetSnapshotDoc(ctx, doc.ID); err != nil || got.Label != other.Label || len(got.Changes) != len(doc.Changes) {
			t.Errorf("GetSnapshotDoc without a sound compact twin = %+v, %v; want the JSON's", got, err)
		}
	}
	if _, err := r.GetSnapshotDoc(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSnapshotDoc of a missing document = %v, want ErrNotFound", err)
	}
}
