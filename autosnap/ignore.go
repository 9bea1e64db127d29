package autosnap

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	gitconfig "github.com/go-git/go-git/v5/plumbing/format/config"
)

// # Ignore rules
//
// Ignore decides which paths of a tree are ignored, as git does
// (gitignore(5)), with the patterns parsed and matched by go-git's
// plumbing/format/gitignore (ignore_pattern.go says how a pattern is
// asked about one path). From the lowest priority to the highest:
//
//  1. the configuration's patterns (the user's, then the project's);
//  2. the user's excludes file: core.excludesFile of git's
//     configuration (the system's, the user's, then the repository's
//     .git/config, the last one set winning), by default
//     $XDG_CONFIG_HOME/git/ignore (~/.config/git/ignore);
//  3. the repository's .git/info/exclude;
//  4. the .gitignore files, at any depth: a file's patterns apply to
//     the paths below its directory, and a deeper file's win.
//
// As in git, the last pattern that matches decides, and a path inside
// an ignored directory is ignored whatever the patterns say of it (git
// does not look inside an ignored directory, so nothing can take its
// contents back).
//
// The files of the tree (2's .git/config, 3 and 4) are read through
// Read, per branch, when a path below them is first asked about, and
// read again after Changed says they changed.

// ReadTreeFunc reads the file at path (relative, '/'-separated) of a
// branch's tree; an error means there is none to honour.
type ReadTreeFunc func(branch, path string) ([]byte, error)

// IgnoreOptions say where an Ignore's rules come from.
type IgnoreOptions struct {
	// Patterns are the configuration's, in gitignore syntax.
	Patterns []string
	// Git honours git's own files: .gitignore at any depth,
	// .git/info/exclude and the user's excludes file.
	Git bool
	// Read reads the files of the tree (nil: Git reads none of them).
	Read ReadTreeFunc
	// Env looks up the environment variables that say where git's
	// configuration is (HOME, XDG_CONFIG_HOME, GIT_CONFIG_GLOBAL,
	// GIT_CONFIG_SYSTEM, GIT_CONFIG_NOSYSTEM); nil: os.Getenv.
	Env func(string) string
}

// Ignore decides which paths are ignored (see above). Its methods may
// be called from several goroutines.
type Ignore struct {
	config []rule
	git    bool
	read   ReadTreeFunc
	env    func(string) string
	// userExcludes is the user's core.excludesFile ("" for none),
	// when the repository's configuration sets none.
	userExcludes string

	mu sync.Mutex
	// bases are the patterns of 1 to 3 by branch; dirs the .gitignore
	// patterns by branch and directory ("" for the root).
	bases map[string][]rule
	dirs  map[dirKey][]rule
	// gen counts what Changed and Forget* dropped: what was read
	// meanwhile is not kept, as it may be of the file before.
	gen uint64
}

type dirKey struct{ branch, dir string }

// NewIgnore makes the rules opts describe. A malformed configuration
// pattern is an error that names it.
func NewIgnore(opts IgnoreOptions) (*Ignore, error) {
	ig := &Ignore{git: opts.Git, read: opts.Read, env: opts.Env,
		bases: map[string][]rule{}, dirs: map[dirKey][]rule{}}
	if ig.env == nil {
		ig.env = os.Getenv
	}
	for _, p := range opts.Patterns {
		if err := CheckPattern(p); err != nil {
			return nil, err
		}
		ig.config = append(ig.config, parseRules([]byte(p), nil)...)
	}
	if ig.git {
		ig.userExcludes = ig.userExcludesFile()
	}
	return ig, nil
}

// CheckPattern says what is wrong with a configuration pattern: none
// at all (blank, or a comment), or a glob that cannot match (an
// unclosed [ or a trailing backslash, which go-git's matcher, like
// filepath.Match, refuses).
func CheckPattern(line string) error {
	pats := parseRules([]byte(line), nil)
	if len(pats) == 0 {
		return fmt.Errorf("pattern %q is empty, or a comment", line)
	}
	body := strings.TrimPrefix(strings.TrimRight(line, " "), "!")
	for _, seg := range strings.Split(body, "/") {
		if _, err := filepath.Match(seg, ""); err != nil {
			return fmt.Errorf("pattern %q: malformed (an unclosed [ or a trailing backslash)", line)
		}
	}
	return nil
}

// Len is the number of the configuration's patterns.
func (ig *Ignore) Len() int {
	if ig == nil {
		return 0
	}
	return len(ig.config)
}

// Ignored reports whether path p (relative to the root, '/'-separated)
// of branch's tree is ignored; isDir says whether p is a directory.
func (ig *Ignore) Ignored(branch, p string, isDir bool) bool {
	if ig == nil || p == "" || p == "." {
		return false
	}
	if !ig.git && len(ig.config) == 0 {
		return false
	}
	names := strings.Split(p, "/")
	ps := ig.base(branch)
	for i := 1; i <= len(names); i++ {
		// The path so far, names[:i], under the rules of the
		// directories above it: a directory on the way that is
		// ignored ignores all below it.
		ps = append(ps[:len(ps):len(ps)], ig.dir(branch, names[:i-1])...)
		if decide(ps, names[:i], i < len(names) || isDir) {
			return true
		}
	}
	return false
}

