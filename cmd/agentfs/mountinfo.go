package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	Mountpoint string
	FsType     string // e.g. fuse.agentfs, ext4, tmpfs
	Source     string
	Dev        string // major:minor
}

// agentfsFsType is the type of agentfs mounts in mountinfo (go-fuse
// mounts as "fuse.NAME").
const agentfsFsType = "fuse.agentfs"

// mountinfoPath is read by mountAt; tests point it elsewhere.
var mountinfoPath = "/proc/self/mountinfo"

// mountAt returns the topmost mount whose mount point is dir (an
// absolute, clean path), if any.
func mountAt(dir string) (mountEntry, bool, error) {
	f, err := os.Open(mountinfoPath)
	if err != nil {
		return mountEntry{}, false, fmt.Errorf("reading the mount table: %w", err)
	}
	defer f.Close()
	var found mountEntry
	ok := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		e, valid := parseMountinfoLine(sc.Text())
		if valid && e.Mountpoint == dir {
			found, ok = e, true // later lines are mounted on top
		}
	}
	if err := sc.Err(); err != nil {
		return mountEntry{}, false, fmt.Errorf("reading the mount table: %w", err)
	}
	return found, ok, nil
}

// parseMountinfoLine parses "36 35 98:0 /root /mnt rw,noatime shared:1 - ext4 /dev/sda1 rw".
func parseMountinfoLine(line string) (mountEntry, bool) {
	fields := strings.Fields(line)
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
		return mountEntry{}, false
	}
	return mountEntry{
		Mountpoint: unescapeMountinfo(fields[4]),
		Dev:        fields[2],
		FsType:     fields[sep+1],
		Source:     unescapeMountinfo(fields[sep+2]),
	}, true
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in mountinfo paths.
func unescapeMountinfo(s string) string {
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
