package integration

// Crash safety under load (docs/semantics.md, "Guarantees": crash
// safety): kill -9 of the daemon at random points while programs write
// the mount and take snapshots, then clear the dead mount, mount the
// same store again and check what the design promises. Here are the
// tests and the round driver; the model of what the load did is in
// crash_model_test.go, the load in crash_load_test.go, the checks after
// recovery in crash_check_test.go.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/procfs"
)

// crashWorkers is the number of goroutines writing the mount; worker i
// owns the subtree w<i> (lower files included), so that each path has
// one writer and the model of a subtree needs no locking.
const crashWorkers = 3

// TestCrashUnderLoad: with a kept store, worker goroutines write the
// mount (create, write, overwrite, pwrite, append, truncate, copy-ups of
// lower files, a lower hard-link pair, link, rename of files and of
// directories, the write-fsync-rename-fsyncdir pattern, unlink, mkdir,
// rmdir, fsync and fdatasync, fsync of directories) while another
// goroutine runs `agentfs snapshot create` now and then, half of the
// time with the workers paused so that the snapshot's exact content is
// known (then the mount is compared with the model at that moment, and
// the snapshot exported at once and compared too: a difference there is
// no crash's doing). Some of those snapshots are restored at once, with
// the load still paused (the tree stays the same, while the branch
// moves to a new layer over the snapshot, which the load then writes,
// and the restore's safety snapshot holds that tree too), and some get
// a branch created from them (agentfs branch create --from). At a random point the daemon is killed with SIGKILL,
// but not before the load did a minimum of work (crashMinimum: each
// worker an operation, later an acknowledged fsync, later a snapshot
// taken with the load paused; a round whose load stalled fails); the load
// fails on the dead mount, `agentfs unmount` clears it and the same
// store is mounted again. Then:
//
//   - agentfs fsck exits 0 and reports no problem (garbage left by the
//     crash is allowed: it is young, and gc's business);
//   - every path shows a state the load may have left: what was
//     acknowledged as durable (a write whose fsync returned, a name
//     whose directory was fsync'ed) or a later change that had not been
//     made durable yet; nothing else appears; paths that show one
//     inode number are names of one file;
//   - every snapshot whose create printed an id is listed with its
//     label, and at most one other (the create in flight at the kill);
//     each exports, and the export of one taken with the workers paused
//     holds exactly the tree of that moment, hard links joined;
//   - every branch whose create returned is listed and exports as the
//     snapshot it was created from, and at most one other branch of the
//     round appears (the create in flight at the kill);
//   - agentfs gc --grace 1s (the shortest), run once the crash's
//     garbage is older, succeeds; fsck then finds nothing at all, and
//     the mount shows the same tree as before gc;
//   - the lower tree is unchanged (the harness).
//
// The next round goes on from the recovered state on the same store, so
// that recovery is also tested after recovery. Kill points go from a few
// milliseconds after the load starts to seconds. AGENTFS_CRASH_SEED
// repeats a run's choices (the interleaving of the goroutines still
// varies); AGENTFS_CRASH_ROUNDS sets the number of rounds (8; 3 with
// -short, as in the repeated passes of make test, at a short, a middle
// and a long kill point);
// AGENTFS_CRASH_NO_LINKS=1 leaves hard links out (to test the rest on
// its own when hard links fail).
func TestCrashUnderLoad(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("AGENTFS_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("AGENTFS_CRASH_SEED=%q: %v", s, err)
		}
		seed = v
	}
	// Round r kills at a point of scale r%8 (crashDelay); -short keeps
	// a short, a middle and a long one.
	scales := []int{0, 1, 2, 3, 4, 5, 6, 7}
	if testing.Short() {
		scales = []int{1, 4, 6}
	}
	if s := os.Getenv("AGENTFS_CRASH_ROUNDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("AGENTFS_CRASH_ROUNDS=%q: want a positive number", s)
		}
		scales = scales[:0]
		for r := range v {
			scales = append(scales, r%8)
		}
	}
	rounds := len(scales)
	noLinks := os.Getenv("AGENTFS_CRASH_NO_LINKS") == "1"
	t.Logf("seed %d (AGENTFS_CRASH_SEED=%d repeats it), %d rounds, hard links: %v", seed, seed, rounds, !noLinks)
	rng := rand.New(rand.NewPCG(seed, 0))
	store := filepath.Join(t.TempDir(), "store")
	m := harness.NewMount(t, harness.WithStore(store), harness.WithLower(crashLowerTree(rng, !noLinks)...))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with AGENTFS_CRASH_SEED=%d", seed)
		}
	})
	c := &crashTest{t: t, m: m, seed: seed, pristine: map[uint64]bool{}, byRoot: map[string]*crashWorker{},
		snapSeen: map[string]bool{}, branchSeen: map[string]bool{}, tmp: t.TempDir(), noLinks: noLinks}
	for i := 0; i < crashWorkers; i++ {
		w := &crashWorker{c: c, root: fmt.Sprintf("w%d", i)}
		c.workers = append(c.workers, w)
		c.byRoot[w.root] = w
	}
	obs := c.observe(m.Dir, "the mount")
	for _, o := range obs {
		if o.kind == 'f' {
			c.pristine[o.ino] = true
		}
	}
	c.rebuild(obs)
	start := time.Now()
	for r := 0; r < rounds; r++ {
		c.round(r, crashDelay(rng, scales[r]))
		if t.Failed() {
			t.Fatalf("round %d failed; AGENTFS_CRASH_SEED=%d repeats the run", r, seed)
		}
	}
	c.recheckSnapshots()
	t.Logf("%d rounds in %v; %d snapshots acknowledged", rounds, time.Since(start).Round(time.Millisecond), len(c.snaps))
}