// Changed tells the rules that path p of branch changed: the ignore
// files among them are read again when next needed.
func (ig *Ignore) Changed(branch, p string) {
	if ig == nil || !ig.git {
		return
	}
	switch {
	case p == ".git" || p == ".git/info" || p == ".git/info/exclude" || p == ".git/config":
		ig.mu.Lock()
		ig.gen++
		delete(ig.bases, branch)
		ig.mu.Unlock()
	case path.Base(p) == ".gitignore":
		dir := path.Dir(p)
		if dir == "." {
			dir = ""
		}
		ig.mu.Lock()
		ig.gen++
		delete(ig.dirs, dirKey{branch, dir})
		ig.mu.Unlock()
	}
}

// ForgetBranch drops what was read of branch's tree (a restore
// replaced it, or it was deleted).
func (ig *Ignore) ForgetBranch(branch string) {
	if ig == nil {
		return
	}
	ig.mu.Lock()
	defer ig.mu.Unlock()
	ig.gen++
	delete(ig.bases, branch)
	for k := range ig.dirs {
		if k.branch == branch {
			delete(ig.dirs, k)
		}
	}
}

// ForgetAll drops what was read of every tree (files changed under the
// mount: a restore, an fsck repair).
func (ig *Ignore) ForgetAll() {
	if ig == nil {
		return
	}
	ig.mu.Lock()
	defer ig.mu.Unlock()
	ig.gen++
	clear(ig.bases)
	clear(ig.dirs)
}

// base returns the patterns of 1 to 3 for branch. The files are read
// without ig.mu held: reading the tree may wait for the workspace,
// which may be telling ig of a change at the time.
func (ig *Ignore) base(branch string) []rule {
	ig.mu.Lock()
	ps, ok := ig.bases[branch]
	gen := ig.gen
	ig.mu.Unlock()
	if ok {
		return ps
	}
	ps = ig.config[:len(ig.config):len(ig.config)]
	if ig.git {
		excludes := ig.userExcludes
		if b, err := ig.readTree(branch, ".git/config"); err == nil {
			if f, ok := excludesFileOf(b); ok {
				excludes = ig.expandHome(f)
			}
		}
		if excludes != "" {
			if b, err := os.ReadFile(excludes); err == nil {
				ps = append(ps, parseRules(b, nil)...)
			}
		}
		if b, err := ig.readTree(branch, ".git/info/exclude"); err == nil {
			ps = append(ps, parseRules(b, nil)...)
		}
	}
	ig.mu.Lock()
	if ig.gen == gen {
		ig.bases[branch] = ps
	}
	ig.mu.Unlock()
	return ps
}

// dir returns the patterns of the .gitignore in directory dir of
// branch (read as base reads).
func (ig *Ignore) dir(branch string, dir []string) []rule {
	if !ig.git {
		return nil
	}
	k := dirKey{branch, strings.Join(dir, "/")}
	ig.mu.Lock()
	ps, ok := ig.dirs[k]
	gen := ig.gen
	ig.mu.Unlock()
	if ok {
		return ps
	}
	if b, err := ig.readTree(branch, path.Join(k.dir, ".gitignore")); err == nil {
		ps = parseRules(b, dir)
	}
	ig.mu.Lock()
	if ig.gen == gen {
		ig.dirs[k] = ps
	}
	ig.mu.Unlock()
	return ps
}

func (ig *Ignore) readTree(branch, p string) ([]byte, error) {
	if ig.read == nil {
		return nil, os.ErrNotExist
	}
	return ig.read(branch, p)
}

// userExcludesFile is core.excludesFile as the system's and the user's
// git configuration set it, or git's default, as git-config(1) lists
// the files: $GIT_CONFIG_SYSTEM (/etc/gitconfig) unless
// GIT_CONFIG_NOSYSTEM, then $GIT_CONFIG_GLOBAL, or else
// $XDG_CONFIG_HOME/git/config and ~/.gitconfig.
func (ig *Ignore) userExcludesFile() string {
	var files []string
	if ig.env("GIT_CONFIG_NOSYSTEM") == "" {
		files = append(files, cmp.Or(ig.env("GIT_CONFIG_SYSTEM"), "/etc/gitconfig"))
	}
	home := ig.env("HOME")
	xdg := ig.env("XDG_CONFIG_HOME")
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	if g := ig.env("GIT_CONFIG_GLOBAL"); g != "" {
		files = append(files, g)
	} else {
		if xdg != "" {
			files = append(files, filepath.Join(xdg, "git", "config"))
		}
		if home != "" {
			files = append(files, filepath.Join(home, ".gitconfig"))
		}
	}
	excludes := ""
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, ok := excludesFileOf(b); ok {
			excludes = ig.expandHome(v)
		}
	}
	if excludes == "" && xdg != "" {
		excludes = filepath.Join(xdg, "git", "ignore") // git's default
	}
	return excludes
}

// excludesFileOf is core.excludesFile of a git configuration file, if
// it sets it (go-git's parser of git's configuration format).
func excludesFileOf(b []byte) (string, bool) {
	raw := gitconfig.New()
	if err := gitconfig.NewDecoder(bytes.NewReader(b)).Decode(raw); err != nil {
		return "", false
	}
	v, ok := "", false
	for _, s := range raw.Sections { // the last one set wins
		if s.IsName("core") && s.HasOption("excludesfile") {
			v, ok = s.Options.Get("excludesfile"), true
		}
	}
	return v, ok
}

// expandHome expands a leading ~/ as git does in a path of its
// configuration.
func (ig *Ignore) expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home := ig.env("HOME"); home != "" {
			return filepath.Join(home, rest)
		}
	}
	return p
}
