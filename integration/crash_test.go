package integration

// Crash safety under load (DESIGN.md, "Crash safety"): kill -9 of the
// daemon at random points while programs write the mount and take
// snapshots, then clear the dead mount, mount the same store again and
// check what the design promises.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/procfs"
	"golang.org/x/sys/unix"
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
// no crash's doing). At a random point the daemon is killed with SIGKILL; the load
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
		snapSeen: map[string]bool{}, tmp: t.TempDir(), noLinks: noLinks}
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

// crashData is size bytes: tag, a newline, then pseudo-random bytes (a
// file's first line says which operation wrote it).
func crashData(rng *rand.Rand, tag string, size int) []byte {
	b := make([]byte, size)
	i := copy(b, tag+"\n")
	for ; i < size; i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < size; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// crashSize is the size of a file the load writes: mostly small, some
// up to a megabyte.
func crashSize(rng *rand.Rand) int {
	switch k := rng.IntN(100); {
	case k < 55:
		return rng.IntN(2048)
	case k < 92:
		return 2048 + rng.IntN(60000)
	default:
		return 200000 + rng.IntN(800000)
	}
}

func crashSum(b []byte) string { return fmt.Sprintf("%x", sha256.Sum256(b)) }

// ---------------------------------------------------------------------
// The model: per path, the state it has now and every state a crash may
// leave it in (the last durable one and all later ones).

// crashInode is a regular file of the model.
type crashInode struct {
	id       int64  // unique in the test
	ino      uint64 // st_ino when seen in the mount at the start of the round; 0 for files made in it
	data     []byte // its content: durable, unless uncertain
	sum      string
	pristine bool // a lower file not written yet: writing it copies it up
	// uncertain: a write to it did not finish (the kill came); a crash
	// may leave any content.
	uncertain bool
}

func (i *crashInode) setData(b []byte) { i.data, i.sum, i.uncertain = b, crashSum(b), false }

// crashBinding is what a path names: nothing (kind 0), a directory
// ('d') or a file ('f').
type crashBinding struct {
	kind byte
	ino  *crashInode
}

func (b crashBinding) String() string {
	switch b.kind {
	case 0:
		return "absent"
	case 'd':
		return "a directory"
	}
	if b.ino.uncertain {
		return fmt.Sprintf("file #%d (any content: a write was in flight)", b.ino.id)
	}
	return fmt.Sprintf("file #%d %s", b.ino.id, describeData(b.ino.data))
}

// describeData says what a content is: size, hash and first line.
func describeData(b []byte) string {
	head := b
	if i := strings.IndexByte(string(head), '\n'); i >= 0 {
		head = head[:i]
	}
	if len(head) > 60 {
		head = head[:60]
	}
	return fmt.Sprintf("(%d bytes, sha256 %.12s, %q)", len(b), crashSum(b), head)
}

// crashName is one path of the model.
type crashName struct {
	cur      crashBinding
	possible []crashBinding // cur included
}

func (n *crashName) add(b crashBinding) {
	for _, p := range n.possible {
		if p == b {
			return
		}
	}
	n.possible = append(n.possible, b)
}

func (n *crashName) set(b crashBinding) { n.cur = b; n.add(b) }

// durable: the current state is what a crash leaves.
func (n *crashName) durable() { n.possible = []crashBinding{n.cur} }

// crashObs is a path as seen in a tree.
type crashObs struct {
	kind byte // 'd', 'f', or '?' for anything else
	ino  uint64
	data []byte
	sum  string
}

func (o crashObs) String() string {
	switch o.kind {
	case 'd':
		return "a directory"
	case 'f':
		return "file " + describeData(o.data)
	}
	return "a special file"
}

func (b crashBinding) matches(o crashObs, present bool) bool {
	switch b.kind {
	case 0:
		return !present
	case 'd':
		return present && o.kind == 'd'
	}
	return present && o.kind == 'f' && (b.ino.uncertain || o.sum == b.ino.sum)
}

// crashWant is a path of a snapshot taken with the load paused.
type crashWant struct {
	kind  byte
	inode int64
	sum   string
	desc  string
}

// crashSnap is a snapshot whose create printed an id.
type crashSnap struct {
	id, label string
	round     int
	want      map[string]crashWant // taken with the load paused: its exact tree
}

// crashTest is the state of the whole test.
type crashTest struct {
	t        *testing.T
	m        *harness.Mount
	seed     uint64
	workers  []*crashWorker
	byRoot   map[string]*crashWorker
	static   map[string]*crashName // paths no worker owns (the root's)
	pristine map[uint64]bool       // st_ino of lower files never written
	snaps    []*crashSnap          // acknowledged, all rounds
	snapSeen map[string]bool       // ids listed so far (acknowledged or not)
	tmp      string                // for exports
	noLinks  bool                  // no hard links in the load nor in the project
	nextID   atomic.Int64
	seq      atomic.Int64 // orders the lines of the logs
	logs     []string     // what the load did, round by round, for a failure's report
}

// owner is the worker owning path p, or nil.
func (c *crashTest) owner(p string) *crashWorker {
	first, _, _ := strings.Cut(p, "/")
	return c.byRoot[first]
}

func (c *crashTest) newInode() *crashInode { return &crashInode{id: c.nextID.Add(1)} }

// observe records every path below root.
func (c *crashTest) observe(root, what string) map[string]crashObs {
	c.t.Helper()
	out, err := crashWalk(root)
	if err != nil {
		c.t.Fatalf("reading %s: %v", what, err)
	}
	return out
}

// crashWalk records every path below root.
func crashWalk(root string) (map[string]crashObs, error) {
	out := map[string]crashObs{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		o := crashObs{kind: '?', ino: st.Ino}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			o.kind = 'd'
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			o.kind, o.data, o.sum = 'f', b, crashSum(b)
		}
		out[rel] = o
		return nil
	})
	return out, err
}

