package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{2, 2, 9, 1, 2}, 2},
	} {
		in := slices.Clone(tc.in)
		if got := median(in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("median(%v) reordered its argument to %v", tc.in, in)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
}

func TestRatio(t *testing.T) {
	if q, ok := ratio(3, 2); !ok || q != 1.5 {
		t.Errorf("ratio(3, 2) = %v, %v; want 1.5, true", q, ok)
	}
	for _, tc := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.NaN()}, {-1, 1}} {
		if q, ok := ratio(tc[0], tc[1]); ok {
			t.Errorf("ratio(%v, %v) = %v, true; want no ratio", tc[0], tc[1], q)
		}
	}
}

func TestRotate(t *testing.T) {
	list := []string{"a", "b", "c"}
	for i, want := range []string{"abc", "bca", "cab", "abc"} {
		if got := strings.Join(rotate(list, i), ""); got != want {
			t.Errorf("rotate(abc, %d) = %s, want %s", i, got, want)
		}
	}
	if got := strings.Join(list, ""); got != "abc" {
		t.Errorf("rotate changed its argument to %s", got)
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		secs float64
		want string
	}{
		{123.4, "123 s"}, {12.34, "12.3 s"}, {1.234, "1.23 s"}, {0.1234, "123 ms"},
		{0.01234, "12.3 ms"}, {0.001234, "1.23 ms"}, {0.000037, "37 µs"},
	} {
		if got := formatSeconds(tc.secs); got != tc.want {
			t.Errorf("formatSeconds(%v) = %q, want %q", tc.secs, got, tc.want)
		}
	}
	for q, want := range map[float64]string{1.044: "1.04×", 12.34: "12.3×", 0.5: "0.50×"} {
		if got := formatRatio(q); got != want {
			t.Errorf("formatRatio(%v) = %q, want %q", q, got, want)
		}
	}
	if got := thousands(1234567); got != "1,234,567" {
		t.Errorf("thousands(1234567) = %q", got)
	}
	if got := humanBytes(1 << 30); got != "1 GiB" {
		t.Errorf("humanBytes(1 GiB) = %q", got)
	}
	if got := humanBytes(64 << 20); got != "64 MiB" {
		t.Errorf("humanBytes(64 MiB) = %q", got)
	}
}

// sampleReport is a finished run over native, overlayfs and agentfs,
// with fuse-overlayfs missing, one workload skipped and one failed.
func sampleReport() *report {
	r := sampleRun()
	r.finish()
	return r
}

// sampleRun is sampleReport before finish.
func sampleRun() *report {
	return &report{
		Machine: machineInfo{Kernel: "Linux 6.18", CPU: "Test CPU", Cores: 2, MemoryBytes: 24 << 30, Date: "2026-01-02T03:04:05Z", GoVersion: "go1.26.8", Workdir: "/var/tmp/agentfs-bench", WorkdirFs: "ext4", ReflinkDetail: "FICLONE: operation not supported"},
		Config:  configInfo{Runs: 3, Warmup: 1, BigFileBytes: 1 << 30, SmallFiles: 5000, TreeFiles: 11478, RmSubtree: "src/cmd/go", RmFiles: 1502},
		Filesystems: []fsStatus{
			{Name: fsNative, Available: true},
			{Name: fsOverlayfs, Available: true},
			{Name: fsFuseOverlayfs, Note: "skipped: fuse-overlayfs is not installed"},
			{Name: fsAgentfs, Available: true, Version: "agentfs 0.1.0"},
		},
		Workloads: []*workloadResult{
			{Name: "find", Title: "find -type f", Results: map[string]*fsResult{
				fsNative:    {Runs: []float64{0.020, 0.010, 0.030}, Warmup: []float64{0.5}, Check: "11478 files"},
				fsOverlayfs: {Runs: []float64{0.022, 0.022, 0.022}, Check: "11478 files"},
				fsAgentfs:   {Runs: []float64{0.2, 0.3, 0.1}, Check: "11477 files"},
			}},
			{Name: "copy-up", Title: "copy-up: first 1-byte write to a 1 GiB file", FreshPerRun: true, Results: map[string]*fsResult{
				fsNative:    {Runs: []float64{0.00004}},
				fsOverlayfs: {Runs: []float64{0.9}},
				fsAgentfs:   {Error: "open big/big.bin for writing: input/output error"},
			}},
			{Name: "read-cold", Title: "read 1 GiB (cold: caches dropped)", Skipped: "needs root (to drop the page cache)"},
		},
		DurationSeconds: 754,
	}
}

