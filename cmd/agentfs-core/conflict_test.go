package main

import (
	"bufio"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoConflictMarkers: no file of the repository keeps the markers of
// an unresolved merge (a merge once left two in the README).
func TestNoConflictMarkers(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".md", ".sh", ".txt", ".conf", ".mod", ".yml", ".yaml", "":
		default:
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for line := 1; sc.Scan(); line++ {
			if s := sc.Text(); strings.HasPrefix(s, "<<<<<<< ") || strings.HasPrefix(s, ">>>>>>> ") {
				t.Errorf("%s:%d: an unresolved merge: %q", p, line, s)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}
