package overlay

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// DirEntry is one name of a merged directory listing.
type DirEntry struct {
	Name string
	Ino  uint64 // equals the st_ino of the name's inode
	Mode uint32 // S_IFMT bits
}

// ReadDir returns the merged listing of directory n: "." and "..", the
// upper names (whiteouts hidden), then the lower names that no upper
// entry hides. The fs package serves one listing per open handle, so
// offsets stay stable for the handle's life (seekdir/telldir).
func (v *FS) ReadDir(n *Node) ([]DirEntry, error) {
	if n.mode != unix.S_IFDIR {
		return nil, unix.ENOTDIR
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	p, ok := n.pathLocked()
	parentIno := n.ino
	if n.parent != nil {
		parentIno = n.parent.ino
	}
	out := []DirEntry{{Name: ".", Ino: n.ino, Mode: unix.S_IFDIR}, {Name: "..", Ino: parentIno, Mode: unix.S_IFDIR}}
	if !ok {
		return out, nil // removed directory: empty
	}
	upper := v.dirs[p]
	for name, e := range upper {
		if !e.IsWhiteout() {
			out = append(out, DirEntry{Name: name, Ino: e.Ino, Mode: typeMode(e.Type)})
		}
	}
	if !n.hasLower {
		return out, nil
	}
	names, err := v.lowerNames(n.lower)
	if err != nil {
		return nil, err
	}
	for _, de := range names {
		if _, hidden := upper[de.Name]; !hidden {
			out = append(out, de)
		}
	}
	return out, nil
}

// lowerNames lists a lower directory (without "." and "..").
func (v *FS) lowerNames(lp string) ([]DirEntry, error) {
	f, err := v.openLower(lp, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []DirEntry
	buf := make([]byte, 32<<10)
	for {
		nb, err := unix.Getdents(int(f.Fd()), buf)
		if err != nil {
			return nil, err
		}
		if nb <= 0 {
			return v.unhiddenNames(lp, out), nil
		}
		out = parseDirents(buf[:nb], out, v.lowerDev)
	}
}

// parseDirents appends the linux_dirent64 records in b to out.
func parseDirents(b []byte, out []DirEntry, dev uint64) []DirEntry {
	for len(b) >= 19 {
		ino := binary.NativeEndian.Uint64(b[0:8])
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		typ := b[18]
		if reclen < 19 || reclen > len(b) {
			break
		}
		name := b[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		b = b[reclen:]
		s := string(name)
		if s == "." || s == ".." {
			continue
		}
		out = append(out, DirEntry{Name: s, Ino: ino, Mode: dtToMode(typ)})
	}
	return out
}

func dtToMode(t uint8) uint32 {
	switch t {
	case unix.DT_REG:
		return unix.S_IFREG
	case unix.DT_DIR:
		return unix.S_IFDIR
	case unix.DT_LNK:
		return unix.S_IFLNK
	case unix.DT_FIFO:
		return unix.S_IFIFO
	case unix.DT_SOCK:
		return unix.S_IFSOCK
	case unix.DT_CHR:
		return unix.S_IFCHR
	case unix.DT_BLK:
		return unix.S_IFBLK
	}
	return 0
}

var _ = unsafe.Sizeof(0)
var _ = branch.TypeFile
