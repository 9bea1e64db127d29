package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSelectSnapshotOps(t *testing.T) {
	names := func(ws []*workload, ops []*snapOp) string {
		var out []string
		for _, w := range ws {
			out = append(out, w.name)
		}
		for _, op := range ops {
			out = append(out, op.name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		only, want string
		memory     bool
	}{
		{"snapshots", strings.Join(snapOpNames(), ","), false},
		{"restore-5k, find,snapshot-5k", "find,snapshot-5k,restore-5k", false},
		{"snapshots,snapshot-100k", strings.Join(snapOpNames(), ","), false},
		{"memory,find", "find", true},
		{"", strings.Join(append(workloadNames(), snapOpNames()...), ","), true},
	} {
		ws, ops, memory, err := selectWorkloads(tc.only)
		if err != nil {
			t.Errorf("--only %q: %v", tc.only, err)
			continue
		}
		if got := names(ws, ops); got != tc.want || memory != tc.memory {
			t.Errorf("--only %q selects %s (memory %v), want %s (memory %v)", tc.only, got, memory, tc.want, tc.memory)
		}
	}
	if _, _, _, err := selectWorkloads("snapshot-1k"); err == nil || !strings.Contains(err.Error(), "snapshot-5k,snapshot-100k") {
		t.Errorf("--only snapshot-1k: error %v, want one that lists the snapshot table's names", err)
	}
}

// configFor parses args as the command line (with a throwaway work and
// output directory).
func configFor(t *testing.T, args ...string) (*config, error) {
	t.Helper()
	o := &options{}
	flags := newFlagSet(o)
	args = append([]string{"--workdir", t.TempDir(), "--out", t.TempDir()}, args...)
	if err := flags.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o.config(flags)
}

// fakeAgentfs is an executable that --agentfs accepts.
func fakeAgentfs(t *testing.T) string {
	t.Helper()
	agentfs := filepath.Join(t.TempDir(), "agentfs")
	if err := os.WriteFile(agentfs, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return agentfs
}

func TestSnapshotConfig(t *testing.T) {
	agentfs := fakeAgentfs(t)
	// The snapshot table alone: only native and agentfs are needed.
	c, err := configFor(t, "--only", "snapshots", "--agentfs", agentfs)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.filesystems, ","); got != "native,agentfs" {
		t.Errorf("--only snapshots: filesystems %s, want native,agentfs", got)
	}
	if len(c.workloads) != 0 || len(c.snapOps) != len(snapOps) {
		t.Errorf("--only snapshots: %d workloads, %d snapshot rows; want 0, %d", len(c.workloads), len(c.snapOps), len(snapOps))
	}
	if c.snapFiles != 5000 || c.snapManyFiles != 100000 {
		t.Errorf("changed sets %d, %d; want 5000, 100000", c.snapFiles, c.snapManyFiles)
	}
	// Without agentfs, the table is left out, unless asked for.
	if c, err = configFor(t, "--fs", "native"); err != nil {
		t.Fatal(err)
	}
	if len(c.snapOps) != 0 {
		t.Errorf("--fs native: %d snapshot rows, want none", len(c.snapOps))
	}
	if _, err = configFor(t, "--fs", "native", "--only", "find,snapshot-5k"); err == nil || !strings.Contains(err.Error(), "add agentfs to --fs") {
		t.Errorf("--fs native --only snapshot-5k: error %v, want a usage error that says to add agentfs", err)
	}
	// --quick cuts the large changed set; snapshot-100k has no warm-up.
	if c, err = configFor(t, "--quick", "--fs", "native,agentfs", "--agentfs", agentfs, "--runs", "7"); err != nil {
		t.Fatal(err)
	}
	if c.snapFiles != 5000 || c.snapManyFiles != 10000 {
		t.Errorf("--quick: changed sets %d, %d; want 5000, 10000", c.snapFiles, c.snapManyFiles)
	}
	if runs, warmup := findSnapOp(opSnapshot100k).runs(c); runs != 7 || warmup != 0 {
		t.Errorf("snapshot-100k with --runs 7: %d runs, %d warm-ups; want 7, 0", runs, warmup)
	}
	if runs, warmup := findSnapOp(opSnapshot5k).runs(c); runs != 7 || warmup != 1 {
		t.Errorf("snapshot-5k with --runs 7: %d runs, %d warm-ups; want 7, 1", runs, warmup)
	}
}

func TestSnapshotTargets(t *testing.T) {
	want := map[string]string{
		opSnapshot5k:     "≤ 50 ms (seed target: ≤ 300 ms, or ≤ 2 s by selective copy)",
		opSnapshot100k:   "≤ 1 s",
		opSnapshotWrite:  "independent of size",
		opSnapshotCopyUp: "independent of size",
		opBranchCreate:   "≤ 10 ms",
		opBranch100k:     "≤ 10 ms",
		opRestore5k:      "≤ 30 ms (seed target: ≤ 200 ms)",
		opRestore100k:    "≤ 300 ms",
	}
	for _, op := range snapOps {
		if got := op.target(); got != want[op.name] {
			t.Errorf("%s: target %q, want %q", op.name, got, want[op.name])
		}
	}
}

func TestWriteChanges(t *testing.T) {
	root := t.TempDir()
	ctx := t.Context()
	if err := writeChanges(ctx, root, 0, 2500, 1); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, changesDir)
	if n, err := countRegular(dir); err != nil || n != 2500 {
		t.Fatalf("%d files (%v), want 2500", n, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 3 {
		t.Fatalf("%d directories (%v), want 3 of at most %d files", len(entries), err, changesPerDir)
	}
	if got := changePath(1234); got != "d001/f001234" {
		t.Errorf("changePath(1234) = %s", got)
	}
	first, _ := os.ReadFile(filepath.Join(dir, changePath(7)))
	if len(first) != changeSize {
		t.Errorf("a changed file has %d bytes, want %d", len(first), changeSize)
	}
	// A new generation rewrites in place, with other contents.
	if err := writeChanges(ctx, root, 0, 10, 2); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(filepath.Join(dir, changePath(7)))
	if bytes.Equal(first, second) || len(second) != changeSize {
		t.Errorf("rewriting in generation 2 left the file as it was")
	}
	if n, _ := countRegular(dir); n != 2500 {
		t.Errorf("after the rewrite, %d files, want 2500", n)
	}
}

func TestByteWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeByte(path, 'x'); err != nil {
		t.Fatal(err)
	}
	if err := checkByte(path, 'x', 3); err != nil {
		t.Error(err)
	}
	if err := checkByte(path, 'x', 4); err == nil {
		t.Error("checkByte accepted a wrong size")
	}
}

func TestSnapshotIDLine(t *testing.T) {
	if id, err := checkSnapshotID("took snapshot 1a2b3c4d of branch main\n1a2b3c4d\n"); err != nil || id != "1a2b3c4d" {
		t.Errorf("checkSnapshotID = %q, %v", id, err)
	}
	if _, err := checkSnapshotID("took snapshot\n"); err == nil {
		t.Error("checkSnapshotID accepted output without an id")
	}
}

// sampleSnapshotReport is sampleReport with a snapshot table: rows met,
// not met, size-independent, failed and with fewer runs.
func sampleSnapshotReport() *report {
	r := sampleReport()
	goal := func(s float64) *float64 { return &s }
	r.Snapshots = []*snapResult{
		{Name: opSnapshot5k, Title: "snapshot, 5,000 changed files in the branch", Target: findSnapOp(opSnapshot5k).target(), GoalSeconds: goal(0.05), Runs: 3, Warmup: 1,
			Agentfs: &fsResult{Runs: []float64{0.006, 0.004, 0.005}}, Copy: &fsResult{Runs: []float64{0.2, 0.1, 0.3}}},
		{Name: opSnapshot100k, Title: "snapshot, 100,000 changed files", Target: "≤ 1 s", GoalSeconds: goal(1), Runs: 2, Warmup: 0,
			Agentfs: &fsResult{Runs: []float64{0.01, 0.02}}, Copy: &fsResult{Runs: []float64{2, 2}}},
		{Name: opSnapshotWrite, Title: "snapshot right after a 1-byte write to a 1 GiB file (already copied up)", Target: "independent of size", Runs: 3, Warmup: 1,
			Agentfs: &fsResult{Runs: []float64{0.008, 0.009, 0.007}}, Copy: &fsResult{Runs: []float64{0.3, 0.3, 0.3}},
			Reference: &fsResult{Runs: []float64{0.004, 0.004, 0.004}}, ReferenceTitle: "after a 1-byte write to a 1 KiB file",
			Setup: map[string][]float64{"write_after_snapshot": {1.1, 1.0, 1.2}}},
		{Name: opBranchCreate, Title: "branch create --from a snapshot (5,000 changed files)", Target: "≤ 10 ms", GoalSeconds: goal(0.01), Runs: 3, Warmup: 1,
			Agentfs: &fsResult{Runs: []float64{0.03, 0.02, 0.025}}, Copy: &fsResult{Error: "cp -a: exit status 1: No space left on device"}},
		{Name: opRestore5k, Title: "restore of a 5,000-file difference (safety snapshot included)", Target: "≤ 200 ms", GoalSeconds: goal(0.2), Runs: 3, Warmup: 1,
			Agentfs: &fsResult{Runs: []float64{0.1, 0.1, 0.1}}, Copy: &fsResult{Runs: []float64{0.1, 0.1, 0.1}}},
	}
	r.Notes = nil
	r.finish()
	return r
}

func TestSnapshotFinish(t *testing.T) {
	r := sampleSnapshotReport()
	s5k, s100k, write, branch := r.Snapshots[0], r.Snapshots[1], r.Snapshots[2], r.Snapshots[3]
	if *s5k.Agentfs.Median != 0.005 || *s5k.Copy.Median != 0.2 || math.Abs(*s5k.RatioToCp-0.025) > 1e-12 || !*s5k.Met {
		t.Errorf("snapshot-5k: median %v, cp %v, ratio %v, met %v", *s5k.Agentfs.Median, *s5k.Copy.Median, *s5k.RatioToCp, *s5k.Met)
	}
	if !*s100k.Met {
		t.Errorf("snapshot-100k: 15 ms is within 1 s")
	}
	if write.Met != nil || *write.Reference.Median != 0.004 || write.SetupMedians["write_after_snapshot"] != 1.1 {
		t.Errorf("snapshot-1byte: met %v, reference %v, setup %v", write.Met, write.Reference.Median, write.SetupMedians)
	}
	if *branch.Met || branch.RatioToCp != nil {
		t.Errorf("branch-create: met %v (25 ms is over 10 ms), ratio %v (cp failed: none)", *branch.Met, branch.RatioToCp)
	}
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "branch-create (cp -a) failed: cp -a: exit status 1: No space left on device") {
		t.Errorf("notes %q lack the failure of cp -a", notes)
	}
}

func TestSnapshotMarkdown(t *testing.T) {
	md := sampleSnapshotReport().markdown()
	for _, want := range []string{
		"## Snapshots, branches, restore (agentfs only)\n",
		"Other runs, as each creates its changed set anew: `snapshot-100k`: 2 runs, no warm-up.",
		"| operation | agentfs | cp -a | ratio | target |\n|---|---:|---:|---:|---|\n",
		"| snapshot, 5,000 changed files in the branch | 5.00 ms | 200 ms | 0.025× | ≤ 50 ms (seed target: ≤ 300 ms, or ≤ 2 s by selective copy): met |\n",
		"| snapshot, 100,000 changed files | 15.0 ms | 2.00 s | 0.0075× | ≤ 1 s: met |\n",
		"| snapshot right after a 1-byte write to a 1 GiB file (already copied up) | 8.00 ms | 300 ms | 0.027× | independent of size (after a 1-byte write to a 1 KiB file: 4.00 ms) |\n",
		"| branch create --from a snapshot (5,000 changed files) | 25.0 ms | failed | – | ≤ 10 ms: not met |\n",
		"| restore of a 5,000-file difference (safety snapshot included) | 100 ms | 100 ms | 1.00× | ≤ 200 ms: met |\n",
		"In `snapshot-1byte`, the 1-byte write before the timed snapshot took 1.10 s (untimed; median; the file's bytes cached)",
		"Restore first takes a safety snapshot",
		"`cp -a` does not sync",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q; it is:\n%s", want, md)
		}
	}
	// The first table comes first.
	if strings.Index(md, "| workload |") > strings.Index(md, "| operation |") {
		t.Errorf("the snapshot table comes before the workloads':\n%s", md)
	}

	// The snapshot table alone.
	r := sampleSnapshotReport()
	r.Workloads = nil
	md = r.markdown()
	if strings.Contains(md, "| workload |") || strings.Contains(md, "The tree is") || !strings.Contains(md, "| operation |") {
		t.Errorf("without workloads, the markdown is:\n%s", md)
	}
	if _, err := r.chartPNG(); err != nil {
		t.Errorf("chart without workloads: %v", err)
	}
}