// TestCrashHardLinkAfterSnapshot: after a snapshot, one name of a file
// hard-linked in the mount is unlinked and the file is appended to and
// fsync'ed through the other. The unlinked name stays gone and the other
// has the data: in the mount, in a snapshot taken then, and after kill
// -9 and remount (TestCrashUnderLoad found this case).
func TestCrashHardLinkAfterSnapshot(t *testing.T) {
	m := harness.NewMount(t, harness.WithStore(filepath.Join(t.TempDir(), "store")))
	harness.WriteFile(t, m.Path("x"), "v1\n")
	if err := os.Link(m.Path("x"), m.Path("y")); err != nil {
		t.Fatal(err)
	}
	takeSnapshot(t, m.Dir, "two names")
	if err := os.Remove(m.Path("x")); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(m.Path("y"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("v2\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	check := func(dir, when string) {
		t.Helper()
		if got := harness.ListDir(t, dir); len(got) != 1 || got[0] != "y" {
			t.Errorf("%s: the names are %v, want [y] (x was unlinked)", when, got)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "y")); err != nil || string(b) != "v1\nv2\n" {
			t.Errorf("%s: y = %q (%v), want the fsync'ed %q", when, b, err, "v1\nv2\n")
		}
	}
	check(m.Dir, "in the mount")
	id := takeSnapshot(t, m.Dir, "after the append")
	export := filepath.Join(t.TempDir(), "export")
	mustC(t, m.Dir, "export", id, "--to", export)
	check(export, "in a snapshot taken after the append")
	killDaemon(t, m)
	remountDead(t, m)
	check(m.Dir, "after kill -9 and remount")
	checkFsckClean(t, m.Dir)
}

// crashDelay is the time from the start of the load to the kill in round
// r: in [lo, 3lo) with lo = 2ms·3^(r mod 8), at most 3s: from 2-6 ms in
// round 0 to 3-9 s in round 7.
func crashDelay(rng *rand.Rand, scale int) time.Duration {
	lo := 2 * time.Millisecond
	for i := 0; i < scale; i++ {
		lo *= 3
	}
	lo = min(lo, 3*time.Second)
	return lo + time.Duration(rng.Int64N(int64(2*lo)))
}

// crashLowerTree is the project: per worker small files, a few large
// ones (long copy-ups), a hard-linked pair and an empty directory.
func crashLowerTree(rng *rand.Rand, links bool) []harness.Entry {
	es := []harness.Entry{harness.LowerFile("README", "crash test project\n")}
	for i := 0; i < crashWorkers; i++ {
		w := fmt.Sprintf("w%d", i)
		file := func(p string, size int) {
			es = append(es, harness.LowerFile(p, string(crashData(rng, "<lower "+p+">", size))))
		}
		for j := 0; j < 10; j++ {
			file(fmt.Sprintf("%s/a%d", w, j), rng.IntN(6000))
		}
		for j := 0; j < 6; j++ {
			file(fmt.Sprintf("%s/src/b%d", w, j), rng.IntN(6000))
		}
		for j := 0; j < 4; j++ {
			file(fmt.Sprintf("%s/src/deep/c%d", w, j), rng.IntN(6000))
		}
		file(w+"/big1", 300<<10)
		file(w+"/src/big2", 1500<<10)
		file(w+"/hl1", 5000)
		if links {
			es = append(es, harness.LowerHardlink(w+"/src/hl2", w+"/hl1"))
		}
		es = append(es, harness.LowerDir(w+"/empty"))
	}
	return es
}

// crashTest is the state of the whole test.
type crashTest struct {
	t          *testing.T
	m          *harness.Mount
	seed       uint64
	workers    []*crashWorker
	byRoot     map[string]*crashWorker
	static     map[string]*crashName // paths no worker owns (the root's)
	pristine   map[uint64]bool       // st_ino of lower files never written
	snaps      []*crashSnap          // acknowledged, all rounds
	branches   []*crashSnap          // created from a paused snapshot, all rounds (crashLoad.branches)
	branchSeen map[string]bool       // branches listed that no create acknowledged
	snapSeen   map[string]bool       // ids listed so far (acknowledged or not)
	tmp        string                // for exports
	noLinks    bool                  // no hard links in the load nor in the project
	nextID     atomic.Int64
	seq        atomic.Int64 // orders the lines of the logs
	logs       []string     // what the load did, round by round, for a failure's report
}

// ---------------------------------------------------------------------
// One round: load, kill, recover, check.

func (c *crashTest) round(r int, delay time.Duration) {
	t := c.t
	t.Helper()
	pid := c.m.Status.Pid
	if pid <= 0 || !procfs.Alive(pid) {
		t.Fatalf("round %d: no running daemon (status gave pid %d)", r, pid)
	}
	l := &crashLoad{c: c, round: r, stopCh: make(chan struct{})}
	for i, w := range c.workers {
		w.l, w.rng, w.written, w.log = l, rand.New(rand.NewPCG(c.seed, uint64(r*16+i+1))), nil, nil
		w.ops.Store(0)
		w.acks.Store(0)
		l.wg.Add(1)
		go w.run()
	}
	l.wg.Add(1)
	go l.snapshots(rand.New(rand.NewPCG(c.seed, uint64(r*16))))

	start := time.Now()
	time.Sleep(delay)
	// Not before the load did a minimum of work: polled every
	// millisecond, so that the short kill points stay short.
	least := crashMinimum(delay)
	for stall := time.Now().Add(30 * time.Second); l.short(least) != "" && time.Now().Before(stall); { // against a stall, not a timing check
		time.Sleep(time.Millisecond)
	}
	reached := time.Since(start)
	if s := l.short(least); s != "" {
		t.Errorf("round %d: the load stalled: %s, %v after it started", r, s, reached.Round(time.Millisecond))
	}
	l.killed.Store(true)
	killed := time.Now()
	killDaemon(t, c.m)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done: // the load failed on the dead mount
	case <-time.After(5 * time.Second):
		close(l.stopCh)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the load hangs on the dead mount", r)
		}
	}
	var ops, acks int64
	for _, w := range c.workers {
		ops, acks = ops+w.ops.Load(), acks+w.acks.Load()
	}

	remountDead(t, c.m)
	garbage := c.fsck(r, "after kill -9 and remount", false)
	obs := c.observe(c.m.Dir, "the mount after kill -9 and remount")
	problems, lost := c.check(obs)
	for _, p := range problems {
		t.Errorf("round %d (kill after %v): after kill -9 and remount: %s", r, delay, p)
	}
	c.keepLogs(l)
	if t.Failed() {
		c.saveLogs()
	}
	newSnaps := c.checkSnapshots(l)
	c.checkBranches(l, "after kill -9 and remount")

	// gc's shortest grace is 1s: wait until what the crash left is older.
	time.Sleep(time.Until(killed.Add(1500 * time.Millisecond)))
	if res := agentfsC(t, c.m.Dir, "gc", "--grace", "1s"); res.Code != 0 {
		t.Errorf("round %d: agentfs gc after the crash:\n%s", r, res)
	}
	c.fsck(r, "after gc", true)
	after := c.observe(c.m.Dir, "the mount after gc")
	for _, d := range crashDiff(obs, after) {
		t.Errorf("round %d: gc changed the mount: %s", r, d)
	}
	compared := 0
	for _, s := range newSnaps {
		if c.export(s, "") {
			compared++
		}
	}
	if compared < least.paused {
		t.Errorf("round %d: %d snapshots compared with the load's model after recovery, want at least %d", r, compared, least.paused)
	}

	for _, w := range c.workers {
		for _, ino := range w.written {
			delete(c.pristine, ino)
		}
	}
	c.rebuild(obs)
	t.Logf("round %d: kill after %v (drawn %v); %d operations, %d acknowledged fsyncs, %d snapshots acknowledged (%d by restores), %d compared with the model, %d branches created, %d merges; load ended %s; "+
		"after recovery: %d objects of garbage, %d paths lost a change not yet durable (allowed)",
		r, reached.Round(time.Microsecond), delay.Round(time.Microsecond), ops, acks, len(l.acked), l.restores, compared, len(l.branches), l.merges, strings.Join(l.ends, ", "), garbage, lost)
}

