package autosnap

import (
	"bytes"
	"compress/zlib"
	"io"
	"path"
	"strings"
	"unicode/utf8"
)

// # Git commits
//
// A commit ends with git moving a ref: it writes refs/heads/BRANCH.lock
// and renames it to refs/heads/BRANCH (or HEAD, on a detached HEAD).
// ParseGitRef recognizes those final names, for a repository at any
// depth in the mount: HEAD, refs/heads/*, refs/tags/* and packed-refs.
// GitLabel names the snapshot after the commit: it reads the ref and,
// when the commit is a loose object (a fresh commit always is), its
// subject; what it cannot read is left out of the label.

// GitRef is a git ref file that changed.
type GitRef struct {
	Repo string // the directory that holds .git ("" for the mount root)
	Name string // HEAD, packed-refs, refs/heads/main, refs/tags/v1
}

// ReadFunc reads a file of the mount (path relative to its root).
type ReadFunc func(path string) ([]byte, error)

// maxSubject bounds the commit subject in a label, in bytes.
const maxSubject = 200

// ParseGitRef reports whether p is a ref file of a git repository.
func ParseGitRef(p string) (GitRef, bool) {
	names := strings.Split(p, "/")
	for i, n := range names {
		if n != ".git" {
			continue
		}
		rest := strings.Join(names[i+1:], "/")
		if strings.HasSuffix(rest, ".lock") {
			return GitRef{}, false
		}
		switch {
		case rest == "HEAD", rest == "packed-refs",
			strings.HasPrefix(rest, "refs/heads/") && len(rest) > len("refs/heads/"),
			strings.HasPrefix(rest, "refs/tags/") && len(rest) > len("refs/tags/"):
			return GitRef{Repo: strings.Join(names[:i], "/"), Name: rest}, true
		}
		return GitRef{}, false
	}
	return GitRef{}, false
}

// GitLabel describes the change of ref: "git commit 1a2b3c4 on main:
// fix the parser", "git tag v1 at 1a2b3c4", "git checkout main at
// 1a2b3c4: ...".
func GitLabel(read ReadFunc, ref GitRef) string {
	g := gitDir{read: read, dir: path.Join(ref.Repo, ".git")}
	where := ""
	if ref.Repo != "" {
		where = " in " + shortPath(ref.Repo)
	}
	switch {
	case ref.Name == "packed-refs":
		return "git refs packed" + where
	case ref.Name == "HEAD":
		head, err := g.file("HEAD")
		if err != nil {
			return "git HEAD changed" + where
		}
		if target, ok := strings.CutPrefix(head, "ref: "); ok {
			branch := strings.TrimPrefix(target, "refs/heads/")
			return g.describe("git checkout "+branch, g.resolve(target), where, " at ")
		}
		return g.describe("git commit", head, where+" (detached HEAD)", " ")
	case strings.HasPrefix(ref.Name, "refs/tags/"):
		tag := strings.TrimPrefix(ref.Name, "refs/tags/")
		hash := g.resolve(ref.Name)
		if hash == "" {
			return "git tag " + tag + " deleted" + where
		}
		return "git tag " + tag + " at " + short(hash) + where
	}
	branch := strings.TrimPrefix(ref.Name, "refs/heads/")
	hash := g.resolve(ref.Name)
	if hash == "" {
		return "git branch " + branch + " deleted" + where
	}
	return g.describe("git commit", hash, " on "+branch+where, " ")
}

// GitHead returns the commit the HEAD of the repository at repo (the
// directory that holds .git, "" for the root) names: a symbolic ref
// followed, a loose or packed ref; "" when it cannot be read (no
// commit yet).
func GitHead(read ReadFunc, repo string) string {
	return gitDir{read: read, dir: path.Join(repo, ".git")}.resolve("HEAD")
}

type gitDir struct {
	read ReadFunc
	dir  string
}

// file returns the trimmed contents of a file of the git directory.
func (g gitDir) file(name string) (string, error) {
	b, err := g.read(path.Join(g.dir, name))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// resolve returns the hash a ref names ("" when it cannot be read):
// the loose ref, a symbolic ref followed, or packed-refs.
func (g gitDir) resolve(name string) string {
	for range 5 {
		v, err := g.file(name)
		if err != nil {
			return g.packed(name)
		}
		target, ok := strings.CutPrefix(v, "ref: ")
		if !ok {
			if isHash(v) {
				return v
			}
			return ""
		}
		name = target
	}
	return ""
}

// packed returns the hash of ref name in packed-refs.
func (g gitDir) packed(name string) string {
	b, err := g.file("packed-refs")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(b) {
		hash, ref, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && ref == name && isHash(hash) {
			return hash
		}
	}
	return ""
}

// describe is what + the short hash + where + the commit's subject.
func (g gitDir) describe(what, hash, where, sep string) string {
	if !isHash(hash) {
		return what + where
	}
	l := what + sep + short(hash) + where
	if s := g.subject(hash); s != "" {
		l += ": " + s
	}
	return l
}

// subject returns the first line of the message of a loose commit
// object, or "".
func (g gitDir) subject(hash string) string {
	b, err := g.read(path.Join(g.dir, "objects", hash[:2], hash[2:]))
	if err != nil {
		return ""
	}
	zr, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return ""
	}
	defer func() { _ = zr.Close() }() // reading from memory: nothing to release, and a bad object shows as no subject
	obj, _ := io.ReadAll(io.LimitReader(zr, 64<<10))
	header, body, ok := bytes.Cut(obj, []byte{0})
	if !ok || !bytes.HasPrefix(header, []byte("commit ")) {
		return ""
	}
	_, msg, ok := bytes.Cut(body, []byte("\n\n"))
	if !ok {
		return ""
	}
	line, _, _ := bytes.Cut(msg, []byte("\n"))
	s := strings.TrimSpace(strings.ToValidUTF8(string(line), "?"))
	if len(s) > maxSubject {
		s = s[:maxSubject]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}

func isHash(s string) bool {
	return (len(s) == 40 || len(s) == 64) && strings.Trim(s, "0123456789abcdef") == ""
}

func short(hash string) string { return hash[:7] }
