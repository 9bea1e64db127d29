package remote

import (
	"context"
	"errors"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestCompactSnapshotDoc pushes a snapshot document: the remote holds
// its compact form beside the JSON, which listings alone see, and
// GetSnapshotDoc reads the compact one (the JSON changed on the server
// behind its back is not what it returns), the JSON where the compact
// one is missing (a push by an older agentfs) or does not decode.
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
	got, err := r.GetSnapshotDoc(ctx, doc.ID)
	if err != nil || !reflect.DeepEqual(got, doc) {
		t.Fatalf("GetSnapshotDoc = %+v, %v; want %+v", got, err, doc)
	}

	// The compact one is what it reads: the JSON rewritten on the
	// server is not seen.
	other := *doc
	other.Label = "the JSON's"
	if err := r.PutDoc(ctx, KindSnapshot, doc.ID, other); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(srv.ObjectFile(bucket, r.loc.CompactDocKey(doc.ID))); err != nil {
		t.Fatal(err)
	}
	if err := r.putCompactDoc(ctx, doc.ID, doc); err != nil {
		t.Fatal(err)
	}
	if got, err := r.GetSnapshotDoc(ctx, doc.ID); err != nil || got.Label != "" {
		t.Errorf("GetSnapshotDoc = label %q, %v; want the compact document's (no label)", got.Label, err)
	}

	// Without the compact one, or with one that does not decode: the
	// JSON.
	if err := os.WriteFile(srv.ObjectFile(bucket, r.loc.CompactDocKey(doc.ID)), []byte("not gob"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := r.GetSnapshotDoc(ctx, doc.ID); err != nil || got.Label != other.Label {
		t.Errorf("GetSnapshotDoc over a damaged compact document = label %q, %v; want the JSON's %q", got.Label, err, other.Label)
	}
	if err := os.Remove(srv.ObjectFile(bucket, r.loc.CompactDocKey(doc.ID))); err != nil {
		t.Fatal(err)
	}
	if got, err := r.GetSnapshotDoc(ctx, doc.ID); err != nil || got.Label != other.Label || len(got.Changes) != len(doc.Changes) {
		t.Errorf("GetSnapshotDoc without a compact document = %+v, %v; want the JSON's", got, err)
	}
	if _, err := r.GetSnapshotDoc(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSnapshotDoc of a missing document = %v, want ErrNotFound", err)
	}
}
