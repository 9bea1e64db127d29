package contenthash

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// Digest is a SHA-256.
type Digest = branch.Digest

// rootPrefix starts the bytes the root hashes (see the package doc).
const rootPrefix = "agentfs-merkle-1\n"

// ManifestFormat names the manifest's format (Manifest.Format).
const ManifestFormat = "agentfs-manifest-1"

// Entry is one path of a tree, as the root commits to it.
type Entry struct {
	Path string `json:"path"` // "" for the top directory
	Type string `json:"type"` // d, f, l, p, s, c or b
	Mode string `json:"mode"` // permission bits, 4 octal digits
	// SHA256 is the node hash: a file's contents, a symlink's target,
	// a directory's records (see the package doc).
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size,omitempty"`   // a regular file's
	Target string `json:"target,omitempty"` // a symlink's

	// Where a regular file's data lives in a store's view: an object,
	// or the project's file at a lower path.
	Object string `json:"-"`
	Lower  string `json:"-"`
}

// Manifest is a tree's root and, when asked for, every path.
type Manifest struct {
	Format   string  `json:"format"`
	Snapshot string  `json:"snapshot,omitempty"`
	Root     string  `json:"root"`
	Files    int64   `json:"files"` // paths below the top directory
	Bytes    int64   `json:"bytes"` // bytes of the regular files
	Entries  []Entry `json:"entries,omitempty"`
}

// Hex writes d as lowercase hex.
func Hex(d Digest) string { return hex.EncodeToString(d[:]) }

// ParseHex reads a digest written by Hex.
func ParseHex(s string) (Digest, error) {
	var d Digest
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(d) {
		return d, fmt.Errorf("%q is not a SHA-256 (64 hex digits)", s)
	}
	copy(d[:], b)
	return d, nil
}

// typeLetter is the type letter of st_mode m ("" for an unknown type).
func typeLetter(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return "d"
	case unix.S_IFREG:
		return "f"
	case unix.S_IFLNK:
		return "l"
	case unix.S_IFIFO:
		return "p"
	case unix.S_IFSOCK:
		return "s"
	case unix.S_IFCHR:
		return "c"
	case unix.S_IFBLK:
		return "b"
	}
	return ""
}

