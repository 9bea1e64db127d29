package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Tree is a read-only tree: the before-state or the after-state of the
// run. Paths are relative to the project root, '/'-separated ("" is the
// root); errors wrap ENOENT when there is no such file.
// workspace.RefTree is one.
type Tree interface {
	Lstat(p string) (unix.Stat_t, error)
	ReadFile(p string) ([]byte, error)
	Readlink(p string) (string, error)
}

// Input is what to record.
type Input struct {
	// Project is the project's absolute path: the records' paths are
	// below it.
	Project    string
	Command    []string
	ExitStatus int
	// StartCwd is where the command started (absolute).
	StartCwd string
	Uid, Gid uint32
	// Before is the tree before the command ran, After the tree once
	// it had exited.
	Before, After Tree
	// Events are the activity log's entries of the run, in order.
	Events []Event
	// Changed are the paths that differ between Before and After.
	Changed []Change
}

// Change is a path that differs between the two trees: created,
// modified or deleted.
type Change struct {
	Path    string
	Deleted bool
}

// Options tune Write.
type Options struct {
	// Hidden reports whether a project path (relative, '/'-separated)
	// is hidden from the mount (the one filter point of hidden paths):
	// such a path, and every path below it, never appears in a record,
	// neither its file record nor its contents. nil: none is.
	Hidden func(p string) bool
	// Hash returns a hash of the contents of the regular file at p in
	// t, to tell whether they changed between the two trees (nil:
	// SHA256, reading the file). A store that keeps hashes can answer
	// from them (a workspace.RefTree names its snapshot: Ref).
	Hash func(t Tree, p string) ([]byte, error)
	// BeforeTime, when set, is when the before-state was taken: a
	// before-state changed later (its ctime says so) is not that state
	// (a snapshot reads the project's unchanged files through, and the
	// project changed since); Result.Stale lists such paths.
	BeforeTime time.Time
	// RowGroupBytes bounds the contents buffered in one row group of
	// blobs.parquet (0: DefaultRowGroupBytes). One blob larger than it
	// is a row group of its own.
	RowGroupBytes int64
}

// DefaultRowGroupBytes is the default bound of a row group's contents.
const DefaultRowGroupBytes = 64 << 20

// SHA256 is the default Options.Hash: the SHA-256 of the file's
// contents.
func SHA256(t Tree, p string) ([]byte, error) {
	b, err := t.ReadFile(p)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// Result says what Write wrote.
type Result struct {
	Files     int   // file records
	Blobs     int   // rows of blobs.parquet
	BlobBytes int64 // their contents, before compression
	// Repos are the Git repositories recorded.
	Repos int
	// Stale are the paths (absolute) whose before-state changed after
	// Options.BeforeTime.
	Stale []string
}

// ErrTarget is the error of a bundle directory that cannot be used.
var ErrTarget = errors.New("the record directory cannot be used")

// CheckTarget checks that dir can take a bundle: it does not exist, or
// is an empty directory.
func CheckTarget(dir string) error {
	st, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("the record directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s exists and is not a directory: give a path that does not exist, or an empty directory", ErrTarget, dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("the record directory %s: %w", dir, err)
	}
	defer f.Close()
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("%w: %s is not empty: give a path that does not exist, or an empty directory (a record is never written over another)", ErrTarget, dir)
	}
	return nil
}

// blobRef is a content to capture: its key, and where to read it.
type blobRef struct {
	key  string
	tree Tree
	path string
}

// Write writes the bundle of in to dir (which must not exist, or be an
// empty directory): blobs.parquet when any content is captured, then
// manifest.json.
func Write(dir string, in Input, o Options) (Result, error) {
	if err := CheckTarget(dir); err != nil {
		return Result{}, err
	}
	if o.Hash == nil {
		o.Hash = SHA256
	}
	if o.RowGroupBytes <= 0 {
		o.RowGroupBytes = DefaultRowGroupBytes
	}
	m, blobs, stale, err := build(in, o)
	if err != nil {
		return Result{}, err
	}
	_, statErr := os.Lstat(dir)
	made := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, fmt.Errorf("making the record directory: %w", err)
	}
	res := Result{Files: len(m.Files), Blobs: len(blobs), Repos: len(m.GitRepositories), Stale: stale}
	res.BlobBytes, err = writeBundle(dir, m, blobs, o.RowGroupBytes)
	if err != nil {
		// Nothing half written is left: only what Write made is
		// removed (the directory was new or empty).
		_ = os.Remove(filepath.Join(dir, BlobsName))
		_ = os.Remove(filepath.Join(dir, ManifestName))
		if made {
			_ = os.Remove(dir)
		}
		return res, err
	}
	return res, nil
}

