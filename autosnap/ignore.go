package autosnap

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strings"
)

// # Ignore patterns
//
// Matcher implements the pattern language of gitignore(5), for paths
// relative to the mount root:
//
//   - blank lines and lines starting with # are skipped; trailing
//     spaces are dropped unless escaped with a backslash; \# and \!
//     start a pattern with those characters;
//   - ! negates: a path a later negated pattern matches is not ignored,
//     unless a directory above it is (as in git, nothing inside an
//     ignored directory can be taken back);
//   - a trailing / matches directories only (and so everything below);
//   - a pattern with a / at the start or in the middle is anchored at
//     the root; without one it matches a name at any depth;
//   - *, ? and [...] match within one name ([!...] negates a class);
//     ** matches any number of directories (**/x, x/**, a/**/b).
//
// The last pattern that matches a path decides, as in git.

// Matcher decides which paths are ignored.
type Matcher struct {
	rules []rule
}

type rule struct {
	segs    []string // the pattern split at '/'; "**" matches any number of names
	negate  bool
	dirOnly bool
}

// Add adds one pattern line (see above). A blank line or a comment adds
// nothing. The error says what is wrong with a malformed pattern.
func (m *Matcher) Add(line string) error {
	r, ok, err := parseRule(line)
	if err != nil || !ok {
		return err
	}
	m.rules = append(m.rules, r)
	return nil
}

// AddFile adds the patterns of a gitignore file, skipping the lines git
// would not understand either (as git does).
func (m *Matcher) AddFile(r io.Reader) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		_ = m.Add(sc.Text()) // a malformed line is skipped (see above)
	}
	return sc.Err()
}

// Len is the number of patterns.
func (m *Matcher) Len() int { return len(m.rules) }

func parseRule(line string) (rule, bool, error) {
	line = strings.TrimSuffix(line, "\r")
	line = trimTrailingSpaces(line)
	if line == "" || line[0] == '#' {
		return rule{}, false, nil
	}
	var r rule
	switch {
	case line[0] == '!':
		r.negate = true
		line = line[1:]
	case strings.HasPrefix(line, `\!`), strings.HasPrefix(line, `\#`):
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") {
		r.dirOnly = true
		line = strings.TrimRight(line, "/")
	}
	if line == "" {
		return rule{}, false, fmt.Errorf("pattern %q matches nothing", "/")
	}
	anchored := strings.Contains(line, "/")
	line = strings.TrimPrefix(line, "/")
	for _, seg := range strings.Split(line, "/") {
		if seg == "" {
			continue // a//b is a/b
		}
		if seg != "**" {
			seg = strings.ReplaceAll(seg, "[!", "[^")
			if _, err := path.Match(seg, ""); err != nil {
				return rule{}, false, fmt.Errorf("pattern %q: malformed (an unclosed [ or a trailing backslash)", line)
			}
		}
		r.segs = append(r.segs, seg)
	}
	if !anchored {
		r.segs = append([]string{"**"}, r.segs...)
	}
	return r, true, nil
}

// trimTrailingSpaces drops trailing spaces that are not escaped.
func trimTrailingSpaces(s string) string {
	for strings.HasSuffix(s, " ") && !strings.HasSuffix(s, `\ `) {
		s = s[:len(s)-1]
	}
	if strings.HasSuffix(s, `\ `) {
		s = s[:len(s)-2] + " "
	}
	return s
}

// Ignored reports whether the path p (relative to the root, '/'
// separated) is ignored; isDir says whether p is a directory.
func (m *Matcher) Ignored(p string, isDir bool) bool {
	if m == nil || len(m.rules) == 0 || p == "" || p == "." {
		return false
	}
	names := strings.Split(p, "/")
	for i := 1; i < len(names); i++ {
		if m.decide(names[:i], true) {
			return true
		}
	}
	return m.decide(names, isDir)
}

// decide applies the rules to one path: the last one that matches wins.
func (m *Matcher) decide(names []string, isDir bool) bool {
	for i := len(m.rules) - 1; i >= 0; i-- {
		r := &m.rules[i]
		if r.dirOnly && !isDir {
			continue
		}
		if matchSegs(r.segs, names) {
			return !r.negate
		}
	}
	return false
}

// matchSegs matches pattern segments against path names.
func matchSegs(pat, names []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			if len(pat) == 1 {
				return len(names) > 0 // x/** is what is inside x
			}
			for i := 0; i <= len(names); i++ {
				if matchSegs(pat[1:], names[i:]) {
					return true
				}
			}
			return false
		}
		if len(names) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], names[0]); !ok {
			return false
		}
		pat, names = pat[1:], names[1:]
	}
	return len(names) == 0
}