// snapshotRowsJSON is r's snapshot table as results.json has it.
func snapshotRowsJSON(t *testing.T, r *report) []map[string]any {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Snapshots []map[string]any `json:"snapshots"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Snapshots
}

// TestSnapshotJSONShape pins the names of the snapshot table in
// results.json.
func TestSnapshotJSONShape(t *testing.T) {
	rows := snapshotRowsJSON(t, sampleSnapshotReport())
	if len(rows) != 5 {
		t.Fatalf("%d snapshot rows, want 5", len(rows))
	}
	row := rows[0]
	for _, key := range []string{"name", "title", "target", "goal_seconds", "met", "changed_set", "runs", "warmup", "agentfs", "cp_a", "ratio_to_cp_a"} {
		if _, ok := row[key]; !ok {
			t.Errorf("snapshot row lacks %q: %v", key, row)
		}
	}
	if row["agentfs"].(map[string]any)["median_seconds"] != 0.005 || row["cp_a"].(map[string]any)["median_seconds"] != 0.2 {
		t.Errorf("snapshot-5k medians: %v", row)
	}
	write := rows[2]
	if write["reference"].(map[string]any)["median_seconds"] != 0.004 || write["setup_median_seconds"].(map[string]any)["write_after_snapshot"] != 1.1 {
		t.Errorf("snapshot-1byte: reference or setup missing: %v", write)
	}
}

// TestSnapshotBaseline: with --baseline the snapshot table keeps
// agentfs-baseline (alone, as --only snapshots runs it, too) and runs
// each row on three sides; the report gives the baseline's medians, the
// ratio to it and whether each build meets the target.
func TestSnapshotBaseline(t *testing.T) {
	agentfs, baseline := fakeAgentfs(t), fakeAgentfs(t)
	for _, only := range []string{"snapshots", "branch-create,restore-5k", ""} {
		c, err := configFor(t, "--only", only, "--agentfs", agentfs, "--baseline", baseline)
		if err != nil {
			t.Fatalf("--only %q --baseline: %v", only, err)
		}
		if !slices.Contains(c.filesystems, fsAgentfsBaseline) || c.agentfsBinary(fsAgentfsBaseline) != baseline {
			t.Errorf("--only %q --baseline: filesystems %v, baseline binary %q; want agentfs-baseline, %s", only, c.filesystems, c.agentfsBinary(fsAgentfsBaseline), baseline)
		}
		b := &bench{cfg: c}
		if got := strings.Join(b.snapSides(), ","); got != "agentfs,agentfs-baseline,cp -a" {
			t.Errorf("--only %q --baseline: sides %s, want agentfs,agentfs-baseline,cp -a", only, got)
		}
	}
	c, err := configFor(t, "--only", "snapshots", "--agentfs", agentfs)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join((&bench{cfg: c}).snapSides(), ","); got != "agentfs,cp -a" {
		t.Errorf("without --baseline: sides %s, want agentfs,cp -a", got)
	}

	r := sampleSnapshotReport()
	r.Snapshots[0].Baseline = &fsResult{Runs: []float64{0.1, 0.09, 0.11}}              // snapshot-5k: not met before
	r.Snapshots[2].Baseline = &fsResult{Runs: []float64{0.008, 0.008, 0.008}}          // size-independent: no verdict
	r.Snapshots[3].Baseline = &fsResult{Error: "agentfs branch create: exit status 1"} // branch-create
	r.Snapshots[4].Baseline = &fsResult{Runs: []float64{0.1, 0.2, 0.2}}                // restore-5k: met by both
	r.Snapshots[1].Baseline = &fsResult{}                                              // snapshot-100k: no runs
	r.Notes = nil
	r.finish()
	s5k, restore := r.Snapshots[0], r.Snapshots[4]
	if *s5k.Baseline.Median != 0.1 || math.Abs(*s5k.RatioToBaseline-0.05) > 1e-12 || *s5k.BaselineMet || !*s5k.Met {
		t.Errorf("snapshot-5k: baseline %v, ratio %v, baseline met %v, met %v", *s5k.Baseline.Median, *s5k.RatioToBaseline, *s5k.BaselineMet, *s5k.Met)
	}
	if !*restore.BaselineMet || math.Abs(*restore.RatioToBaseline-0.5) > 1e-12 {
		t.Errorf("restore-5k: baseline met %v, ratio %v", *restore.BaselineMet, *restore.RatioToBaseline)
	}
	if r.Snapshots[2].BaselineMet != nil || r.Snapshots[1].RatioToBaseline != nil {
		t.Errorf("a row without a goal or without runs has a verdict or a ratio: %v, %v", r.Snapshots[2].BaselineMet, r.Snapshots[1].RatioToBaseline)
	}
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "branch-create (agentfs-baseline) failed: agentfs branch create: exit status 1") {
		t.Errorf("notes %q lack the failure of the baseline", notes)
	}
	md := r.markdown()
	for _, want := range []string{
		"| operation | agentfs | agentfs-baseline | vs baseline | cp -a | ratio | target |\n|---|---:|---:|---:|---:|---:|---|\n",
		"| snapshot, 5,000 changed files in the branch | 5.00 ms | 100 ms | 0.050× | 200 ms | 0.025× | ≤ 50 ms (seed target: ≤ 300 ms, or ≤ 2 s by selective copy): met (baseline: not met) |\n",
		"| snapshot, 100,000 changed files | 15.0 ms | – | – | 2.00 s | 0.0075× | ≤ 1 s: met |\n",
		"| snapshot right after a 1-byte write to a 1 GiB file (already copied up) | 8.00 ms | 8.00 ms | 1.00× | 300 ms | 0.027× | independent of size (after a 1-byte write to a 1 KiB file: 4.00 ms) |\n",
		"| branch create --from a snapshot (5,000 changed files) | 25.0 ms | failed | – | failed | – | ≤ 10 ms: not met |\n",
		"| restore of a 5,000-file difference (safety snapshot included) | 100 ms | 200 ms | 0.50× | 100 ms | 1.00× | ≤ 200 ms: met (baseline: met) |\n",
		"`agentfs-baseline` is the other build",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q; it is:\n%s", want, md)
		}
	}
	row := snapshotRowsJSON(t, r)[0]
	if row["agentfs_baseline"].(map[string]any)["median_seconds"] != 0.1 || math.Abs(row["ratio_to_baseline"].(float64)-0.05) > 1e-12 || row["baseline_met"] != false {
		t.Errorf("snapshot-5k in results.json: %v", row)
	}
	// Without a baseline, the table keeps its five columns.
	if md := sampleSnapshotReport().markdown(); strings.Contains(md, "agentfs-baseline") {
		t.Errorf("without --baseline the markdown names agentfs-baseline:\n%s", md)
	}
}
