package integration

// The checks of TestCrashUnderLoad (crash_test.go) after kill -9 and
// remount: the mount against the model, fsck, the snapshots and their
// exports.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/agentfs/agentfs/integration/harness"
)

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
	var extra, merging []string
	prefix := fmt.Sprintf("crash r%d ", l.round)
	for _, s := range list {
		if c.snapSeen[s.ID] {
			continue
		}
		c.snapSeen[s.ID] = true
		fresh = append(fresh, &crashSnap{id: s.ID, label: s.Label, round: l.round})
		if strings.HasPrefix(s.Label, crashMergeSafetyLabel) || strings.HasPrefix(s.Label, crashMergedLabel) {
			// The two a merge in flight at the kill takes.
			merging = append(merging, fmt.Sprintf("%s (%q)", s.ID, s.Label))
			continue
		}
		extra = append(extra, fmt.Sprintf("%s (%q)", s.ID, s.Label))
		if !strings.HasPrefix(s.Label, prefix) && !strings.HasPrefix(s.Label, crashSafetyLabel) {
			t.Errorf("round %d: snapshot %s (%q) is listed; no create of this round made it", l.round, s.ID, s.Label)
		}
	}
	if len(extra) > 1 {
		t.Errorf("round %d: snapshots listed that no create acknowledged: %v (only the one in flight at the kill may be)", l.round, extra)
	}
	if len(merging) > 2 {
		t.Errorf("round %d: snapshots of merges listed that no merge acknowledged: %v (only the two of the one in flight at the kill may be)", l.round, merging)
	}
	return fresh
}

// checkBranches checks that every branch created in a round so far is
// listed and holds the tree of the snapshot it was created from (which
// was taken with the load paused), and that at most one other branch
// of this round appeared (the create in flight at the kill).
func (c *crashTest) checkBranches(l *crashLoad, when string) {
	t := c.t
	t.Helper()
	if l != nil {
		c.branches = append(c.branches, l.branches...)
	}
	listed := map[string]bool{}
	for _, b := range listBranches(t, c.m.Dir) {
		listed[b.Name] = true
	}
	known := map[string]bool{}
	for _, b := range c.branches {
		known[b.id] = true
		if !listed[b.id] {
			t.Errorf("branch %s (%s, round %d) is not listed %s", b.id, b.label, b.round, when)
			continue
		}
		diffs, err := c.exportDiffs(b)
		if err != nil {
			t.Errorf("branch %s (%s, round %d) %s: %v", b.id, b.label, b.round, when, err)
		}
		for _, d := range diffs {
			t.Errorf("branch %s (%s, round %d) %s: %s", b.id, b.label, b.round, when, d)
		}
	}
	var extra []string
	for name := range listed {
		if name != "main" && !known[name] && !c.branchSeen[name] {
			c.branchSeen[name] = true
			extra = append(extra, name)
		}
	}
	if l != nil && len(extra) > 1 {
		t.Errorf("round %d: branches listed that no create acknowledged: %v (only the one in flight at the kill may be)", l.round, extra)
	}
}

// export runs agentfs export of a snapshot and, for one taken with the
// load paused, compares the tree with the model of that moment; it
// reports whether it compared.
func (c *crashTest) export(s *crashSnap, when string) (compared bool) {
	c.t.Helper()
	diffs, err := c.exportDiffs(s)
	if err != nil {
		c.t.Errorf("snapshot %s (%q, round %d)%s: %v", s.id, s.label, s.round, when, err)
		return false
	}
	for _, d := range diffs {
		c.t.Errorf("snapshot %s (%q, taken in round %d with the load paused)%s: %s", s.id, s.label, s.round, when, d)
	}
	return s.want != nil
}

// exportDiffs exports snapshot s into a fresh directory and, when the
// snapshot's tree is known, lists how the export differs from it. It
// may run outside the test's goroutine.
func (c *crashTest) exportDiffs(s *crashSnap) (diffs []string, err error) {
	dir, err := os.MkdirTemp(c.tmp, "export-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = rerr
		}
	}()
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
	diffs = crashCompareLinks(s.want, got, !s.looseLinks)
	if len(diffs) > 0 && s.alt != nil {
		alt := crashCompareLinks(s.alt, got, false)
		if len(alt) == 0 {
			return nil, nil // the merge in flight at the kill was made
		}
		diffs = append(diffs, fmt.Sprintf("nor is it the tree of the merge in flight at the kill (a half-made merge?): %s", strings.Join(alt, "; ")))
	}
	return diffs, nil
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
	c.checkBranches(nil, "at the end")
	c.fsck(-1, "at the end", true)
}

// crashCompare lists the differences between the tree the load left
// (want) and a tree seen (the mount, or an export of a snapshot): paths,
// types, contents, and hard links.
func crashCompare(want map[string]crashWant, got map[string]crashObs) []string {
	return crashCompareLinks(want, got, true)
}

// crashCompareLinks is crashCompare; without checkLinks, names that are
// one file in the model may be separate files in got.
func crashCompareLinks(want map[string]crashWant, got map[string]crashObs, checkLinks bool) []string {
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
		case w.kind == 'f' && checkLinks:
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
