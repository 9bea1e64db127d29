package record

import (
	"bytes"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/autosnap"
)

// # Git classification
//
// A repository is a directory of the project that holds a .git
// directory (a .git file, as a linked worktree or a submodule has, is
// not followed). Each path is classified in the nearest repository
// above it, as the before-tree shows it (the after-tree when the
// repository did not exist before: the command made it): HEAD, the
// index, the ignore rules. A path is tracked when the index has it (a
// directory when the index has a path below it); dirty when it is
// tracked and its before-state is not what the index holds (missing,
// another type, other contents, another executable bit); ignored when
// it is untracked and the repository's ignore rules (.gitignore at any
// depth, .git/info/exclude, the user's excludes file) ignore it.

// repo is one repository, read from one tree.
type repo struct {
	root   string // relative to the project ("" for its root)
	head   string
	tree   Tree
	index  map[string]*index.Entry // by path relative to root
	dirs   map[string]bool         // the directories of the index's paths
	ignore *autosnap.Ignore
}

// gitScan finds and reads the repositories of the paths asked about.
type gitScan struct {
	before, after Tree
	// found caches the repository of each directory asked about (nil:
	// none).
	found map[string]*repo
	repos []*repo // in the order found
}

func newGitScan(before, after Tree) *gitScan {
	return &gitScan{before: before, after: after, found: map[string]*repo{}}
}

// repoOf returns the repository of relative path p (a repository's
// root belongs to it), or nil.
func (g *gitScan) repoOf(p string) *repo {
	return g.repoOfDir(p)
}

func (g *gitScan) repoOfDir(d string) *repo {
	if r, ok := g.found[d]; ok {
		return r
	}
	var r *repo
	for _, t := range []Tree{g.before, g.after} {
		if st, err := t.Lstat(path.Join(d, ".git")); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			r = readRepo(t, d)
			g.repos = append(g.repos, r)
			break
		}
	}
	if r == nil && d != "" {
		parent := path.Dir(d)
		if parent == "." {
			parent = ""
		}
		r = g.repoOfDir(parent)
	}
	g.found[d] = r
	return r
}

// readRepo reads the repository at root of tree t: what cannot be read
// (no commit yet, no index) is left empty.
func readRepo(t Tree, root string) *repo {
	r := &repo{root: root, tree: t, index: map[string]*index.Entry{}, dirs: map[string]bool{}}
	read := func(p string) ([]byte, error) { return t.ReadFile(p) }
	r.head = autosnap.GitHead(read, root)
	if b, err := t.ReadFile(path.Join(root, ".git", "index")); err == nil {
		var idx index.Index
		if index.NewDecoder(bytes.NewReader(b)).Decode(&idx) == nil {
			for _, e := range idx.Entries {
				r.index[e.Name] = e
				for d := path.Dir(e.Name); d != "."; d = path.Dir(d) {
					r.dirs[d] = true
				}
			}
		}
	}
	// The ignore rules read the repository's files from the same tree,
	// with paths relative to the repository.
	r.ignore, _ = autosnap.NewIgnore(autosnap.IgnoreOptions{Git: true, Read: func(_, p string) ([]byte, error) {
		return t.ReadFile(path.Join(root, p))
	}}) // with no configuration patterns, it cannot fail
	return r
}

// relative returns p relative to the repository's root ("." for the
// root).
func (r *repo) relative(p string) string {
	if r.root == "" {
		if p == "" {
			return "."
		}
		return p
	}
	if p == r.root {
		return "."
	}
	return strings.TrimPrefix(p, r.root+"/")
}

// classify returns the classification of p (relative to the project),
// whose before-state in the scan's before-tree is before (nil: it did
// not exist) and whose type, for the ignore rules, is isDir.
func (r *repo) classify(g *gitScan, p string, before *unix.Stat_t, isDir bool, abs func(string) string) *Git {
	rel := r.relative(p)
	c := &Git{InRepo: true, Root: jsonName(abs(r.root)), Head: r.head, RelativePath: jsonName(rel)}
	switch {
	case rel == ".":
		c.Tracked = len(r.index) > 0
	case isDir:
		c.Tracked = r.dirs[rel]
	default:
		if e := r.index[rel]; e != nil {
			c.Tracked = true
			c.Dirty = !matchesIndex(g.before, p, before, e)
		}
	}
	if !c.Tracked && rel != "." {
		c.Ignored = r.ignore.Ignored("", rel, isDir)
	}
	return c
}

// matchesIndex reports whether the file at p in tree t, with attributes
// st (nil: missing), is what index entry e holds.
func matchesIndex(t Tree, p string, st *unix.Stat_t, e *index.Entry) bool {
	if st == nil {
		return false
	}
	var content []byte
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		want := filemode.Regular
		if st.Mode&0o111 != 0 {
			want = filemode.Executable
		}
		if e.Mode != want {
			return false
		}
		b, err := t.ReadFile(p)
		if err != nil {
			return false
		}
		content = b
	case unix.S_IFLNK:
		if e.Mode != filemode.Symlink {
			return false
		}
		target, err := t.Readlink(p)
		if err != nil {
			return false
		}
		content = []byte(target)
	default:
		return false
	}
	return plumbing.ComputeHash(plumbing.BlobObject, content) == e.Hash
}
