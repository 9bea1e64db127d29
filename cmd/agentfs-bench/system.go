package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The system table: what starting programs costs in a system session
// (agentfs run --system), where every binary, shared library and script
// is read through the session's view of /. Each row runs one loop of
// programs on the host (native) and inside a system session, twice in
// each: the session's own start and end are not timed; the loop times
// itself, with date +%s%N around it, and prints the nanoseconds of its
// first pass (in a new session, every name is looked up through FUSE
// for the first time) and of its second (the kernel's caches of the
// view warm, as in a session that has run for a while). Native and the
// sessions run interleaved, the order rotating; agentfs-system-untraced
// is a session with --trace=false, to tell the exec trace from the
// view. The sessions run with --max-bytes off: FUSE passthrough, which
// agentfs run's default byte limit turns off.
//
//	exec-bash    bash -c true, in a loop
//	exec-python  python3 -c pass, in a loop (skipped without python3)
//	go-build     go build of a small module, the build cache warm

// systemGroup names the table, for --only.
const systemGroup = "system"

// The columns of the system table.
const (
	sysNative   = "native"
	sysSession  = "agentfs-system"
	sysUntraced = "agentfs-system-untraced"
)

var sysColumns = []string{sysNative, sysSession, sysUntraced}

// Loop counts of the full benchmark and of --quick.
const (
	fullBashLoops    = 500
	quickBashLoops   = 100
	fullPythonLoops  = 100
	quickPythonLoops = 20
)

// sysOp is one row.
type sysOp struct {
	name  string
	title func(c *config) string
	// script is the shell script timed, or why the row cannot run.
	script func(b *bench) (string, error)
}

var sysOps = []*sysOp{
	{name: "exec-bash", title: func(c *config) string { return fmt.Sprintf("bash -c true ×%d", c.bashLoops) },
		script: func(b *bench) (string, error) {
			return fmt.Sprintf("i=0; while [ $i -lt %d ]; do bash -c true; i=$((i+1)); done", b.cfg.bashLoops), nil
		}},
	{name: "exec-python", title: func(c *config) string { return fmt.Sprintf("python3 -c pass ×%d", c.pythonLoops) },
		script: func(b *bench) (string, error) {
			if _, err := exec.LookPath("python3"); err != nil {
				return "", fmt.Errorf("python3 is not on $PATH")
			}
			// The interpreter itself, not a wrapper in front of it (a
			// pyenv shim is a shell script that runs several programs).
			out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
			py := strings.TrimSpace(string(out))
			if err != nil || py == "" {
				return "", fmt.Errorf("python3 does not say where its interpreter is: %v", err)
			}
			return fmt.Sprintf("i=0; while [ $i -lt %d ]; do %s -c pass; i=$((i+1)); done", b.cfg.pythonLoops, py), nil
		}},
	{name: "go-build", title: func(*config) string { return "go build of a small module (warm cache)" },
		script: func(b *bench) (string, error) {
			mod, err := b.systemModule()
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("cd %s && go build -o %s .", mod, filepath.Join(mod, "hello")), nil
		}},
}

func sysOpNames() []string {
	var out []string
	for _, op := range sysOps {
		out = append(out, op.name)
	}
	return out
}

func findSysOp(name string) *sysOp {
	for _, op := range sysOps {
		if op.name == name {
			return op
		}
	}
	return nil
}

// sysResult is one row of the system table.
type sysResult struct {
	Name    string `json:"name"`
	Title   string `json:"title"`
	Skipped string `json:"skipped,omitempty"`
	// Runs are the seconds of the second pass of each timed run, by
	// column; FirstRuns those of the first pass. Medians and Ratios (to
	// native) are the second passes'; FirstMedians and FirstRatios the
	// first passes'. They are computed at the end.
	Runs         map[string][]float64 `json:"runs"`
	FirstRuns    map[string][]float64 `json:"first_runs"`
	FirstMedians map[string]float64   `json:"first_medians,omitempty"`
	FirstRatios  map[string]float64   `json:"first_ratios,omitempty"`
	Medians      map[string]float64   `json:"medians,omitempty"`
	Ratios       map[string]float64   `json:"ratios,omitempty"`
	Error        string               `json:"error,omitempty"`
}

