package branch

// Type is the file type of an upper entry.
type Type uint8

const (
	TypeWhiteout Type = iota // hides the name in every layer below
	TypeFile
	TypeDir
	TypeSymlink
	TypeFifo
	TypeSocket
	TypeChar
	TypeBlock
)

func (t Type) String() string {
	switch t {
	case TypeWhiteout:
		return "whiteout"
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	case TypeFifo:
		return "fifo"
	case TypeSocket:
		return "socket"
	case TypeChar:
		return "char"
	case TypeBlock:
		return "block"
	}
	return "unknown"
}

// Entry is a branch's record for one path: either a whiteout, or an
// upper inode whose attributes (mode, owner, times, size, xattrs) live
// on a real inode in the backstore, named Object.
//
// The path itself is the key under which the entry is stored; paths
// are relative to the mount root, "/"-separated, without a leading
// slash; the root directory is "".
type Entry struct {
	Type Type
	// Ino is the st_ino reported for this inode: the lower file's inode
	// number for copied-up files (so it is stable across copy-up), a
	// freshly allocated one for files created in the overlay.
	Ino uint64
	// Object names the backstore inode that holds this entry's
	// attributes and, for regular files, its data. Empty for whiteouts.
	Object string
	// Metacopy marks a regular file whose object holds attributes only:
	// the data still lives in the lower file at Origin (chmod, chown,
	// utimens, xattr changes and renames of lower files copy no data).
	Metacopy bool
	// Origin is the lower path of a metacopy file's data.
	Origin string
	// Opaque directories hide everything below them in lower layers.
	Opaque bool
	// Redirect is the lower path whose contents a renamed directory
	// merges with ("" means the lower path is the entry's own path,
	// unless Opaque).
	Redirect string
	// Epoch is the layer epoch in which Object was created or last
	// cloned. Below Layer.Epoch, the object may be shared with a
	// snapshot: clone it before changing it (see "Epochs" in the package
	// doc).
	Epoch uint64
}

// IsWhiteout reports whether e hides its name.
func (e *Entry) IsWhiteout() bool { return e.Type == TypeWhiteout }