// TestMarkdownBaseline checks that agentfs-baseline (--baseline) gets a
// column pair after agentfs's, and its version in the Versions line.
func TestMarkdownBaseline(t *testing.T) {
	r := sampleRun()
	r.Filesystems = append(r.Filesystems, fsStatus{Name: fsAgentfsBaseline, Available: true, Version: "agentfs 0.0.9"})
	r.Workloads[0].Results[fsAgentfsBaseline] = &fsResult{Runs: []float64{0.1, 0.1, 0.1}, Check: "11478 files"}
	r.Workloads[1].Results[fsAgentfsBaseline] = &fsResult{Runs: []float64{0.5}}
	r.finish()
	md := r.markdown()
	for _, want := range []string{
		"| workload | native | overlayfs | ratio | agentfs | ratio | agentfs-baseline | ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
		"| find -type f | 20.0 ms | 22.0 ms | 1.10× | 200 ms | 10.0× | 100 ms | 5.00× |\n",
		"| copy-up: first 1-byte write to a 1 GiB file | 40 µs | 900 ms | 22500.0× | failed | – | 500 ms | 12500.0× |\n",
		"| read 1 GiB (cold: caches dropped) | skipped | skipped | – | skipped | – | skipped | – |\n",
		"Copy-up of a 1 GiB file: overlayfs 0.90 s, agentfs-baseline 0.50 s (",
		"Versions: agentfs agentfs 0.1.0; agentfs-baseline agentfs 0.0.9.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q; it is:\n%s", want, md)
		}
	}
}

func TestFinish(t *testing.T) {
	r := sampleReport()
	find := r.Workloads[0].Results
	if got := *find[fsNative].Median; got != 0.020 {
		t.Errorf("native median = %v, want 0.020", got)
	}
	if got := *find[fsNative].Ratio; got != 1 {
		t.Errorf("native ratio = %v, want 1", got)
	}
	if got := *find[fsAgentfs].Ratio; math.Abs(got-10) > 1e-9 {
		t.Errorf("agentfs ratio = %v, want 10", got)
	}
	if r.Workloads[1].Results[fsAgentfs].Ratio != nil {
		t.Errorf("a failed workload has a ratio")
	}
	if got := r.CopyUpSeconds[fsOverlayfs]; got != 0.9 {
		t.Errorf("copy-up seconds for overlayfs = %v, want 0.9", got)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{
		"fuse-overlayfs: skipped: fuse-overlayfs is not installed",
		"read-cold: skipped: needs root",
		"copy-up on agentfs failed: open big/big.bin for writing: input/output error",
		`find on agentfs saw "11477 files", native "11478 files"`,
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
}

func TestMarkdown(t *testing.T) {
	md := sampleReport().markdown()
	for _, want := range []string{
		"| workload | native | overlayfs | ratio | agentfs | ratio |\n|---|---:|---:|---:|---:|---:|\n",
		"| find -type f | 20.0 ms | 22.0 ms | 1.10× | 200 ms | 10.0× |\n",
		"| copy-up: first 1-byte write to a 1 GiB file | 40 µs | 900 ms | 22500.0× | failed | – |\n",
		"| read 1 GiB (cold: caches dropped) | skipped | skipped | – | skipped | – |\n",
		"Copy-up of a 1 GiB file: overlayfs 0.90 s (open for writing, write 1 byte, close; median).",
		"Reflink (FICLONE) in the work directory (ext4; lowers and the agentfs backstore live there): no (FICLONE: operation not supported).",
		"Medians of 3 runs after 1 warm-up;",
		"Whole run: 12 min 34 s.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q; it is:\n%s", want, md)
		}
	}
	if strings.Contains(md, "fuse-overlayfs |") {
		t.Errorf("markdown has a column for fuse-overlayfs, which did not run:\n%s", md)
	}
}