// systemDir holds the table's module and the sessions' state.
func (b *bench) systemDir() string { return filepath.Join(b.cfg.workdir, "system") }

// systemModule writes the go-build row's module (once) and returns its
// directory.
func (b *bench) systemModule() (string, error) {
	mod := filepath.Join(b.systemDir(), "mod")
	files := map[string]string{
		"go.mod":  "module example.com/hello\n\ngo 1.21\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n\t\"strings\"\n)\n\nfunc main() { fmt.Println(strings.Join(os.Args, \" \")) }\n",
	}
	if err := os.MkdirAll(mod, 0o755); err != nil {
		return "", err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	return mod, nil
}

// runSystemOp measures one row.
func (b *bench) runSystemOp(ctx context.Context, op *sysOp) (*sysResult, error) {
	res := &sysResult{Name: op.name, Title: op.title(b.cfg), Runs: map[string][]float64{}, FirstRuns: map[string][]float64{}}
	script, err := op.script(b)
	if err != nil {
		res.Skipped = err.Error()
		b.logf("%s: skipped: %s", op.name, res.Skipped)
		return res, nil
	}
	b.logf("%s: %s, native and in a system session", op.name, res.Title)
	if err := os.MkdirAll(b.systemDir(), 0o755); err != nil {
		return nil, err
	}
	for i := range b.cfg.warmup + b.cfg.runs {
		for _, col := range rotate(sysColumns, i) {
			first, secs, err := b.timeSystem(ctx, col, script)
			if err != nil {
				res.Error = fmt.Sprintf("%s: %v", col, err)
				b.logf("%s on %s: %v", op.name, col, err)
				return res, nil
			}
			if i >= b.cfg.warmup {
				res.Runs[col] = append(res.Runs[col], secs)
				res.FirstRuns[col] = append(res.FirstRuns[col], first)
			}
		}
	}
	return res, nil
}

// timeSystem runs script twice in column col and returns the seconds
// each pass took, as the script itself measured them.
func (b *bench) timeSystem(ctx context.Context, col, script string) (first, second float64, err error) {
	pass := `t0=$(date +%s%N); ` + script + ` >/dev/null || exit 1; t1=$(date +%s%N); echo "BENCH-NS $((t1-t0))"; `
	timed := pass + pass
	args := []string{"sh", "-c", timed}
	env := b.env
	if col != sysNative {
		state := filepath.Join(b.systemDir(), "state")
		if err := os.MkdirAll(state, 0o700); err != nil {
			return 0, 0, err
		}
		env = withEnv(b.env, "XDG_STATE_HOME="+state)
		// --max-bytes off: with a byte limit (agentfs run's default)
		// the view serves files through the page cache, not with FUSE
		// passthrough, which is what this table measures.
		args = append([]string{b.cfg.agentfsBin, "run", "--system", "--max-bytes", "off", "--trace=" + strconv.FormatBool(col == sysSession), "--"}, args...)
	}
	unix.Sync() // no earlier writeback is charged to this run
	cmd := commandContext(ctx, b.systemDir(), env, args[0], args[1:]...)
	var stdout strings.Builder
	stderr := &tailBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	err = cmd.Run()
	if col != sysNative {
		if id := sessionOf(stderr.String()); id != "" {
			discard := commandContext(ctx, "/", env, b.cfg.agentfsBin, "discard", "-s", id)
			if out, derr := discard.CombinedOutput(); derr != nil {
				b.logf("discarding the system session %s: %v: %s", id, derr, out)
			}
		}
	}
	if err != nil {
		return 0, 0, commandError(args, err, stderr.String())
	}
	var passes []float64
	for _, line := range strings.Split(stdout.String(), "\n") {
		if ns, ok := strings.CutPrefix(line, "BENCH-NS "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(ns), 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("the loop's time %q: %w", ns, err)
			}
			passes = append(passes, time.Duration(n).Seconds())
		}
	}
	if len(passes) != 2 {
		return 0, 0, fmt.Errorf("the loop printed %d times, want 2: %q", len(passes), stdout.String())
	}
	return passes[0], passes[1], nil
}

