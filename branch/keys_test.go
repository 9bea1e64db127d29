package branch

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckPath(t *testing.T) {
	for _, p := range []string{"", "a", "a/b", "a/b-c", "a/.x", "..a/b..", "\x01/\xff", "x y/z"} {
		if err := checkPath(p); err != nil {
			t.Errorf("checkPath(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"/", "/a", "a/", "a//b", ".", "a/./b", "..", "a/..", "a\x00b", strings.Repeat("x", maxPathLen+1)} {
		if err := checkPath(p); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("checkPath(%.20q) = %v, want ErrInvalidPath", p, err)
		}
	}
}

func TestPathKeyRoundTrip(t *testing.T) {
	for _, c := range []struct{ path, key string }{
		{"", ""},
		{"a", "\x00a"},
		{"a/b", "\x00a\x00b"},
		{"a/b-c/d", "\x00a\x00b-c\x00d"},
	} {
		k := appendPath(nil, c.path)
		if string(k) != c.key {
			t.Errorf("appendPath(%q) = %q, want %q", c.path, k, c.key)
		}
		if got := pathOf(k); got != c.path {
			t.Errorf("pathOf(%q) = %q, want %q", k, got, c.path)
		}
	}
}
