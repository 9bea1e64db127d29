package main

import (
	"context"
	"encoding/json"
	"fmt"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/agentfs/agentfs/procfs"
)

// The memory row: the agentfs daemon's resident memory after it served
// walks of a large tree. The target: under 150 MiB after a walk of a
// 100,000-file tree, and no growth from walk to walk, since the daemon
// forgets the inodes the kernel forgot. agentfs only: the other
// filesystems are the kernel's or keep no comparable state.
//
// The tree is a lower directory of empty files, memFilesPerDir to a
// directory, made once in the setup directory. A fresh mount walks it
// memWalks times, listing every directory and lstat'ing every file (as
// find and git status do); as root, the kernel's dentry and inode caches
// are dropped before every walk but the first, so that the kernel
// forgets the inodes and the daemon has to let them go. The figures are
// the daemon's VmRSS after each walk, and its peak (VmHWM), from /proc.
// A daemon that kept what the kernel forgot would grow from walk to
// walk; agentfs's rises and falls with Go's collector.

// memoryOp names the row, for --only.
const memoryOp = "memory"

const (
	fullMemFiles   = 100000
	quickMemFiles  = 10000
	memFilesPerDir = 1000
	memWalks       = 10
	memTargetBytes = 150 << 20
)

// memResult is the memory row.
type memResult struct {
	Files int `json:"files"`
	Walks int `json:"walks"`
	// AfterBytes is VmRSS after each walk; PeakBytes VmHWM at the end.
	AfterBytes []int64 `json:"rss_after_walk_bytes"`
	PeakBytes  int64   `json:"rss_peak_bytes"`
	// CachesDropped: the kernel's caches were dropped between walks.
	CachesDropped bool   `json:"caches_dropped"`
	TargetBytes   int64  `json:"target_bytes"`
	Skipped       string `json:"skipped,omitempty"`
}

// met reports whether the peak is under the target.
func (m *memResult) met() bool { return m.PeakBytes < m.TargetBytes }

// runMemory measures the memory row.
func (b *bench) runMemory(ctx context.Context, agentfsOK bool) (res *memResult, err error) {
	res = &memResult{Files: b.cfg.memFiles, Walks: memWalks, TargetBytes: memTargetBytes, CachesDropped: os.Geteuid() == 0}
	if !agentfsOK {
		res.Skipped = "agentfs did not run (see --fs and the notes)"
		b.logf("%s: skipped: %s", memoryOp, res.Skipped)
		return res, nil
	}
	b.logf("%s: the daemon's memory over %d walks of %s files", memoryOp, memWalks, thousands(res.Files))
	lower, err := b.memTree(res.Files)
	if err != nil {
		return nil, err
	}
	v, err := b.mountView(ctx, fsAgentfs, lower)
	defer func() {
		if cerr := b.closeView(v); cerr != nil && err == nil {
			res, err = nil, cerr
		}
	}()
	if err != nil {
		return nil, err
	}
	pid, err := b.daemonPid(ctx, v.root)
	if err != nil {
		return nil, err
	}
	for i := range memWalks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if i > 0 && res.CachesDropped {
			if err := dropCaches(dropAllCaches); err != nil {
				return nil, err
			}
		}
		n, err := walkStat(v.root)
		if err != nil {
			return nil, fmt.Errorf("%s: walk %d: %w", memoryOp, i+1, err)
		}
		if n != res.Files {
			return nil, fmt.Errorf("%s: walk %d saw %d files, want %d", memoryOp, i+1, n, res.Files)
		}
		rss, peak, err := daemonMemory(pid)
		if err != nil {
			return nil, err
		}
		// VmHWM and VmRSS are sampled apart: the peak is at least the
		// RSS seen.
		res.AfterBytes, res.PeakBytes = append(res.AfterBytes, rss), max(peak, rss, res.PeakBytes)
		b.logf("  walk %d: VmRSS %s, VmHWM %s", i+1, mebibytes(rss), mebibytes(peak))
	}
	return res, nil
}