// TestJSONShape pins the names that readers of results.json rely on.
func TestJSONShape(t *testing.T) {
	data, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	machine := doc["machine"].(map[string]any)
	for _, key := range []string{"kernel", "cpu", "cores", "memory_bytes", "date", "go_version", "workdir_fs", "reflink"} {
		if _, ok := machine[key]; !ok {
			t.Errorf("machine lacks %q: %v", key, machine)
		}
	}
	workloads := doc["workloads"].([]any)
	find := workloads[0].(map[string]any)
	if find["name"] != "find" || find["title"] != "find -type f" {
		t.Errorf("workload 0 = %v", find)
	}
	agentfs := find["results"].(map[string]any)["agentfs"].(map[string]any)
	if runs := agentfs["runs_seconds"].([]any); len(runs) != 3 {
		t.Errorf("agentfs runs_seconds = %v, want 3 runs", runs)
	}
	if agentfs["median_seconds"].(float64) != 0.2 || math.Abs(agentfs["ratio"].(float64)-10) > 1e-9 {
		t.Errorf("agentfs median, ratio = %v, %v; want 0.2, 10", agentfs["median_seconds"], agentfs["ratio"])
	}
	failed := workloads[1].(map[string]any)["results"].(map[string]any)["agentfs"].(map[string]any)
	if failed["ratio"] != nil || failed["error"] == "" {
		t.Errorf("failed agentfs copy-up = %v, want ratio null and an error", failed)
	}
	if got := doc["copy_up_seconds"].(map[string]any)["overlayfs"]; got != 0.9 {
		t.Errorf("copy_up_seconds.overlayfs = %v, want 0.9", got)
	}
	if workloads[2].(map[string]any)["skipped"] == "" {
		t.Errorf("skipped workload has no reason: %v", workloads[2])
	}
}

func TestChart(t *testing.T) {
	data, err := sampleReport().chartPNG()
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("decoding the chart: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 640 || b.Dy() != chartHeight {
		t.Errorf("chart is %dx%d, want at least 640 wide and %d high", b.Dx(), b.Dy(), chartHeight)
	}
	// Somewhere, a bar of agentfs's colour.
	want := seriesColor(fsAgentfs)
	found := false
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y && !found; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(b>>8) == want.B {
				found = true
				break
			}
		}
	}
	if !found {
		t.Errorf("the chart has no bar in agentfs's colour")
	}
}

func TestChartRange(t *testing.T) {
	q := func(v float64) *float64 { return &v }
	ws := []*workloadResult{{Results: map[string]*fsResult{fsAgentfs: {Ratio: q(0.7)}, fsOverlayfs: {Ratio: q(37)}}}}
	lo, hi := chartRange(ws, []string{fsOverlayfs, fsAgentfs})
	if lo != 0.5 || hi != 50 {
		t.Errorf("chartRange(0.7, 37) = %v, %v; want 0.5, 50", lo, hi)
	}
}

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	var stdout bytes.Buffer
	if err := sampleReport().write(dir, &stdout); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"results.md", "results.json", "results.png"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (size %v)", name, err, st)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	if !strings.HasPrefix(stdout.String(), string(md)) {
		t.Errorf("stdout does not start with results.md")
	}
}

