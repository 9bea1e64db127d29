package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// Opener is a Tree that can stream a regular file: a record hashes
// files through it (Options.Hash's default, Git's dirtiness) rather
// than holding them whole. workspace.RefTree is one.
type Opener interface {
	Open(p string) (io.ReadCloser, error)
}

// open returns a reader of the regular file at p in t: streamed when t
// is an Opener, read whole otherwise.
func open(t Tree, p string) (io.ReadCloser, error) {
	if o, ok := t.(Opener); ok {
		return o.Open(p)
	}
	b, err := t.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
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
	// ReadEvents, when set, gives the entries instead of Events, one
	// at a time (a log read as it goes, never held whole): it calls fn
	// with each, and its error (fn's or its own) fails Write before
	// anything is written.
	ReadEvents func(fn func(Event) error) error
	// Changed are the paths that differ between Before and After; a
	// path not listed is the same in both (its contents are not
	// compared).
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
	// MaxBlobBytes bounds the size of one blob (0:
	// DefaultMaxBlobBytes; at most MaxBlobLimit): a state whose file
	// is larger gets no blob (the format's blob is optional), and
	// Result.TooLarge names it.
	MaxBlobBytes int64
	// Done, when it is closed, stops Write (an interrupt): it fails
	// with ErrInterrupted, leaving nothing of itself. nil: never.
	Done <-chan struct{}
}

// ErrInterrupted is the error of a Write that Options.Done stopped.
var ErrInterrupted = errors.New("the record was interrupted: nothing of it was written")

// interrupted returns ErrInterrupted once done is closed.
func interrupted(done <-chan struct{}) error {
	select {
	case <-done:
		return ErrInterrupted
	default:
		return nil
	}
}

// DefaultRowGroupBytes is the default bound of a row group's contents.
const DefaultRowGroupBytes = 64 << 20

// A blob is one Parquet value, held whole in memory while it is written
// (parquet-go writes a value whole, into one page) and stored whole in
// one page, whose header gives its sizes as 32-bit signed integers: a
// file of 2 GiB or more cannot be a blob at all.
const (
	// MaxBlobLimit is the largest blob a record writes: a page of
	// one value, with room for its length and the page's header, under
	// 2 GiB.
	MaxBlobLimit = 1<<31 - 1<<20
	// DefaultMaxBlobBytes is the default bound of one blob.
	DefaultMaxBlobBytes = 1 << 30
)

// SHA256 is the default Options.Hash: the SHA-256 of the file's
// contents.
// The file is streamed when t is an Opener.
func SHA256(t Tree, p string) ([]byte, error) {
	f, err := open(t, p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // only read
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
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
	// TooLarge are the keys of the blobs left out, sorted: files larger
	// than Options.MaxBlobBytes, whose states have no blob.
	TooLarge []string
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
	defer func() { _ = f.Close() }() // only read
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
	if o.MaxBlobBytes <= 0 {
		o.MaxBlobBytes = DefaultMaxBlobBytes
	}
	o.MaxBlobBytes = min(o.MaxBlobBytes, MaxBlobLimit)
	m, blobs, res, err := build(in, o)
	if err != nil {
		return Result{}, err
	}
	// made is the topmost directory Write makes ("" when dir exists).
	made := ""
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) || d == filepath.Dir(d) {
			break
		}
		made = d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		unmake(dir, made)
		return Result{}, fmt.Errorf("making the record directory: %w", err)
	}
	res.Files, res.Blobs, res.Repos = len(m.Files), len(blobs), len(m.GitRepositories)
	res.BlobBytes, err = writeBundle(dir, m, blobs, o)
	if err != nil {
		// Nothing half written is left: only what Write made is
		// removed (the directory was new or empty, and so were the
		// directories above it that Write made).
		_ = os.Remove(filepath.Join(dir, BlobsName))
		_ = os.Remove(filepath.Join(dir, ManifestName))
		unmake(dir, made)
		return res, err
	}
	return res, nil
}

// unmake removes the empty directories from dir up to made, which
// Write made ("": none).
func unmake(dir, made string) {
	if made == "" {
		return
	}
	for d := filepath.Clean(dir); len(d) >= len(made); d = filepath.Dir(d) {
		_ = os.Remove(d)
	}
}

