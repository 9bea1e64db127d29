// Package hostpath answers the questions about paths of the host that
// agentfs asks before it writes or mounts anywhere: is this path inside
// that directory (by name, through symlinks, and by identity through
// bind mounts), and what does the existing part of a path resolve to.
// The project must never be written but by apply: every check that a
// store, an export target or a mountpoint is outside it goes through
// here.
package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Within reports whether p is strictly inside dir (both clean and
// absolute).
func Within(p, dir string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// ResolveExisting resolves the symlinks of the longest existing prefix
// of the absolute path p, and appends the rest.
func ResolveExisting(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p
	}
	return filepath.Join(ResolveExisting(parent), filepath.Base(p))
}

// InsideAny reports whether p (resolved as far as it exists) is one of
// dirs or inside one. Empty dirs are skipped.
func InsideAny(p string, dirs []string) bool {
	real := ResolveExisting(p)
	for _, d := range dirs {
		if d != "" && (real == d || Within(real, d)) {
			return true
		}
	}
	return false
}

// ID identifies a file across paths: its device and inode number.
type ID struct{ Dev, Ino uint64 }

// IDOf returns the identity of the file p names (following symlinks).
func IDOf(p string) (ID, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return ID{}, err
	}
	return ID{st.Dev, st.Ino}, nil
}

// HasAncestor reports whether a strict ancestor of p is the directory
// id.
func HasAncestor(p string, id ID) bool {
	for {
		parent := filepath.Dir(p)
		if parent == p {
			return false
		}
		p = parent
		if pid, err := IDOf(p); err == nil && pid == id {
			return true
		}
	}
}

// Existing returns the longest prefix of the absolute path p that
// exists.
func Existing(p string) string {
	for {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err == nil || p == "/" {
			return p
		}
		p = filepath.Dir(p)
	}
}

// Inside reports whether the absolute path p is dir or inside it: by
// name once resolved as far as it exists, or by identity (the existing
// part of p is dir, or has it as an ancestor, also through a bind
// mount). idPath is a path that reaches dir for its identity when
// dir's own path does not (under agentfs run a mount covers the
// project's path; /proc/self/fd/N reaches it); "" for dir itself.
func Inside(p, dir, idPath string) bool {
	real := ResolveExisting(p)
	if real == dir || Within(real, dir) {
		return true
	}
	if idPath == "" {
		idPath = dir
	}
	id, err := IDOf(idPath)
	if err != nil {
		return false
	}
	existing := Existing(real)
	eid, err := IDOf(existing)
	return err == nil && (eid == id || HasAncestor(existing, id))
}

// IsMountRoot reports whether dir is on another device than its parent,
// which mountinfo would also show; it catches a mount that mountinfo
// lists under another path (e.g. in a chroot).
func IsMountRoot(dir string) bool {
	if dir == "/" {
		return true
	}
	var st, pst unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &pst) != nil {
		return false
	}
	return st.Dev != pst.Dev
}

// OpenNoatime opens p for reading without updating its atime (a file
// of the project, which agentfs never changes); O_NOATIME needs
// ownership or CAP_FOWNER, so without them it opens p plainly.
func OpenNoatime(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		f, err = os.Open(p)
	}
	return f, err
}
