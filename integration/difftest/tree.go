package difftest

import (
	"fmt"
	"math/rand"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Entry types of a Tree.
const (
	TypeDir      = 'd'
	TypeFile     = 'f'
	TypeSymlink  = 'l'
	TypeHardlink = 'h' // another name for the file at LinkTo
	TypeFifo     = 'p'
)

// TreeEntry is one name of a lower tree.
type TreeEntry struct {
	Path   string
	Type   byte
	Mode   uint32 // permission bits incl. setuid/setgid/sticky
	Size   int    // file: bytes of content (pattern Fill)
	Fill   byte
	Hole   bool   // file: the content starts after a hole of HoleSize bytes
	Target string // symlink
	LinkTo string // hardlink
	Uid    int
	Gid    int
	Mtime  int64 // nanoseconds; atime is Mtime - 1s
	Xattrs [][2]string
}

// Tree is a lower tree: its root's mode and mtime and the entries in
// creation order (parents before children, link targets before links).
type Tree struct {
	RootMode  uint32
	RootMtime int64
	Entries   []TreeEntry
}

// HoleSize is the length of the hole before the data of a sparse file.
const HoleSize = 1 << 20

// GenerateTree makes a random lower tree: a few levels of directories,
// files with content (some sparse, some empty), symlinks (in-tree,
// dangling and to directories), hard links, a fifo, user xattrs, a few
// owners and modes, and explicit times everywhere.
func GenerateTree(rng *rand.Rand) *Tree {
	t := &Tree{RootMode: 0o755, RootMtime: explicitTime(rng)}
	dirs := []string{""}
	var files []string
	add := func(e TreeEntry) {
		if e.Mtime == 0 {
			e.Mtime = explicitTime(rng)
		}
		t.Entries = append(t.Entries, e)
	}
	dirModes := []uint32{0o755, 0o755, 0o755, 0o700, 0o775, 0o1777, 0o2755, 0o555}
	fileModes := []uint32{0o644, 0o644, 0o644, 0o600, 0o755, 0o444, 0o4755, 0o2755, 0o640, 0o000, 0o666}
	ndirs := 3 + rng.Intn(5)
	for i := 0; i < ndirs; i++ {
		parent := dirs[rng.Intn(len(dirs))]
		if strings.Count(parent, "/") >= 2 {
			parent = ""
		}
		p := path.Join(parent, fmt.Sprintf("d%d", i))
		add(TreeEntry{Path: p, Type: TypeDir, Mode: dirModes[rng.Intn(len(dirModes))], Uid: pickOwner(rng), Gid: pickOwner(rng)})
		dirs = append(dirs, p)
	}
	nfiles := 6 + rng.Intn(12)
	for i := 0; i < nfiles; i++ {
		e := TreeEntry{
			Path: path.Join(dirs[rng.Intn(len(dirs))], fmt.Sprintf("f%d", i)),
			Type: TypeFile, Mode: fileModes[rng.Intn(len(fileModes))],
			Size: pickSize(rng), Fill: byte(rng.Intn(256)),
			Uid: pickOwner(rng), Gid: pickOwner(rng),
		}
		e.Hole = e.Size > 0 && rng.Intn(8) == 0
		if rng.Intn(3) == 0 {
			e.Xattrs = append(e.Xattrs, [2]string{"user.a", fmt.Sprintf("v%d", rng.Intn(100))})
		}
		if rng.Intn(6) == 0 {
			e.Xattrs = append(e.Xattrs, [2]string{"user.b", strings.Repeat("x", rng.Intn(300))})
		}
		add(e)
		files = append(files, e.Path)
	}
	for j := range t.Entries {
		if t.Entries[j].Type == TypeDir && rng.Intn(4) == 0 {
			t.Entries[j].Xattrs = append(t.Entries[j].Xattrs, [2]string{"user.dir", fmt.Sprintf("d%d", j)})
		}
	}
	for i, n := 0, 1+rng.Intn(3); i < n; i++ {
		src := files[rng.Intn(len(files))]
		add(TreeEntry{Path: path.Join(dirs[rng.Intn(len(dirs))], fmt.Sprintf("h%d", i)), Type: TypeHardlink, LinkTo: src})
	}
	for i, n := 0, 2+rng.Intn(4); i < n; i++ {
		p := path.Join(dirs[rng.Intn(len(dirs))], fmt.Sprintf("l%d", i))
		var target string
		switch rng.Intn(4) {
		case 0:
			target = "missing"
		case 1:
			target = RelTarget(p, dirs[rng.Intn(len(dirs))])
		default:
			target = RelTarget(p, files[rng.Intn(len(files))])
		}
		add(TreeEntry{Path: p, Type: TypeSymlink, Target: target, Uid: pickOwner(rng), Gid: pickOwner(rng)})
	}
	if rng.Intn(2) == 0 {
		add(TreeEntry{Path: path.Join(dirs[rng.Intn(len(dirs))], "fifo"), Type: TypeFifo, Mode: 0o644})
	}
	return t
}

// RelTarget is a relative symlink target that, from a link at linkPath,
// reaches target ("" is the root).
func RelTarget(linkPath, target string) string {
	depth := strings.Count(linkPath, "/")
	up := strings.Repeat("../", depth)
	if target == "" {
		if up == "" {
			return "."
		}
		return strings.TrimSuffix(up, "/")
	}
	return up + target
}

func pickOwner(rng *rand.Rand) int {
	if rng.Intn(4) == 0 {
		return UserID
	}
	return 0
}

func pickSize(rng *rand.Rand) int {
	sizes := []int{0, 1, 5, 100, 4095, 4096, 4097, 10000, 65536, 200000}
	return sizes[rng.Intn(len(sizes))]
}

// explicitTime is a time with nanoseconds, well before ExplicitTimeLimit.
func explicitTime(rng *rand.Rand) int64 {
	return (1_000_000_000+rng.Int63n(200_000_000))*1e9 + rng.Int63n(1e9)
}

// Data is the content of a file entry (without its hole).
func (e *TreeEntry) Data() []byte {
	op := Op{Len: e.Size, Fill: e.Fill}
	return op.Data()
}

// Without returns a copy of t without the entry at path p, everything
// below it and the hard links to anything removed.
func (t *Tree) Without(p string) *Tree {
	out := &Tree{RootMode: t.RootMode, RootMtime: t.RootMtime}
	gone := map[string]bool{}
	for _, e := range t.Entries {
		if e.Path == p || strings.HasPrefix(e.Path, p+"/") || (e.Type == TypeHardlink && gone[e.LinkTo]) {
			gone[e.Path] = true
			continue
		}
		out.Entries = append(out.Entries, e)
	}
	return out
}

// Paths returns the paths of the tree's entries.
func (t *Tree) Paths() []string {
	var ps []string
	for _, e := range t.Entries {
		ps = append(ps, e.Path)
	}
	return ps
}

func (e *TreeEntry) String() string {
	switch e.Type {
	case TypeDir:
		return fmt.Sprintf("dir      %-14s mode=%04o owner=%d:%d mtime=%s%s", e.Path, e.Mode, e.Uid, e.Gid, timeString(e.Mtime), xattrsString(e.Xattrs))
	case TypeFile:
		hole := ""
		if e.Hole {
			hole = fmt.Sprintf(" after a %d-byte hole", HoleSize)
		}
		return fmt.Sprintf("file     %-14s mode=%04o owner=%d:%d size=%d fill=%#x%s mtime=%s%s", e.Path, e.Mode, e.Uid, e.Gid, e.Size, e.Fill, hole, timeString(e.Mtime), xattrsString(e.Xattrs))
	case TypeSymlink:
		return fmt.Sprintf("symlink  %-14s -> %q owner=%d:%d", e.Path, e.Target, e.Uid, e.Gid)
	case TypeHardlink:
		return fmt.Sprintf("hardlink %-14s = %s", e.Path, e.LinkTo)
	case TypeFifo:
		return fmt.Sprintf("fifo     %-14s mode=%04o", e.Path, e.Mode)
	}
	return fmt.Sprintf("? %s", e.Path)
}

func xattrsString(x [][2]string) string {
	var b strings.Builder
	for _, kv := range x {
		fmt.Fprintf(&b, " %s=%q", kv[0], abbrev(kv[1]))
	}
	return b.String()
}

func (t *Tree) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "root     mode=%04o mtime=%s\n", t.RootMode, timeString(t.RootMtime))
	for i := range t.Entries {
		b.WriteString(t.Entries[i].String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Materialize creates the tree in dir, which must exist and be empty.
// Every copy made from the same Tree is identical in names, types,
// contents, modes, owners, xattrs and times.
func (t *Tree) Materialize(dir string) error {
	for _, e := range t.Entries {
		p := dir + "/" + e.Path
		var err error
		switch e.Type {
		case TypeDir:
			err = unix.Mkdir(p, 0o700)
		case TypeFile:
			err = writeFile(p, &e)
		case TypeSymlink:
			err = unix.Symlink(e.Target, p)
		case TypeHardlink:
			err = unix.Link(dir+"/"+e.LinkTo, p)
		case TypeFifo:
			err = unix.Mknod(p, unix.S_IFIFO|0o600, 0)
		}
		if err != nil {
			return fmt.Errorf("materialize %s: %w", e.Path, err)
		}
		if e.Type == TypeHardlink {
			continue
		}
		for _, kv := range e.Xattrs {
			if err := unix.Lsetxattr(p, kv[0], []byte(kv[1]), 0); err != nil {
				return fmt.Errorf("materialize %s: setxattr %s: %w", e.Path, kv[0], err)
			}
		}
		if err := unix.Lchown(p, e.Uid, e.Gid); err != nil {
			return fmt.Errorf("materialize %s: %w", e.Path, err)
		}
		if e.Type != TypeSymlink {
			if err := unix.Chmod(p, e.Mode); err != nil {
				return fmt.Errorf("materialize %s: %w", e.Path, err)
			}
		}
	}
	// Times last, deepest first, so that creating children does not
	// change them.
	idx := make([]int, len(t.Entries))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		return strings.Count(t.Entries[idx[a]].Path, "/") > strings.Count(t.Entries[idx[b]].Path, "/")
	})
	for _, i := range idx {
		e := &t.Entries[i]
		if e.Type == TypeHardlink {
			continue
		}
		if err := setTimes(dir+"/"+e.Path, e.Mtime); err != nil {
			return fmt.Errorf("materialize %s: %w", e.Path, err)
		}
	}
	if err := unix.Chmod(dir, t.RootMode); err != nil {
		return fmt.Errorf("materialize root: %w", err)
	}
	if err := setTimes(dir, t.RootMtime); err != nil {
		return fmt.Errorf("materialize root: %w", err)
	}
	return nil
}

// MaterializeRoot gives dir the root attributes of t, for a directory
// that stands in for the tree's root (overlayfs takes its root's
// attributes from the upper directory).
func (t *Tree) MaterializeRoot(dir string) error {
	if err := unix.Chmod(dir, t.RootMode); err != nil {
		return err
	}
	return setTimes(dir, t.RootMtime)
}

func setTimes(p string, mtime int64) error {
	ts := []unix.Timespec{unix.NsecToTimespec(mtime - 1e9), unix.NsecToTimespec(mtime)}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func writeFile(p string, e *TreeEntry) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	off := int64(0)
	if e.Hole {
		off = HoleSize
	}
	if _, err := f.WriteAt(e.Data(), off); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