// specialNode is the node hash of a symlink, fifo, socket or device.
func specialNode(st *unix.Stat_t, target string) Digest {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return sha256.Sum256([]byte(target))
	case unix.S_IFCHR, unix.S_IFBLK:
		return sha256.Sum256(fmt.Appendf(nil, "%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	}
	return sha256.Sum256(nil)
}

// record is a child's record in its directory's node hash.
func record(typ string, mode uint32, node Digest, name string) []byte {
	return fmt.Appendf(nil, "%s %04o %s %s\x00", typ, mode&07777, Hex(node), name)
}

// builder computes a root from the paths of a tree given in path order
// (parents first, depth first, each directory's names in byte order),
// as overlay.Walk and walkDir give them.
type builder struct {
	stack []frame
	root  Digest
	done  bool
	m     Manifest
	keep  bool // keep every Entry in m
}

type frame struct {
	path  string
	mode  uint32
	h     hash.Hash
	entry int // its index in m.Entries, or -1
}

func newBuilder(keep bool) *builder {
	return &builder{keep: keep, m: Manifest{Format: ManifestFormat}}
}

// parentOf is the directory of path p ("" for a top-level name).
func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

func baseOf(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// popTo closes the directories on the stack until dir is on top.
func (b *builder) popTo(dir string) error {
	for len(b.stack) > 0 && b.stack[len(b.stack)-1].path != dir {
		b.pop()
	}
	if len(b.stack) == 0 {
		return fmt.Errorf("tree: %q comes outside the directories walked (not in path order)", dir)
	}
	return nil
}

func (b *builder) pop() {
	f := b.stack[len(b.stack)-1]
	b.stack = b.stack[:len(b.stack)-1]
	var node Digest
	f.h.Sum(node[:0])
	if f.entry >= 0 {
		b.m.Entries[f.entry].SHA256 = Hex(node)
	}
	if len(b.stack) == 0 {
		h := sha256.New()
		h.Write([]byte(rootPrefix))
		h.Write(record("d", f.mode, node, ""))
		h.Sum(b.root[:0])
		b.done = true
		return
	}
	b.stack[len(b.stack)-1].h.Write(record("d", f.mode, node, baseOf(f.path)))
}

// dir adds directory p (mode: st_mode) and enters it.
func (b *builder) dir(p string, mode uint32) error {
	if p != "" {
		if err := b.popTo(parentOf(p)); err != nil {
			return err
		}
		b.m.Files++
	} else if len(b.stack) > 0 || b.done {
		return fmt.Errorf("tree: the top directory given twice")
	}
	idx := -1
	if b.keep {
		idx = len(b.m.Entries)
		b.m.Entries = append(b.m.Entries, Entry{Path: p, Type: "d", Mode: fmt.Sprintf("%04o", mode&07777)})
	}
	b.stack = append(b.stack, frame{path: p, mode: mode, h: sha256.New(), entry: idx})
	return nil
}

// leaf adds a path that is not a directory, with its node hash.
func (b *builder) leaf(e Entry, mode uint32, node Digest) error {
	if err := b.popTo(parentOf(e.Path)); err != nil {
		return err
	}
	b.m.Files++
	if e.Type == "f" {
		b.m.Bytes += e.Size
	}
	b.stack[len(b.stack)-1].h.Write(record(e.Type, mode, node, baseOf(e.Path)))
	if b.keep {
		e.Mode = fmt.Sprintf("%04o", mode&07777)
		e.SHA256 = Hex(node)
		b.m.Entries = append(b.m.Entries, e)
	}
	return nil
}

// finish closes every directory and returns the manifest with its root.
func (b *builder) finish() (Manifest, Digest, error) {
	for len(b.stack) > 0 {
		b.pop()
	}
	if !b.done {
		return Manifest{}, Digest{}, fmt.Errorf("tree: no top directory")
	}
	b.m.Root = Hex(b.root)
	return b.m, b.root, nil
}

// hashFile returns the SHA-256 of what f holds from its offset on, and
// the number of bytes read.
func hashFile(f *os.File) (Digest, int64, error) {
	return hashFileBuf(f, make([]byte, 256<<10))
}

// hashFileBuf is hashFile reading through buf.
func hashFileBuf(f *os.File, buf []byte) (Digest, int64, error) {
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, buf)
	var d Digest
	h.Sum(d[:0])
	return d, n, err
}

// HashDir computes the root of the plain directory tree at dir (an
// export, say), and every path's entry when entries is set. It reads
// the tree with lstat, readlink and open(O_NOFOLLOW), as any program
// recomputing a root would.
func HashDir(dir string, entries bool) (Manifest, error) {
	// The top directory named through a symlink is the directory: the
	// symlinks below it are paths of the tree.
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		dir = resolved
	}
	b := newBuilder(entries)
	if err := walkDir(b, dir, ""); err != nil {
		return Manifest{}, err
	}
	m, _, err := b.finish()
	return m, err
}

func walkDir(b *builder, top, p string) error {
	full := filepath.Join(top, filepath.FromSlash(p))
	var st unix.Stat_t
	if err := unix.Lstat(full, &st); err != nil {
		return fmt.Errorf("%s: %w", full, err)
	}
	typ := typeLetter(st.Mode)
	switch typ {
	case "d":
		if err := b.dir(p, st.Mode); err != nil {
			return err
		}
		f, err := os.Open(full)
		if err != nil {
			return err
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", full, err)
		}
		slices.Sort(names)
		for _, name := range names {
			if err := walkDir(b, top, joinPath(p, name)); err != nil {
				return err
			}
		}
		return nil
	case "f":
		fd, err := unix.Open(full, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", full, err)
		}
		f := os.NewFile(uintptr(fd), full)
		sum, n, err := hashFile(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", full, err)
		}
		return b.leaf(Entry{Path: p, Type: typ, Size: n}, st.Mode, sum)
	case "l":
		target, err := os.Readlink(full)
		if err != nil {
			return err
		}
		return b.leaf(Entry{Path: p, Type: typ, Target: target}, st.Mode, specialNode(&st, target))
	case "":
		return fmt.Errorf("%s: a file of unknown type %o", full, st.Mode&unix.S_IFMT)
	}
	return b.leaf(Entry{Path: p, Type: typ}, st.Mode, specialNode(&st, ""))
}

func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
