package workspace

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/remote"
)

// TestConflictsSkipAbsentDirs: the conflict check of a pull (and of
// mount --from) looks at a project path only when the project holds
// its parent as a directory: under an absent directory, or under a
// file, a path is absent without a look, so a snapshot over a project
// that holds none of its directories costs one look per top-level
// name. What it finds is what a look at every path finds.
func TestConflictsSkipAbsentDirs(t *testing.T) {
	w := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	if err := os.MkdirAll(filepath.Join(w.opts.Lower, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.opts.Lower, "d", "f"), []byte("f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fileBase := &remote.Base{Type: "file", Size: 2}
	var changes []remote.Change
	for _, c := range []struct {
		path string
		base *remote.Base
	}{
		{"gone", nil}, {"gone/x", nil}, {"gone/sub", nil}, {"gone/sub/y", nil}, {"gone/z", fileBase},
		{"a.txt/x", nil}, {"a.txt/y", fileBase},
		{"d", &remote.Base{Type: "dir"}}, {"d/f", fileBase}, {"d/new", nil},
	} {
		changes = append(changes, remote.Change{Path: c.path, Kind: "created", Type: "file", Base: c.base})
	}
	var looked []string
	projectLstat = func(p string, st *unix.Stat_t) error {
		looked = append(looked, p)
		return unix.Lstat(p, st)
	}
	t.Cleanup(func() { projectLstat = unix.Lstat })
	im := &importer{}
	bases, err := im.conflicts(w.view, &remote.SnapshotDoc{Changes: changes})
	if err != nil {
		t.Fatal(err)
	}
	// gone/z and a.txt/y had a file on the other machine and none
	// here; d/f differs by content (no object given).
	if got, want := slices.Sorted(maps.Keys(bases)), []string{"a.txt/y", "d/f", "gone/z"}; !slices.Equal(got, want) {
		t.Errorf("conflicts = %v, want %v", got, want)
	}
	// Looked at: gone, a.txt/x (ENOTDIR: a.txt is no directory), d and
	// what d holds; nothing else under gone or a.txt.
	for i, p := range looked {
		looked[i] = filepath.Base(filepath.Dir(p)) + "/" + filepath.Base(p)
	}
	if want := 5; len(looked) != want {
		t.Errorf("the check looked at %d project paths (%v), want %d: gone, a.txt/x, d, d/f, d/new", len(looked), looked, want)
	}
}
