package harness

// Lower trees: a spec of entries (LowerFile, LowerDir, ...), built by
// NewLowerDir or BuildLower.

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Entry is one thing in a lower tree spec.
type Entry struct {
	path    string
	kind    byte   // 'f' file, 'd' dir, 'l' symlink, 'h' hard link, 's' sparse, 'p' fifo, 'c' char device
	content string // files
	target  string // symlinks: the target; hard links: the existing path
	size    int64  // sparse files
	extents map[int64]string
	rdev    uint64
	attrs   entryAttrs
}

type entryAttrs struct {
	mode         *uint32 // permission bits incl. setuid/setgid/sticky
	uid, gid     int     // -1: unchanged
	atime, mtime *unix.Timespec
	xattrs       [][2]string
}

// Attr sets an attribute of a lower entry.
type Attr func(*entryAttrs)

// WithMode sets the permission bits (incl. setuid, setgid, sticky).
func WithMode(perm uint32) Attr { return func(a *entryAttrs) { a.mode = &perm } }

// WithOwner sets the owner.
func WithOwner(uid, gid int) Attr { return func(a *entryAttrs) { a.uid, a.gid = uid, gid } }

// WithTimes sets atime and mtime (set last, after the whole tree is built).
func WithTimes(atime, mtime unix.Timespec) Attr {
	return func(a *entryAttrs) { a.atime, a.mtime = &atime, &mtime }
}

// WithXattr sets an extended attribute.
func WithXattr(name, value string) Attr {
	return func(a *entryAttrs) { a.xattrs = append(a.xattrs, [2]string{name, value}) }
}

func newEntry(path string, kind byte, attrs []Attr) Entry {
	e := Entry{path: path, kind: kind, attrs: entryAttrs{uid: -1, gid: -1}}
	for _, a := range attrs {
		a(&e.attrs)
	}
	return e
}

// LowerFile is a regular file (mode 0644 unless WithMode).
func LowerFile(path, content string, attrs ...Attr) Entry {
	e := newEntry(path, 'f', attrs)
	e.content = content
	return e
}

// LowerDir is a directory (mode 0755 unless WithMode).
func LowerDir(path string, attrs ...Attr) Entry { return newEntry(path, 'd', attrs) }

// LowerSymlink is a symbolic link to target.
func LowerSymlink(path, target string, attrs ...Attr) Entry {
	e := newEntry(path, 'l', attrs)
	e.target = target
	return e
}

// LowerHardlink is another name for the existing entry at existing.
func LowerHardlink(path, existing string) Entry {
	e := newEntry(path, 'h', nil)
	e.target = existing
	return e
}

// LowerSparse is a file of the given size with data only at the given
// offsets; the rest is holes.
func LowerSparse(path string, size int64, extents map[int64]string, attrs ...Attr) Entry {
	e := newEntry(path, 's', attrs)
	e.size, e.extents = size, extents
	return e
}

// LowerFifo is a named pipe.
func LowerFifo(path string, attrs ...Attr) Entry { return newEntry(path, 'p', attrs) }

// LowerCharDevice is a character device node.
func LowerCharDevice(path string, major, minor uint32, attrs ...Attr) Entry {
	e := newEntry(path, 'c', attrs)
	e.rdev = unix.Mkdev(major, minor)
	return e
}

// NewLowerDir makes a lower tree in a fresh temporary directory.
func NewLowerDir(t testing.TB, entries ...Entry) string {
	t.Helper()
	dir := t.TempDir()
	BuildLower(t, dir, entries)
	return dir
}

// BuildLower creates entries under root: first every entry, then owners,
// modes and xattrs, then times (deepest first, so that creating children
// does not move a directory's times afterwards).
func BuildLower(t testing.TB, root string, entries []Entry) {
	t.Helper()
	for _, e := range entries {
		p := filepath.Join(root, e.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatalf("lower %s: %v", e.path, err)
		}
		var err error
		switch e.kind {
		case 'f':
			err = os.WriteFile(p, []byte(e.content), 0o644)
		case 'd':
			err = os.MkdirAll(p, 0o755)
		case 'l':
			err = os.Symlink(e.target, p)
		case 'h':
			err = os.Link(filepath.Join(root, e.target), p)
		case 's':
			err = writeSparse(p, e.size, e.extents)
		case 'p':
			err = unix.Mkfifo(p, 0o644)
		case 'c':
			err = unix.Mknod(p, unix.S_IFCHR|0o644, int(e.rdev))
		default:
			err = fmt.Errorf("unknown kind %q", e.kind)
		}
		if err != nil {
			t.Fatalf("lower %s: %v", e.path, err)
		}
	}
	for _, e := range entries {
		p := filepath.Join(root, e.path)
		a := e.attrs
		if a.uid >= 0 || a.gid >= 0 {
			if err := os.Lchown(p, a.uid, a.gid); err != nil {
				t.Fatalf("lower %s: %v", e.path, err)
			}
		}
		if a.mode != nil {
			// chmod(2) after chown(2): chown clears setuid/setgid.
			if err := unix.Chmod(p, *a.mode); err != nil {
				t.Fatalf("lower %s: chmod: %v", e.path, err)
			}
		}
		for _, x := range a.xattrs {
			if err := unix.Lsetxattr(p, x[0], []byte(x[1]), 0); err != nil {
				t.Fatalf("lower %s: setxattr %s: %v", e.path, x[0], err)
			}
		}
	}
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if e.attrs.mtime == nil {
			continue
		}
		ts := []unix.Timespec{*e.attrs.atime, *e.attrs.mtime}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(root, e.path), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatalf("lower %s: utimes: %v", e.path, err)
		}
	}
}

func writeSparse(p string, size int64, extents map[int64]string) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	for off, data := range extents {
		if _, err := f.WriteAt([]byte(data), off); err != nil {
			return err
		}
	}
	return f.Truncate(size)
}
