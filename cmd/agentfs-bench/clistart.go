package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The cli-start row: how long the agentfs command takes from exec to
// exit when it does little else, which every command an agent or a
// script runs pays: agentfs version (which also reads what the kernel
// offers), agentfs --help, and agentfs status outside a mount (it
// fails at once: "not inside an agentfs mount"). Each run execs each
// command cliStartExecs times in a row (the binaries interleaved when
// --baseline gives a second one); a run's figure is the median of its
// execs, the row's the median of the runs. The target is the issue's:
// at most 3 ms.

// cliStartOp names the row, for --only.
const cliStartOp = "cli-start"

const (
	cliStartExecs  = 200
	cliStartTarget = 0.003 // seconds
)

// cliStartCommands are the commands timed, as agentfs arguments.
var cliStartCommands = [][]string{{"version"}, {"--help"}, {"status"}}

// cliStartResult is the cli-start row.
type cliStartResult struct {
	Execs         int            `json:"execs_per_run"`
	TargetSeconds float64        `json:"target_seconds"`
	Rows          []*cliStartRow `json:"commands"`
	// Floor is /bin/true timed the same way in the same runs: what a
	// fork and exec cost here. GoFloor is a static Go hello world
	// (CGO_ENABLED=0, as make build links agentfs), built here: what
	// Go's runtime start adds, before any package's init.
	Floor   *cliStartRow `json:"floor"`
	GoFloor *cliStartRow `json:"go_floor,omitempty"`
}

// cliStartRow is one command of one binary.
type cliStartRow struct {
	Command string `json:"command"`
	Binary  string `json:"binary"` // agentfs or agentfs-baseline
	// Runs are the per-exec medians of each run, in seconds.
	Runs   []float64 `json:"runs_seconds"`
	Warmup []float64 `json:"warmup_seconds,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// runCLIStart measures the cli-start row.
func (b *bench) runCLIStart(ctx context.Context) (*cliStartResult, error) {
	res := &cliStartResult{Execs: cliStartExecs, TargetSeconds: cliStartTarget}
	bins := map[string]string{fsAgentfs: b.cfg.agentfsBin}
	names := []string{fsAgentfs}
	if b.cfg.baselineBin != "" {
		bins[fsAgentfsBaseline] = b.cfg.baselineBin
		names = append(names, fsAgentfsBaseline)
	}
	b.logf("%s: %s, %d execs a run", cliStartOp, strings.Join(cliStartNames(), ", "), cliStartExecs)
	const floor = "floor"
	res.Floor = &cliStartRow{Command: "/bin/true", Binary: "/bin/true"}
	res.GoFloor = &cliStartRow{Command: "a static Go hello world", Binary: goHelloName}
	goHello, err := b.buildGoHello(ctx)
	if err != nil {
		res.GoFloor.Error = err.Error()
		b.logf("  %s: not built: %v", goHelloName, err)
	}
	floors := []*cliStartRow{res.Floor, res.GoFloor}
	for _, args := range append(slices.Clone(cliStartCommands), nil, nil) {
		rows := map[string]*cliStartRow{}
		names, bins := names, bins
		if args == nil {
			// A floor, interleaved with nothing.
			f := floors[0]
			floors = floors[1:]
			bin := "/bin/true"
			if f == res.GoFloor {
				bin = goHello
			}
			rows[floor], names, bins = f, []string{floor}, map[string]string{floor: bin}
		}
		for _, name := range names {
			if name == floor {
				break
			}
			rows[name] = &cliStartRow{Command: "agentfs " + strings.Join(args, " "), Binary: name}
			res.Rows = append(res.Rows, rows[name])
		}
		for i := 0; i < b.cfg.warmup+b.cfg.runs; i++ {
			for _, name := range rotate(names, i) {
				r := rows[name]
				if r.Error != "" {
					continue
				}
				s, err := timeExecs(ctx, bins[name], args, b.cfg.workdir, b.env)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if err != nil {
					r.Error = err.Error()
					b.logf("  %-24s %-17s failed: %v", r.Command, name, err)
					continue
				}
				b.logf("  %-24s %-17s %.2f ms", r.Command, name, s*1e3)
				if i < b.cfg.warmup {
					r.Warmup = append(r.Warmup, s)
				} else {
					r.Runs = append(r.Runs, s)
				}
			}
		}
	}
	return res, nil
}

// goHelloName names the Go floor in the log.
const goHelloName = "go-hello"

// buildGoHello builds a static Go hello world in the work directory
// (with the go on $PATH, as agentfs is built) and returns it.
func (b *bench) buildGoHello(ctx context.Context) (string, error) {
	dir := filepath.Join(b.cfg.workdir, "cli-start-hello")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src := "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hello\\n\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n"), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hello")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir, cmd.Env = dir, append(slices.Clone(b.env), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

func cliStartNames() []string {
	var out []string
	for _, args := range cliStartCommands {
		out = append(out, "agentfs "+strings.Join(args, " "))
	}
	return out
}

// timeExecs runs bin with args cliStartExecs times in dir (outside any
// mount) and returns the median time of one, in seconds. Exit code 1
// (status outside a mount) is the command's answer, not a failure.
func timeExecs(ctx context.Context, bin string, args []string, dir string, env []string) (float64, error) {
	times := make([]float64, 0, cliStartExecs)
	for range cliStartExecs {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir, cmd.Env = dir, env
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start)
		var ee *exec.ExitError
		if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
			return 0, fmt.Errorf("%s %s: %w", bin, strings.Join(args, " "), err)
		}
		times = append(times, took.Seconds())
	}
	return median(times), nil
}

// cliStartMarkdown writes the cli-start table.
func (r *report) cliStartMarkdown(b *strings.Builder) {
	c := r.CLIStart
	b.WriteString("## The CLI's start\n\n")
	baseline := false
	for _, row := range c.Rows {
		baseline = baseline || row.Binary == fsAgentfsBaseline
	}
	if baseline {
		b.WriteString("| command | agentfs | agentfs-baseline | target |\n|---|---:|---:|---|\n")
	} else {
		b.WriteString("| command | agentfs | target |\n|---|---:|---|\n")
	}
	cell := func(row *cliStartRow) string {
		if row.Error != "" {
			return "failed"
		}
		if len(row.Runs) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f ms", median(row.Runs)*1e3)
	}
	for i := 0; i < len(c.Rows); {
		row := c.Rows[i]
		verdict := "not met"
		if row.Error == "" && len(row.Runs) > 0 && median(row.Runs) <= c.TargetSeconds {
			verdict = "met"
		}
		fmt.Fprintf(b, "| `%s` | %s", row.Command, cell(row))
		i++
		if baseline {
			other := "-"
			if i < len(c.Rows) && c.Rows[i].Command == row.Command {
				other = cell(c.Rows[i])
				i++
			}
			fmt.Fprintf(b, " | %s", other)
		}
		fmt.Fprintf(b, " | ≤ %g ms: %s |\n", c.TargetSeconds*1e3, verdict)
	}
	floor := ""
	if c.Floor != nil {
		floor = fmt.Sprintf(" Floor: /bin/true, timed the same way in the same runs, %s", cell(c.Floor))
		if c.GoFloor != nil {
			floor += fmt.Sprintf("; a static Go hello world (Go's runtime start, no package of ours), %s", cell(c.GoFloor))
		}
		floor += "."
	}
	fmt.Fprintf(b, "\nFrom exec to exit, outside any mount (status answers \"not inside an agentfs mount\"): each run execs a command %d times in a row, a run's figure is the median exec, the table's the median of the runs.%s\n", c.Execs, floor)
}
