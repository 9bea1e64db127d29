package main

import (
	"os"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/procfs"
)

func TestStatusKiB(t *testing.T) {
	text := "Name:\tagentfs\nVmPeak:\t 2284420 kB\nVmHWM:\t   70312 kB\nVmRSS:\t   61440 kB\nThreads:\t9\n"
	v := procfs.StatusValues(text, "VmRSS", "VmHWM")
	rss, err1 := statusKiB("VmRSS", v[0])
	peak, err2 := statusKiB("VmHWM", v[1])
	if err1 != nil || err2 != nil || rss != 61440<<10 || peak != 70312<<10 {
		t.Errorf("statusKiB: %d, %d, %v, %v; want %d, %d, nil, nil", rss, peak, err1, err2, 61440<<10, 70312<<10)
	}
	for _, bad := range []string{"", "12 MB", "x kB", "12"} {
		if _, err := statusKiB("VmRSS", bad); err == nil {
			t.Errorf("statusKiB(%q): no error", bad)
		}
	}
	rss, peak, err := daemonMemory(os.Getpid())
	if err != nil || rss <= 0 || peak < rss {
		t.Errorf("daemonMemory(self) = %d, %d, %v; want 0 < VmRSS <= VmHWM", rss, peak, err)
	}
}

func TestMemoryMarkdown(t *testing.T) {
	m := &memResult{Files: 100000, Walks: 4, AfterBytes: []int64{60 << 20, 70 << 20, 55 << 20, 62 << 20}, PeakBytes: 70 << 20,
		TargetBytes: memTargetBytes, CachesDropped: true}
	var b strings.Builder
	(&report{Memory: m}).memoryMarkdown(&b)
	for _, want := range []string{
		"| walks of a lower tree of 100,000 files | 60.0 MiB | 55.0 MiB–70.0 MiB | 62.0 MiB | 70.0 MiB | < 150 MiB: met |",
		"after walks 2–4 (lowest–highest) | after walk 4 |",
		"caches were dropped before every walk but the first",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("memory table lacks %q:\n%s", want, b.String())
		}
	}
	m.PeakBytes = 151 << 20
	b.Reset()
	(&report{Memory: m}).memoryMarkdown(&b)
	if !strings.Contains(b.String(), "not met") {
		t.Errorf("a peak over the target is not reported as not met:\n%s", b.String())
	}
	b.Reset()
	(&report{Memory: &memResult{Skipped: "agentfs did not run"}}).memoryMarkdown(&b)
	if !strings.Contains(b.String(), "Not measured: agentfs did not run.") {
		t.Errorf("skipped memory row:\n%s", b.String())
	}
}

func TestMemoryConfig(t *testing.T) {
	agentfs := fakeAgentfs(t)
	c, err := configFor(t, "--only", "memory", "--agentfs", agentfs)
	if err != nil {
		t.Fatal(err)
	}
	if !c.memory || c.memFiles != 100000 || len(c.workloads) != 0 || len(c.snapOps) != 0 {
		t.Errorf("--only memory: memory %v of %d files, %d workloads, %d snapshot rows; want true, 100000, 0, 0",
			c.memory, c.memFiles, len(c.workloads), len(c.snapOps))
	}
	if got := strings.Join(c.filesystems, ","); got != "native,agentfs" {
		t.Errorf("--only memory: filesystems %s, want native,agentfs", got)
	}
	if c, err = configFor(t, "--quick", "--only", "memory", "--agentfs", agentfs); err != nil || c.memFiles != 10000 {
		t.Errorf("--quick --only memory: %v files (err %v), want 10000", c.memFiles, err)
	}
	if c, err = configFor(t, "--fs", "native"); err != nil || c.memory {
		t.Errorf("--fs native: memory %v (err %v), want it left out", c.memory, err)
	}
	if _, err = configFor(t, "--fs", "native", "--only", "memory"); err == nil || !strings.Contains(err.Error(), "add agentfs to --fs") {
		t.Errorf("--fs native --only memory: error %v, want a usage error that says to add agentfs", err)
	}
}
