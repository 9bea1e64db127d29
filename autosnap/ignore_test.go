package autosnap

import (
	"strings"
	"testing"
)

func TestIgnored(t *testing.T) {
	m := &Matcher{}
	err := m.AddFile(strings.NewReader(`
# build output
*.o
/bin
build/
docs/**/*.tmp
logs/**
**/cache
!keep.o
\#notes
trailing\ 
[!a]x.txt
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path  string
		isDir bool
		want  bool
	}{
		{"a.o", false, true},
		{"src/deep/a.o", false, true},
		{"keep.o", false, false}, // negated later
		{"src/keep.o", false, false},
		{"a.go", false, false},
		{"bin", false, true},            // anchored: only at the root
		{"bin/tool", false, true},       // inside an ignored directory
		{"src/bin", false, false},       // anchored pattern does not match deeper
		{"build", true, true},           // directory-only pattern, a directory
		{"build", false, false},         // ... not a file named build
		{"src/build/x.go", false, true}, // a directory on the way
		{"docs/a/b/c.tmp", false, true}, // a/**/b
		{"docs/c.tmp", false, true},     // ** matches no directory too
		{"other/c.tmp", false, false},   // anchored at docs
		{"logs", true, false},           // x/** is what is inside x
		{"logs/today.txt", false, true}, // ...
		{"cache", true, true},           // **/cache
		{"a/b/cache", false, true},      // at any depth
		{"#notes", false, true},         // escaped #
		{"trailing ", false, true},      // escaped trailing space
		{"bx.txt", false, true},         // [!a]
		{"ax.txt", false, false},        // ...
		{".", true, false},              // the root never
		{"", true, false},               // ...
	} {
		if got := m.Ignored(tc.path, tc.isDir); got != tc.want {
			t.Errorf("Ignored(%q, dir=%v) = %v, want %v", tc.path, tc.isDir, got, tc.want)
		}
	}
}

func TestIgnoredNoReincludeBelowIgnoredDir(t *testing.T) {
	m := &Matcher{}
	for _, p := range []string{"out/", "!out/keep.txt"} {
		if err := m.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	// As in git: a file cannot be taken back when its directory is ignored.
	if !m.Ignored("out/keep.txt", false) {
		t.Errorf("out/keep.txt not ignored, want ignored (its directory is)")
	}
}

func TestIgnoreLastMatchWins(t *testing.T) {
	m := &Matcher{}
	for _, p := range []string{"*.log", "!important.log", "important.log"} {
		if err := m.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if !m.Ignored("important.log", false) {
		t.Errorf("important.log not ignored: the last pattern re-ignores it")
	}
}

func TestIgnoreBadPattern(t *testing.T) {
	for _, p := range []string{"[abc", "/"} {
		var m Matcher
		if err := m.Add(p); err == nil {
			t.Errorf("Add(%q) = nil, want an error", p)
		}
	}
	var m Matcher
	for _, p := range []string{"", "   ", "# comment"} {
		if err := m.Add(p); err != nil {
			t.Errorf("Add(%q) = %v, want nil", p, err)
		}
	}
	if m.Len() != 0 {
		t.Errorf("Len = %d after blank lines and comments, want 0", m.Len())
	}
	// A nil matcher ignores nothing.
	var nilM *Matcher
	if nilM.Ignored("a", false) {
		t.Errorf("a nil matcher ignores a path")
	}
}
