package main

import (
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClosestSubtree(t *testing.T) {
	counts := map[string]int{"a": 3000, "a/b": 1495, "c": 1510, "d/e": 1510, "f": 10}
	if dir, n := closestSubtree(counts, 1500); dir != "a/b" || n != 1495 {
		t.Errorf("closestSubtree = %s, %d; want a/b, 1495", dir, n)
	}
	// Ties: the shallower, then the first by name.
	counts = map[string]int{"x/y": 1510, "q": 1490, "c": 1510}
	if dir, _ := closestSubtree(counts, 1500); dir != "c" {
		t.Errorf("closestSubtree on a tie = %s, want c", dir)
	}
	if dir, _ := closestSubtree(nil, 1500); dir != "" {
		t.Errorf("closestSubtree(nil) = %q, want none", dir)
	}
}

func TestCountFiles(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"top.go", "a/1", "a/2", "a/b/3", ".git/objects/x", "c/4"} {
		path := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	counts, total, err := countFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if total != 5 {
		t.Errorf("total = %d, want 5 (.git left out)", total)
	}
	want := map[string]int{"a": 3, "a/b": 1, "c": 1}
	if len(counts) != len(want) {
		t.Errorf("counts = %v, want %v", counts, want)
	}
	for dir, n := range want {
		if counts[dir] != n {
			t.Errorf("counts[%s] = %d, want %d", dir, counts[dir], n)
		}
	}
}

// TestVetModule checks that the generated module is valid Go (go vet
// itself runs in the benchmark).
func TestVetModule(t *testing.T) {
	tr := &tree{dir: t.TempDir()}
	if err := writeVetModule(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(tr.lower(), vetModDir)
	n := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		n++
		_, err = parser.ParseFile(token.NewFileSet(), path, nil, parser.AllErrors)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := vetPackages*vetFiles + 1; n != want {
		t.Errorf("%d Go files, want %d", n, want)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(mod), "module "+vetModule) {
		t.Errorf("go.mod = %q, %v", mod, err)
	}
}

func TestWithEnv(t *testing.T) {
	got := withEnv([]string{"A=1", "HOME=/root", "B=2"}, "HOME=/w/home", "C=3")
	if want := "A=1 B=2 C=3 HOME=/w/home"; strings.Join(got, " ") != want {
		t.Errorf("withEnv = %v, want %s", got, want)
	}
}

func TestChildEnvStaysInWorkdir(t *testing.T) {
	env := childEnv("/w")
	for _, key := range []string{"HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "GOPATH", "GOCACHE", "AGENTFS_PRIVATE_DIR", "AGENTFS_RUNTIME_DIR"} {
		found := false
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, key+"="); ok {
				found = true
				if !strings.HasPrefix(v, "/w/") {
					t.Errorf("%s=%s is outside the work directory", key, v)
				}
			}
		}
		if !found {
			t.Errorf("%s is not set", key)
		}
	}
}

func TestLineCounterAndTail(t *testing.T) {
	write := func(w io.Writer, s string) {
		t.Helper()
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want %d, nil", s, n, err, len(s))
		}
	}
	var c lineCounter
	write(&c, "a\nb")
	write(&c, "\nc\n")
	if c.n != 3 {
		t.Errorf("lines = %d, want 3", c.n)
	}
	tb := &tailBuffer{max: 4}
	write(tb, "abc")
	write(tb, "defg")
	if got := tb.String(); got != "defg" {
		t.Errorf("tail = %q, want defg", got)
	}
}
