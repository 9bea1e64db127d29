package record

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// The files of a bundle.
const (
	ManifestName = "manifest.json"
	BlobsName    = "blobs.parquet"
)

// The operations of a file record, in the order a record lists them.
const (
	OpRead      = "read"
	OpWrite     = "write"
	OpExistence = "existence" // a stat-like check
	OpDirectory = "directory" // traversed or listed
	OpDelete    = "delete"
)

var opOrder = []string{OpRead, OpWrite, OpExistence, OpDirectory, OpDelete}

// Manifest is manifest.json.
type Manifest struct {
	Command         []string `json:"command"`
	ExitStatus      int      `json:"exit_status"`
	StartCwd        string   `json:"start_cwd"`
	Uid             uint32   `json:"uid"`
	Gid             uint32   `json:"gid"`
	GitRepositories []Repo   `json:"git_repositories"`
	Files           []File   `json:"files"`
}

// Repo is a Git repository the command observed.
type Repo struct {
	Root string `json:"root"`
	Head string `json:"head"`
}

// File is the record of one observed path.
type File struct {
	Path       string   `json:"path"`
	Operations []string `json:"operations"`
	Before     State    `json:"before"`
	After      State    `json:"after"`
	Git        *Git     `json:"git,omitempty"`
}

// State is a path's state: whether it exists and, when it does, its
// type, full st_mode, mtime (seconds) and the key of its contents in
// blobs.parquet, if captured. A deleted path's after-state is a
// tombstone.
type State struct {
	Exists    bool    `json:"exists"`
	Tombstone bool    `json:"tombstone,omitempty"`
	Type      string  `json:"type,omitempty"`
	Mode      *uint32 `json:"mode,omitempty"`
	Mtime     *int64  `json:"mtime,omitempty"`
	Blob      string  `json:"blob,omitempty"`
}

// Git is a path's Git classification.
type Git struct {
	InRepo       bool   `json:"in_repo"`
	Root         string `json:"root"`
	Head         string `json:"head"`
	RelativePath string `json:"relative_path"`
	Tracked      bool   `json:"tracked"`
	Dirty        bool   `json:"dirty"`
	Ignored      bool   `json:"ignored"`
}

// The types of a state.
const (
	TypeFile        = "file"
	TypeDirectory   = "directory"
	TypeSymlink     = "symlink"
	TypeFIFO        = "fifo"
	TypeSocket      = "socket"
	TypeCharDevice  = "char_device"
	TypeBlockDevice = "block_device"
)

// typeOf names the file type of st_mode m.
func typeOf(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return TypeFile
	case unix.S_IFDIR:
		return TypeDirectory
	case unix.S_IFLNK:
		return TypeSymlink
	case unix.S_IFIFO:
		return TypeFIFO
	case unix.S_IFSOCK:
		return TypeSocket
	case unix.S_IFCHR:
		return TypeCharDevice
	case unix.S_IFBLK:
		return TypeBlockDevice
	}
	return "unknown"
}

// stateOf is the state of an existing file with attributes st.
func stateOf(st *unix.Stat_t) State {
	mode, mtime := st.Mode, st.Mtim.Sec
	return State{Exists: true, Type: typeOf(st.Mode), Mode: &mode, Mtime: &mtime}
}

// BlobKey is the key of a state's contents: "before:/repo/input.txt".
func BlobKey(state, abs string) string { return state + ":" + jsonName(abs) }

// jsonName is a name as the manifest writes it: a name that is not
// UTF-8 is read as Latin-1 (each byte one character), so that the
// manifest stays valid JSON and distinct names stay distinct.
func jsonName(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(rune(s[i]))
	}
	return b.String()
}