// crashWork is a minimum of work a round's load must have done before
// the kill, so that a round whose workers or snapshots stalled fails
// instead of testing recovery from next to nothing.
type crashWork struct {
	ops    int64 // operations done, by each worker
	acks   int64 // fsyncs acknowledged, to each worker
	paused int   // snapshots taken with the load paused (compared with the model)
}

// crashMinimum is the minimum of work for a kill after delay: from the
// first moments, one operation by each worker; from 150 ms (dozens of
// operations each), an acknowledged fsync each too; from 450 ms (the
// first snapshot comes 50-300 ms after the start, with the load
// paused), a snapshot taken with the load paused.
func crashMinimum(delay time.Duration) crashWork {
	w := crashWork{ops: 1}
	if delay >= 150*time.Millisecond {
		w.acks = 1
	}
	if delay >= 450*time.Millisecond {
		w.paused = 1
	}
	return w
}

// short says what of least the load has not done yet, or "" when it has
// done it all.
func (l *crashLoad) short(least crashWork) string {
	var out []string
	for _, w := range l.c.workers {
		if n := w.ops.Load(); n < least.ops {
			out = append(out, fmt.Sprintf("worker %s did %d operations, want at least %d", w.root, n, least.ops))
		}
		if n := w.acks.Load(); n < least.acks {
			out = append(out, fmt.Sprintf("worker %s had %d fsyncs acknowledged, want at least %d", w.root, n, least.acks))
		}
	}
	l.mu.Lock()
	paused := 0
	for _, s := range l.acked {
		if s.want != nil {
			paused++
		}
	}
	l.mu.Unlock()
	if paused < least.paused {
		out = append(out, fmt.Sprintf("%d snapshots taken with the load paused, want at least %d", paused, least.paused))
	}
	return strings.Join(out, "; ")
}

