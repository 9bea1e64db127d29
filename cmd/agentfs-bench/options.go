package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// The filesystems, in the order of the table's columns.
const (
	fsNative        = "native"
	fsOverlayfs     = "overlayfs"
	fsFuseOverlayfs = "fuse-overlayfs"
	fsAgentfs       = "agentfs"
	// fsAgentfsUntraced is agentfs mounted as agentfs is, with
	// --trace=false: no exec trace (package exectrace). It is in the
	// default list, beside agentfs, so that every make bench shows what
	// the trace costs (agentfs over agentfs-untraced, measured in the same
	// interleaved run; the issue allows it 5% of a traced workload).
	fsAgentfsUntraced = "agentfs-untraced"
	// fsAgentfsNohash is agentfs mounted with --hash=false: no worker
	// computes content hashes and roots after a snapshot. Every agentfs
	// mount takes a snapshot once mounted (as agentfs run takes its
	// pre-run snapshot), so that beside it agentfs shows what hashing
	// the whole tree in the background costs the workloads.
	fsAgentfsNohash = "agentfs-nohash"
	// fsAgentfsBaseline is agentfs run from --baseline, another build,
	// mounted the same way: an A/B comparison in one interleaved run.
	fsAgentfsBaseline = "agentfs-baseline"
	// fsAgentfsBound is agentfs while another process is bound to
	// another branch (root lookups then depend on the caller): the
	// cost of binding to unbound processes. It runs only the workloads
	// marked binding.
	fsAgentfsBound = "agentfs-bound"
	// fsAgentfsBoundRoot is the same with the other process bound
	// through the mount root (agentfs branch bind, exec --no-namespace).
	fsAgentfsBoundRoot = "agentfs-bound-root"
	// fsAgentfsQuota is agentfs with agentfs run's default limits
	// (--max-files 300000 --max-bytes 50%): files opened for writing
	// are then served by the daemon, not passed through. Not in the
	// default list: ask for it with --fs.
	fsAgentfsQuota = "agentfs-quota"
)

var allFilesystems = []string{fsNative, fsOverlayfs, fsFuseOverlayfs, fsAgentfs, fsAgentfsUntraced, fsAgentfsNohash, fsAgentfsQuota, fsAgentfsBaseline, fsAgentfsBound, fsAgentfsBoundRoot}

// defaultFilesystems is --fs's default: all but the baseline, which
// --baseline adds, and the quota variant.
var defaultFilesystems = slices.DeleteFunc(slices.Clone(allFilesystems), func(filesystem string) bool {
	return filesystem == fsAgentfsBaseline || filesystem == fsAgentfsQuota
})

// boundVariant reports whether filesystem is agentfs with another branch bound.
func boundVariant(filesystem string) bool {
	return filesystem == fsAgentfsBound || filesystem == fsAgentfsBoundRoot
}

// agentfsMount reports whether filesystem is mounted by an agentfs binary.
func agentfsMount(filesystem string) bool {
	return filesystem == fsAgentfs || filesystem == fsAgentfsUntraced || filesystem == fsAgentfsNohash || filesystem == fsAgentfsQuota || filesystem == fsAgentfsBaseline || boundVariant(filesystem)
}

// mountFlags are the flags of agentfs mount for filesystem, an agentfs
// filesystem, beyond --lower.
func mountFlags(filesystem string) []string {
	switch filesystem {
	case fsAgentfsUntraced:
		return []string{"--trace=false"}
	case fsAgentfsNohash:
		return []string{"--hash=false"}
	case fsAgentfsQuota:
		return []string{"--max-files", "300000", "--max-bytes", "50%"}
	}
	return nil
}

// Sizes of the full benchmark and of --quick.
const (
	fullBigSize     = 1 << 30
	fullSmallFiles  = 5000
	fullSpawns      = 5000
	quickBigSize    = 64 << 20
	quickSmallFiles = 500
	quickSpawns     = 1000
	quickRuns       = 2
	// The snapshot table's changed sets: the small one, and the large
	// one (cut by --quick: creating 100,000 files through the mount
	// takes about half a minute a run).
	fullSnapFiles      = 5000
	fullSnapManyFiles  = 100000
	quickSnapManyFiles = 10000
)

// defaultWorkdir holds the trees, mounts and uppers. Not /tmp: it is
// often a tmpfs, which would turn disk I/O into memory copies.
const defaultWorkdir = "/var/tmp/agentfs-bench"

