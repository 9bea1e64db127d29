package harness

// Small helpers for the tests.

import (
	"errors"
	"os"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Lstat is lstat(2) of p; it fails the test on an error.
func Lstat(t testing.TB, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

// ReadFile returns the content of p; it fails the test on an error.
func ReadFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

// WriteFile writes content to p (created with mode 0644, or truncated);
// it fails the test on an error.
func WriteFile(t testing.TB, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
}

// ListDir returns the sorted names in dir, without . and ..
func ListDir(t testing.TB, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	sort.Strings(names)
	return names
}

// ErrnoOf returns the errno in err, 0 for nil, or EIO-less -1 when err is
// not an errno.
func ErrnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var en unix.Errno
	if errors.As(err, &en) {
		return en
	}
	return unix.Errno(^uintptr(0))
}

// ErrName names an errno for messages: "ENOENT", or "ok".
func ErrName(err error) string {
	e := ErrnoOf(err)
	switch {
	case e == 0:
		return "ok"
	case e == unix.Errno(^uintptr(0)):
		return err.Error()
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return e.Error()
}

// Timespec is the time sec.nsec after the epoch.
func Timespec(sec, nsec int64) unix.Timespec { return unix.Timespec{Sec: sec, Nsec: nsec} }

// JoinNames writes a list of names for messages: "[a b c]".
func JoinNames(names []string) string { return "[" + strings.Join(names, " ") + "]" }
