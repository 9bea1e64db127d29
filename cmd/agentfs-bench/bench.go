package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// bench is one benchmark run.
type bench struct {
	cfg  *config
	tree *tree
	env  []string // of every command it runs (childEnv)
	log  io.Writer
	// views are the views not yet closed, for the cleanup at the end.
	views map[*view]bool
	buf   []byte
	seq   int // runs measured so far
	// agentfsOrig is --agentfs; cfg.agentfsBin is the copy that runs.
	// baselineOrig and cfg.baselineBin are the same for --baseline.
	agentfsOrig, baselineOrig string
}

// scratchDir holds files that runs leave for the end of the workload.
func (b *bench) scratchDir() string { return filepath.Join(b.runsDir(), "scratch") }

func (b *bench) logf(format string, a ...any) {
	fmt.Fprintf(b.log, format+"\n", a...)
}

// ioBuffer is the buffer of the sequential reads and writes (filled with
// non-zero bytes, for the writes).
func (b *bench) ioBuffer() []byte {
	if b.buf == nil {
		b.buf = make([]byte, ioChunk)
		for i := range b.buf {
			b.buf[i] = byte(i*7 + 1)
		}
	}
	return b.buf
}

func runBench(ctx context.Context, cfg *config, stdout, stderr io.Writer) (err error) {
	start := time.Now()
	b := &bench{cfg: cfg, env: childEnv(cfg.workdir), log: stderr, views: map[*view]bool{}}
	for _, d := range []string{"home", "tmp", "agentfs/run"} {
		if err := os.MkdirAll(filepath.Join(cfg.workdir, d), 0o755); err != nil {
			return err
		}
	}
	if err := b.cleanupLeftovers(); err != nil {
		return err
	}
	if cfg.agentfsBin != "" {
		b.agentfsOrig = cfg.agentfsBin
		if cfg.agentfsBin, err = b.snapshotBinary(b.agentfsOrig); err != nil {
			return fmt.Errorf("--agentfs: %w", err)
		}
		bin := cfg.agentfsBin
		defer func() { joinCleanup(&err, os.Remove(bin)) }()
	}
	if cfg.baselineBin != "" {
		b.baselineOrig = cfg.baselineBin
		if cfg.baselineBin, err = b.snapshotBinary(b.baselineOrig); err != nil {
			return fmt.Errorf("--baseline: %w", err)
		}
		bin := cfg.baselineBin
		defer func() { joinCleanup(&err, os.Remove(bin)) }()
	}
	defer func() {
		joinCleanup(&err, b.closeAll())
		joinCleanup(&err, os.RemoveAll(b.runsDir()))
	}()
	// The tree is the first two tables' and the memory row's (and
	// describes the run); the CLI's start and the system table alone
	// need none.
	if len(cfg.workloads) == 0 && len(cfg.snapOps) == 0 && !cfg.memory {
		b.tree = &tree{}
	} else if b.tree, err = b.prepareTree(ctx); err != nil {
		return err
	}
	rt := measureRoundTrips()
	rep := &report{
		Machine:     describeMachine(cfg.workdir),
		Config:      b.describeConfig(),
		Filesystems: b.probeFilesystems(ctx),
	}
	rep.Machine.RoundTrips = &rt
	b.logf("%s", strings.TrimSuffix(rt.markdown(), "\n"))
	var available []string
	for _, st := range rep.Filesystems {
		if st.Available {
			available = append(available, st.Name)
		}
	}
	for _, w := range cfg.workloads {
		res, err := b.runWorkload(ctx, w, available)
		if err != nil {
			return err
		}
		rep.Workloads = append(rep.Workloads, res)
	}
	agentfsOK := slices.Contains(available, fsAgentfs)
	for _, op := range cfg.snapOps {
		res, err := b.runSnapOp(ctx, op, agentfsOK)
		if err != nil {
			return err
		}
		rep.Snapshots = append(rep.Snapshots, res)
	}
	if cfg.memory {
		if rep.Memory, err = b.runMemory(ctx, agentfsOK); err != nil {
			return err
		}
	}
	for _, op := range cfg.sysOps {
		if !agentfsOK || os.Geteuid() != 0 {
			rep.Notes = append(rep.Notes, op.name+": skipped: it needs agentfs and root (agentfs run --system as a normal user has no passthrough)")
			continue
		}
		res, err := b.runSystemOp(ctx, op)
		if err != nil {
			return err
		}
		rep.System = append(rep.System, res)
	}
	if cfg.remote {
		if rep.Remote, err = b.runRemote(ctx, agentfsOK); err != nil {
			return err
		}
	}
	if cfg.cliStart && agentfsOK {
		if rep.CLIStart, err = b.runCLIStart(ctx); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		rep.Notes = append(rep.Notes, "not run as root: the page cache was not dropped before the runs in fresh views, so the times of untar and small-files depend on what was deleted just before them (see bench/README.md)")
	}
	rep.DurationSeconds = time.Since(start).Seconds()
	rep.finish()
	return rep.write(cfg.outDir, stdout)
}

