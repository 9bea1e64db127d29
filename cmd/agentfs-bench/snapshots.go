package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The second table: agentfs's snapshot, branch and restore commands,
// timed as a user runs them (a command run from inside the mount, the
// CLI included), each beside cp -a of the same changed set on the
// native filesystem, measured in the same run and interleaved with it.
// Only agentfs has snapshots, so the table has no other filesystem;
// with --baseline the other build runs each row too, in its own mount
// and with its own CLI, interleaved with agentfs and cp -a.

// Names of the snapshot operations, for --only.
const (
	opSnapshot5k     = "snapshot-5k"
	opSnapshot100k   = "snapshot-100k"
	opSnapshotWrite  = "snapshot-1byte"
	opSnapshotCopyUp = "snapshot-copyup"
	opBranchCreate   = "branch-create"
	opBranch100k     = "branch-create-100k"
	opRestore5k      = "restore-5k"
	opRestore100k    = "restore-100k"
)

// snapshotGroup names every snapshot operation at once (--only snapshots).
const snapshotGroup = "snapshots"

// The sides of a row (sideBaseline with --baseline).
const (
	sideAgentfs  = "agentfs"
	sideBaseline = fsAgentfsBaseline
	sideCp       = "cp -a"
)

// The changed set: files of changeSize bytes in changesDir, changesPerDir
// to a directory (d000/f000000 ... d099/f099999), made the same way in a
// mount and natively.
const (
	changesDir    = "bench-changes"
	changesPerDir = 1000
	changeSize    = 1024
)

// The 100,000-file row has no warm-up: each of its runs creates 100,000
// files through the mount first, and with the native copy and the
// unmount (which deletes the store) takes about 35 s here. Every run is
// in a fresh mount anyway, and the row follows snapshot-5k, whose
// warm-up has run the same commands.
const manyWarmup = 0

// refSmallFile is the small file of the copy-up row's reference (a lower
// file of the tree, 35 bytes); refNewFile that of the other 1-byte row.
const (
	refSmallFile = "vetmod/go.mod"
	refNewFile   = "bench-small.txt"
)

// A snapOp is one row of the second table.
type snapOp struct {
	name  string
	title func(c *config) string
	// goal is the goal in seconds (0: none, see sizeIndependent);
	// seed its first target, shown beside it.
	goal float64
	seed string
	// sizeIndependent: the goal is a time that does not depend on the
	// file's size; the row's reference is the same operation on a small
	// file, measured in the same runs.
	sizeIndependent bool
	refTitle        string
	// files is the size of the changed set (small files); 0 means the
	// big file.
	files func(c *config) int
	// many: the 100,000-file row, without warm-up (manyWarmup).
	many bool
	// agentfs does one run in a fresh mount: the untimed preparation,
	// then the timed command (s.timed).
	agentfs func(ctx context.Context, s *snapRun) error
}

// snapRun is one agentfs run of a snapOp, in its own mount.
type snapRun struct {
	b   *bench
	bin string // the agentfs binary of the run (--agentfs or --baseline's)
	mnt string
	seq int
	// secs is the time of the row's command, ref that of the reference
	// (or -1); setup holds untimed steps worth reporting, in seconds.
	secs, ref float64
	setup     map[string]float64
	check     string
}

