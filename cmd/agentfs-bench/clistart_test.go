package main

import (
	"strings"
	"testing"
)

func TestCLIStartMarkdown(t *testing.T) {
	c := &cliStartResult{Execs: 200, TargetSeconds: cliStartTarget, Floor: &cliStartRow{Command: "/bin/true", Runs: []float64{0.0009}},
		GoFloor: &cliStartRow{Command: "a static Go hello world", Runs: []float64{0.0012, 0.0011}}, Rows: []*cliStartRow{
			{Command: "agentfs version", Binary: fsAgentfs, Runs: []float64{0.0031, 0.0029, 0.0028}},
			{Command: "agentfs version", Binary: fsAgentfsBaseline, Runs: []float64{0.0062}},
			{Command: "agentfs --help", Binary: fsAgentfs, Runs: []float64{0.0035}},
			{Command: "agentfs --help", Binary: fsAgentfsBaseline, Error: "exit 2"},
		}}
	var b strings.Builder
	(&report{CLIStart: c}).cliStartMarkdown(&b)
	for _, want := range []string{
		"| command | agentfs | agentfs-baseline | target |",
		"| `agentfs version` | 2.90 ms | 6.20 ms | ≤ 3 ms: met |",
		"| `agentfs --help` | 3.50 ms | failed | ≤ 3 ms: not met |",
		"each run execs a command 200 times",
		"Floor: /bin/true, timed the same way in the same runs, 0.90 ms; a static Go hello world (Go's runtime start, no package of ours), 1.15 ms.",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("cli-start table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestCLIStartConfig(t *testing.T) {
	agentfs := fakeAgentfs(t)
	c, err := configFor(t, "--only", "cli-start", "--agentfs", agentfs, "--baseline", agentfs)
	if err != nil {
		t.Fatal(err)
	}
	if !c.cliStart || c.memory || len(c.workloads) != 0 || len(c.snapOps) != 0 || c.baselineBin == "" {
		t.Errorf("--only cli-start: cli-start %v, memory %v, %d workloads, %d snapshot rows, baseline %q", c.cliStart, c.memory, len(c.workloads), len(c.snapOps), c.baselineBin)
	}
	if c, err = configFor(t, "--only", "memory", "--agentfs", agentfs); err != nil || c.cliStart {
		t.Errorf("--only memory: cli-start %v (err %v), want it left out", c.cliStart, err)
	}
	if c, err = configFor(t, "--agentfs", agentfs); err != nil || !c.cliStart {
		t.Errorf("everything: cli-start %v (err %v), want it in", c.cliStart, err)
	}
}
