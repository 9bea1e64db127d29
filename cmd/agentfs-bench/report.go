package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// report is everything one run measured; it is written as results.json.
type report struct {
	Machine     machineInfo       `json:"machine"`
	Config      configInfo        `json:"config"`
	Filesystems []fsStatus        `json:"filesystems"`
	Workloads   []*workloadResult `json:"workloads"`
	// Snapshots is the second table: agentfs's snapshot, branch and
	// restore commands beside cp -a of the same changed set.
	Snapshots []*snapResult `json:"snapshots,omitempty"`
	// Memory is the agentfs daemon's memory over walks of a large tree.
	Memory *memResult `json:"memory,omitempty"`
	// System is the table of programs started in a system session
	// (system.go).
	System []*sysResult `json:"system,omitempty"`
	// CLIStart is the CLI's start (clistart.go).
	CLIStart *cliStartResult `json:"cli_start,omitempty"`
	// Remote is push and pull of a session against a local S3 server.
	Remote *remoteResult `json:"remote,omitempty"`
	// TraceCost is agentfs over agentfs-untraced (tracecost.go).
	TraceCost *traceCost `json:"trace_cost,omitempty"`
	// HashCost is agentfs over agentfs-nohash (tracecost.go).
	HashCost        *traceCost         `json:"hash_cost,omitempty"`
	CopyUpSeconds   map[string]float64 `json:"copy_up_seconds,omitempty"`
	Notes           []string           `json:"notes,omitempty"`
	DurationSeconds float64            `json:"duration_seconds"`
}

type configInfo struct {
	Runs          int    `json:"runs"`
	Warmup        int    `json:"warmup"`
	Quick         bool   `json:"quick"`
	BigFileBytes  int64  `json:"big_file_bytes"`
	SmallFiles    int    `json:"small_files"`
	TreeFiles     int    `json:"tree_files"`
	RmSubtree     string `json:"rm_subtree"`
	RmFiles       int    `json:"rm_files"`
	GrepString    string `json:"grep_string"`
	GoCache       string `json:"gocache"`
	AgentfsBinary string `json:"agentfs_binary,omitempty"`
	// BaselineBinary is --baseline, the binary of agentfs-baseline.
	BaselineBinary string `json:"baseline_binary,omitempty"`
	// The snapshot table's changed sets (files of 1 KiB).
	SnapshotFiles     int `json:"snapshot_files,omitempty"`
	SnapshotManyFiles int `json:"snapshot_many_files,omitempty"`
}

type workloadResult struct {
	Name        string `json:"name"`
	Title       string `json:"title"`
	FreshPerRun bool   `json:"fresh_per_run"`
	// Skipped says why the workload did not run at all.
	Skipped string `json:"skipped,omitempty"`
	// Results by filesystem name.
	Results map[string]*fsResult `json:"results"`
}

// snapResult is a row of the snapshot table.
type snapResult struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	// Target is the target column; GoalSeconds the goal it states (none
	// for the rows whose goal is a time independent of the file's size:
	// compare with Reference).
	Target      string   `json:"target"`
	GoalSeconds *float64 `json:"goal_seconds,omitempty"`
	SeedTarget  string   `json:"seed_target,omitempty"`
	// Met: the agentfs median is within the goal.
	Met *bool `json:"met,omitempty"`
	// ChangedSet is what cp -a copies natively.
	ChangedSet string `json:"changed_set"`
	Runs       int    `json:"runs"`
	Warmup     int    `json:"warmup"`
	Skipped    string `json:"skipped,omitempty"`
	// Agentfs is the agentfs command, Copy cp -a (their Ratio fields
	// stay empty: the row's ratio is RatioToCp).
	Agentfs   *fsResult `json:"agentfs"`
	Copy      *fsResult `json:"cp_a"`
	RatioToCp *float64  `json:"ratio_to_cp_a"`
	// Baseline (with --baseline) is the same command of the other
	// build, in the same runs; RatioToBaseline agentfs's median over
	// its, BaselineMet whether its median is within the goal.
	Baseline        *fsResult `json:"agentfs_baseline,omitempty"`
	RatioToBaseline *float64  `json:"ratio_to_baseline,omitempty"`
	BaselineMet     *bool     `json:"baseline_met,omitempty"`
	// Reference (the 1-byte rows): the same snapshot after the same
	// write to a small file, in the same runs.
	Reference      *fsResult `json:"reference,omitempty"`
	ReferenceTitle string    `json:"reference_title,omitempty"`
	// Setup holds untimed steps of each agentfs run worth knowing (the
	// write before the snapshot), SetupMedians their medians.
	Setup        map[string][]float64 `json:"setup_seconds,omitempty"`
	SetupMedians map[string]float64   `json:"setup_median_seconds,omitempty"`
}