// writeBundle writes blobs.parquet (when there are blobs), then the
// manifest, and returns the bytes of the blobs' contents.
func writeBundle(dir string, m *Manifest, blobs []blobRef, o Options) (int64, error) {
	var n int64
	if len(blobs) > 0 {
		var err error
		if n, err = writeBlobs(filepath.Join(dir, BlobsName), blobs, o.RowGroupBytes, o.Done); err != nil {
			return n, err
		}
	}
	if err := interrupted(o.Done); err != nil {
		return n, err
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
// lists the before-states changed after o.BeforeTime (res.Stale) and
// the blobs too large to capture (res.TooLarge).
func build(in Input, o Options) (m *Manifest, blobs []blobRef, res Result, err error) {
	seen, err := observe(in, func(p string) bool { return !inGitDir(p) && !hidden(o.Hidden, p) })
	if err != nil {
		return nil, nil, res, fmt.Errorf("reading the operations: %w", err)
	}
	paths := slices.Sorted(maps.Keys(seen))

	abs := func(p string) string {
		if p == "" {
			return in.Project
		}
		return path.Join(in.Project, p)
	}
	m = &Manifest{ExitStatus: in.ExitStatus, StartCwd: jsonName(in.StartCwd),
		Uid: in.Uid, Gid: in.Gid, GitRepositories: []Repo{}, Files: make([]File, 0, len(paths))}
	// The arguments are names too (files, mostly): as the paths are.
	m.Command = make([]string, len(in.Command))
	for i, a := range in.Command {
		m.Command[i] = jsonName(a)
	}
	git := newGitScan(in.Before, in.After)
	repos := map[*repo]bool{}
	for _, p := range paths {
		if err := interrupted(o.Done); err != nil {
			return nil, nil, res, err
		}
		ob := seen[p]
		bst, bok, err := lstat(in.Before, p)
		if err != nil {
			return nil, nil, res, fmt.Errorf("the before-state of %s: %w", abs(p), err)
		}
		ast, aok, err := lstat(in.After, p)
		if err != nil {
			return nil, nil, res, fmt.Errorf("the after-state of %s: %w", abs(p), err)
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
				res.Stale = append(res.Stale, abs(p))
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
			clean = f.Git.Tracked && !f.Git.Dirty && r.before
			if !repos[r] {
				repos[r] = true
				m.GitRepositories = append(m.GitRepositories, Repo{Root: jsonName(abs(r.root)), Head: r.head})
			}
		}
		changed, err := contentsChanged(in, o, p, before, aok, &ast, ob.changed)
		if err != nil {
			return nil, nil, res, err
		}
		needed := ob.ops[OpRead] || ob.ops[OpWrite] || ob.ops[OpDelete] || changed
		capture := func(s *State, state string, st *unix.Stat_t, t Tree) {
			key := BlobKey(state, abs(p))
			if st.Size > o.MaxBlobBytes {
				res.TooLarge = append(res.TooLarge, key)
				return
			}
			s.Blob = key
			blobs = append(blobs, blobRef{key: key, tree: t, path: p})
		}
		if bok && bst.Mode&unix.S_IFMT == unix.S_IFREG && needed && !clean {
			capture(&f.Before, "before", &bst, in.Before)
		}
		if aok && ast.Mode&unix.S_IFMT == unix.S_IFREG && (ob.ops[OpWrite] || changed || needed && !clean) {
			capture(&f.After, "after", &ast, in.After)
		}
		m.Files = append(m.Files, f)
	}
	slices.SortFunc(m.GitRepositories, func(a, b Repo) int { return strings.Compare(a.Root, b.Root) })
	slices.Sort(res.TooLarge)
	return m, blobs, res, nil
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
// contents after than before: never when the diff does not list it (it
// is the comparison of the two trees: a file the command only read is
// not hashed); when it does, a file regular on both sides changed when
// its size or hash differs (rewritten with the same contents, it did
// not).
func contentsChanged(in Input, o Options, p string, before *unix.Stat_t, aok bool, after *unix.Stat_t, diffSays bool) (bool, error) {
	if !diffSays || before == nil || !aok || before.Mode&unix.S_IFMT != unix.S_IFREG || after.Mode&unix.S_IFMT != unix.S_IFREG {
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
