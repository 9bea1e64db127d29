package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// machineInfo describes where the numbers were measured.
type machineInfo struct {
	Kernel      string `json:"kernel"`
	CPU         string `json:"cpu"`
	Cores       int    `json:"cores"`
	MemoryBytes int64  `json:"memory_bytes"`
	Date        string `json:"date"`
	GoVersion   string `json:"go_version"`
	// Workdir is where the trees and uppers live; WorkdirFs its filesystem.
	Workdir   string `json:"workdir"`
	WorkdirFs string `json:"workdir_fs"`
	// Reflink tells whether FICLONE works in the work directory (the
	// agentfs backstore and the lower are both there).
	Reflink       bool   `json:"reflink"`
	ReflinkDetail string `json:"reflink_detail"`
	// RoundTrips is the cost of a hand-over between two threads, measured
	// at the start of the run (nil where it was not measured).
	RoundTrips *roundTrips `json:"pipe_round_trips,omitempty"`
}

func describeMachine(workdir string) machineInfo {
	m := machineInfo{
		Cores:     runtime.NumCPU(),
		Date:      time.Now().UTC().Format(time.RFC3339),
		GoVersion: goVersion(),
		Workdir:   workdir,
		CPU:       cpuModel(),
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		m.Kernel = unix.ByteSliceToString(uts.Sysname[:]) + " " + unix.ByteSliceToString(uts.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
	}
	var st unix.Statfs_t
	if unix.Statfs(workdir, &st) == nil {
		m.WorkdirFs = fsTypeName(st.Type)
	}
	m.Reflink, m.ReflinkDetail = probeReflink(workdir)
	return m
}

// goVersion is the version of the go command the workloads run.
func goVersion() string {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimSpace(string(out))
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// probeReflink tries FICLONE between two temporary files in dir.
func probeReflink(dir string) (bool, string) {
	src, err := os.CreateTemp(dir, "reflink-src-")
	if err != nil {
		return false, err.Error()
	}
	defer func() { _ = os.Remove(src.Name()) }() // a 64 KiB probe file: a leftover changes no figure
	defer src.Close()
	if _, err := src.Write(make([]byte, 64<<10)); err != nil {
		return false, err.Error()
	}
	if err := src.Sync(); err != nil {
		return false, err.Error()
	}
	dst, err := os.CreateTemp(dir, "reflink-dst-")
	if err != nil {
		return false, err.Error()
	}
	defer func() { _ = os.Remove(dst.Name()) }() // an empty probe file: a leftover changes no figure
	defer dst.Close()
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		return false, "FICLONE: " + err.Error()
	}
	return true, "FICLONE works"
}

// fsTypeNames names the statfs f_types the benchmark may meet.
var fsTypeNames = map[int64]string{
	unix.EXT4_SUPER_MAGIC:      "ext4",
	unix.XFS_SUPER_MAGIC:       "xfs",
	unix.BTRFS_SUPER_MAGIC:     "btrfs",
	unix.F2FS_SUPER_MAGIC:      "f2fs",
	0x2fc12fc1:                 "zfs",
	unix.TMPFS_MAGIC:           "tmpfs",
	unix.RAMFS_MAGIC:           "ramfs",
	unix.OVERLAYFS_SUPER_MAGIC: "overlay",
	unix.FUSE_SUPER_MAGIC:      "fuse",
}

// fsTypeName names a statfs f_type.
func fsTypeName(t int64) string {
	if name, ok := fsTypeNames[t]; ok {
		return name
	}
	return fmt.Sprintf("0x%x", t)
}

// toolVersion runs "name args..." and returns the first line it prints
// that holds "version" (fuse-overlayfs prints fusermount3's first).
func toolVersion(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		if strings.Contains(line, "version") && !strings.Contains(line, "fusermount") {
			return strings.TrimSpace(line)
		}
	}
	return strings.TrimSpace(lines[0])
}

// Arguments of dropCaches.
const (
	dropPageCache = "1"
	dropAllCaches = "3" // also dentries and inodes
)

// dropCaches writes back dirty data and drops the caches that what says
// (root only).
func dropCaches(what string) error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte(what), 0); err != nil {
		return fmt.Errorf("dropping caches: %w", err)
	}
	return nil
}

// isMountRoot reports whether dir is the root of a mount.
func isMountRoot(dir string) bool {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &stx); err != nil {
		// A FUSE mount whose daemon died answers ENOTCONN (ECONNABORTED
		// while the kernel aborts the connection): still a mount.
		return errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED)
	}
	return stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// humanBytes formats a size as 1 GiB, 64 MiB.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
