package hostpath

import (
	"os"
	"path/filepath"
	"testing"
)

func TestInsideAny(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lower := filepath.Join(root, "lower")
	if err := os.Mkdir(lower, 0755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lower, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		lower:                                   true,
		filepath.Join(lower, "a", "b"):          true,
		filepath.Join(root, "link", "new", "x"): true, // through a symlink, not existing yet
		filepath.Join(root, "lowerx"):           false,
		root:                                    false,
	} {
		if got := InsideAny(p, []string{lower}); got != want {
			t.Errorf("InsideAny(%s, [%s]) = %v, want %v", p, lower, got, want)
		}
	}
}