var snapOps = []*snapOp{
	{
		name: opSnapshot5k,
		title: func(c *config) string {
			return fmt.Sprintf("snapshot, %s changed files in the branch", thousands(c.snapFiles))
		},
		goal:  0.050,
		seed:  "≤ 300 ms, or ≤ 2 s by selective copy",
		files: func(c *config) int { return c.snapFiles },
		agentfs: func(ctx context.Context, s *snapRun) error {
			return s.snapshotAfterChanges(ctx, s.b.cfg.snapFiles)
		},
	},
	{
		name:  opSnapshot100k,
		title: func(c *config) string { return fmt.Sprintf("snapshot, %s changed files", thousands(c.snapManyFiles)) },
		goal:  1,
		files: func(c *config) int { return c.snapManyFiles },
		many:  true,
		agentfs: func(ctx context.Context, s *snapRun) error {
			return s.snapshotAfterChanges(ctx, s.b.cfg.snapManyFiles)
		},
	},
	{
		name: opSnapshotWrite,
		title: func(c *config) string {
			return "snapshot right after a 1-byte write to a " + humanBytes(c.bigSize) + " file (already copied up)"
		},
		sizeIndependent: true,
		refTitle:        "after a 1-byte write to a 1 KiB file",
		files:           func(*config) int { return 0 },
		agentfs:         snapshotAfterWrite,
	},
	{
		name: opSnapshotCopyUp,
		title: func(c *config) string {
			return "snapshot right after a 1-byte write that copied a " + humanBytes(c.bigSize) + " file up"
		},
		sizeIndependent: true,
		refTitle:        "after a 1-byte write that copied up a 35-byte file",
		files:           func(*config) int { return 0 },
		agentfs:         snapshotAfterCopyUp,
	},
	{
		name: opBranchCreate,
		title: func(c *config) string {
			return fmt.Sprintf("branch create --from a snapshot (%s changed files)", thousands(c.snapFiles))
		},
		goal:  0.010,
		files: func(c *config) int { return c.snapFiles },
		agentfs: func(ctx context.Context, s *snapRun) error {
			return branchCreate(ctx, s, s.b.cfg.snapFiles)
		},
	},
	{
		name: opBranch100k,
		title: func(c *config) string {
			return fmt.Sprintf("branch create --from a snapshot (%s changed files)", thousands(c.snapManyFiles))
		},
		goal:  0.010,
		files: func(c *config) int { return c.snapManyFiles },
		many:  true,
		agentfs: func(ctx context.Context, s *snapRun) error {
			return branchCreate(ctx, s, s.b.cfg.snapManyFiles)
		},
	},
	{
		name: opRestore5k,
		title: func(c *config) string {
			return fmt.Sprintf("restore of a %s-file difference (safety snapshot included)", thousands(c.snapFiles))
		},
		goal:  0.030,
		seed:  "≤ 200 ms",
		files: func(c *config) int { return c.snapFiles },
		agentfs: func(ctx context.Context, s *snapRun) error {
			return restoreDifference(ctx, s, s.b.cfg.snapFiles)
		},
	},
	{
		name: opRestore100k,
		title: func(c *config) string {
			return fmt.Sprintf("restore of a %s-file difference (safety snapshot included)", thousands(c.snapManyFiles))
		},
		goal:  0.300,
		files: func(c *config) int { return c.snapManyFiles },
		many:  true,
		agentfs: func(ctx context.Context, s *snapRun) error {
			return restoreDifference(ctx, s, s.b.cfg.snapManyFiles)
		},
	},
}

func snapOpName(op *snapOp) string { return op.name }

func snapOpNames() []string { return rowNames(snapOps, snapOpName) }

func findSnapOp(name string) *snapOp { return findRow(snapOps, snapOpName, name) }

// target is the row's target column: the goal (and the seed target),
// or for a size-independent row, that and its reference.
func (op *snapOp) target() string {
	switch {
	case op.sizeIndependent:
		return "independent of size"
	case op.seed != "":
		return "≤ " + formatGoal(op.goal) + " (seed target: " + op.seed + ")"
	}
	return "≤ " + formatGoal(op.goal)
}

// formatGoal prints a goal as the issue does: 50 ms, 1 s.
func formatGoal(s float64) string {
	if s >= 1 {
		return fmt.Sprintf("%g s", s)
	}
	return fmt.Sprintf("%g ms", math.Round(s*1e6)/1e3)
}

// runs is how many runs (and warm-ups) the row gets.
func (op *snapOp) runs(c *config) (runs, warmup int) {
	if op.many {
		return c.runs, min(c.warmup, manyWarmup)
	}
	return c.runs, c.warmup
}

// changedSet describes what cp -a copies.
func (op *snapOp) changedSet(c *config) string {
	if n := op.files(c); n > 0 {
		return fmt.Sprintf("%s files of 1 KiB in %d directories", thousands(n), (n+changesPerDir-1)/changesPerDir)
	}
	return "one " + humanBytes(c.bigSize) + " file"
}

// snapSides are the sides of each row: agentfs, the baseline when
// --baseline gives one, and cp -a.
func (b *bench) snapSides() []string {
	if b.cfg.baselineBin != "" && slices.Contains(b.cfg.filesystems, fsAgentfsBaseline) {
		return []string{sideAgentfs, sideBaseline, sideCp}
	}
	return []string{sideAgentfs, sideCp}
}

