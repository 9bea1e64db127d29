package contenthash

import (
	"crypto/sha256"
	"testing"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
)

// TestPendingObjectHash: an object with no hash record that is pending
// has its key's hash (Config.PendingSum), with its size and mtime, for
// KnownObject (push) and the worker alike, and nothing is read; once it
// is no longer pending, it is unknown again (hashed from its bytes).
func TestPendingObjectHash(t *testing.T) {
	meta, err := branch.Open(branch.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = meta.Close() }()
	objs, err := backstore.Open(backstore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = objs.Close() }()
	sum := Digest(sha256.Sum256([]byte("the remote's bytes")))
	ids, err := objs.Defer([]backstore.Deferred{{Key: "k", Size: 18, Mode: 0o644, Atime: 5, Mtime: 7}})
	if err != nil {
		t.Fatal(err)
	}
	id := ids[0]
	pending := true
	h := New(Config{Meta: meta, Objects: objs, ReadOnly: true, PendingSum: func(got string) (Digest, bool) {
		if key, ok := objs.PendingKey(got); !ok || key != "k" || !pending {
			return Digest{}, false
		}
		return sum, true
	}})
	got, ok, err := h.KnownObject(id)
	if err != nil || !ok || got != sum {
		t.Errorf("KnownObject of a pending object = %x, %v, %v; want its key's hash", got, ok, err)
	}
	oh, ok, err := h.objectHash(id)
	if err != nil || !ok || oh.Size != 18 || oh.Mtime != 7 {
		t.Errorf("objectHash of a pending object = %+v, %v, %v; want size 18, mtime 7", oh, ok, err)
	}
	if !objs.Deferred(id) {
		t.Errorf("asking its hash made the deferred object")
	}
	pending = false
	if _, ok, err := h.KnownObject(id); err != nil || ok {
		t.Errorf("KnownObject once no longer pending = %v, %v; want unknown", ok, err)
	}
	// Without PendingSum, a pending object's hash is unknown.
	if _, ok, err := New(Config{Meta: meta, Objects: objs, ReadOnly: true}).KnownObject(id); err != nil || ok {
		t.Errorf("KnownObject without PendingSum = %v, %v; want unknown", ok, err)
	}
}
