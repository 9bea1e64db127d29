package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	iofs "io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// tree is the benchmark's data, built once in WORKDIR/setup:
//
//	lower/src/          the Go distribution's src, a git repository with one commit
//	lower/big/big.bin   the large file (pseudo-random bytes)
//	lower/vetmod/       a small Go module without dependencies
//	native/             a copy of lower/ for the native runs
//	src.tar             a tar of GOROOT/src, for the untar workload
//	gocache-seed/       a GOCACHE holding the standard library's vet results
//	stamp.json          what the tree was built from; a mismatch rebuilds it
type tree struct {
	srcOnce  sync.Once
	srcPaths []string
	srcErr   error

	Format    int    `json:"format"`
	GoVersion string `json:"go_version"`
	GoRoot    string `json:"goroot"`
	BigSize   int64  `json:"big_size"`
	// TreeFiles counts the files of src (without .git).
	TreeFiles int `json:"tree_files"`
	// RmSubtree (relative to the tree's root) is the directory rm -rf
	// removes; RmFiles counts its files.
	RmSubtree string `json:"rm_subtree"`
	RmFiles   int    `json:"rm_files"`

	dir string // WORKDIR/setup
}

// treeFormat changes whenever the layout above does, so that an old
// tree is rebuilt.
const treeFormat = 1

// Paths inside the tree (lower/ and native/ alike).
const (
	srcDir    = "src"
	bigFile   = "big/big.bin"
	vetModDir = "vetmod"
)

// rmTargetFiles is the size of the subtree rm -rf removes.
const rmTargetFiles = 1500

func (t *tree) lower() string       { return filepath.Join(t.dir, "lower") }
func (t *tree) native() string      { return filepath.Join(t.dir, "native") }
func (t *tree) tarPath() string     { return filepath.Join(t.dir, "src.tar") }
func (t *tree) gocacheSeed() string { return filepath.Join(t.dir, "gocache-seed") }
func (t *tree) stampPath() string   { return filepath.Join(t.dir, "stamp.json") }

// prepareTree reuses the tree in WORKDIR/setup when it was built from
// the same Go and with the same big file size, and builds it otherwise.
func (b *bench) prepareTree(ctx context.Context) (*tree, error) {
	goroot, err := output(ctx, "", b.env, "go", "env", "GOROOT")
	if err != nil {
		return nil, err
	}
	want := &tree{Format: treeFormat, GoVersion: goVersion(), GoRoot: strings.TrimSpace(goroot), BigSize: b.cfg.bigSize, dir: filepath.Join(b.cfg.workdir, "setup")}
	if old, err := readStamp(want.stampPath()); err == nil && old.Format == want.Format && old.GoVersion == want.GoVersion && old.GoRoot == want.GoRoot && old.BigSize == want.BigSize {
		old.dir = want.dir
		b.logf("reusing the tree in %s (%d files; delete it to rebuild)", want.dir, old.TreeFiles)
		return old, nil
	}
	t := want
	b.logf("building the tree in %s (once; later runs reuse it)", t.dir)
	if err := os.RemoveAll(t.dir); err != nil {
		return nil, err
	}
	steps := []struct {
		what string
		do   func(context.Context, *tree) error
	}{
		{"copying " + filepath.Join(t.GoRoot, "src"), b.copyGoSrc},
		{"making it a git repository", b.commitSrc},
		{"writing " + humanBytes(t.BigSize) + " " + bigFile, b.writeBigFile},
		{"writing the go vet module", writeVetModule},
		{"choosing the rm -rf subtree", chooseRmSubtree},
		{"making " + filepath.Base(t.tarPath()), b.makeTar},
		{"copying the tree for native", b.copyNative},
		{"warming a GOCACHE with the standard library", b.seedGoCache},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b.logf("  %s", s.what)
		if err := s.do(ctx, t); err != nil {
			return nil, fmt.Errorf("building the tree: %s: %w", s.what, err)
		}
	}
	unix.Sync()
	data, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return nil, err
	}
	return t, os.WriteFile(t.stampPath(), data, 0o644)
}

func readStamp(path string) (*tree, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t tree
	return &t, json.Unmarshal(data, &t)
}

func (b *bench) copyGoSrc(ctx context.Context, t *tree) error {
	if err := os.MkdirAll(t.lower(), 0o755); err != nil {
		return err
	}
	return runQuiet(ctx, "", b.env, "cp", "-a", filepath.Join(t.GoRoot, "src"), filepath.Join(t.lower(), srcDir))
}

func (b *bench) commitSrc(ctx context.Context, t *tree) error {
	dir := filepath.Join(t.lower(), srcDir)
	for _, args := range [][]string{
		{"-c", "init.defaultBranch=main", "init", "-q"},
		{"add", "-A"},
		{"commit", "-q", "-m", "Go " + t.GoVersion + " src"},
		// Packed, as a clone is (and in the foreground: childEnv turns
		// automatic gc off, so that nothing changes the tree later).
		{"gc", "-q"},
	} {
		if err := runQuiet(ctx, dir, b.env, "git", args...); err != nil {
			return err
		}
	}
	return nil
}

