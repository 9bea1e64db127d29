package ctl

import "testing"

// TestCutAtRune: a cut that would split a character goes back to its
// start; bytes that are not UTF-8 before the cut are kept as they are.
func TestCutAtRune(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 3, "abc"},
		{"abc", 2, "ab"},
		{"abc", 0, ""},
		{"aé", 2, "a"},   // é is 2 bytes: cut inside it
		{"aéb", 3, "aé"}, // cut after it
		{"a😀b", 4, "a"},  // inside a 4-byte character
		{"a😀b", 5, "a😀"},
		{"\xff\xfeab", 3, "\xff\xfea"}, // not UTF-8, kept
		{"a\x80\x80\x80\x80b", 4, "a\x80\x80\x80"},
	} {
		if got := CutAtRune(c.s, c.n); got != c.want {
			t.Errorf("CutAtRune(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