// writeBundle writes blobs.parquet (when there are blobs), then the
// manifest, and returns the bytes of the blobs' contents.
func writeBundle(dir string, m *Manifest, blobs []blobRef, rowGroupBytes int64) (int64, error) {
	var n int64
	if len(blobs) > 0 {
		var err error
		if n, err = writeBlobs(filepath.Join(dir, BlobsName), blobs, rowGroupBytes); err != nil {
			return n, err
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return n, fmt.Errorf("encoding the manifest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), append(b, '\n'), 0o644); err != nil {
		return n, fmt.Errorf("writing the manifest: %w", err)
	}
	return n, nil
}

// build makes the manifest and the list of contents to capture, and
// lists the before-states changed after o.BeforeTime.
func build(in Input, o Options) (m *Manifest, blobs []blobRef, stale []string, err error) {
	seen := observe(in, func(p string) bool { return !inGitDir(p) && !hidden(o.Hidden, p) })
	paths := slices.Sorted(maps.Keys(seen))

	abs := func(p string) string {
		if p == "" {
			return in.Project
		}
		return path.Join(in.Project, p)
	}
	m = &Manifest{Command: in.Command, ExitStatus: in.ExitStatus, StartCwd: jsonName(in.StartCwd),
		Uid: in.Uid, Gid: in.Gid, GitRepositories: []Repo{}, Files: make([]File, 0, len(paths))}
	if m.Command == nil {
		m.Command = []string{}
	}
	git := newGitScan(in.Before, in.After)
	repos := map[*repo]bool{}
	for _, p := range paths {
		ob := seen[p]
		bst, bok, err := lstat(in.Before, p)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("the before-state of %s: %w", abs(p), err)
		}
		ast, aok, err := lstat(in.After, p)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("the after-state of %s: %w", abs(p), err)
		}
		f := File{Path: jsonName(abs(p))}
		isDir := bok && bst.Mode&unix.S_IFMT == unix.S_IFDIR || aok && ast.Mode&unix.S_IFMT == unix.S_IFDIR
		if ob.ops[lookupOp] {
			delete(ob.ops, lookupOp)
			if isDir {
				ob.ops[OpDirectory] = true
			} else {
				ob.ops[OpExistence] = true
			}
		}
		f.Operations = ob.ops.list()
		var before *unix.Stat_t
		if bok {
			before = &bst
			f.Before = stateOf(&bst)
			if !o.BeforeTime.IsZero() && time.Unix(bst.Ctim.Unix()).After(o.BeforeTime) {
				stale = append(stale, abs(p))
			}
		}
		if aok {
			f.After = stateOf(&ast)
		} else if bok || ob.ops[OpDelete] {
			f.After = State{Tombstone: true}
		}
		var clean bool // Git gives the before contents back
		if r := git.repoOf(p); r != nil {
			f.Git = r.classify(git, p, before, isDir, abs)
			clean = f.Git.Tracked && !f.Git.Dirty
			if !repos[r] {
				repos[r] = true
				m.GitRepositories = append(m.GitRepositories, Repo{Root: jsonName(abs(r.root)), Head: r.head})
			}
		}
		changed, err := contentsChanged(in, o, p, before, aok, &ast, ob.changed)
		if err != nil {
			return nil, nil, nil, err
		}
		needed := ob.ops[OpRead] || ob.ops[OpWrite] || ob.ops[OpDelete] || changed
		if bok && bst.Mode&unix.S_IFMT == unix.S_IFREG && needed && !clean {
			f.Before.Blob = BlobKey("before", abs(p))
			blobs = append(blobs, blobRef{key: f.Before.Blob, tree: in.Before, path: p})
		}
		if aok && ast.Mode&unix.S_IFMT == unix.S_IFREG && (ob.ops[OpWrite] || changed || needed && !clean) {
			f.After.Blob = BlobKey("after", abs(p))
			blobs = append(blobs, blobRef{key: f.After.Blob, tree: in.After, path: p})
		}
		m.Files = append(m.Files, f)
	}
	slices.SortFunc(m.GitRepositories, func(a, b Repo) int { return strings.Compare(a.Root, b.Root) })
	return m, blobs, stale, nil
}

// hidden reports whether path p or a directory above it is hidden by
// filter (nil: none is).
func hidden(filter func(string) bool, p string) bool {
	if filter == nil {
		return false
	}
	for ; p != "." && p != ""; p = path.Dir(p) {
		if filter(p) {
			return true
		}
	}
	return false
}

// contentsChanged reports whether the regular file p has other
// contents after than before (a file that is regular on one side only
// changed when the diff says so).
func contentsChanged(in Input, o Options, p string, before *unix.Stat_t, aok bool, after *unix.Stat_t, diffSays bool) (bool, error) {
	if before == nil || !aok || before.Mode&unix.S_IFMT != unix.S_IFREG || after.Mode&unix.S_IFMT != unix.S_IFREG {
		return diffSays, nil
	}
	if before.Size != after.Size {
		return true, nil
	}
	hb, err := o.Hash(in.Before, p)
	if err != nil {
		return false, fmt.Errorf("hashing the before-state of %s: %w", p, err)
	}
	ha, err := o.Hash(in.After, p)
	if err != nil {
		return false, fmt.Errorf("hashing the after-state of %s: %w", p, err)
	}
	return !bytes.Equal(hb, ha), nil
}

// lstat returns p's attributes in t, and whether it exists there.
func lstat(t Tree, p string) (unix.Stat_t, bool, error) {
	st, err := t.Lstat(p)
	switch {
	case err == nil:
		return st, true, nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, os.ErrNotExist):
		return st, false, nil
	}
	return st, false, err
}