// traceRun is sampleRun with agentfs-untraced beside agentfs (its trace
// as agentfs status said it, traced) and a spawn workload.
func traceRun(traced string) *report {
	r := sampleRun()
	r.Filesystems[3].Trace = traced
	r.Filesystems = append(r.Filesystems, fsStatus{Name: fsAgentfsUntraced, Available: true, Version: "agentfs 0.1.0", Trace: "off: turned off (--trace=false)"})
	r.Workloads[0].Results[fsAgentfsUntraced] = &fsResult{Runs: []float64{0.2, 0.2, 0.2}, Check: "11477 files"}
	r.Workloads[1].Results[fsAgentfsUntraced] = &fsResult{Runs: []float64{0.5}}
	r.Workloads = append(r.Workloads,
		&workloadResult{Name: "grep", Title: "grep -r EINVAL", Results: map[string]*fsResult{
			fsNative:          {Runs: []float64{0.1}},
			fsAgentfs:         {Runs: []float64{0.303}},
			fsAgentfsUntraced: {Runs: []float64{0.3}},
		}},
		&workloadResult{Name: spawnWorkload, Title: "spawn /bin/true 5,000 times (sh loop)", FreshPerRun: true, Results: map[string]*fsResult{
			fsNative:          {Runs: []float64{1.9, 2.0, 2.1}, Check: "5000 programs"},
			fsOverlayfs:       {Runs: []float64{2.0}, Check: "5000 programs"},
			fsAgentfs:         {Runs: []float64{2.1, 2.2, 2.0}, Check: "5000 programs"},
			fsAgentfsUntraced: {Runs: []float64{1.9, 2.0, 2.1}, Check: "5000 programs"},
		}})
	r.finish()
	return r
}