// rebuild makes the model the observed tree: every state durable.
func (c *crashTest) rebuild(obs map[string]crashObs) {
	c.static = map[string]*crashName{}
	for _, w := range c.workers {
		w.names = map[string]*crashName{}
	}
	inodes := map[uint64]*crashInode{}
	for p, o := range obs {
		b := crashBinding{kind: o.kind}
		if o.kind == 'f' {
			if b.ino = inodes[o.ino]; b.ino == nil {
				b.ino = c.newInode()
				b.ino.ino, b.ino.pristine = o.ino, c.pristine[o.ino]
				b.ino.setData(o.data)
				inodes[o.ino] = b.ino
			}
		}
		n := &crashName{cur: b, possible: []crashBinding{b}}
		if w := c.owner(p); w != nil {
			w.names[p] = n
		} else {
			c.static[p] = n
		}
	}
}

// check compares the mount after a crash with the model: every path
// must show one of its possible states, and nothing else may appear.
// lost counts the paths that lost a change not yet made durable.
func (c *crashTest) check(obs map[string]crashObs) (problems []string, lost int) {
	seen := map[string]bool{}
	visit := func(names map[string]*crashName) {
		for p, n := range names {
			seen[p] = true
			o, present := obs[p]
			if n.cur.matches(o, present) {
				continue
			}
			ok := false
			for _, b := range n.possible {
				ok = ok || b.matches(o, present)
			}
			if ok {
				lost++
				continue
			}
			got := "nothing"
			if present {
				got = o.String()
			}
			var want []string
			for _, b := range n.possible {
				want = append(want, b.String())
			}
			problems = append(problems, fmt.Sprintf("/%s shows %s; the load left it %s, and a crash may only leave one of: %s",
				p, got, n.cur, strings.Join(want, "; ")))
		}
	}
	visit(c.static)
	for _, w := range c.workers {
		visit(w.names)
	}
	for p, o := range obs {
		if !seen[p] {
			problems = append(problems, fmt.Sprintf("/%s appeared (%s): the load never made it", p, o))
		}
	}
	problems = append(problems, c.checkInodes(obs)...)
	sort.Strings(problems)
	return problems, lost
}

// name is the model of path p, or nil.
func (c *crashTest) name(p string) *crashName {
	if w := c.owner(p); w != nil {
		return w.names[p]
	}
	return c.static[p]
}

// checkInodes checks inode numbers after a crash: paths that show one
// st_ino must be names of one file of the model (in states the crash may
// have left), and the durable names of one file must show one st_ino.
func (c *crashTest) checkInodes(obs map[string]crashObs) []string {
	var problems []string
	byIno := map[uint64][]string{}
	for _, p := range sortedKeys(obs) {
		if obs[p].kind == 'f' {
			byIno[obs[p].ino] = append(byIno[obs[p].ino], p)
		}
	}
	for ino, paths := range byIno {
		if len(paths) < 2 {
			continue
		}
		// The files of the model each path may show.
		var common map[int64]bool
		for _, p := range paths {
			files := map[int64]bool{}
			if n := c.name(p); n != nil {
				for _, b := range n.possible {
					if b.matches(obs[p], true) && (common == nil || common[b.ino.id]) {
						files[b.ino.id] = true
					}
				}
			}
			common = files
		}
		if len(common) == 0 {
			problems = append(problems, fmt.Sprintf("%s show the same inode number %d but are not names of one file", harness.JoinNames(paths), ino))
		}
	}
	durable := map[int64][]string{}
	for _, p := range sortedKeys(obs) {
		if n := c.name(p); n != nil && len(n.possible) == 1 && n.cur.kind == 'f' && obs[p].kind == 'f' {
			durable[n.cur.ino.id] = append(durable[n.cur.ino.id], p)
		}
	}
	for _, paths := range durable {
		for _, p := range paths[1:] {
			if obs[p].ino != obs[paths[0]].ino {
				problems = append(problems, fmt.Sprintf("/%s and /%s are hard links of one file but show inode numbers %d and %d",
					paths[0], p, obs[paths[0]].ino, obs[p].ino))
			}
		}
	}
	return problems
}

