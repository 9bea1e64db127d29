package autosnap

import (
	"bufio"
	"bytes"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// # Matching one path, as git does
//
// go-git's patterns are made for its own walk of a work tree, and
// match a path when they match the path or any directory above it
// ("build/" matches build/x.o). git instead decides each path on its
// own, walking down: a directory that is ignored ignores all below it,
// and otherwise a path is decided by the last pattern that matches
// that very path. The difference shows with negations: in git,
// "!build/" takes back the directory build, not the files in it that
// another pattern ignores; "logs/**" ignores what is inside logs, not
// logs itself, so "!logs/keep.txt" can take a file back. rule asks a
// go-git pattern whether it matches the path itself:
//
//   - a pattern without a slash matches names: it is asked about the
//     path's last name alone (in its .gitignore's directory);
//   - a pattern ending in "/**" matches what is inside the directories
//     its start matches: that start, as a directory pattern, is asked
//     about the path's parent;
//   - a pattern starting with "**/" matches its rest at any depth:
//     "**/x" is the name pattern "x", and "**/a/b" asks "/a/b" about
//     the path below each directory (go-git looks for the rest after
//     the first "a" on the path only, so it misses b/b/x.tmp for
//     "**/b/*.tmp");
//   - any other pattern with a slash matches the path itself when it
//     matches it but not its parent.
//
// One difference is left: a "**" inside a pattern ("a/**/b/c") takes
// the first "b" below a, where git tries each (a/b/b/c matches in git,
// not here); the tests against git check-ignore keep to the others.
//
// And as git (wildmatch) reads "[!a]" as "[^a]", which Go's
// filepath.Match, under go-git, reads as "! or a", the line is given
// to go-git with "[!" written "[^".
type rule struct {
	p      gitignore.Pattern
	domain []string // the directory of the .gitignore, split
	// name: the pattern has no slash (but a trailing one).
	name bool
	// inside: the pattern ends in "/**"; start matches its start, as
	// a directory.
	inside gitignore.Pattern
	// anyDepth: the pattern starts with "**/" and has a slash after;
	// the rule of its rest, anchored, asked below each directory.
	anyDepth *rule
}

// match says whether r decides path (relative to the root, split):
// gitignore.Exclude, gitignore.Include or gitignore.NoMatch.
func (r rule) match(path []string, isDir bool) gitignore.MatchResult {
	n := len(path)
	if n <= len(r.domain) {
		return gitignore.NoMatch
	}
	switch {
	case r.anyDepth != nil:
		for k := len(r.domain); k < n; k++ {
			if res := r.anyDepth.match(path[k:], isDir); res != gitignore.NoMatch {
				return res
			}
		}
		return gitignore.NoMatch
	case r.name:
		return r.p.Match(append(r.domain[:len(r.domain):len(r.domain)], path[n-1]), isDir)
	case r.inside != nil:
		if r.inside.Match(path[:n-1], true) == gitignore.NoMatch {
			return gitignore.NoMatch
		}
		return r.p.Match(path, isDir)
	}
	res := r.p.Match(path, isDir)
	if res != gitignore.NoMatch && n-1 > len(r.domain) && r.p.Match(path[:n-1], true) != gitignore.NoMatch {
		return gitignore.NoMatch // it matches a directory above
	}
	return res
}

// decide returns whether the last of rules that matches path ignores
// it (false when none matches).
func decide(rules []rule, path []string, isDir bool) bool {
	for i := len(rules) - 1; i >= 0; i-- {
		if res := rules[i].match(path, isDir); res != gitignore.NoMatch {
			return res == gitignore.Exclude
		}
	}
	return false
}

// parseRule parses one pattern line of a gitignore file in directory
// domain; false for a blank line or a comment.
func parseRule(line string, domain []string) (rule, bool) {
	if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
		return rule{}, false
	}
	line = strings.ReplaceAll(line, "[!", "[^")
	r := rule{p: gitignore.ParsePattern(line, domain), domain: append([]string(nil), domain...)}
	neg := ""
	body := line
	if strings.HasPrefix(line, "!") {
		neg, body = "!", line[1:]
	}
	if !strings.HasSuffix(body, `\ `) {
		body = strings.TrimRight(body, " ")
	}
	dirOnly := ""
	if strings.HasSuffix(body, "/") {
		dirOnly, body = "/", strings.TrimSuffix(body, "/")
	}
	rest, anyDepth := strings.CutPrefix(strings.TrimPrefix(body, "/"), "**/")
	switch {
	case anyDepth && strings.Contains(rest, "/"):
		sub, _ := parseRule(neg+"/"+rest+dirOnly, nil)
		r.anyDepth = &sub
	case anyDepth:
		r.name = true
		r.p = gitignore.ParsePattern(neg+rest+dirOnly, domain)
	case !strings.Contains(body, "/"):
		r.name = true
	case strings.HasSuffix(body, "/**"):
		start := strings.TrimPrefix(strings.TrimSuffix(body, "/**"), "/")
		r.inside = gitignore.ParsePattern("/"+start+"/", domain)
	}
	return r, true
}

// parseRules parses the lines of a gitignore file in directory domain.
func parseRules(b []byte, domain []string) []rule {
	var rs []rule
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		if r, ok := parseRule(sc.Text(), domain); ok {
			rs = append(rs, r)
		}
	}
	return rs
}