// options are the command-line flags.
type options struct {
	runs, warmup int
	only         string
	filesystems  string
	workdir      string
	agentfs      string
	baseline     string
	out          string
	quick        bool
	versitygw    string
}

func (o *options) AddFlags(flags *pflag.FlagSet) {
	flags.IntVar(&o.runs, "runs", 5, "timed runs per workload and filesystem, and of each side of a snapshot-table row (`N`; default 2 with --quick)")
	flags.IntVar(&o.warmup, "warmup", 1, "untimed warm-up runs before the timed ones (`N`; snapshot-100k: none)")
	flags.StringVar(&o.only, "only", "", "run only these `WORKLOADS` (comma-separated): "+strings.Join(workloadNames(), ",")+
		"; or of the snapshot table (agentfs): "+strings.Join(snapOpNames(), ",")+" ("+snapshotGroup+": all of these)"+
		"; or "+memoryOp+" (the agentfs daemon's memory over walks of a large tree)"+
		"; or of the system table (agentfs run --system, as root): "+strings.Join(sysOpNames(), ",")+" ("+systemGroup+": all of these)"+
		"; or "+remoteOp+" (push and pull of a session of 10,000 files against a local S3 server)")
	flags.StringVar(&o.filesystems, "fs", strings.Join(defaultFilesystems, ","), "the filesystems to compare (`LIST`, comma-separated; must include native; with --baseline the default adds "+fsAgentfsBaseline+")")
	flags.StringVar(&o.workdir, "workdir", defaultWorkdir, "`DIR` for the trees, uppers and mounts (on a disk filesystem, not tmpfs)")
	flags.StringVar(&o.agentfs, "agentfs", "", "the agentfs binary (`PATH`; default: agentfs beside this program, else on $PATH)")
	flags.StringVar(&o.baseline, "baseline", "", "another agentfs binary to compare with --agentfs (`PATH`): mounted as agentfs is, as the filesystem "+fsAgentfsBaseline+" (the first table, the snapshot table, cli-start and the remote row's mounts)")
	flags.StringVar(&o.out, "out", "bench", "`DIR` for results.md, results.json and results.png")
	flags.StringVar(&o.versitygw, "versitygw", os.Getenv("AGENTFS_VERSITYGW"), "the S3 server of the remote row, Versity's gateway (`PATH`; default: AGENTFS_VERSITYGW, which make bench sets)")
	flags.BoolVar(&o.quick, "quick", false, "small sizes for development: a 64 MiB file, 500 small files, 1,000 programs spawned, 10,000 instead of 100,000 changed files and walked files, 2 runs")
}

// config is a validated benchmark request.
type config struct {
	runs, warmup int
	workloads    []*workload
	snapOps      []*snapOp
	filesystems  []string
	workdir      string
	agentfsBin   string
	baselineBin  string // --baseline, for fsAgentfsBaseline
	outDir       string
	quick        bool
	bigSize      int64
	smallFiles   int
	spawns       int // the programs the spawn workload starts
	// snapFiles and snapManyFiles are the sizes of the snapshot table's
	// changed sets.
	snapFiles, snapManyFiles int
	// memory: measure the daemon's memory (memory.go) over walks of a
	// tree of memFiles files.
	memory bool
	// cliStart: time the CLI's start (clistart.go).
	cliStart bool
	memFiles int
	// sysOps are the system table's rows (system.go), with their loops.
	sysOps                 []*sysOp
	bashLoops, pythonLoops int
	// remote: push and pull a session of remoteFiles files to the S3
	// server versitygw (remote.go).
	remote      bool
	remoteFiles int
	versitygw   string
}

// agentfsBinary is the binary that mounts filesystem, an agentfs filesystem
// (agentfsMount): --baseline's copy for the baseline, else --agentfs's.
func (c *config) agentfsBinary(filesystem string) string {
	if filesystem == fsAgentfsBaseline {
		return c.baselineBin
	}
	return c.agentfsBin
}