// want is the tree the model holds now (the load paused).
func (c *crashTest) want() map[string]crashWant {
	out := map[string]crashWant{}
	add := func(names map[string]*crashName) {
		for p, n := range names {
			switch n.cur.kind {
			case 'd':
				out[p] = crashWant{kind: 'd', desc: "a directory"}
			case 'f':
				w := crashWant{kind: 'f', inode: n.cur.ino.id, desc: n.cur.String()}
				if !n.cur.ino.uncertain {
					w.sum = n.cur.ino.sum
				}
				out[p] = w
			}
		}
	}
	add(c.static)
	for _, w := range c.workers {
		add(w.names)
	}
	return out
}

// ---------------------------------------------------------------------
// One round: load, kill, recover, check.

// crashLoad is the load of one round.
type crashLoad struct {
	c      *crashTest
	round  int
	world  sync.RWMutex // workers hold it for reading during an operation; a paused snapshot for writing
	killed atomic.Bool  // set just before the kill: errors are expected from then on
	stopCh chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	acked  []*crashSnap
	ends   []string // how each goroutine ended
	log    []string // the snapshot goroutine's log
}

func (l *crashLoad) note(format string, args ...any) {
	l.mu.Lock()
	l.log = append(l.log, fmt.Sprintf("[%d] ", l.c.seq.Add(1))+fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *crashLoad) stopped() bool {
	select {
	case <-l.stopCh:
		return true
	default:
		return false
	}
}

// end records how a goroutine of the load ended: on an error after the
// kill it is the expected end; before, a failure.
func (l *crashLoad) end(who string, err error) {
	if !l.killed.Load() {
		l.c.t.Errorf("round %d: %s failed before the kill: %v", l.round, who, err)
	}
	why := "failed"
	if e := harness.ErrnoOf(err); e != 0 && e != unix.Errno(^uintptr(0)) {
		why = harness.ErrName(err)
	}
	l.mu.Lock()
	l.ends = append(l.ends, who+" "+why)
	l.mu.Unlock()
}

func (c *crashTest) round(r int, delay time.Duration) {
	t := c.t
	t.Helper()
	pid := c.m.Status.Pid
	if pid <= 0 || !procfs.Alive(pid) {
		t.Fatalf("round %d: no running daemon (status gave pid %d)", r, pid)
	}
	l := &crashLoad{c: c, round: r, stopCh: make(chan struct{})}
	acks := 0
	for i, w := range c.workers {
		w.l, w.rng, w.ops, w.acks, w.written, w.log = l, rand.New(rand.NewPCG(c.seed, uint64(r*16+i+1))), 0, 0, nil, nil
		l.wg.Add(1)
		go w.run()
	}
	l.wg.Add(1)
	go l.snapshots(rand.New(rand.NewPCG(c.seed, uint64(r*16))))

	time.Sleep(delay)
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
	ops := 0
	for _, w := range c.workers {
		ops, acks = ops+w.ops, acks+w.acks
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
	for _, s := range newSnaps {
		c.export(s, "")
	}

	for _, w := range c.workers {
		for _, ino := range w.written {
			delete(c.pristine, ino)
		}
	}
	c.rebuild(obs)
	t.Logf("round %d: kill after %v; %d operations, %d acknowledged fsyncs, %d snapshots acknowledged; load ended %s; "+
		"after recovery: %d objects of garbage, %d paths lost a change not yet durable (allowed)",
		r, delay.Round(time.Microsecond), ops, acks, len(l.acked), strings.Join(l.ends, ", "), garbage, lost)
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
	syscall.Kill(pid, syscall.SIGKILL)
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

// fsck runs agentfs fsck --json: exit 0 and no problem; with noGarbage,
// no garbage either. It returns the number of garbage objects.
func (c *crashTest) fsck(r int, when string, noGarbage bool) int {
	t := c.t
	t.Helper()
	res := agentfsC(t, c.m.Dir, "fsck", "--json")
	var rep struct {
		Problems []json.RawMessage `json:"problems"`
		Garbage  []json.RawMessage `json:"garbage"`
		Report   string            `json:"report"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
		t.Errorf("round %d: fsck %s: %v\n%s", r, when, err, res)
		return 0
	}
	if res.Code != 0 || len(rep.Problems) > 0 {
		t.Errorf("round %d: fsck %s: exit %d, want 0 and no problems:\n%s%s", r, when, res.Code, rep.Report, res.Stderr)
	} else if noGarbage && len(rep.Garbage) > 0 {
		t.Errorf("round %d: fsck %s still finds garbage:\n%s", r, when, rep.Report)
	}
	return len(rep.Garbage)
}

// checkSnapshots checks that every acknowledged snapshot is listed with
// its label and that at most one other appeared (the create in flight at
// the kill); it returns the snapshots listed for the first time.
func (c *crashTest) checkSnapshots(l *crashLoad) []*crashSnap {
	t := c.t
	t.Helper()
	list := listSnapshots(t, c.m.Dir)
	var fresh []*crashSnap
	for _, s := range l.acked {
		c.snaps = append(c.snaps, s)
		fresh = append(fresh, s)
	}
	for _, s := range c.snaps {
		c.snapSeen[s.id] = true
		switch got := findSnapshot(list, s.id); {
		case got == nil:
			t.Errorf("round %d: snapshot %s (%q), reported created in round %d, is not listed after kill -9 and remount", l.round, s.id, s.label, s.round)
		case got.Label != s.label:
			t.Errorf("round %d: snapshot %s is listed with label %q, want %q", l.round, s.id, got.Label, s.label)
		}
	}
	var extra []string
	prefix := fmt.Sprintf("crash r%d ", l.round)
	for _, s := range list {
		if c.snapSeen[s.ID] {
			continue
		}
		c.snapSeen[s.ID] = true
		extra = append(extra, fmt.Sprintf("%s (%q)", s.ID, s.Label))
		if !strings.HasPrefix(s.Label, prefix) {
			t.Errorf("round %d: snapshot %s (%q) is listed; no create of this round made it", l.round, s.ID, s.Label)
		}
		fresh = append(fresh, &crashSnap{id: s.ID, label: s.Label, round: l.round})
	}
	if len(extra) > 1 {
		t.Errorf("round %d: snapshots listed that no create acknowledged: %v (only the one in flight at the kill may be)", l.round, extra)
	}
	return fresh
}

// export runs agentfs export of a snapshot and, for one taken with the
// load paused, compares the tree with the model of that moment.
func (c *crashTest) export(s *crashSnap, when string) {
	c.t.Helper()
	diffs, err := c.exportDiffs(s)
	if err != nil {
		c.t.Errorf("snapshot %s (%q, round %d)%s: %v", s.id, s.label, s.round, when, err)
	}
	for _, d := range diffs {
		c.t.Errorf("snapshot %s (%q, taken in round %d with the load paused)%s: %s", s.id, s.label, s.round, when, d)
	}
}

// exportDiffs exports snapshot s into a fresh directory and, when the
// snapshot's tree is known, lists how the export differs from it. It
// may run outside the test's goroutine.
func (c *crashTest) exportDiffs(s *crashSnap) ([]string, error) {
	dir, err := os.MkdirTemp(c.tmp, "export-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(harness.Bin(), "export", s.id, "--to", dir, "-C", c.m.Dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("agentfs export %s --to %s: %v: %s", s.id, dir, err, out)
	}
	if s.want == nil {
		return nil, nil
	}
	got, err := crashWalk(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the export: %v", err)
	}
	return crashCompare(s.want, got), nil
}

// recheckSnapshots exports every acknowledged snapshot again at the end,
// after every round's gc, and checks that fsck finds nothing.
func (c *crashTest) recheckSnapshots() {
	list := listSnapshots(c.t, c.m.Dir)
	for _, s := range c.snaps {
		if findSnapshot(list, s.id) == nil {
			c.t.Errorf("snapshot %s (%q, round %d) is not listed at the end", s.id, s.label, s.round)
			continue
		}
		c.export(s, " at the end")
	}
	c.fsck(-1, "at the end", true)
}

// crashCompare lists the differences between the tree the load left
// (want) and a tree seen (the mount, or an export of a snapshot): paths,
// types, contents, and hard links.
func crashCompare(want map[string]crashWant, got map[string]crashObs) []string {
	var out []string
	links := map[int64]string{} // model inode → a path of it
	for _, p := range sortedKeys(want) {
		w := want[p]
		o, ok := got[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("/%s is missing (the load left it %s)", p, w.desc))
		case o.kind != w.kind:
			out = append(out, fmt.Sprintf("/%s is %s; the load left it %s", p, o, w.desc))
		case w.kind == 'f' && w.sum != "" && o.sum != w.sum:
			out = append(out, fmt.Sprintf("/%s is %s; the load left it %s", p, o, w.desc))
		case w.kind == 'f':
			if q, ok := links[w.inode]; ok && got[q].ino != o.ino {
				out = append(out, fmt.Sprintf("/%s and /%s are one file in the load but not hard links there", q, p))
			}
			links[w.inode] = p
		}
	}
	for _, p := range sortedKeys(got) {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("/%s (%s) is there, but the load never made it or removed it", p, got[p]))
		}
	}
	byIno := map[uint64]string{}
	for _, p := range sortedKeys(want) {
		o, ok := got[p]
		if !ok || want[p].kind != 'f' || o.kind != 'f' {
			continue
		}
		if q, ok := byIno[o.ino]; ok && want[q].inode != want[p].inode {
			out = append(out, fmt.Sprintf("/%s and /%s are hard links there, but separate files in the load", q, p))
		}
		byIno[o.ino] = p
	}
	return out
}

// crashDiff lists the differences between two observations of a tree.
func crashDiff(a, b map[string]crashObs) []string {
	var out []string
	for _, p := range sortedKeys(a) {
		o, ok := b[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("/%s (%s) is gone", p, a[p]))
		case o.kind != a[p].kind || o.sum != a[p].sum:
			out = append(out, fmt.Sprintf("/%s was %s, is %s", p, a[p], o))
		}
	}
	for _, p := range sortedKeys(b) {
		if _, ok := a[p]; !ok {
			out = append(out, fmt.Sprintf("/%s (%s) appeared", p, b[p]))
		}
	}
	return out
}

// snapshots runs agentfs snapshot create every 50-300 ms until it fails
// (after the kill); half of them with the workers paused, recording the
// tree the snapshot must hold.
func (l *crashLoad) snapshots(rng *rand.Rand) {
	defer l.wg.Done()
	for n := 0; ; n++ {
		select {
		case <-l.stopCh:
			return
		case <-time.After(time.Duration(50+rng.IntN(250)) * time.Millisecond):
		}
		paused := rng.IntN(2) == 0
		var want map[string]crashWant
		label := fmt.Sprintf("crash r%d n%d", l.round, n)
		if paused {
			l.world.Lock()
			want = l.c.want()
			l.checkLive(want, label)
		}
		l.note("snapshot create %q (paused: %v)", label, paused)
		id, err := crashSnapshotCreate(l.c.m.Dir, label)
		l.note("snapshot create %q: %s %v", label, id, err)
		if paused {
			l.world.Unlock()
		}
		if err != nil {
			l.end("snapshot create", err)
			return
		}
		s := &crashSnap{id: id, label: label, round: l.round, want: want}
		l.mu.Lock()
		l.acked = append(l.acked, s)
		l.mu.Unlock()
		if paused {
			// Export it at once, under the load: what differs now is
			// wrong from the start, not the crash's doing.
			diffs, err := l.c.exportDiffs(s)
			if l.killed.Load() {
				continue
			}
			if err != nil {
				l.c.t.Errorf("round %d: snapshot %s (%q) right after it was taken: %v", l.round, id, label, err)
			}
			for _, d := range diffs {
				l.c.t.Errorf("round %d: snapshot %s (%q, taken with the load paused) right after it was taken, before the kill: %s", l.round, id, label, d)
			}
		}
	}
}

// checkLive compares the mount with the model while the load is paused
// (no crash involved): a difference is a bug of the model or of the
// live filesystem, not of crash recovery.
func (l *crashLoad) checkLive(want map[string]crashWant, label string) {
	got, err := crashWalk(l.c.m.Dir)
	if err != nil {
		return // the kill came
	}
	if l.killed.Load() {
		return
	}
	for _, d := range crashCompare(want, got) {
		l.c.t.Errorf("round %d: before the kill, with the load paused (for snapshot %q), the mount differs from what the load did: %s", l.round, label, d)
	}
}

// crashSnapshotCreate runs agentfs snapshot create; the id is the last
// line of its output. (Not harness.Run: it runs outside the test's
// goroutine.)
func crashSnapshotCreate(dir, label string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Bin(), "snapshot", "create", "-m", label, "-C", dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("agentfs snapshot create: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	id := lines[len(lines)-1]
	if !snapshotIDRe.MatchString(id) {
		return "", fmt.Errorf("agentfs snapshot create exited 0 but its last line is %q, not an id", id)
	}
	return id, nil
}

// ---------------------------------------------------------------------
// The workers.

// crashWorker writes the subtree root of the mount and keeps its model.
type crashWorker struct {
	c     *crashTest
	root  string
	names map[string]*crashName
	// per round
	l       *crashLoad
	rng     *rand.Rand
	ops     int
	acks    int      // writes whose fsync returned
	written []uint64 // st_ino of lower files written this round
	opNo    int
	log     []string // what the worker did this round, for a failure's report
}

// note adds a line to the worker's log of the round.
func (w *crashWorker) note(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf("[%d] #%d ", w.c.seq.Add(1), w.opNo)+fmt.Sprintf(format, args...))
}

func (w *crashWorker) run() {
	defer w.l.wg.Done()
	for !w.l.stopped() {
		w.l.world.RLock()
		w.opNo++
		err := w.step()
		w.l.world.RUnlock()
		if err != nil {
			w.l.end(w.root, err)
			return
		}
		w.ops++
	}
}

// step does one operation, chosen at random among those the model says
// apply.
func (w *crashWorker) step() error {
	for tries := 0; tries < 20; tries++ {
		var done bool
		var err error
		switch k := w.rng.IntN(100); {
		case k < 22:
			done, err = w.opWrite()
		case k < 40:
			done, err = w.opModify()
		case k < 48:
			done, err = w.opReplace()
		case k < 60:
			done, err = w.opRename()
		case k < 70:
			done, err = w.opUnlink()
		case k < 78:
			if w.c.noLinks {
				continue
			}
			done, err = w.opLink()
		case k < 86:
			done, err = w.opMkdir()
		case k < 93:
			done, err = w.opRmdir()
		default:
			done, err = w.opMoveDir()
		}
		if done || err != nil {
			return err
		}
	}
	return nil
}

func (w *crashWorker) abs(p string) string { return filepath.Join(w.c.m.Dir, p) }

func (w *crashWorker) tag(p, op string) string {
	return fmt.Sprintf("<%s r%d #%d %s>", p, w.l.round, w.opNo, op)
}

func (w *crashWorker) name(p string) *crashName {
	n := w.names[p]
	if n == nil {
		n = &crashName{possible: []crashBinding{{}}}
		w.names[p] = n
	}
	return n
}

// paths lists the paths that are now of kind, sorted.
func (w *crashWorker) paths(kind byte) []string {
	var out []string
	for p, n := range w.names {
		if n.cur.kind == kind {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (w *crashWorker) pick(list []string) string { return list[w.rng.IntN(len(list))] }

func crashDepth(p string) int { return strings.Count(p, "/") }

// newName is prefix<n> in a random directory less than 4 deep.
func (w *crashWorker) newName(prefix string, n int) string {
	var dirs []string
	for _, d := range w.paths('d') {
		if crashDepth(d) < 4 {
			dirs = append(dirs, d)
		}
	}
	return w.pick(dirs) + "/" + prefix + strconv.Itoa(w.rng.IntN(n))
}

// files lists the files whose content the model knows; with pristine
// first, preferably lower files never written (copy-ups).
func (w *crashWorker) files(pristine bool) []string {
	var all, fresh []string
	for _, p := range w.paths('f') {
		if ino := w.names[p].cur.ino; !ino.uncertain {
			all = append(all, p)
			if ino.pristine {
				fresh = append(fresh, p)
			}
		}
	}
	if pristine && len(fresh) > 0 {
		return fresh
	}
	return all
}

func (w *crashWorker) unpristine(ino *crashInode) {
	if ino.pristine {
		ino.pristine = false
		w.written = append(w.written, ino.ino)
	}
}

// crashRetry runs a system call again while it is interrupted, as the os
// package does.
func crashRetry(f func() error) error {
	for {
		if err := f(); err != syscall.EINTR {
			return err
		}
	}
}

// fsync is fsync(2), or now and then fdatasync(2).
func (w *crashWorker) fsync(f *os.File) error {
	if w.rng.IntN(3) == 0 {
		return crashRetry(func() error { return unix.Fdatasync(int(f.Fd())) })
	}
	return f.Sync()
}

// syncDir fsyncs directory d: the names in it are durable.
func (w *crashWorker) syncDir(d string) error {
	f, err := os.Open(w.abs(d))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync of directory %s: %w", d, err)
	}
	w.note("fsync directory %s: acknowledged", d)
	for p, n := range w.names {
		if filepath.Dir(p) == d {
			n.durable()
		}
	}
	return nil
}

// maybeSyncDirs fsyncs the directories of paths with probability 1/den
// (1: always).
func (w *crashWorker) maybeSyncDirs(den int, paths ...string) error {
	if w.rng.IntN(den) != 0 {
		return nil
	}
	done := map[string]bool{}
	for _, p := range paths {
		if d := filepath.Dir(p); !done[d] {
			done[d] = true
			if err := w.syncDir(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// write replaces the content of p (creating it), then fsyncs it: the
// acknowledgement.
func (w *crashWorker) write(p, tag string) error {
	n := w.name(p)
	ino := n.cur.ino
	if n.cur.kind != 'f' {
		ino = w.c.newInode()
		n.set(crashBinding{kind: 'f', ino: ino})
	}
	data := crashData(w.rng, tag, crashSize(w.rng))
	w.note("write %s: file #%d := %s", p, ino.id, describeData(data))
	w.unpristine(ino)
	ino.uncertain = true
	f, err := os.OpenFile(w.abs(p), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", tag, err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("%s: write: %w", tag, err)
	}
	if err := w.fsync(f); err != nil {
		return fmt.Errorf("%s: fsync: %w", tag, err)
	}
	ino.setData(data)
	n.durable()
	w.note("fsync %s: acknowledged", p)
	w.acks++
	return nil
}

// opWrite writes a file, new or existing (lower ones are copied up by
// the O_TRUNC open, without their data).
func (w *crashWorker) opWrite() (bool, error) {
	var p string
	if files := w.files(true); len(files) > 0 && w.rng.IntN(3) == 0 {
		p = w.pick(files)
	} else if p = w.newName("f", 8); w.name(p).cur.kind == 'd' {
		return false, nil
	}
	return true, w.write(p, w.tag(p, "write"))
}

// opModify changes part of a file, preferably a lower one (a copy-up
// with data): pwrite, append or truncate, then fsync.
func (w *crashWorker) opModify() (bool, error) {
	files := w.files(w.rng.IntN(2) == 0)
	if len(files) == 0 {
		return false, nil
	}
	p := w.pick(files)
	n := w.names[p]
	ino := n.cur.ino
	old := ino.data
	variant := w.rng.IntN(3)
	tag := w.tag(p, []string{"pwrite", "append", "truncate"}[variant])
	flags := os.O_WRONLY
	var piece []byte
	off, size := 0, 0
	switch variant {
	case 0:
		piece = crashData(w.rng, tag, len(tag)+1+w.rng.IntN(3000))
		off = w.rng.IntN(len(old) + 4096)
	case 1:
		flags |= os.O_APPEND
		piece = crashData(w.rng, tag, len(tag)+1+w.rng.IntN(3000))
		off = len(old)
	default:
		size = w.rng.IntN(len(old) + 8192)
	}
	var data []byte
	if piece != nil {
		data = make([]byte, max(len(old), off+len(piece)))
		copy(data, old)
		copy(data[off:], piece)
	} else {
		data = make([]byte, size)
		copy(data, old)
	}
	w.note("%s %s (file #%d, off %d, size %d): %s -> %s", tag, p, ino.id, off, size, describeData(old), describeData(data))
	w.unpristine(ino)
	ino.uncertain = true
	f, err := os.OpenFile(w.abs(p), flags, 0)
	if err != nil {
		return true, fmt.Errorf("%s: %w", tag, err)
	}
	defer f.Close()
	switch variant {
	case 0:
		_, err = f.WriteAt(piece, int64(off))
	case 1:
		_, err = f.Write(piece)
	default:
		err = f.Truncate(int64(size))
	}
	if err != nil {
		return true, fmt.Errorf("%s: %w", tag, err)
	}
	if err := w.fsync(f); err != nil {
		return true, fmt.Errorf("%s: fsync: %w", tag, err)
	}
	ino.setData(data)
	n.durable()
	w.note("fsync %s: acknowledged", p)
	w.acks++
	return true, nil
}

// opReplace is the careful program's replace: write a temporary file,
// fsync it, rename it over the target, fsync the directory.
func (w *crashWorker) opReplace() (bool, error) {
	var p string
	if files := w.files(false); len(files) > 0 && w.rng.IntN(2) == 0 {
		p = w.pick(files)
	} else {
		p = w.newName("f", 8)
	}
	tmp := filepath.Join(filepath.Dir(p), "tmp"+strconv.Itoa(w.rng.IntN(3)))
	if w.name(p).cur.kind == 'd' || w.name(tmp).cur.kind != 0 || tmp == p {
		return false, nil
	}
	if err := w.write(tmp, w.tag(p, "replace via "+filepath.Base(tmp))); err != nil {
		return true, err
	}
	if err := w.rename(tmp, p); err != nil {
		return true, fmt.Errorf("rename %s %s: %w", tmp, p, err)
	}
	return true, w.syncDir(filepath.Dir(p))
}

// rename renames s to d in the model, then in the mount. Every path
// below s moves; each may show its old or its new state after a crash
// until a directory fsync.
func (w *crashWorker) rename(s, d string) error {
	var moved []string
	for q := range w.names {
		if q == s || strings.HasPrefix(q, s+"/") {
			moved = append(moved, q)
		}
	}
	w.note("rename %s %s (moves %d names)", s, d, len(moved))
	for _, q := range moved {
		nq := w.names[q]
		nr := w.name(d + q[len(s):])
		for _, b := range nq.possible {
			nr.add(b)
		}
		nr.cur = nq.cur
		nq.set(crashBinding{})
	}
	return crashRetry(func() error { return syscall.Rename(w.abs(s), w.abs(d)) })
}

// opRename renames a file to a new name or over another file.
func (w *crashWorker) opRename() (bool, error) {
	files := w.paths('f')
	if len(files) == 0 {
		return false, nil
	}
	s := w.pick(files)
	var d string
	if w.rng.IntN(2) == 0 {
		d = w.pick(files)
	} else {
		d = w.newName("f", 8)
	}
	nd := w.name(d)
	if d == s || nd.cur.kind == 'd' || (nd.cur.kind == 'f' && nd.cur.ino == w.names[s].cur.ino) {
		return false, nil
	}
	if err := w.rename(s, d); err != nil {
		return true, fmt.Errorf("rename %s %s: %w", s, d, err)
	}
	return true, w.maybeSyncDirs(2, s, d)
}

// opMoveDir renames a directory (lower, merged or new) to a new name,
// then fsyncs both parents.
func (w *crashWorker) opMoveDir() (bool, error) {
	var dirs []string
	for _, p := range w.paths('d') {
		if p != w.root {
			dirs = append(dirs, p)
		}
	}
	if len(dirs) == 0 {
		return false, nil
	}
	s := w.pick(dirs)
	height := 0
	for q, n := range w.names {
		if n.cur.kind != 0 && strings.HasPrefix(q, s+"/") {
			height = max(height, crashDepth(q)-crashDepth(s))
		}
	}
	d := w.newName("d", 4)
	if d == s || strings.HasPrefix(d, s+"/") || w.name(d).cur.kind != 0 || crashDepth(d)+height > 5 {
		return false, nil
	}
	if err := w.rename(s, d); err != nil {
		return true, fmt.Errorf("rename directory %s %s: %w", s, d, err)
	}
	return true, w.maybeSyncDirs(1, s, d)
}

func (w *crashWorker) opUnlink() (bool, error) {
	files := w.paths('f')
	if len(files) == 0 {
		return false, nil
	}
	p := w.pick(files)
	w.note("unlink %s (%s)", p, w.names[p].cur)
	w.names[p].set(crashBinding{})
	if err := crashRetry(func() error { return syscall.Unlink(w.abs(p)) }); err != nil {
		return true, fmt.Errorf("unlink %s: %w", p, err)
	}
	return true, w.maybeSyncDirs(3, p)
}

// opLink makes a hard link (of a lower file: a copy-up).
func (w *crashWorker) opLink() (bool, error) {
	files := w.paths('f')
	if len(files) == 0 {
		return false, nil
	}
	s := w.pick(files)
	d := w.newName("f", 8)
	nd := w.name(d)
	if nd.cur.kind != 0 {
		return false, nil
	}
	w.note("link %s %s (%s)", s, d, w.names[s].cur)
	nd.set(w.names[s].cur)
	if err := crashRetry(func() error { return syscall.Link(w.abs(s), w.abs(d)) }); err != nil {
		return true, fmt.Errorf("link %s %s: %w", s, d, err)
	}
	return true, w.maybeSyncDirs(3, d)
}

// opMkdir makes a directory and fsyncs its parent.
func (w *crashWorker) opMkdir() (bool, error) {
	d := w.newName("d", 4)
	n := w.name(d)
	if n.cur.kind != 0 {
		return false, nil
	}
	w.note("mkdir %s", d)
	n.set(crashBinding{kind: 'd'})
	if err := crashRetry(func() error { return syscall.Mkdir(w.abs(d), 0o755) }); err != nil {
		return true, fmt.Errorf("mkdir %s: %w", d, err)
	}
	return true, w.maybeSyncDirs(1, d)
}

// opRmdir removes an empty directory (in the merged view: a lower one
// whose files were all deleted too).
func (w *crashWorker) opRmdir() (bool, error) {
	var empty []string
	for _, d := range w.paths('d') {
		if d == w.root {
			continue
		}
		full := false
		for q, n := range w.names {
			if n.cur.kind != 0 && filepath.Dir(q) == d {
				full = true
				break
			}
		}
		if !full {
			empty = append(empty, d)
		}
	}
	if len(empty) == 0 {
		return false, nil
	}
	d := w.pick(empty)
	w.note("rmdir %s", d)
	w.names[d].set(crashBinding{})
	if err := crashRetry(func() error { return syscall.Rmdir(w.abs(d)) }); err != nil {
		return true, fmt.Errorf("rmdir %s: %w", d, err)
	}
	return true, w.maybeSyncDirs(2, d)
}