// TestTraceCost checks agentfs over agentfs-untraced: a ratio for each
// workload both ran (not the failed copy-up, not the skipped cold read),
// their median and highest, the column pair and the line under the
// table, and the line's warning when agentfs ran untraced.
func TestTraceCost(t *testing.T) {
	r := traceRun("on: the processes working in the mount, and what they start")
	c := r.TraceCost
	if c == nil {
		t.Fatal("no trace cost")
	}
	want := map[string]float64{"find": 1, "grep": 1.01, spawnWorkload: 1.05}
	if len(c.Ratios) != len(want) {
		t.Errorf("ratios %v, want those of %v", c.Ratios, want)
	}
	for name, q := range want {
		if got, ok := c.Ratios[name]; !ok || math.Abs(got-q) > 1e-9 {
			t.Errorf("ratio of %s = %v (%v), want %v", name, got, ok, q)
		}
	}
	if math.Abs(c.Median-1.01) > 1e-9 || math.Abs(c.Highest-1.05) > 1e-9 || c.HighestWorkload != spawnWorkload {
		t.Errorf("median %v, highest %v (%s); want 1.01, 1.05 (%s)", c.Median, c.Highest, c.HighestWorkload, spawnWorkload)
	}
	md := r.markdown()
	for _, want := range []string{
		"| workload | native | overlayfs | ratio | agentfs | ratio | agentfs-untraced | ratio |\n",
		"| spawn /bin/true 5,000 times (sh loop) | 2.00 s | 2.00 s | 1.00× | 2.10 s | 1.05× | 2.00 s | 1.00× |\n",
		"\nExec trace: agentfs (traced, the default) / agentfs-untraced (`--trace=false`), same run: find 1.00×, grep 1.01×, spawn 1.05×; median 1.01×, highest 1.05× (spawn).\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q; it is:\n%s", want, md)
		}
	}

	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceCost struct {
			Ratios          map[string]float64 `json:"ratios"`
			Median          float64            `json:"median"`
			HighestWorkload string             `json:"highest_workload"`
			Traced          string             `json:"traced"`
		} `json:"trace_cost"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.TraceCost; math.Abs(got.Ratios[spawnWorkload]-1.05) > 1e-9 || got.HighestWorkload != spawnWorkload || !strings.HasPrefix(got.Traced, "on: ") {
		t.Errorf("results.json trace_cost = %+v", got)
	}

	off := traceRun("off: tracing needs root (eBPF)").markdown()
	if want := "same run: the trace did not run in agentfs's mount (off: tracing needs root (eBPF)), so the two columns differ in nothing.\n"; !strings.Contains(off, want) {
		t.Errorf("markdown lacks %q; it is:\n%s", want, off)
	}
	if r := sampleReport(); r.TraceCost != nil || strings.Contains(r.markdown(), "Exec trace") {
		t.Errorf("a run without agentfs-untraced has a trace cost: %+v", r.TraceCost)
	}
}

// TestHashCost checks agentfs over agentfs-nohash: a ratio for each
// workload both ran and the line under the table.
func TestHashCost(t *testing.T) {
	r := sampleRun()
	r.Filesystems = append(r.Filesystems, fsStatus{Name: fsAgentfsNohash, Available: true, Version: "agentfs 0.1.0"})
	r.Workloads[0].Results[fsAgentfsNohash] = &fsResult{Runs: []float64{0.2, 0.2, 0.2}, Check: "11477 files"}
	r.Workloads = append(r.Workloads, &workloadResult{Name: "write-small", Title: "write small files", FreshPerRun: true, Results: map[string]*fsResult{
		fsNative:        {Runs: []float64{1.0}},
		fsAgentfs:       {Runs: []float64{2.2}},
		fsAgentfsNohash: {Runs: []float64{2.0}},
	}})
	r.finish()
	c := r.HashCost
	if c == nil {
		t.Fatal("no hash cost")
	}
	if len(c.Ratios) != 2 || math.Abs(c.Ratios["write-small"]-1.1) > 1e-9 || c.HighestWorkload != "write-small" {
		t.Errorf("hash cost %+v, want find 1.00× and write-small 1.10× (the highest)", c)
	}
	if want := "same run: find 1.00×, write-small 1.10×; median 1.05×, highest 1.10× (write-small).\n"; !strings.Contains(r.markdown(), "\nHash worker: ") || !strings.Contains(r.markdown(), want) {
		t.Errorf("markdown lacks the hash worker's line %q:\n%s", want, r.markdown())
	}
	if r := sampleReport(); r.HashCost != nil || strings.Contains(r.markdown(), "Hash worker") {
		t.Errorf("a run without agentfs-nohash has a hash cost: %+v", r.HashCost)
	}
}

// TestFillTogether checks that the views' copies of a file are read
// into the page cache a chunk of each in turn, rotated each round
// (fillTogether: the first copy filled whole gets the worst memory),
// and that read-warm's are.
func TestFillTogether(t *testing.T) {
	got := fillOrder(3, 20, 8)
	want := []fillStep{{0, 0}, {1, 0}, {2, 0}, {1, 8}, {2, 8}, {0, 8}, {2, 16}, {0, 16}, {1, 16}}
	if !slices.Equal(got, want) {
		t.Errorf("fillOrder(3, 20, 8) = %v, want %v", got, want)
	}
	if got := fillOrder(2, 0, 8); len(got) != 0 {
		t.Errorf("fillOrder(2, 0, 8) = %v, want nothing", got)
	}

	dir := t.TempDir()
	var paths []string
	for i, size := range []int{5, 20, 17, 0} {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(p, bytes.Repeat([]byte{'x'}, size), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	if err := fillTogether(context.Background(), paths, 8, make([]byte, 3)); err != nil {
		t.Errorf("fillTogether: %v", err)
	}
	if err := fillTogether(context.Background(), append(paths, filepath.Join(dir, "missing")), 8, make([]byte, 3)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fillTogether with a missing file: %v, want ENOENT", err)
	}

	for _, w := range workloads {
		if w.name == "read-warm" && w.fill != bigFile {
			t.Errorf("read-warm fills %q together, want %q", w.fill, bigFile)
		}
	}
}