// config checks the flags and the tools they call for. flags tells which
// flags were given.
func (o *options) config(flags *pflag.FlagSet) (*config, error) {
	c := &config{runs: o.runs, warmup: o.warmup, quick: o.quick, bigSize: fullBigSize, smallFiles: fullSmallFiles, spawns: fullSpawns,
		snapFiles: fullSnapFiles, snapManyFiles: fullSnapManyFiles, memFiles: fullMemFiles, bashLoops: fullBashLoops, pythonLoops: fullPythonLoops,
		remoteFiles: fullRemoteFiles}
	if o.quick {
		c.bigSize, c.smallFiles, c.spawns, c.snapManyFiles, c.memFiles = quickBigSize, quickSmallFiles, quickSpawns, quickSnapManyFiles, quickMemFiles
		c.bashLoops, c.pythonLoops = quickBashLoops, quickPythonLoops
		c.remoteFiles = quickRemoteFiles
		if !flags.Changed("runs") {
			c.runs = quickRuns
		}
	}
	if c.runs < 1 {
		return nil, usagef("--runs %d: must be at least 1", c.runs)
	}
	if c.warmup < 0 {
		return nil, usagef("--warmup %d: must be 0 or more", c.warmup)
	}
	var err error
	var rest string
	c.sysOps, rest = splitSystemOps(o.only)
	if strings.TrimSpace(o.only) == "" || rest != "" {
		if c.workloads, c.snapOps, c.memory, err = selectWorkloads(rest); err != nil {
			return nil, err
		}
	}
	c.cliStart = strings.TrimSpace(o.only) == "" || slices.Contains(splitList(o.only), cliStartOp)
	c.remote = strings.TrimSpace(o.only) == "" || slices.Contains(splitList(o.only), remoteOp)
	if c.remote && o.versitygw != "" {
		// Missing, the row says so (make bench-deps installs it).
		if st, err := os.Stat(o.versitygw); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			c.versitygw = o.versitygw
		}
	}
	list := o.filesystems
	if o.baseline != "" && !flags.Changed("fs") {
		list += "," + fsAgentfsBaseline
	}
	if c.filesystems, err = selectFilesystems(list); err != nil {
		return nil, err
	}
	if o.baseline == "" && slices.Contains(c.filesystems, fsAgentfsBaseline) {
		return nil, usagef("--fs %s: %s needs --baseline PATH, the agentfs binary to compare with", o.filesystems, fsAgentfsBaseline)
	}
	if o.baseline != "" && !slices.Contains(c.filesystems, fsAgentfsBaseline) {
		return nil, usagef("--baseline %s: --fs %s leaves it out; add %s to --fs (or drop --fs)", o.baseline, o.filesystems, fsAgentfsBaseline)
	}
	if len(c.workloads) == 0 {
		// Only agentfs's tables: the other filesystems have no part in
		// them (and need not be probed).
		c.filesystems = slices.DeleteFunc(c.filesystems, func(filesystem string) bool {
			return filesystem != fsNative && filesystem != fsAgentfs && (!c.cliStart && len(c.snapOps) == 0 && !c.remote || filesystem != fsAgentfsBaseline)
		})
	}
	if slices.ContainsFunc(c.filesystems, boundVariant) && !slices.Contains(c.filesystems, fsAgentfs) {
		return nil, usagef("--fs %s and %s need agentfs too: the binding overhead is against agentfs", fsAgentfsBound, fsAgentfsBoundRoot)
	}
	if !slices.Contains(c.filesystems, fsAgentfs) {
		// The snapshot table, the memory row, the CLI's start, the
		// system table and the remote row are agentfs's alone.
		if (len(c.snapOps) > 0 || c.memory || c.cliStart || len(c.sysOps) > 0 || c.remote) && strings.TrimSpace(o.only) != "" {
			return nil, usagef("--only %q asks for agentfs's own figures (snapshots, memory, cli-start, system, remote): add agentfs to --fs", o.only)
		}
		c.snapOps, c.memory, c.cliStart, c.sysOps, c.remote = nil, false, false, nil, false
	}
	if slices.Contains(c.filesystems, fsAgentfs) || slices.Contains(c.filesystems, fsAgentfsUntraced) || slices.Contains(c.filesystems, fsAgentfsQuota) {
		if c.agentfsBin, err = findAgentfs(o.agentfs); err != nil {
			return nil, err
		}
	}
	if slices.Contains(c.filesystems, fsAgentfsBaseline) {
		if c.baselineBin, err = executable("baseline", o.baseline); err != nil {
			return nil, err
		}
	}
	if o.out == "" {
		return nil, usagef("--out is empty: give the directory for the results, e.g. --out bench")
	}
	if c.outDir, err = filepath.Abs(o.out); err != nil {
		return nil, err
	}
	if c.workdir, err = checkWorkdir(o.workdir); err != nil {
		return nil, err
	}
	if within(c.outDir, c.workdir) || within(c.workdir, c.outDir) {
		return nil, usagef("--out %s and --workdir %s overlap: keep the results out of the work directory (and the reverse)", c.outDir, c.workdir)
	}
	for _, tool := range []struct{ name, pkg string }{{"git", "git"}, {"find", "findutils"}, {"grep", "grep"}, {"tar", "tar"}, {"rm", "coreutils"}, {"cp", "coreutils"}, {"go", "golang (or put go on $PATH)"}} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return nil, fmt.Errorf("%s is not on $PATH: the workloads run it; install it (apt-get install %s)", tool.name, tool.pkg)
		}
	}
	return c, nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// selectWorkloads selects the workloads of the first table, the
