package integration

// The load of TestCrashUnderLoad (crash_test.go): the workers that write
// the mount, each keeping the model of its subtree, and the goroutine
// that takes snapshots now and then.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentfs/agentfs/integration/harness"
	"golang.org/x/sys/unix"
)

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
	// branches are the branches created from a snapshot taken with the
	// load paused: id is the branch's name, want the snapshot's tree.
	branches []*crashSnap
	restores int      // restores done (restoreRoundTrip)
	merges   int      // merges made (merge)
	ends     []string // how each goroutine ended
	log      []string // the snapshot goroutine's log
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

// snapshots runs agentfs snapshot create every 50-300 ms until it fails
// (after the kill); the first and half of the others with the workers
// paused, recording the tree the snapshot must hold.
func (l *crashLoad) snapshots(rng *rand.Rand) {
	defer l.wg.Done()
	for n := 0; ; n++ {
		select {
		case <-l.stopCh:
			return
		case <-time.After(time.Duration(50+rng.IntN(250)) * time.Millisecond):
		}
		paused := rng.IntN(2) == 0 || n == 0
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
		s := &crashSnap{id: id, label: label, round: l.round, want: want}
		if err == nil {
			l.ack(s)
			if paused && rng.IntN(3) == 0 {
				err = l.restoreRoundTrip(s)
			}
		}
		if paused {
			l.world.Unlock()
		}
		if err != nil {
			l.end("snapshot create or restore", err)
			return
		}
		if paused && rng.IntN(2) == 0 {
			if err := l.branchCreate(s, n); err != nil {
				l.end("branch create", err)
				return
			}
			if rng.IntN(2) == 0 {
				if err := l.merge(); err != nil {
					l.end("merge", err)
					return
				}
			}
		}
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

func (l *crashLoad) ack(s *crashSnap) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked = append(l.acked, s)
}

// restoreRoundTrip restores snapshot s right after it was taken, with
// the load paused: the mount's content stays what the model says, while
// the branch moves to a new layer over the snapshot, which the load
// then writes. The safety snapshot the restore takes holds the same
// tree.
func (l *crashLoad) restoreRoundTrip(s *crashSnap) error {
	l.note("restore %s", s.id)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Bin(), "restore", s.id, "-C", l.c.m.Dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	l.note("restore %s: %v %s", s.id, err, strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("agentfs restore %s: %v: %s", s.id, err, strings.TrimSpace(stderr.String()))
	}
	m := crashUndoRe.FindStringSubmatch(string(out))
	if m == nil {
		return fmt.Errorf("agentfs restore %s exited 0 without a \"to undo\" line: %q", s.id, out)
	}
	l.ack(&crashSnap{id: m[1], label: crashSafetyLabel + s.id, round: l.round, want: s.want})
	l.mu.Lock()
	l.restores++
	l.mu.Unlock()
	return nil
}

// crashSafetyLabel starts the label of the safety snapshot of a
// restore (workspace.restoreLocked).
const crashSafetyLabel = "before restoring "

var crashUndoRe = regexp.MustCompile(`(?m)^to undo: agentfs restore ([0-9a-f]{8})$`)

// branchCreate creates a branch from snapshot s, taken with the load
// paused: the branch must hold the snapshot's tree, after any crash.
func (l *crashLoad) branchCreate(s *crashSnap, n int) error {
	name := fmt.Sprintf("crash-r%d-n%d", l.round, n)
	l.note("branch create %s --from %s", name, s.id)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, harness.Bin(), "branch", "create", name, "--from", s.id, "-C", l.c.m.Dir).CombinedOutput()
	l.note("branch create %s: %v", name, err)
	if err != nil {
		return fmt.Errorf("agentfs branch create %s --from %s: %v: %s", name, s.id, err, strings.TrimSpace(string(out)))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.branches = append(l.branches, &crashSnap{id: name, label: "branch of " + s.id, round: l.round, want: s.want, from: s.id})
	return nil
}

// merge merges the branch created last into an older branch of the
// round that nothing changed since its create, while the load writes
// main: from the older one's snapshot, every change is the newer
// one's, so the older branch then holds the newer one's tree (with
// what were hard links in the model as copies). A merge in flight at
// the kill leaves it one tree or the other, never a mix.
func (l *crashLoad) merge() error {
	l.mu.Lock()
	var into, from *crashSnap
	if n := len(l.branches); n >= 2 {
		from = l.branches[n-1]
		for _, b := range l.branches[:n-1] {
			if !b.merged && b.from != from.from {
				into = b
				break
			}
		}
	}
	if into == nil {
		l.mu.Unlock()
		return nil
	}
	before := into.want
	into.merged, into.alt, into.looseLinks = true, from.want, true
	l.mu.Unlock()
	l.note("merge %s --into %s --base %s", from.id, into.id, into.from)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Bin(), "merge", from.id, "--into", into.id, "--base", into.from, "--json", "-C", l.c.m.Dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	l.note("merge %s --into %s: %v", from.id, into.id, err)
	if err != nil {
		return fmt.Errorf("agentfs merge %s --into %s --base %s: %v: %s%s", from.id, into.id, into.from, err, out, strings.TrimSpace(stderr.String()))
	}
	var rep struct {
		Safety, Merged *struct{ ID string }
		Unresolved     int
	}
	if err := json.Unmarshal(out, &rep); err != nil || rep.Safety == nil || rep.Merged == nil {
		return fmt.Errorf("agentfs merge %s --into %s --json: %v: %s", from.id, into.id, err, out)
	}
	if rep.Unresolved != 0 {
		return fmt.Errorf("agentfs merge %s --into %s: %d conflicts, where only one side changed: %s", from.id, into.id, rep.Unresolved, out)
	}
	l.ack(&crashSnap{id: rep.Safety.ID, label: crashMergeSafetyLabel + from.id, round: l.round, want: before})
	l.ack(&crashSnap{id: rep.Merged.ID, label: crashMergedLabel + into.id, round: l.round, want: from.want})
	l.mu.Lock()
	defer l.mu.Unlock()
	into.want, into.alt = from.want, nil
	l.merges++
	return nil
}

// The labels of the snapshots a merge takes (workspace.Merge): of the
// target before it, and of the branch merged in.
const (
	crashMergeSafetyLabel = "before merging "
	crashMergedLabel      = "merged into "
)

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
	ops     atomic.Int64 // operations done (read during the round: the kill waits for a minimum)
	acks    atomic.Int64 // writes whose fsync returned
	written []uint64     // st_ino of lower files written this round
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
		w.ops.Add(1)
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
	w.acks.Add(1)
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
	w.acks.Add(1)
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