// writeBigFile writes pseudo-random bytes, so that no layer can compress
// or deduplicate them.
func (b *bench) writeBigFile(ctx context.Context, t *tree) error {
	path := filepath.Join(t.lower(), bigFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{'a', 'g', 'e', 'n', 't', 'f', 's'})
	buf := make([]byte, ioChunk)
	for written := int64(0); written < t.BigSize; written += int64(len(buf)) {
		if err := ctx.Err(); err != nil {
			f.Close()
			return err
		}
		_, _ = rng.Read(buf) // ChaCha8's Read always fills buf
		n := min(int64(len(buf)), t.BigSize-written)
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// chooseRmSubtree picks the directory of src whose file count is closest
// to rmTargetFiles.
func chooseRmSubtree(_ context.Context, t *tree) error {
	counts, total, err := countFiles(filepath.Join(t.lower(), srcDir))
	if err != nil {
		return err
	}
	dir, n := closestSubtree(counts, rmTargetFiles)
	if dir == "" {
		return fmt.Errorf("no directory in %s", srcDir)
	}
	t.TreeFiles, t.RmSubtree, t.RmFiles = total, filepath.Join(srcDir, dir), n
	return nil
}

// countFiles counts the non-directories below each directory of root
// (recursively; root itself and .git left out) and in all.
func countFiles(root string) (map[string]int, int, error) {
	counts := map[string]int{}
	total := 0
	err := filepath.WalkDir(root, func(path string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		total++
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		for dir := filepath.Dir(rel); dir != "."; dir = filepath.Dir(dir) {
			counts[dir]++
		}
		return nil
	})
	return counts, total, err
}

// closestSubtree returns the directory whose count is closest to target;
// on a tie, the shallower, then the alphabetically first.
func closestSubtree(counts map[string]int, target int) (string, int) {
	best, bestN := "", 0
	for dir, n := range counts {
		if best == "" || closerSubtree(dir, n, best, bestN, target) {
			best, bestN = dir, n
		}
	}
	return best, bestN
}

func closerSubtree(dir string, n int, best string, bestN int, target int) bool {
	d, bd := abs(n-target), abs(bestN-target)
	if d != bd {
		return d < bd
	}
	depth, bestDepth := strings.Count(dir, "/"), strings.Count(best, "/")
	if depth != bestDepth {
		return depth < bestDepth
	}
	return dir < best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func (b *bench) makeTar(ctx context.Context, t *tree) error {
	return runQuiet(ctx, "", b.env, "tar", "-cf", t.tarPath(), "-C", t.GoRoot, "src")
}

func (b *bench) copyNative(ctx context.Context, t *tree) error {
	return runQuiet(ctx, "", b.env, "cp", "-a", "--reflink=auto", t.lower(), t.native())
}

// seedGoCache vets a copy of the module at another path, so that the
// cache holds the standard library's results but none of the module's
// (the go command keys a module package's results by its directory).
func (b *bench) seedGoCache(ctx context.Context, t *tree) (err error) {
	scratch := filepath.Join(t.dir, "vet-seed")
	if err := runQuiet(ctx, "", b.env, "cp", "-a", filepath.Join(t.lower(), vetModDir), scratch); err != nil {
		return err
	}
	defer func() { joinCleanup(&err, os.RemoveAll(scratch)) }()
	env := withEnv(b.env, "GOCACHE="+t.gocacheSeed())
	return runQuiet(ctx, scratch, env, "go", "vet", "./...")
}

// runQuiet runs a command and fails with what it printed.
func runQuiet(ctx context.Context, dir string, env []string, name string, args ...string) error {
	_, err := output(ctx, dir, env, name, args...)
	return err
}

// output runs a command and returns its standard output.
func output(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	var out strings.Builder
	err := runCommand(ctx, dir, env, &out, name, args...)
	return out.String(), err
}

// runCommand runs name with args in dir, its standard output to stdout;
// a failure names the command and quotes the end of its error output.
func runCommand(ctx context.Context, dir string, env []string, stdout io.Writer, name string, args ...string) error {
	cmd := commandContext(ctx, dir, env, name, args...)
	cmd.Stdout = stdout
	stderr := &tailBuffer{max: 2048}
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return commandError(cmd.Args, err, stderr.String())
	}
	return nil
}

// srcFiles returns the paths (from the tree's root) of the files of src,
// .git left out, listed once from the lower tree. A listing that fails
// fails: a shorter list would make a smaller workload.
func (t *tree) srcFiles() ([]string, error) {
	t.srcOnce.Do(func() {
		root := t.lower()
		err := filepath.WalkDir(filepath.Join(root, srcDir), func(p string, d iofs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == ".git" {
				return filepath.SkipDir
			}
			if !d.IsDir() {
				rel, _ := filepath.Rel(root, p)
				t.srcPaths = append(t.srcPaths, rel)
			}
			return nil
		})
		if err != nil {
			t.srcPaths, t.srcErr = nil, fmt.Errorf("listing the files of src: %w", err)
		}
	})
	return t.srcPaths, t.srcErr
}