// sessionOf finds the session id in agentfs run's summary.
func sessionOf(stderr string) string {
	_, rest, ok := strings.Cut(stderr, "agentfs run: session ")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, " ")
	return id
}

// finishSystem computes the medians and ratios of the system table.
func (r *report) finishSystem() {
	for _, s := range r.System {
		if s.Skipped != "" {
			r.Notes = append(r.Notes, s.Name+": skipped: "+s.Skipped)
			continue
		}
		if s.Error != "" {
			r.Notes = append(r.Notes, s.Name+" failed: "+s.Error)
		}
		s.Medians, s.Ratios = mediansAndRatios(s.Runs)
		s.FirstMedians, s.FirstRatios = mediansAndRatios(s.FirstRuns)
	}
}

// mediansAndRatios are the medians of runs by column, and their ratios
// to native's.
func mediansAndRatios(runs map[string][]float64) (medians, ratios map[string]float64) {
	medians, ratios = map[string]float64{}, map[string]float64{}
	for col, rs := range runs {
		if len(rs) > 0 {
			medians[col] = median(rs)
		}
	}
	for col, m := range medians {
		if q, ok := ratio(m, medians[sysNative]); ok && col != sysNative {
			ratios[col] = q
		}
	}
	return medians, ratios
}

// systemMarkdown renders the system table.
func (r *report) systemMarkdown(b *strings.Builder) {
	b.WriteString("## Starting programs in a system session (agentfs run --system)\n\n")
	b.WriteString("| workload | native | agentfs-system | ratio | agentfs-system-untraced | ratio | agentfs-system, first pass | ratio |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	cell := func(medians, ratios map[string]float64, col string) string {
		m, ok := medians[col]
		if !ok {
			return "– | –"
		}
		q, ok := ratios[col]
		if !ok {
			return fmt.Sprintf("%.3f s | –", m)
		}
		return fmt.Sprintf("%.3f s | %.2f×", m, q)
	}
	for _, s := range r.System {
		if s.Skipped != "" {
			fmt.Fprintf(b, "| %s | skipped: %s | | | | | | |\n", s.Title, s.Skipped)
			continue
		}
		native := "–"
		if m, ok := s.Medians[sysNative]; ok {
			native = fmt.Sprintf("%.3f s", m)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", s.Title, native, cell(s.Medians, s.Ratios, sysSession),
			cell(s.Medians, s.Ratios, sysUntraced), cell(s.FirstMedians, s.FirstRatios, sysSession))
	}
	b.WriteString("\nEach loop runs twice in one session (or on the host) and times itself: the session's start and end are not counted. Every binary, library and script it runs is read through the session's view of /. The ratios are to native, medians of the timed runs, interleaved; \"first pass\" is the loop's first run in a new session, whose every lookup goes to the daemon once.\n")
}

// splitSystemOps takes the system table's names out of --only: the rows
// it names (all of them for an empty list, or "system"), and the rest.
func splitSystemOps(only string) ([]*sysOp, string) {
	if strings.TrimSpace(only) == "" {
		return sysOps, ""
	}
	want := map[string]bool{}
	var rest []string
	for _, name := range splitList(only) {
		switch {
		case name == systemGroup:
			for _, op := range sysOps {
				want[op.name] = true
			}
		case findSysOp(name) != nil:
			want[name] = true
		default:
			rest = append(rest, name)
		}
	}
	var ops []*sysOp
	for _, op := range sysOps {
		if want[op.name] {
			ops = append(ops, op)
		}
	}
	return ops, strings.Join(rest, ",")
}
