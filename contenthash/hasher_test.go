package contenthash

import (
	"fmt"
	"testing"

	"github.com/agentfs/agentfs/branch"
)

// TestObjectMemoBounded: the object hashes a Hasher keeps in memory
// are bounded, however many objects it hashes.
func TestObjectMemoBounded(t *testing.T) {
	h := New(Config{ReadOnly: true})
	for i := range 3 {
		hs := branch.Hashes{Objects: map[string]branch.ObjectHash{}}
		for j := range maxObjectMemo {
			hs.Objects[fmt.Sprintf("%d-%d", i, j)] = branch.ObjectHash{Size: int64(j)}
		}
		if err := h.record(hs); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.objects); n > maxObjectMemo {
		t.Errorf("%d object hashes in memory, want at most %d", n, maxObjectMemo)
	}
}