// runSnapOp runs op: for each run (warm-ups first), agentfs, the
// baseline (with --baseline) and cp -a in turn, the order rotating
// every run.
func (b *bench) runSnapOp(ctx context.Context, op *snapOp, agentfsOK bool) (_ *snapResult, err error) {
	runs, warmup := op.runs(b.cfg)
	res := &snapResult{
		Name: op.name, Title: op.title(b.cfg), Target: op.target(), SeedTarget: op.seed,
		ChangedSet: op.changedSet(b.cfg), Runs: runs, Warmup: warmup,
		Agentfs: &fsResult{}, Copy: &fsResult{},
	}
	if op.goal > 0 {
		g := op.goal
		res.GoalSeconds = &g
	}
	if op.sizeIndependent {
		res.Reference, res.ReferenceTitle = &fsResult{}, op.refTitle
	}
	sides := b.snapSides()
	if slices.Contains(sides, sideBaseline) {
		res.Baseline = &fsResult{}
	}
	if !agentfsOK {
		res.Skipped = "agentfs did not run (see --fs and the notes)"
		b.logf("%s: skipped: %s", op.name, res.Skipped)
		return res, nil
	}
	b.logf("%s: %s (cp -a: %s)", op.name, res.Title, res.ChangedSet)

	// The native changed set, made once; each cp -a run copies it into a
	// new directory.
	nat := filepath.Join(b.runsDir(), "snapshots-native")
	if err := b.resetDir(nat); err != nil {
		return nil, err
	}
	defer func() { joinCleanup(&err, os.RemoveAll(nat)) }()
	src := filepath.Join(b.tree.native(), bigFile)
	if n := op.files(b.cfg); n > 0 {
		src = filepath.Join(nat, changesDir)
		if err := writeChanges(ctx, filepath.Dir(src), 0, n, 1); err != nil {
			return nil, fmt.Errorf("%s: making the native changed set: %w", op.name, err)
		}
	}

	for i := 0; i < warmup+runs; i++ {
		label := fmt.Sprintf("run %d/%d", i-warmup+1, runs)
		if i < warmup {
			label = "warm-up"
		}
		for _, side := range rotate(sides, i) {
			r := map[string]*fsResult{sideAgentfs: res.Agentfs, sideBaseline: res.Baseline, sideCp: res.Copy}[side]
			if r.Error != "" {
				continue
			}
			b.seq++
			var s *snapRun
			var err error
			switch side {
			case sideAgentfs:
				s, err = b.measureSnapAgentfs(ctx, op, fsAgentfs)
			case sideBaseline:
				s, err = b.measureSnapAgentfs(ctx, op, fsAgentfsBaseline)
			default:
				s, err = b.measureCopy(ctx, op, src, filepath.Join(nat, fmt.Sprintf("copy-%d", b.seq)))
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil {
				r.Error = err.Error()
				b.logf("  %-8s %-16s failed: %v", label, side, err)
				continue
			}
			line := fmt.Sprintf("  %-8s %-16s %s", label, side, formatSeconds(s.secs))
			if s.ref >= 0 {
				line += fmt.Sprintf(" (reference %s)", formatSeconds(s.ref))
			}
			for _, k := range sortedKeys(s.setup) {
				line += fmt.Sprintf(" [%s %s, untimed]", strings.ReplaceAll(k, "_", " "), formatSeconds(s.setup[k]))
			}
			b.logf("%s", line)
			if r.Check == "" {
				r.Check = s.check
			}
			if side != sideAgentfs {
				// The reference and the untimed steps are agentfs's.
				s.ref, s.setup = -1, nil
			}
			if i < warmup {
				r.Warmup = append(r.Warmup, s.secs)
				if s.ref >= 0 && res.Reference != nil {
					res.Reference.Warmup = append(res.Reference.Warmup, s.ref)
				}
				continue
			}
			r.Runs = append(r.Runs, s.secs)
			if s.ref >= 0 && res.Reference != nil {
				res.Reference.Runs = append(res.Reference.Runs, s.ref)
			}
			for k, v := range s.setup {
				if res.Setup == nil {
					res.Setup = map[string][]float64{}
				}
				res.Setup[k] = append(res.Setup[k], v)
			}
		}
	}
	return res, nil
}

// measureSnapAgentfs does one run of op in a fresh mount (with its
// private store) of filesystem (agentfs, or agentfs-baseline: the
// other build mounts and runs the commands), unmounted afterwards.
func (b *bench) measureSnapAgentfs(ctx context.Context, op *snapOp, filesystem string) (s *snapRun, err error) {
	v, err := b.mountView(ctx, filesystem, b.tree.lower())
	if err != nil {
		return nil, errors.Join(err, b.closeView(v))
	}
	defer func() { err = errors.Join(err, b.closeView(v)) }()
	s = &snapRun{b: b, bin: b.cfg.agentfsBinary(filesystem), mnt: v.root, seq: b.seq, ref: -1}
	if err := op.agentfs(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// measureCopy times cp -a of src into dst (which does not exist yet),
// checks the copy and removes it.
func (b *bench) measureCopy(ctx context.Context, op *snapOp, src, dst string) (_ *snapRun, err error) {
	defer func() { joinCleanup(&err, os.RemoveAll(dst)) }()
	s := &snapRun{b: b, seq: b.seq, ref: -1}
	if err := b.beforeTimed(src); err != nil {
		return nil, err
	}
	start := time.Now()
	err = runQuiet(ctx, "", b.env, "cp", "-a", src, dst)
	s.secs = time.Since(start).Seconds()
	if err != nil {
		return nil, err
	}
	if n := op.files(b.cfg); n > 0 {
		got, err := countRegular(dst)
		if err != nil {
			return nil, err
		}
		if got != n {
			return nil, fmt.Errorf("cp -a copied %d files, want %d", got, n)
		}
		s.check = fmt.Sprintf("%d files", n)
	} else {
		st, err := os.Stat(dst)
		if err != nil {
			return nil, err
		}
		if st.Size() != b.tree.BigSize {
			return nil, fmt.Errorf("cp -a made a file of %d bytes, want %d", st.Size(), b.tree.BigSize)
		}
		s.check = humanBytes(st.Size())
	}
	return s, nil
}

// beforeTimed gets ready for a timed command: sync(2), so that no
// earlier writeback is charged to it, and as root the page cache
// dropped (the runs before deleted many files: see bench.measure) and
// the programs (agentfs, cp) and the command's input (inputs, if not "")
// read back in.
func (b *bench) beforeTimed(input string) error {
	if os.Geteuid() == 0 {
		if err := dropCaches(dropPageCache); err != nil {
			return err
		}
		progs := []string{b.cfg.agentfsBin}
		if b.cfg.baselineBin != "" {
			progs = append(progs, b.cfg.baselineBin)
		}
		if cp, err := exec.LookPath("cp"); err == nil {
			progs = append(progs, cp)
		}
		for _, p := range progs {
			if err := readAll(p); err != nil {
				return fmt.Errorf("reading %s: %w", p, err)
			}
		}
		if input != "" {
			if err := readTree(input); err != nil {
				return fmt.Errorf("reading the inputs: %w", err)
			}
		}
	}
	unix.Sync()
	return nil
}

// agentfs runs an agentfs command in the mount, untimed, and returns its
// output.
func (s *snapRun) agentfs(ctx context.Context, args ...string) (string, error) {
	return output(ctx, s.mnt, s.b.env, s.bin, args...)
}

// timed runs an agentfs command from the mount's root as a user would,
// after beforeTimed, and returns its time and output.
func (s *snapRun) timed(ctx context.Context, args ...string) (float64, string, error) {
	if err := s.b.beforeTimed(""); err != nil {
		return 0, "", err
	}
	start := time.Now()
	out, err := s.agentfs(ctx, args...)
	return time.Since(start).Seconds(), out, err
}

// awaitRoot waits until the mount's hash worker has computed snapshot
// id's root (snapshot show --json says root_status "computed"), or "off"
// where no worker runs.
func (s *snapRun) awaitRoot(ctx context.Context, id string) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		out, err := s.agentfs(ctx, "snapshot", "show", id, "--json")
		if err != nil {
			return err
		}
		var shown struct {
			RootStatus string `json:"root_status"`
		}
		if err := json.Unmarshal([]byte(out), &shown); err != nil {
			return fmt.Errorf("snapshot show %s --json: %w", id, err)
		}
		if shown.RootStatus != "pending" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the root of snapshot %s is still pending after 5 minutes", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// snapshotIDLine matches the id that snapshot create prints alone on
// its last line.
var snapshotIDLine = regexp.MustCompile(`^[0-9a-f]{8}$`)

// lastLine is the last non-empty line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// snapshot takes a snapshot, untimed, and returns its id.
func (s *snapRun) snapshot(ctx context.Context, label string) (string, error) {
	out, err := s.agentfs(ctx, "snapshot", "create", "-m", label)
	if err != nil {
		return "", err
	}
	return checkSnapshotID(out)
}

func checkSnapshotID(out string) (string, error) {
	id := lastLine(out)
	if !snapshotIDLine.MatchString(id) {
		return "", fmt.Errorf("snapshot create printed %q: no id on its last line", strings.TrimSpace(out))
	}
	return id, nil
}

// timedSnapshot times agentfs snapshot create -m x.
func (s *snapRun) timedSnapshot(ctx context.Context) (float64, error) {
	secs, out, err := s.timed(ctx, "snapshot", "create", "-m", "x")
	if err != nil {
		return 0, err
	}
	_, err = checkSnapshotID(out)
	return secs, err
}

// snapshotAfterChanges: n files created through the mount (untimed),
// then the snapshot, timed.
func (s *snapRun) snapshotAfterChanges(ctx context.Context, n int) error {
	if err := writeChanges(ctx, s.mnt, 0, n, 1); err != nil {
		return fmt.Errorf("creating the changed set in the mount: %w", err)
	}
	secs, err := s.timedSnapshot(ctx)
	s.secs, s.check = secs, fmt.Sprintf("%d files", n)
	return err
}

// snapshotAfterWrite: the big file and a 1 KiB file are copied up (or
// created) and a snapshot taken, untimed; then 1 byte is written to the
// 1 KiB file and a snapshot timed (the reference), and 1 byte to the big
// file (its bytes cached first) and a snapshot timed. Both files are in
// the branch's upper before their write; each write follows a snapshot
// that shares the file, so agentfs copies it (without reflink, the whole
// file): that write's time is reported, untimed in the row.
func snapshotAfterWrite(ctx context.Context, s *snapRun) error {
	big, small := filepath.Join(s.mnt, bigFile), filepath.Join(s.mnt, refNewFile)
	if err := writeByte(big, 'x'); err != nil {
		return err
	}
	if err := os.WriteFile(small, make([]byte, 1024), 0o644); err != nil {
		return err
	}
	if _, err := s.snapshot(ctx, "before the write"); err != nil {
		return err
	}
	if err := writeByte(small, 'y'); err != nil {
		return err
	}
	ref, err := s.timedSnapshot(ctx)
	if err != nil {
		return err
	}
	// The file's bytes cached, as when it was just written (the timed
	// snapshot dropped the page cache), for the reported write time.
	if err := readAll(big); err != nil {
		return err
	}
	start := time.Now()
	if err := writeByte(big, 'y'); err != nil {
		return err
	}
	write := time.Since(start).Seconds()
	secs, err := s.timedSnapshot(ctx)
	if err != nil {
		return err
	}
	s.secs, s.ref, s.setup = secs, ref, map[string]float64{"write_after_snapshot": write}
	return checkByte(big, 'y', s.b.tree.BigSize)
}

// snapshotAfterCopyUp: a 1-byte write copies a small lower file up and
// a snapshot is timed (the reference); then a 1-byte write copies the
// big file up (the lower file cached first, as for the copy-up workload;
// its time is reported, untimed in the row) and a snapshot is timed.
func snapshotAfterCopyUp(ctx context.Context, s *snapRun) error {
	big, small := filepath.Join(s.mnt, bigFile), filepath.Join(s.mnt, refSmallFile)
	if err := writeByte(small, 'x'); err != nil {
		return err
	}
	ref, err := s.timedSnapshot(ctx)
	if err != nil {
		return err
	}
	// The lower file cached, as for the copy-up workload.
	if err := readAll(filepath.Join(s.b.tree.lower(), bigFile)); err != nil {
		return err
	}
	start := time.Now()
	if err := writeByte(big, 'x'); err != nil {
		return err
	}
	copyUp := time.Since(start).Seconds()
	secs, err := s.timedSnapshot(ctx)
	if err != nil {
		return err
	}
	s.secs, s.ref, s.setup = secs, ref, map[string]float64{"copy_up": copyUp}
	return checkByte(big, 'x', s.b.tree.BigSize)
}

// branchCreate: the changed set created and a snapshot taken (untimed),
// then branch create --from it, timed.
func branchCreate(ctx context.Context, s *snapRun, n int) error {
	if err := writeChanges(ctx, s.mnt, 0, n, 1); err != nil {
		return fmt.Errorf("creating the changed set in the mount: %w", err)
	}
	id, err := s.snapshot(ctx, "branch point")
	if err != nil {
		return err
	}
	name := fmt.Sprintf("bench-%d", s.seq)
	secs, out, err := s.timed(ctx, "branch", "create", "--from", id, name)
	if err != nil {
		return err
	}
	if !strings.Contains(out, name) {
		return fmt.Errorf("branch create printed %q, which does not name the branch %s", strings.TrimSpace(out), name)
	}
	s.secs, s.check = secs, "created"
	return nil
}

// restoreDifference: n files created and snapshot A taken; then half of
// them rewritten and as many new files created (a difference of n
// files), all untimed; then agentfs restore A, timed. Restore takes a
// safety snapshot of the current state first: that is part of the time
// the user waits, so it is in the figure.
func restoreDifference(ctx context.Context, s *snapRun, n int) error {
	if err := writeChanges(ctx, s.mnt, 0, n, 1); err != nil {
		return fmt.Errorf("creating the files of snapshot A: %w", err)
	}
	id, err := s.snapshot(ctx, "A")
	if err != nil {
		return err
	}
	half := n / 2
	if err := writeChanges(ctx, s.mnt, 0, half, 2); err != nil {
		return fmt.Errorf("rewriting files after snapshot A: %w", err)
	}
	if err := writeChanges(ctx, s.mnt, n, n+(n-half), 2); err != nil {
		return fmt.Errorf("creating files after snapshot A: %w", err)
	}
	// The hash worker is done with A before the clock starts: its
	// hashing of n files is the setup's, not the restore's.
	if err := s.awaitRoot(ctx, id); err != nil {
		return err
	}
	secs, out, err := s.timed(ctx, "restore", id)
	if err != nil {
		return err
	}
	if !strings.Contains(out, id) {
		return fmt.Errorf("restore printed %q, which does not name snapshot %s", strings.TrimSpace(out), id)
	}
	// The mount shows A again: the rewritten files as they were, the new
	// ones gone.
	got, err := countRegular(filepath.Join(s.mnt, changesDir))
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("after the restore, %s holds %d files, want %d", changesDir, got, n)
	}
	data, err := os.ReadFile(filepath.Join(s.mnt, changesDir, changePath(0)))
	if err != nil {
		return err
	}
	if want := changeContent(0, 1); string(data) != string(want) {
		return fmt.Errorf("after the restore, %s is not as in snapshot A", changePath(0))
	}
	s.secs, s.check = secs, fmt.Sprintf("%d files", n)
	return nil
}

// changePath is the path of file i of the changed set, below changesDir.
func changePath(i int) string {
	return filepath.Join(fmt.Sprintf("d%03d", i/changesPerDir), fmt.Sprintf("f%06d", i))
}

// changeContent is file i's content in generation gen.
func changeContent(i int, gen byte) []byte {
	data := make([]byte, changeSize)
	for k := range data {
		data[k] = 'a' + byte((i+k+int(gen)*7)%26)
	}
	return data
}

// writeChanges writes files from to to-1 of the changed set below
// root/changesDir, in generation gen (creating them, or rewriting them
// in place).
func writeChanges(ctx context.Context, root string, from, to int, gen byte) error {
	for i := from; i < to; i++ {
		if i%changesPerDir == 0 || i == from {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(root, changesDir, filepath.Dir(changePath(i))), 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(root, changesDir, changePath(i)), changeContent(i, gen), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeByte writes b at offset 0 of path (open for writing, write,
// close), as the copy-up workload does.
func writeByte(path string, b byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s for writing: %w", path, err)
	}
	if _, err := unix.Pwrite(fd, []byte{b}, 0); err != nil {
		unix.Close(fd)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return unix.Close(fd)
}

// checkByte checks that path starts with b and has size bytes.
func checkByte(path string, b byte, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	got := make([]byte, 1)
	if _, err := f.ReadAt(got, 0); err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if got[0] != b || st.Size() != size {
		return fmt.Errorf("%s starts with %q and has %d bytes; want %q and %d", path, got[0], st.Size(), b, size)
	}
	return nil
}

// countRegular counts the regular files below dir.
func countRegular(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d iofs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	return n, err
}

// readTree reads path, a file or every file below a directory, into the
// page cache.
func readTree(path string) error {
	return filepath.WalkDir(path, func(p string, d iofs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			err = readAll(p)
		}
		return err
	})
}

func sortedKeys(m map[string]float64) []string {
	return slices.Sorted(maps.Keys(m))
}