// snapshotBinary copies the agentfs binary bin, and the agentfs-core
// beside it when there is one (the full program the front runs most
// commands in; a build older than the split has none), into a
// directory of their own in the work directory, and returns the copy
// of bin, which the run uses, so that a rebuild of the originals during
// the run cannot mix two versions in one table.
func (b *bench) snapshotBinary(bin string) (string, error) {
	base := filepath.Join(b.cfg.workdir, "bin")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	// A new directory each time: a daemon of an earlier run may still be
	// running the old copy.
	dir, err := os.MkdirTemp(base, "agentfs-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	copyTo := func(src, dst string) error {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o755)
	}
	front := filepath.Join(dir, "agentfs")
	if err := copyTo(bin, front); err != nil {
		return "", err
	}
	core := filepath.Join(filepath.Dir(bin), "agentfs-core")
	if _, err := os.Stat(core); err == nil {
		if err := copyTo(core, filepath.Join(dir, "agentfs-core")); err != nil {
			return "", err
		}
	}
	return front, nil
}

// joinCleanup adds the error of a cleanup step, if any, to *err: what a
// run leaves behind can slow the runs after it (see measure), so a
// cleanup that fails fails the run.
func joinCleanup(err *error, cerr error) {
	if cerr != nil {
		*err = errors.Join(*err, fmt.Errorf("cleaning up: %w", cerr))
	}
}

func (b *bench) describeConfig() configInfo {
	c := configInfo{
		Runs:         b.cfg.runs,
		Warmup:       b.cfg.warmup,
		Quick:        b.cfg.quick,
		BigFileBytes: b.cfg.bigSize,
		SmallFiles:   b.cfg.smallFiles,
		TreeFiles:    b.tree.TreeFiles,
		RmSubtree:    b.tree.RmSubtree,
		RmFiles:      b.tree.RmFiles,
		GrepString:   grepString,
		GoCache:      "a fresh copy per run of a cache holding only the standard library: each run compiles and vets the module's packages from the mount",
	}
	if len(b.cfg.snapOps) > 0 {
		c.SnapshotFiles, c.SnapshotManyFiles = b.cfg.snapFiles, b.cfg.snapManyFiles
	}
	c.AgentfsBinary, c.BaselineBinary = b.agentfsOrig, b.baselineOrig
	return c
}

// runWorkload runs w on each filesystem, interleaved: for each run
// (warm-ups first), each filesystem in turn.
func (b *bench) runWorkload(ctx context.Context, w *workload, filesystems []string) (_ *workloadResult, err error) {
	res := &workloadResult{Name: w.name, Title: w.title(b), FreshPerRun: w.fresh, Results: map[string]*fsResult{}}
	if !w.binding {
		filesystems = slices.DeleteFunc(slices.Clone(filesystems), boundVariant)
	}
	if w.needsRoot && os.Geteuid() != 0 {
		res.Skipped = "needs root (to drop the page cache)"
		b.logf("%s: skipped: %s", w.name, res.Skipped)
		return res, nil
	}
	b.logf("%s: %s", w.name, res.Title)
	if err := os.MkdirAll(b.scratchDir(), 0o755); err != nil {
		return nil, err
	}
	defer func() { joinCleanup(&err, os.RemoveAll(b.scratchDir())) }()
	shared := map[string]*view{}
	defer func() {
		for _, v := range shared {
			if err := b.closeView(v); err != nil {
				b.logf("%s: %v", w.name, err)
			}
		}
	}()
	for _, filesystem := range filesystems {
		r := &fsResult{}
		res.Results[filesystem] = r
		if w.fresh {
			continue
		}
		v, err := b.openView(ctx, filesystem, w)
		if v != nil {
			shared[filesystem] = v
		}
		if err != nil {
			r.Error = err.Error()
		}
	}
	if w.fill != "" {
		var paths []string
		for _, filesystem := range filesystems {
			if v := shared[filesystem]; v != nil && res.Results[filesystem].Error == "" {
				paths = append(paths, filepath.Join(v.root, w.fill))
			}
		}
		if err := fillTogether(ctx, paths, fillChunk, b.ioBuffer()); err != nil {
			return nil, fmt.Errorf("%s: filling the page cache: %w", w.name, err)
		}
	}
	for i := 0; i < b.cfg.warmup+b.cfg.runs; i++ {
		for _, filesystem := range rotate(filesystems, i) {
			r := res.Results[filesystem]
			if r.Error != "" {
				continue
			}
			secs, check, err := b.measure(ctx, w, filesystem, shared[filesystem])
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			label := fmt.Sprintf("run %d/%d", i-b.cfg.warmup+1, b.cfg.runs)
			if i < b.cfg.warmup {
				label = "warm-up"
			}
			if err != nil {
				r.Error = err.Error()
				b.logf("  %-8s %-18s failed: %v", label, filesystem, err)
				continue
			}
			b.logf("  %-8s %-18s %s", label, filesystem, formatSeconds(secs))
			if i < b.cfg.warmup {
				r.Warmup = append(r.Warmup, secs)
			} else {
				r.Runs = append(r.Runs, secs)
			}
			if r.Check == "" {
				r.Check = check
			}
		}
	}
	return res, nil
}

