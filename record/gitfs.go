package record

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5"
	"golang.org/x/sys/unix"
)

// # A repository's objects, read from a tree
//
// Whether a tracked file is dirty is decided against HEAD's tree (what
// Git gives back from the commit the record names), which go-git reads
// from the repository's object store: loose objects and packs. gitFS
// shows go-git the .git directory of a Tree as a read-only billy
// filesystem; listing a directory (the packs) needs a DirReader.

// DirReader is a Tree that lists a directory's names:
// workspace.RefTree is one.
type DirReader interface {
	ReadDir(p string) ([]string, error)
}

// gitFS is the directory root of tree t as a read-only billy
// filesystem.
type gitFS struct {
	t    Tree
	root string // relative to the tree ("" for its root)
}

var _ billy.Filesystem = gitFS{}

// rel returns name (as go-git gives it) relative to the tree.
func (g gitFS) rel(name string) string {
	return strings.TrimPrefix(path.Join(g.root, path.Clean("/"+name)), "/")
}

// notExist makes an error that wraps ENOENT one os.IsNotExist knows.
func notExist(op, name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return &os.PathError{Op: op, Path: name, Err: os.ErrNotExist}
	}
	return err
}

func (g gitFS) Open(name string) (billy.File, error) {
	p := g.rel(name)
	r, err := open(g.t, p)
	if err != nil {
		return nil, notExist("open", name, err)
	}
	if f, ok := r.(gitFileReader); ok {
		return &gitFile{name: name, gitFileReader: f}, nil
	}
	// Not seekable: read whole (a small file, or a tree without
	// Opener).
	_ = r.Close()
	b, err := g.t.ReadFile(p)
	if err != nil {
		return nil, notExist("open", name, err)
	}
	return &gitFile{name: name, gitFileReader: nopCloser{bytes.NewReader(b)}}, nil
}

func (g gitFS) OpenFile(name string, flag int, _ os.FileMode) (billy.File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0 {
		return nil, billy.ErrReadOnly
	}
	return g.Open(name)
}

func (g gitFS) Stat(name string) (os.FileInfo, error) { return g.Lstat(name) }

func (g gitFS) Lstat(name string) (os.FileInfo, error) {
	st, err := g.t.Lstat(g.rel(name))
	if err != nil {
		return nil, notExist("lstat", name, err)
	}
	return fileInfo{name: path.Base(path.Clean("/" + name)), st: st}, nil
}

func (g gitFS) ReadDir(name string) ([]os.FileInfo, error) {
	d, ok := g.t.(DirReader)
	if !ok {
		return nil, billy.ErrNotSupported
	}
	names, err := d.ReadDir(g.rel(name))
	if err != nil {
		return nil, notExist("readdir", name, err)
	}
	out := make([]os.FileInfo, 0, len(names))
	for _, n := range names {
		if fi, err := g.Lstat(path.Join(name, n)); err == nil {
			out = append(out, fi)
		}
	}
	return out, nil
}

func (g gitFS) Readlink(name string) (string, error) { return g.t.Readlink(g.rel(name)) }
func (g gitFS) Join(elem ...string) string           { return path.Join(elem...) }
func (g gitFS) Root() string                         { return g.root }
func (g gitFS) Chroot(p string) (billy.Filesystem, error) {
	return gitFS{t: g.t, root: g.rel(p)}, nil
}

// What writes is refused: a record only reads.
func (gitFS) Create(string) (billy.File, error)           { return nil, billy.ErrReadOnly }
func (gitFS) Rename(string, string) error                 { return billy.ErrReadOnly }
func (gitFS) Remove(string) error                         { return billy.ErrReadOnly }
func (gitFS) TempFile(string, string) (billy.File, error) { return nil, billy.ErrReadOnly }
func (gitFS) MkdirAll(string, os.FileMode) error          { return billy.ErrReadOnly }
func (gitFS) Symlink(string, string) error                { return billy.ErrReadOnly }

// gitFileReader is what a billy file reads with.
type gitFileReader interface {
	io.Reader
	io.ReaderAt
	io.Seeker
	io.Closer
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// gitFile is a file of gitFS, read-only.
type gitFile struct {
	name string
	gitFileReader
}

func (f *gitFile) Name() string              { return f.name }
func (f *gitFile) Write([]byte) (int, error) { return 0, billy.ErrReadOnly }
func (f *gitFile) Truncate(int64) error      { return billy.ErrReadOnly }
func (f *gitFile) Lock() error               { return nil }
func (f *gitFile) Unlock() error             { return nil }

// fileInfo is an os.FileInfo of attributes st.
type fileInfo struct {
	name string
	st   unix.Stat_t
}

func (fi fileInfo) Name() string       { return fi.name }
func (fi fileInfo) Size() int64        { return fi.st.Size }
func (fi fileInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Unix()) }
func (fi fileInfo) IsDir() bool        { return fi.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (fi fileInfo) Sys() any           { return &fi.st }
func (fi fileInfo) Mode() os.FileMode {
	m := os.FileMode(fi.st.Mode & 0o777)
	switch fi.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= os.ModeDir
	case unix.S_IFLNK:
		m |= os.ModeSymlink
	case unix.S_IFREG:
	default:
		m |= os.ModeIrregular
	}
	return m
}
