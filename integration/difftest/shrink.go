package difftest

import (
	"fmt"
	"strings"
)

// shrinker reduces a failing case while a difference with the same
// signature still shows on fresh roots.
type shrinker struct {
	c      *Config
	sig    string
	runs   int
	budget int
	hang   string // the first replay that hung, reported besides
}

// fails replays the case and reports whether it still shows the target
// difference. Out of budget, it reports false: nothing more is removed.
func (sh *shrinker) fails(tree *Tree, ops []Op) bool {
	if sh.runs >= sh.budget {
		return false
	}
	sh.runs++
	diffs, err := sh.c.replay(tree, ops, nil)
	if err != nil {
		sh.c.logf("shrink: replay: %v", err)
		return false
	}
	for _, d := range diffs {
		if d.Sig == sh.sig {
			return true
		}
	}
	if len(diffs) > 0 && diffs[0].Sig == "hang" {
		sh.c.shrinkHung = true
	}
	if len(diffs) > 0 && diffs[0].Sig == "hang" && sh.sig != "hang" && sh.hang == "" {
		// A different bug turned up on the way: keep the first hang.
		var b strings.Builder
		fmt.Fprintf(&b, "a replay while shrinking hung: %s\n", diffs[0])
		for _, d := range diffs[1:] {
			fmt.Fprintf(&b, "  %s\n", d)
		}
		b.WriteString("lower tree:\n")
		writeIndented(&b, tree.String())
		b.WriteString("ops:\n")
		for i := range ops {
			fmt.Fprintf(&b, "%4d  %s\n", i+1, ops[i].String())
		}
		sh.hang = b.String()
		sh.c.logf("%s", sh.hang)
	}
	return false
}

// ddmin removes chunks of ops, then single ops, keeping every removal
// that still fails (Zeller's delta debugging, complement variant).
func (sh *shrinker) ddmin(tree *Tree, ops []Op) []Op {
	n := 2
	for len(ops) >= 2 && sh.runs < sh.budget {
		chunk := (len(ops) + n - 1) / n
		reduced := false
		for start := 0; start < len(ops); start += chunk {
			end := min(start+chunk, len(ops))
			cand := append(append([]Op{}, ops[:start]...), ops[end:]...)
			if sh.fails(tree, cand) {
				ops, reduced = cand, true
				n = max(n-1, 2)
				break
			}
		}
		if !reduced {
			if n >= len(ops) {
				break
			}
			n = min(2*n, len(ops))
		}
	}
	if len(ops) == 1 && sh.fails(tree, nil) {
		return nil
	}
	return ops
}

// shrinkTree removes lower-tree entries (with what is below them),
// last first, that the failure does not need.
func (sh *shrinker) shrinkTree(tree *Tree, ops []Op) *Tree {
	for i := len(tree.Entries) - 1; i >= 0 && sh.runs < sh.budget; i-- {
		if i >= len(tree.Entries) {
			continue
		}
		cand := tree.Without(tree.Entries[i].Path)
		if sh.fails(cand, ops) {
			tree = cand
		}
	}
	return tree
}

// simplify tries plainer arguments for each op: root instead of the
// other user, shorter writes.
func (sh *shrinker) simplify(tree *Tree, ops []Op) []Op {
	for i := range ops {
		var cands []Op
		if ops[i].AsUser {
			o := ops[i]
			o.AsUser = false
			cands = append(cands, o)
		}
		if ops[i].Len > 1 && (ops[i].Kind == OpPwrite || ops[i].Kind == OpWrite || ops[i].Kind == OpWriteFile) {
			o := ops[i]
			o.Len = 1
			cands = append(cands, o)
		}
		for _, o := range cands {
			cand := append([]Op{}, ops...)
			cand[i] = o
			if sh.fails(tree, cand) {
				ops = cand
			}
		}
	}
	return ops
}

func (c *Config) shrink(seed int64, tree *Tree, ops []Op, diffs []Diff) *Failure {
	budget := c.ShrinkRuns
	if budget <= 0 {
		budget = 400
	}
	sh := &shrinker{c: c, sig: diffs[0].Sig, budget: budget}
	// Replays of a hang hang again: wait for them only seconds.
	c.shrinkHung = sh.sig == "hang"
	defer func() { c.shrinkHung = false }()
	f := &Failure{Seed: seed, Tree: tree, Ops: ops, Diffs: diffs}
	orig := len(ops)
	if !sh.fails(tree, ops) {
		var b strings.Builder
		fmt.Fprintf(&b, "seed %d: %s\n", seed, diffs[0])
		fmt.Fprintf(&b, "the difference did not reproduce on fresh roots (a race or state outside the ops); the last ops were:\n")
		for i := max(0, len(ops)-20); i < len(ops); i++ {
			fmt.Fprintf(&b, "%4d  %s\n", i+1, ops[i].String())
		}
		writeDiffs(&b, diffs)
		f.Report = b.String()
		return f
	}
	ops = sh.ddmin(tree, ops)
	tree = sh.shrinkTree(tree, ops)
	ops = sh.ddmin(tree, ops)
	ops = sh.simplify(tree, ops)
	f.Tree, f.Ops = tree, ops

	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s\n", seed, diffs[0])
	fmt.Fprintf(&b, "minimal failing case: %d of %d ops, %d lower entries (%d replays", len(ops), orig, len(tree.Entries), sh.runs)
	if sh.runs >= sh.budget {
		b.WriteString(", budget used up: may not be minimal")
	}
	b.WriteString(")\nlower tree:\n")
	writeIndented(&b, tree.String())
	b.WriteString("ops, with each root's result:\n")
	final, transcript, err := c.Replay(tree, ops)
	b.WriteString(transcript)
	if err != nil {
		fmt.Fprintf(&b, "replay: %v\n", err)
	}
	if len(final) > 0 {
		f.Diffs = final
	}
	writeDiffs(&b, f.Diffs)
	if sh.hang != "" {
		b.WriteString("\nalso found while shrinking (a different bug):\n" + sh.hang)
	}
	f.Report = b.String()
	return f
}

func writeDiffs(b *strings.Builder, diffs []Diff) {
	b.WriteString("differences:\n")
	for i, d := range diffs {
		if i == 20 {
			fmt.Fprintf(b, "  ... and %d more\n", len(diffs)-i)
			break
		}
		fmt.Fprintf(b, "  %s\n", d.Text)
	}
}

// writeIndented writes text with every line indented to the ops'
// arguments.
func writeIndented(b *strings.Builder, text string) {
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		fmt.Fprintf(b, "      %s\n", line)
	}
}