type fsResult struct {
	Runs   []float64 `json:"runs_seconds"`
	Warmup []float64 `json:"warmup_seconds"`
	// Median of Runs; Ratio is Median over native's (absent when either
	// is missing).
	Median *float64 `json:"median_seconds"`
	Ratio  *float64 `json:"ratio"`
	Check  string   `json:"check,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// finish computes the medians and ratios, the copy-up times, and notes
// on filesystems that were left out or saw something else than native.
func (r *report) finish() {
	for _, st := range r.Filesystems {
		if !st.Available {
			r.Notes = append(r.Notes, st.Name+": "+st.Note)
		}
	}
	for _, w := range r.Workloads {
		if w.Skipped != "" {
			r.Notes = append(r.Notes, w.Name+": skipped: "+w.Skipped)
			continue
		}
		for _, res := range w.Results {
			if len(res.Runs) > 0 {
				m := median(res.Runs)
				res.Median = &m
			}
		}
		native := w.Results[fsNative]
		for _, filesystem := range r.order() {
			res := w.Results[filesystem]
			if res == nil {
				continue
			}
			if res.Error != "" {
				r.Notes = append(r.Notes, fmt.Sprintf("%s on %s failed: %s", w.Name, filesystem, res.Error))
			}
			if native == nil || native.Median == nil || res.Median == nil {
				continue
			}
			if q, ok := ratio(*res.Median, *native.Median); ok {
				res.Ratio = &q
			}
			if res.Check != native.Check && res.Error == "" && native.Error == "" {
				r.Notes = append(r.Notes, fmt.Sprintf("%s on %s saw %q, native %q", w.Name, filesystem, res.Check, native.Check))
			}
		}
		if w.Name == copyUpWorkload {
			r.CopyUpSeconds = map[string]float64{}
			for filesystem, res := range w.Results {
				if res.Median != nil {
					r.CopyUpSeconds[filesystem] = *res.Median
				}
			}
		}
	}
	r.finishTraceCost()
	r.finishHashCost()
	r.finishSystem()
	for _, op := range r.Snapshots {
		op.finish(r)
	}
}

// finish computes a snapshot row's medians, ratio and verdict, and
// notes its failures.
func (op *snapResult) finish(r *report) {
	if op.Skipped != "" {
		r.Notes = append(r.Notes, op.Name+": skipped: "+op.Skipped)
		return
	}
	for _, res := range []*fsResult{op.Agentfs, op.Baseline, op.Copy, op.Reference} {
		if res != nil && len(res.Runs) > 0 {
			m := median(res.Runs)
			res.Median = &m
		}
	}
	if op.Baseline != nil && op.Baseline.Median != nil && op.GoalSeconds != nil {
		met := *op.Baseline.Median <= *op.GoalSeconds
		op.BaselineMet = &met
	}
	for _, side := range []struct {
		name string
		res  *fsResult
	}{{sideAgentfs, op.Agentfs}, {sideBaseline, op.Baseline}, {sideCp, op.Copy}} {
		if side.res != nil && side.res.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("%s (%s) failed: %s", op.Name, side.name, side.res.Error))
		}
	}
	if op.Agentfs == nil || op.Agentfs.Median == nil {
		return
	}
	if op.Copy != nil && op.Copy.Median != nil {
		if q, ok := ratio(*op.Agentfs.Median, *op.Copy.Median); ok {
			op.RatioToCp = &q
		}
	}
	if op.Baseline != nil && op.Baseline.Median != nil {
		if q, ok := ratio(*op.Agentfs.Median, *op.Baseline.Median); ok {
			op.RatioToBaseline = &q
		}
	}
	if op.GoalSeconds != nil {
		met := *op.Agentfs.Median <= *op.GoalSeconds
		op.Met = &met
	}
	if len(op.Setup) > 0 {
		op.SetupMedians = map[string]float64{}
		for k, v := range op.Setup {
			op.SetupMedians[k] = median(v)
		}
	}
}

// copyUpSummary is "Copy-up of a 1 GiB file: overlayfs 0.75 s, ...", or
// "" when copy-up did not run on any overlay.
func (r *report) copyUpSummary() string {
	var parts []string
	for _, filesystem := range r.order() {
		if s, ok := r.CopyUpSeconds[filesystem]; ok && filesystem != fsNative {
			parts = append(parts, fmt.Sprintf("%s %.2f s", filesystem, s))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("copy-up of a %s file: %s", humanBytes(r.Config.BigFileBytes), strings.Join(parts, ", "))
}

// order is the available filesystems, in column order.
func (r *report) order() []string {
	var out []string
	for _, st := range r.Filesystems {
		if st.Available {
			out = append(out, st.Name)
		}
	}
	return out
}

// write prints the table to stdout and writes results.md, results.json
// and results.png in dir.
func (r *report) write(dir string, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	md := r.markdown()
	fmt.Fprint(stdout, md)
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	png, err := r.chartPNG()
	if err != nil {
		return err
	}
	for name, content := range map[string][]byte{
		"results.md":   []byte(md),
		"results.json": append(data, '\n'),
		"results.png":  png,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nwritten: %s\n", strings.Join([]string{
		filepath.Join(dir, "results.md"), filepath.Join(dir, "results.json"), filepath.Join(dir, "results.png"),
	}, ", "))
	return nil
}

// markdown renders the tables. The first: a row per workload; native's
// median time, then each other filesystem's median time and its ratio
// to native. The second (snapshotMarkdown): agentfs's snapshot
// operations beside cp -a.
func (r *report) markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# agentfs benchmark\n\n")
	fmt.Fprintf(&b, "%s, %s (%d cores), %s memory, %s on %s; %s; %s.\n",
		m.Kernel, m.CPU, m.Cores, humanMemory(m.MemoryBytes), m.WorkdirFs, m.Workdir, m.GoVersion, m.Date)
	if rt := m.RoundTrips; rt != nil {
		b.WriteString(rt.markdown())
	}
	fmt.Fprintf(&b, "Medians of %d runs after %d warm-up", r.Config.Runs, r.Config.Warmup)
	if r.Config.Warmup != 1 {
		b.WriteString("s")
	}
	if len(r.Workloads) > 0 {
		b.WriteString("; the ratio is to native (lower is faster).")
	} else {
		b.WriteString(".")
	}
	if r.Config.Quick {
		b.WriteString(" **Quick run (--quick): small sizes, for development only.**")
	}
	b.WriteString("\n\n")

	if len(r.Workloads) > 0 {
		r.workloadMarkdown(&b)
		r.traceMarkdown(&b)
		r.hashMarkdown(&b)
		r.bindingMarkdown(&b)
	}
	if len(r.Snapshots) > 0 {
		if len(r.Workloads) > 0 {
			b.WriteString("\n")
		}
		r.snapshotMarkdown(&b)
	}
	if r.Memory != nil {
		if len(r.Workloads) > 0 || len(r.Snapshots) > 0 {
			b.WriteString("\n")
		}
		r.memoryMarkdown(&b)
	}
	if r.CLIStart != nil {
		if len(r.Workloads) > 0 || len(r.Snapshots) > 0 || r.Memory != nil {
			b.WriteString("\n")
		}
		r.cliStartMarkdown(&b)
	}
	if len(r.System) > 0 {
		if len(r.Workloads) > 0 || len(r.Snapshots) > 0 || r.Memory != nil || r.CLIStart != nil {
			b.WriteString("\n")
		}
		r.systemMarkdown(&b)
	}
	if r.Remote != nil {
		if len(r.Workloads) > 0 || len(r.Snapshots) > 0 || r.Memory != nil || r.CLIStart != nil || len(r.System) > 0 {
			b.WriteString("\n")
		}
		r.Remote.markdown(&b)
	}

	reflink := "no"
	if m.Reflink {
		reflink = "yes"
	}
	fmt.Fprintf(&b, "\nReflink (FICLONE) in the work directory (%s; lowers and the agentfs backstore live there): %s (%s).\n", m.WorkdirFs, reflink, m.ReflinkDetail)
	var versions []string
	for _, st := range r.Filesystems {
		if st.Available && st.Version != "" {
			versions = append(versions, st.Name+" "+st.Version)
		}
	}
	if len(versions) > 0 {
		fmt.Fprintf(&b, "Versions: %s.\n", strings.Join(versions, "; "))
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes:\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	b.WriteString("\n")
	if len(r.Workloads) > 0 {
		fmt.Fprintf(&b, "The tree is the Go distribution's src (%d files) as a git repository with one commit, a %s file and a small Go module; "+
			"workloads that change the tree get a fresh mount (native: a fresh copy) for each run, made outside the timed region.",
			r.Config.TreeFiles, humanBytes(r.Config.BigFileBytes))
		for _, w := range r.Workloads {
			if w.Name == "go-vet" {
				fmt.Fprintf(&b, " go vet: GOCACHE is %s.", r.Config.GoCache)
			}
		}
		b.WriteString(" ")
	}
	fmt.Fprintf(&b, "Whole run: %s.\n", formatDuration(r.DurationSeconds))
	return b.String()
}

// bindingMarkdown renders the binding overhead: the workloads marked
// binding on agentfs, and on agentfs while another process is bound to
// another branch (the workloads run unbound), with their ratios to
// native and the overhead.
func (r *report) bindingMarkdown(b *strings.Builder) {
	if !slices.ContainsFunc(r.order(), boundVariant) {
		return
	}
	b.WriteString("\nBinding overhead: the same workloads, run by an unbound process, on agentfs alone and while another process is bound to another branch: through a branch mount in a mount namespace of its own (`agentfs exec -b other`, as root), or through the mount root (`agentfs exec --no-namespace -b other`, as `agentfs branch bind` binds a shell), which makes the root's answers depend on the caller.\n\n")
	b.WriteString("| workload | native | agentfs | ratio | other branch bound (exec -b) | overhead | other branch bound through the root | overhead |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, w := range r.Workloads {
		ns, root := w.Results[fsAgentfsBound], w.Results[fsAgentfsBoundRoot]
		if ns == nil && root == nil {
			continue
		}
		plain := w.Results[fsAgentfs]
		over := func(res *fsResult) string {
			if res == nil || plain == nil || plain.Median == nil || res.Median == nil || *plain.Median <= 0 {
				return "–"
			}
			return fmt.Sprintf("%+.1f%%", (*res.Median / *plain.Median - 1)*100)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", w.Title, cellTime(w, w.Results[fsNative]),
			cellTime(w, plain), cellRatio(plain), cellTime(w, ns), over(ns), cellTime(w, root), over(root))
	}
}

// workloadMarkdown renders the first table and its footnote.
func (r *report) workloadMarkdown(b *strings.Builder) {
	fss := slices.DeleteFunc(r.order(), boundVariant)
	b.WriteString("| workload |")
	sep := "|---|"
	for _, filesystem := range fss {
		if filesystem == fsNative {
			b.WriteString(" native |")
			sep += "---:|"
			continue
		}
		fmt.Fprintf(b, " %s | ratio |", filesystem)
		sep += "---:|---:|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, w := range r.Workloads {
		fmt.Fprintf(b, "| %s |", w.Title)
		for _, filesystem := range fss {
			res := w.Results[filesystem]
			cell := cellTime(w, res)
			if filesystem == fsNative {
				fmt.Fprintf(b, " %s |", cell)
				continue
			}
			fmt.Fprintf(b, " %s | %s |", cell, cellRatio(res))
		}
		b.WriteString("\n")
	}
	if note := r.copyUpSummary(); note != "" {
		fmt.Fprintf(b, "\n%s%s (open for writing, write 1 byte, close; median).\n", strings.ToUpper(note[:1]), note[1:])
	}
}

// snapshotMarkdown renders the snapshot table and its footnotes.
func (r *report) snapshotMarkdown(b *strings.Builder) {
	b.WriteString("## Snapshots, branches, restore (agentfs only)\n\n")
	b.WriteString("Each agentfs figure is the time of the command as a user runs it, from inside the mount (`agentfs snapshot create -m x`, " +
		"`agentfs branch create NAME --from ID`, `agentfs restore ID`: the CLI included), in a fresh mount for each run whose changes were made just before, untimed. " +
		"`cp -a` copies the same changed set, as native files, into a new directory, in the same run (interleaved); the ratio is agentfs over `cp -a` (lower is faster).")
	var cut []string
	for _, op := range r.Snapshots {
		if op.Skipped == "" && (op.Runs != r.Config.Runs || op.Warmup != r.Config.Warmup) {
			warm := "no warm-up"
			if op.Warmup > 0 {
				warm = fmt.Sprintf("%d warm-up%s", op.Warmup, plural(op.Warmup))
			}
			cut = append(cut, fmt.Sprintf("`%s`: %d run%s, %s", op.Name, op.Runs, plural(op.Runs), warm))
		}
	}
	if len(cut) > 0 {
		fmt.Fprintf(b, " Other runs, as each creates its changed set anew: %s.", strings.Join(cut, "; "))
	}
	baseline := slices.ContainsFunc(r.Snapshots, func(op *snapResult) bool { return op.Baseline != nil })
	if baseline {
		b.WriteString(" With `--baseline`, `agentfs-baseline` is the other build running the same commands in its own mounts, in the same runs (interleaved); " +
			"\"vs baseline\" is agentfs over it, and the target column says whether each build meets the target.")
		b.WriteString("\n\n| operation | agentfs | agentfs-baseline | vs baseline | cp -a | ratio | target |\n|---|---:|---:|---:|---:|---:|---|\n")
	} else {
		b.WriteString("\n\n| operation | agentfs | cp -a | ratio | target |\n|---|---:|---:|---:|---|\n")
	}
	for _, op := range r.Snapshots {
		if baseline {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", op.Title, snapCell(op, op.Agentfs), snapCell(op, op.Baseline), ratioCell(op.RatioToBaseline),
				snapCell(op, op.Copy), snapRatioCell(op), snapTargetCell(op))
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", op.Title, snapCell(op, op.Agentfs), snapCell(op, op.Copy), snapRatioCell(op), snapTargetCell(op))
	}
	var notes []string
	for _, op := range r.Snapshots {
		switch {
		case op.SetupMedians == nil:
		case op.Name == opSnapshotWrite:
			notes = append(notes, fmt.Sprintf("In `%s`, the 1-byte write before the timed snapshot took %s (untimed; median; the file's bytes cached): "+
				"the file is shared with the snapshot taken before it, so the write copies the whole file first (no reflink here)",
				op.Name, formatSeconds(op.SetupMedians["write_after_snapshot"])))
		case op.Name == opSnapshotCopyUp:
			notes = append(notes, fmt.Sprintf("In `%s`, the copy-up itself took %s (untimed; median; the lower file cached)", op.Name, formatSeconds(op.SetupMedians["copy_up"])))
		}
	}
	for _, op := range r.Snapshots {
		if (op.Name == opRestore5k || op.Name == opRestore100k) && op.Skipped == "" {
			notes = append(notes, "Restore first takes a safety snapshot of the current state (to undo the restore): its time is part of the figure, as the user waits for it")
			break
		}
	}
	notes = append(notes, "`snapshot create` returns once the snapshot is on disk; `cp -a` does not sync (the writeback of its copy is not in its time)")
	b.WriteString("\n")
	for _, n := range notes {
		fmt.Fprintf(b, "- %s.\n", n)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func snapCell(op *snapResult, res *fsResult) string { return medianCell(op.Skipped != "", res) }

func snapRatioCell(op *snapResult) string { return ratioCell(op.RatioToCp) }

// snapTargetCell is the target, and whether the median meets it (or for
// a size-independent row, the reference beside it).
func snapTargetCell(op *snapResult) string {
	t := op.Target
	switch {
	case op.Met != nil && *op.Met:
		t += ": met"
	case op.Met != nil:
		t += ": not met"
	case op.Reference != nil && op.Reference.Median != nil:
		t += fmt.Sprintf(" (%s: %s)", op.ReferenceTitle, formatSeconds(*op.Reference.Median))
	}
	if op.BaselineMet != nil {
		t += map[bool]string{true: " (baseline: met)", false: " (baseline: not met)"}[*op.BaselineMet]
	}
	return t
}

func cellTime(w *workloadResult, res *fsResult) string { return medianCell(w.Skipped != "", res) }

// medianCell is a table cell: res's median, or why there is none.
func medianCell(skipped bool, res *fsResult) string {
	switch {
	case skipped:
		return "skipped"
	case res == nil:
		return "–"
	case res.Error != "":
		return "failed"
	case res.Median == nil:
		return "–"
	}
	return formatSeconds(*res.Median)
}

func cellRatio(res *fsResult) string {
	if res == nil {
		return "–"
	}
	return ratioCell(res.Ratio)
}

func ratioCell(q *float64) string {
	if q == nil {
		return "–"
	}
	return formatRatio(*q)
}

// formatSeconds prints a time with three significant digits: 1.23 s,
// 45.6 ms, 789 µs.
func formatSeconds(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case s >= 100:
		return fmt.Sprintf("%.0f s", s)
	case s >= 10:
		return fmt.Sprintf("%.1f s", s)
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 0.1:
		return fmt.Sprintf("%.0f ms", s*1e3)
	case s >= 0.01:
		return fmt.Sprintf("%.1f ms", s*1e3)
	case s >= 0.001:
		return fmt.Sprintf("%.2f ms", s*1e3)
	}
	return fmt.Sprintf("%.0f µs", s*1e6)
}

// formatRatio prints 1.04×, 12.3×, 0.52×, and below 0.1 two
// significant digits: 0.0052×.
func formatRatio(q float64) string {
	switch {
	case q >= 10:
		return fmt.Sprintf("%.1f×", q)
	case q >= 0.1:
		return fmt.Sprintf("%.2f×", q)
	case q <= 0:
		return "0×"
	}
	return fmt.Sprintf("%.*f×", 1-int(math.Floor(math.Log10(q))), q)
}

func formatDuration(s float64) string {
	m := int(s) / 60
	return fmt.Sprintf("%d min %02d s", m, int(s)%60)
}

func humanMemory(n int64) string {
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
