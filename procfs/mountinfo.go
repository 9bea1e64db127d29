package procfs

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of a mountinfo file (proc(5)):
//
//	36 35 98:0 /root /mnt rw,noatime shared:1 - ext4 /dev/sda1 rw
type Mount struct {
	ID, Parent int
	Dev        string // major:minor
	Root       string // the directory of the filesystem mounted
	Mountpoint string
	Options    string // per-mount options
	FsType     string // ext4, tmpfs, fuse.agentfs, ...
	Source     string
}

// MountinfoPath is the mount table of this process's mount namespace.
const MountinfoPath = "/proc/self/mountinfo"

// Mounts reads the mount table at path (MountinfoPath, or another
// process's /proc/PID/mountinfo), in the kernel's order: a later line
// is mounted on top of an earlier one at the same mountpoint.
func Mounts(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	defer f.Close()
	var out []Mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m, ok := ParseMountinfoLine(sc.Text()); ok {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the mount table %s: %w", path, err)
	}
	return out, nil
}

// MountAt returns the topmost mount whose mountpoint is dir (an
// absolute, clean path) in the table at path.
func MountAt(path, dir string) (Mount, bool, error) {
	mounts, err := Mounts(path)
	if err != nil {
		return Mount{}, false, err
	}
	var found Mount
	ok := false
	for _, m := range mounts {
		if m.Mountpoint == dir {
			found, ok = m, true // later lines are mounted on top
		}
	}
	return found, ok, nil
}

// ParseMountinfoLine parses one line; false when it is not one.
func ParseMountinfoLine(line string) (Mount, bool) {
	fields := splitFields(line)
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if len(fields) < 6 || sep < 0 || sep+2 >= len(fields) {
		return Mount{}, false
	}
	id, err1 := strconv.Atoi(fields[0])
	parent, err2 := strconv.Atoi(fields[1])
	if err1 != nil || err2 != nil {
		return Mount{}, false
	}
	return Mount{
		ID:         id,
		Parent:     parent,
		Dev:        fields[2],
		Root:       UnescapeMountinfo(fields[3]),
		Mountpoint: UnescapeMountinfo(fields[4]),
		Options:    fields[5],
		FsType:     fields[sep+1],
		Source:     UnescapeMountinfo(fields[sep+2]),
	}, true
}

// UnescapeMountinfo undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in mountinfo paths.
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// splitFields splits on spaces, tabs and newlines (mountinfo escapes
// those inside paths).
func splitFields(s string) []string { return strings.Fields(s) }