// fillChunk is how much of each view's file fillTogether reads at a
// time.
const fillChunk = 8 << 20

// fillTogether reads the files at paths (one file, as each view shows
// it) into the page cache together: chunk bytes of each in turn, the
// order rotated by one each round, until each is read whole.
//
// Where a file's pages land in memory decides how fast a cache-warm
// read of it is, and the first mount to fill its cache gets the worst
// memory: the page cache of a FUSE file is made of single 4 KiB pages
// (an ext4 file's of folios up to 2 MiB), taken from the free memory
// smallest pieces first, and a machine that has run for a while has a
// GiB or more of free memory in pieces of 4 to 32 KiB scattered
// everywhere (/proc/buddyinfo); the first 1 GiB file filled takes them,
// the next gets whole blocks in order. Read one after the other (the
// first table's warm-up, in column order), agentfs's copy of the 1 GiB
// file came out scattered (29% of its pages not next to the one before,
// by /proc/self/pagemap) and agentfs-baseline's nearly in order (5%),
// and reading the same build's copy took 40% more CPU in the mount
// filled first: an A/B of one build against itself showed it 1.1-2.3x
// slower as --agentfs than as --baseline, and every build slower as
// --agentfs. Filled in turns, the views share the scattered pieces.
func fillTogether(ctx context.Context, paths []string, chunk int64, buf []byte) error {
	files := make([]*os.File, len(paths))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	var size int64
	for i, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		files[i] = f
		st, err := f.Stat()
		if err != nil {
			return err
		}
		size = max(size, st.Size())
	}
	for _, step := range fillOrder(len(files), size, chunk) {
		if err := ctx.Err(); err != nil {
			return err
		}
		f := files[step.file]
		for off := step.off; off < step.off+chunk; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), step.off+chunk-off)], off)
			off += int64(n)
			if err == io.EOF {
				break
			} else if err != nil {
				return err
			}
		}
	}
	return nil
}

// A fillStep is one chunk fillTogether reads: of files[file], at off.
type fillStep struct {
	file int
	off  int64
}

// fillOrder is the order in which fillTogether reads n files of at most
// size bytes: in rounds, one chunk of each file a round, the files'
// order rotated by one each round.
func fillOrder(n int, size, chunk int64) []fillStep {
	var steps []fillStep
	for round := int64(0); round*chunk < size; round++ {
		for i := range n {
			steps = append(steps, fillStep{file: (i + int(round%int64(n))) % n, off: round * chunk})
		}
	}
	return steps
}

// measure runs w once on filesystem, in v or (for a workload that changes the
// tree) in a view of its own, and returns the time of w.run in seconds.
//
// Before a run in a fresh view, as root, the page cache is dropped and
// the run's inputs read back in (w.warm). The views before it deleted
// many files, and ext4 without a journal makes the creation of files
// slow for a minute after many deletes, for as long as the deleted
// inodes' table blocks are cached (ext4's recently_deleted: creating a
// file scans past every recently deleted inode). Without the drop, the
// time of an untar depended on how much had been deleted just before it
// (0.3 s to 3.5 s natively).
func (b *bench) measure(ctx context.Context, w *workload, filesystem string, v *view) (secs float64, check string, err error) {
	if w.fresh {
		if v, err = b.openView(ctx, filesystem, w); err != nil {
			return 0, "", errors.Join(err, b.closeView(v))
		}
		defer func() { err = errors.Join(err, b.closeView(v)) }()
	}
	b.seq++
	r := &runEnv{b: b, filesystem: filesystem, root: v.root, seq: b.seq}
	if w.prepare != nil {
		if err := w.prepare(ctx, r); err != nil {
			return 0, "", fmt.Errorf("preparing: %w", err)
		}
	}
	if w.fresh && os.Geteuid() == 0 {
		if err := dropCaches(dropPageCache); err != nil {
			return 0, "", err
		}
		if w.warm != nil {
			if err := w.warm(r); err != nil {
				return 0, "", fmt.Errorf("reading the inputs: %w", err)
			}
		}
	}
	unix.Sync() // no earlier writeback is charged to this run
	start := time.Now()
	check, err = w.run(ctx, r)
	secs = time.Since(start).Seconds()
	if w.finish != nil {
		if ferr := w.finish(r); ferr != nil && err == nil {
			err = fmt.Errorf("after the run: %w", ferr)
		}
	}
	return secs, check, err
}