// keepLogs adds the logs of a round to the test's.
func (c *crashTest) keepLogs(l *crashLoad) {
	for _, w := range c.workers {
		c.logs = append(c.logs, fmt.Sprintf("round %d, worker %s:\n%s\n", l.round, w.root, strings.Join(w.log, "\n")))
	}
	c.logs = append(c.logs, fmt.Sprintf("round %d, snapshots:\n%s\n", l.round, strings.Join(l.log, "\n")))
}

// killDaemon kills the daemon of m with SIGKILL and waits until it is
// gone.
func killDaemon(t *testing.T, m *harness.Mount) {
	t.Helper()
	pid := m.Status.Pid
	mustf(t, syscall.Kill(pid, syscall.SIGKILL), "kill -9 of the daemon (pid %d)", pid)
	if !harness.WaitFor(func() bool { return !procfs.Alive(pid) }) {
		t.Fatalf("the daemon (pid %d) survived SIGKILL", pid)
	}
}

// remountDead clears the dead mount m with agentfs unmount and mounts
// its store again.
func remountDead(t *testing.T, m *harness.Mount) {
	t.Helper()
	if res := harness.Run(t, "unmount", m.Dir); res.Code != 0 {
		t.Fatalf("agentfs unmount of the dead mount:\n%s", res)
	}
	if harness.IsMounted(m.Dir) {
		t.Fatalf("%s is still mounted after agentfs unmount of the dead mount", m.Dir)
	}
	m.Mount()
}

// saveLogs writes what the load did to a file kept after the test, and
// says where.
func (c *crashTest) saveLogs() {
	p := filepath.Join(os.TempDir(), fmt.Sprintf("agentfs-crash-%d.log", c.seed))
	if err := os.WriteFile(p, []byte(strings.Join(c.logs, "\n")), 0o644); err != nil {
		c.t.Logf("writing the operations log: %v", err)
		return
	}
	c.t.Logf("what the load did, round by round, is in %s", p)
}
