package integration

// A merge killed half way (issue 29): the target branch holds none of
// it after the daemon comes back, and what a program wrote to the
// target meanwhile is kept.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
)

func TestCrashMidMerge(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "merge-gate")
	t.Setenv("AGENTFS_TEST_MERGE_GATE", gate)
	var lower []harness.Entry
	for i := range 20 {
		lower = append(lower, harness.LowerFile(fmt.Sprintf("src/f%02d.txt", i), fmt.Sprintf("lower %d\n", i)))
	}
	lower = append(lower, harness.LowerFile("old/a.txt", "a\n"), harness.LowerFile("old/b.txt", "b\n"))
	m := harness.NewMount(t, harness.WithStore(filepath.Join(t.TempDir(), "store")), harness.WithLower(lower...))
	branchesFrom(t, m, "feat")
	// Theirs: new files in a new directory, edits, deletes and a
	// removed directory: enough changes that the gate stops the merge
	// with some made and some not.
	inBranch(t, m, "feat", `mkdir -p new/deep && for i in $(seq 1 30); do echo "new $i" > new/deep/n$i.txt; done &&
		for i in 00 01 02 03 04 05 06 07 08 09; do echo "theirs $i" > src/f$i.txt; done && rm src/f19.txt src/f18.txt && rm -r old`)
	harness.WriteFile(t, m.Path("ours.txt"), "ours, before the merge\n")
	before, err := crashWalk(m.Dir)
	if err != nil {
		t.Fatal(err)
	}

	harness.WriteFile(t, gate, "")
	merge := exec.Command(harness.Bin(), "merge", "feat", "-C", m.Dir)
	var out strings.Builder
	merge.Stdout, merge.Stderr = &out, &out
	if err := merge.Start(); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(func() bool { _, err := os.Stat(gate + ".reached"); return err == nil }) {
		_ = merge.Process.Kill()
		_ = merge.Wait()
		t.Fatalf("the merge never reached its gate half way (is AGENTFS_TEST_MERGE_GATE read?): %s", out.String())
	}
	// Half of the merge is made; a program writes the target meanwhile
	// (a path the merge does not change), and makes it durable.
	during := m.Path("during.txt")
	f, err := os.Create(during)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("written while the merge ran\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mid, err := crashWalk(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(crashDiff(before, mid)) <= 1 {
		t.Fatalf("at the gate the merge has changed nothing yet (the test would prove nothing): %v", crashDiff(before, mid))
	}
	killDaemon(t, m)
	if err := merge.Wait(); err == nil {
		t.Fatalf("agentfs merge exited 0 although its daemon was killed half way:\n%s", out.String())
	}
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	remountDead(t, m)

	after, err := crashWalk(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	want := before
	want["during.txt"] = after["during.txt"]
	if harness.ReadFile(t, during) != "written while the merge ran\n" {
		t.Errorf("during.txt, written and fsync'ed while the merge ran, was lost by the crash's recovery")
	}
	for _, d := range crashDiff(want, after) {
		t.Errorf("after a merge killed half way and a remount, the target is not as before the merge: %s", d)
	}
	checkFsckClean(t, m.Dir)

	// The merge made again, whole.
	r := mustC(t, m.Dir, "merge", "feat")
	if !strings.Contains(r.Stdout, "merged branch feat into main") {
		t.Errorf("the merge made again:\n%s", r)
	}
	for p, w := range map[string]string{"new/deep/n30.txt": "new 30\n", "src/f00.txt": "theirs 00\n", "during.txt": "written while the merge ran\n", "ours.txt": "ours, before the merge\n"} {
		if got := harness.ReadFile(t, m.Path(p)); got != w {
			t.Errorf("%s after the merge made again = %q, want %q", p, got, w)
		}
	}
	for _, p := range []string{"old", "src/f19.txt"} {
		if _, err := os.Lstat(m.Path(p)); !os.IsNotExist(err) {
			t.Errorf("%s after the merge made again: %v, want it gone", p, err)
		}
	}
	m.AssertLowerUnchanged()
}
