package branch

import (
	"crypto/sha256"
	"slices"
	"testing"
	"time"
)

// TestHashRecords: object hashes, the index by contents, project file
// hashes and snapshot roots are kept; a root is only a snapshot's own
// (its Ts), goes with the snapshot, and is not written for a snapshot
// deleted meanwhile.
func TestHashRecords(t *testing.T) {
	s := openMem(t)
	l, err := s.Layer("main")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := l.Snapshot("one", KindManual)
	if err != nil {
		t.Fatal(err)
	}
	sum := Digest(sha256.Sum256([]byte("x")))
	other := Digest(sha256.Sum256([]byte("y")))
	root := SnapshotRoot{Ts: snap.Ts, Root: other, Files: 3, Bytes: 10, Computed: time.Unix(5, 6)}
	err = s.PutHashes(Hashes{
		Objects: map[string]ObjectHash{"00aa": {Sum: sum, Size: 1, Mtime: 7}, "00bb": {Sum: sum, Size: 1, Mtime: 8}, "00cc": {Sum: other, Size: 1}},
		Lower:   []LowerHash{{Dev: 1, Ino: 2, Size: 3, Mtime: 4, Ctime: 5, Sum: other}},
		Roots:   map[string]SnapshotRoot{snap.ID: root, "deadbeef": root},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ObjectHashes([]string{"00aa", "00bb", "none"})
	if err != nil || len(got) != 2 || got["00aa"].Mtime != 7 || got["00bb"].Sum != sum {
		t.Errorf("ObjectHashes = %v, %v", got, err)
	}
	if ids, err := s.ObjectsWithHash(sum); err != nil || !slices.Equal(ids, []string{"00aa", "00bb"}) {
		t.Errorf("ObjectsWithHash = %v, %v; want 00aa 00bb", ids, err)
	}
	if lh, ok, err := s.LowerHashOf(1, 2); err != nil || !ok || lh.Sum != other || lh.Ctime != 5 {
		t.Errorf("LowerHashOf = %+v %v %v", lh, ok, err)
	}
	if r, ok, err := s.SnapshotRootOf(snap); err != nil || !ok || r.Root != other || r.Files != 3 || !r.Computed.Equal(root.Computed) {
		t.Errorf("SnapshotRootOf = %+v %v %v", r, ok, err)
	}
	if _, ok, _ := s.SnapshotRootOf(Snapshot{ID: "deadbeef", Ts: snap.Ts}); ok {
		t.Errorf("a root was written for a snapshot that does not exist")
	}
	stale := snap
	stale.Ts++
	if _, ok, _ := s.SnapshotRootOf(stale); ok {
		t.Errorf("a root recorded at Ts %d is taken for a snapshot of the same id at %d", snap.Ts, stale.Ts)
	}
	if err := s.DropObjectHashes([]string{"00aa"}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := s.ObjectsWithHash(sum); !slices.Equal(ids, []string{"00bb"}) {
		t.Errorf("after dropping 00aa: ObjectsWithHash = %v", ids)
	}
	if hashed, err := s.HashedObjects(); err != nil || !slices.Equal(hashed, []string{"00bb", "00cc"}) {
		t.Errorf("HashedObjects = %v, %v", hashed, err)
	}
	if err := s.DeleteSnapshot(snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.SnapshotRootOf(snap); ok {
		t.Errorf("the root outlived its snapshot")
	}
}