// memTree returns the lower tree of n empty files, making it the first
// time (a stamp file marks it complete).
func (b *bench) memTree(n int) (string, error) {
	dir := filepath.Join(b.cfg.workdir, "setup", fmt.Sprintf("memtree-%d", n))
	stamp := dir + ".done"
	if _, err := os.Stat(stamp); err == nil {
		return dir, nil
	}
	b.logf("  making %s (%s empty files; once)", dir, thousands(n))
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i/memFilesPerDir))
		if i%memFilesPerDir == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return "", err
			}
		}
		f, err := os.OpenFile(filepath.Join(d, fmt.Sprintf("f%06d", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return "", err
		}
		f.Close()
	}
	return dir, os.WriteFile(stamp, nil, 0o644)
}

// walkStat lists every directory below root and lstats every entry; it
// returns the number of regular files.
func walkStat(root string) (int, error) {
	n := 0
	err := filepath.WalkDir(root, func(path string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err == nil && info.Mode().IsRegular() {
			n++
		}
		return err
	})
	return n, err
}

// daemonPid asks agentfs status for the pid of the daemon serving mnt.
func (b *bench) daemonPid(ctx context.Context, mnt string) (int, error) {
	cmd := exec.CommandContext(ctx, b.cfg.agentfsBin, "status", "-C", mnt, "--json")
	cmd.Env = b.env
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("agentfs status -C %s: %w", mnt, err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		return 0, fmt.Errorf("agentfs status -C %s --json: no daemon pid in %q", mnt, out)
	}
	return st.Pid, nil
}

// daemonMemory reads VmRSS and VmHWM of pid, in bytes.
func daemonMemory(pid int) (rss, peak int64, err error) {
	v, err := procfs.Status(pid, "VmRSS", "VmHWM")
	if err != nil {
		return 0, 0, fmt.Errorf("the daemon's memory: %w", err)
	}
	if rss, err = statusKiB("VmRSS", v[0]); err != nil {
		return 0, 0, err
	}
	if peak, err = statusKiB("VmHWM", v[1]); err != nil {
		return 0, 0, err
	}
	return rss, peak, nil
}

// statusKiB parses the value of a size in /proc/PID/status ("61440
// kB"; "" where the file has no such line), in bytes.
func statusKiB(name, val string) (int64, error) {
	if val == "" {
		return 0, fmt.Errorf("/proc status: no %s line", name)
	}
	f := strings.Fields(val)
	if len(f) != 2 || f[1] != "kB" {
		return 0, fmt.Errorf("/proc status: unexpected %s value %q", name, val)
	}
	kb, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc status: %s: %w", name, err)
	}
	return kb << 10, nil
}

// mebibytes prints n bytes in MiB, to a tenth.
func mebibytes(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// memoryMarkdown renders the memory row.
func (r *report) memoryMarkdown(b *strings.Builder) {
	m := r.Memory
	b.WriteString("## Memory (agentfs only)\n\n")
	if m.Skipped != "" {
		fmt.Fprintf(b, "Not measured: %s.\n", m.Skipped)
		return
	}
	verdict := "met"
	if !m.met() {
		verdict = "not met"
	}
	if len(m.AfterBytes) < 2 {
		b.WriteString("Not measured: fewer than two walks.\n")
		return
	}
	later := m.AfterBytes[1:]
	fmt.Fprintf(b, "| daemon's resident memory | after walk 1 | after walks 2–%d (lowest–highest) | after walk %d | peak | target |\n", len(m.AfterBytes), len(m.AfterBytes))
	b.WriteString("|---|---:|---:|---:|---:|---|\n")
	fmt.Fprintf(b, "| walks of a lower tree of %s files | %s | %s–%s | %s | %s | < %s: %s |\n\n",
		thousands(m.Files), mebibytes(m.AfterBytes[0]), mebibytes(slices.Min(later)), mebibytes(slices.Max(later)),
		mebibytes(later[len(later)-1]), mebibytes(m.PeakBytes), humanBytes(m.TargetBytes), verdict)
	fmt.Fprintf(b, "Each walk lists every directory of the tree (%s empty files, %s to a directory) in one fresh mount and lstats every file, as find and git status do; ",
		thousands(m.Files), thousands(memFilesPerDir))
	if m.CachesDropped {
		b.WriteString("the kernel's dentry and inode caches were dropped before every walk but the first, so the kernel forgot the inodes between walks. ")
	} else {
		b.WriteString("not run as root: the kernel's caches were not dropped between walks. ")
	}
	b.WriteString("VmRSS of the daemon after each walk; peak: its VmHWM (met: under the target).\n")
}