// operations of the snapshot table and the memory row that --only
// names (all without it), each in table order.
func selectWorkloads(only string) ([]*workload, []*snapOp, bool, error) {
	if strings.TrimSpace(only) == "" {
		return workloads, snapOps, true, nil
	}
	want := map[string]bool{}
	for _, name := range splitList(only) {
		switch {
		case name == snapshotGroup:
			for _, op := range snapOps {
				want[op.name] = true
			}
		case name == memoryOp || name == cliStartOp:
			want[name] = true
		case name == remoteOp:
			// runRemote's: config reads it
		case findWorkload(name) == nil && findSnapOp(name) == nil:
			return nil, nil, false, usagef("--only %q: unknown workload %q; choose from %s, the snapshot table's %s (%s: all of them), %s, %s or %s",
				only, name, strings.Join(workloadNames(), ","), strings.Join(snapOpNames(), ","), snapshotGroup, memoryOp, cliStartOp, remoteOp)
		default:
			want[name] = true
		}
	}
	var ws []*workload
	for _, w := range workloads {
		if want[w.name] {
			ws = append(ws, w)
		}
	}
	var ops []*snapOp
	for _, op := range snapOps {
		if want[op.name] {
			ops = append(ops, op)
		}
	}
	return ws, ops, want[memoryOp], nil
}

func selectFilesystems(list string) ([]string, error) {
	want := map[string]bool{}
	for _, name := range splitList(list) {
		if !slices.Contains(allFilesystems, name) {
			return nil, usagef("--fs %q: unknown filesystem %q; choose from %s", list, name, strings.Join(allFilesystems, ","))
		}
		want[name] = true
	}
	if !want[fsNative] {
		return nil, usagef("--fs %q: must include native: every figure is a ratio to it", list)
	}
	var out []string
	for _, name := range allFilesystems {
		if want[name] {
			out = append(out, name)
		}
	}
	return out, nil
}

// checkWorkdir makes the work directory and refuses memory filesystems:
// the comparison is of filesystems over a disk.
func checkWorkdir(dir string) (string, error) {
	if dir == "" {
		return "", usagef("--workdir is empty: give a directory on a disk filesystem, e.g. --workdir %s", defaultWorkdir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if strings.ContainsAny(abs, ",:\\") {
		return "", usagef("--workdir %s: overlay mount options cannot hold a path with ',', ':' or '\\'; choose another directory", abs)
	}
	// The filesystem it is (or will be) on: that of its nearest
	// existing ancestor.
	existing := abs
	for {
		if _, err := os.Stat(existing); err == nil || existing == "/" {
			break
		}
		existing = filepath.Dir(existing)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(existing, &st); err != nil {
		return "", fmt.Errorf("--workdir %s: %w", abs, err)
	}
	switch name := fsTypeName(st.Type); name {
	case "tmpfs", "ramfs", "overlay", "fuse":
		return "", usagef("--workdir %s is on %s: the benchmark compares filesystems over a disk (and overlayfs cannot use an upper on overlay or FUSE); choose a directory on a disk filesystem, e.g. --workdir %s", abs, name, defaultWorkdir)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("--workdir %s: %w: choose a directory you can write", abs, err)
	}
	return filepath.EvalSymlinks(abs)
}

// findAgentfs resolves --agentfs, or looks beside this program and on
// $PATH.
func findAgentfs(flag string) (string, error) {
	if flag != "" {
		return executable("agentfs", flag)
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "agentfs")
		if st, err := os.Stat(beside); err == nil && !st.IsDir() {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("agentfs"); err == nil {
		return filepath.Abs(p)
	}
	return "", usagef("no agentfs binary: pass --agentfs PATH (make build makes bin/agentfs), or leave agentfs out with --fs")
}

// executable checks that path, given as --flag, is an agentfs binary
// one can run, and makes it absolute.
func executable(flag, path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", usagef("--%s %s: not an executable file: build it (make build) or give the path of an agentfs binary", flag, path)
	}
	return abs, nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
