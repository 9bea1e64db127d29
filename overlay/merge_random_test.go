package overlay

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// A randomized test of the merge's rules against a model of them: on
// files of five lines, each side edits lines 0, 2 and 4 (never two
// adjacent lines, which diff3 would see as one change), deletes files
// and creates others; the model merges each file line by line from the
// base and says which paths conflict.

const mergeRandomFiles = 8

type mergeModel map[string][]string // path → lines; missing: no file

func (m mergeModel) clone() mergeModel {
	c := mergeModel{}
	for p, l := range m {
		c[p] = slices.Clone(l)
	}
	return c
}

func fileText(lines []string) string { return strings.Join(lines, "\n") + "\n" }

// randomEdits changes side (a view and its model) with rng.
func randomEdits(rng *rand.Rand, e *env, m mergeModel, tag string) {
	for i := range mergeRandomFiles {
		p := fmt.Sprintf("d/f%d", i)
		switch k := rng.IntN(10); {
		case k < 4: // untouched
		case k < 8: // edit a line, or create
			lines, ok := m[p]
			if !ok {
				lines = []string{"new", "1", tag + " new", "3", "new"}
			} else {
				lines = slices.Clone(lines)
				line := 2 * rng.IntN(3)
				lines[line] = []string{"x", "y", tag}[rng.IntN(3)] // x and y: both sides may agree
			}
			m[p] = lines
			e.put(p, fileText(lines))
		default: // delete
			if _, ok := m[p]; ok {
				delete(m, p)
				e.remove(p)
			}
		}
	}
}

// mergeLines is the model's line merge: the merged lines, or ok false
// on a conflict.
func mergeLines(b, o, t []string) ([]string, bool) {
	if b == nil { // both created
		return nil, slices.Equal(o, t)
	}
	out := make([]string, len(b))
	for i := range b {
		switch {
		case o[i] == b[i]:
			out[i] = t[i]
		case t[i] == b[i] || o[i] == t[i]:
			out[i] = o[i]
		default:
			return nil, false
		}
	}
	return out, true
}

func TestMergeRandom(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 29))
			lower := map[string]string{"d/": ""}
			base := mergeModel{}
			for i := range mergeRandomFiles / 2 {
				p := fmt.Sprintf("d/f%d", i)
				base[p] = []string{"a", "1", "b", "3", "c"}
				lower[p] = fileText(base[p])
			}
			me := newMergeEnv(t, lower)
			ours, theirs := base.clone(), base.clone()
			randomEdits(rng, me.ours, ours, "ours")
			randomEdits(rng, me.theirs, theirs, "theirs")

			wantConflicts := map[string]bool{}
			want := mergeModel{}
			for i := range mergeRandomFiles {
				p := fmt.Sprintf("d/f%d", i)
				b, o, th := base[p], ours[p], theirs[p]
				same := func(x, y []string) bool { return (x == nil) == (y == nil) && slices.Equal(x, y) }
				switch {
				case same(o, b):
					if th != nil {
						want[p] = th
					}
				case same(th, b) || same(o, th):
					if o != nil {
						want[p] = o
					}
				case o == nil || th == nil:
					wantConflicts[p] = true // a deletion against a change: ours stays
					if o != nil {
						want[p] = o
					}
				default:
					if merged, ok := mergeLines(b, o, th); ok {
						want[p] = merged
					} else {
						wantConflicts[p] = true
						want[p] = nil // markers
					}
				}
			}
			plan := me.merge(t, MergeOptions{})
			got := map[string]bool{}
			for _, c := range plan.Conflicts {
				got[c.Path] = true
			}
			for i := range mergeRandomFiles {
				p := fmt.Sprintf("d/f%d", i)
				if got[p] != wantConflicts[p] {
					t.Errorf("seed %d: %s: conflict %v, want %v (base %q, ours %q, theirs %q)", seed, p, got[p], wantConflicts[p], base[p], ours[p], theirs[p])
				}
				lines, exists := want[p]
				switch {
				case exists && lines == nil:
					if text := me.ours.read(p); !strings.Contains(text, "<<<<<<< ours\n") || !strings.Contains(text, ">>>>>>> theirs\n") {
						t.Errorf("seed %d: %s = %q, want conflict markers", seed, p, text)
					}
				case exists:
					if text := me.ours.read(p); text != fileText(lines) {
						t.Errorf("seed %d: %s = %q, want %q (base %q, ours %q, theirs %q)", seed, p, text, fileText(lines), base[p], ours[p], theirs[p])
					}
				default:
					if me.ours.exists(p) {
						t.Errorf("seed %d: %s exists, want it deleted (base %q, ours %q, theirs %q)", seed, p, base[p], ours[p], theirs[p])
					}
				}
			}
		})
	}
}
