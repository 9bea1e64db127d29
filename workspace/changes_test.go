package workspace

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentfs/agentfs/ctl"
)

// TestDiffPatchLimit: a patch asked for with MaxBytes is cut there, at
// the start of a character, and says so; a larger one than the pipe
// to diff(1) holds is cut too (diff ended early), without an error;
// one within the limit is whole.
func TestDiffPatchLimit(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	writeFile(t, w.View(), "a.txt", strings.Repeat("é", 100)+"\n")
	full, err := w.Diff(self, ctl.DiffArgs{Patch: true})
	if err != nil || full.PatchTruncated {
		t.Fatalf("Diff with no limit = %+v, %v", full, err)
	}
	// Every cut inside the é's: an odd number of bytes into them.
	start := strings.Index(full.Patch, "+é") + 1
	for _, limit := range []int{start + 1, start + 2, start + 51} {
		rep, err := w.Diff(self, ctl.DiffArgs{Patch: true, MaxBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.PatchTruncated || len(rep.Patch) > limit || len(rep.Patch) < limit-1 || !strings.HasPrefix(full.Patch, rep.Patch) || !utf8.ValidString(rep.Patch) {
			t.Errorf("limit %d: %d bytes, truncated %v, valid %v; want a prefix of the patch of %d or %d bytes, cut at a character",
				limit, len(rep.Patch), rep.PatchTruncated, utf8.ValidString(rep.Patch), limit-1, limit)
		}
	}
	if rep, err := w.Diff(self, ctl.DiffArgs{Patch: true, MaxBytes: len(full.Patch)}); err != nil || rep.PatchTruncated || rep.Patch != full.Patch {
		t.Errorf("limit the patch's size: truncated %v, same %v, %v", rep.PatchTruncated, rep.Patch == full.Patch, err)
	}

	var big strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&big, "line %d\n", i)
	}
	writeFile(t, w.View(), "b.txt", big.String())
	rep, err := w.Diff(self, ctl.DiffArgs{Patch: true, MaxBytes: 1000})
	if err != nil || !rep.PatchTruncated || len(rep.Patch) != 1000 || len(rep.Changes) != 2 {
		t.Errorf("a 200 KB patch cut at 1000 bytes: %d bytes, truncated %v, %d changes, %v", len(rep.Patch), rep.PatchTruncated, len(rep.Changes), err)
	}
}
