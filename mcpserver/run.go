package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentfs/agentfs/session"
	"github.com/agentfs/agentfs/workspace"
)

// RunIn is a command to run in a branch.
type RunIn struct {
	Branch         string `json:"branch" jsonschema:"the branch the command sees"`
	Command        string `json:"command" jsonschema:"a shell command, run with sh -c in the project root"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"kill it after this many seconds (default 60, at most 3600)"`
	OutputBytes    int    `json:"output_bytes,omitempty" jsonschema:"keep the last this many bytes of its output (default 8192, at most 1048576)"`
}

// RunOut is what the command did.
type RunOut struct {
	Branch   string `json:"branch"`
	ExitCode int    `json:"exit_code" jsonschema:"its exit code; 128+N when signal N killed it"`
	TimedOut bool   `json:"timed_out,omitempty" jsonschema:"it ran past timeout_seconds and was killed"`
	// Output is the tail of stdout and stderr, interleaved.
	Output    string `json:"output"`
	Total     int64  `json:"output_total_bytes"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"the output was longer: only its end is here"`
}

// Limits of run_in_branch.
const (
	defaultRunTimeout = 60 * time.Second
	maxRunTimeout     = time.Hour
	defaultRunOutput  = 8 << 10
	maxRunOutput      = 1 << 20
)

func (t *target) runInBranch(ctx context.Context, _ *mcp.CallToolRequest, in RunIn) (*mcp.CallToolResult, RunOut, error) {
	timeout, keep := time.Duration(in.TimeoutSeconds)*time.Second, in.OutputBytes
	switch {
	case in.Branch == "":
		return nil, RunOut{}, errors.New("no branch given: name one (branch_list shows them)")
	case strings.TrimSpace(in.Command) == "":
		return nil, RunOut{}, errors.New("no command given")
	case timeout < 0 || timeout > maxRunTimeout:
		return nil, RunOut{}, fmt.Errorf("timeout_seconds %d: give 1 to %d (0 for %d)", in.TimeoutSeconds, int(maxRunTimeout.Seconds()), int(defaultRunTimeout.Seconds()))
	case keep < 0 || keep > maxRunOutput:
		return nil, RunOut{}, fmt.Errorf("output_bytes %d: give 1 to %d (0 for %d)", keep, maxRunOutput, defaultRunOutput)
	}
	if timeout == 0 {
		timeout = defaultRunTimeout
	}
	if keep == 0 {
		keep = defaultRunOutput
	}
	// What agentfs exec would refuse is refused here, as a tool error:
	// once it runs, its exit code is the command's.
	if err := t.canRun(ctx, in.Branch); err != nil {
		return nil, RunOut{}, err
	}
	agentfs, err := t.agentfsBinary()
	if err != nil {
		return nil, RunOut{}, fmt.Errorf("finding the agentfs binary: %w", err)
	}
	args := []string{"exec", "-b", in.Branch}
	dir := "/"
	if t.opts.Session != "" {
		args = append(args, "-s", t.opts.Session)
	} else {
		root, err := t.root()
		if err != nil {
			return nil, RunOut{}, err
		}
		args = append(args, "-C", root)
		dir = root
	}
	cmd := exec.Command(agentfs, append(args, "--", "sh", "-c", in.Command)...)
	out := &tail{keep: keep}
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	// A process group of its own, killed whole at the time limit.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, RunOut{}, fmt.Errorf("running agentfs exec: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	res := RunOut{Branch: in.Branch}
	var werr error
	select {
	case werr = <-done:
	case <-time.After(timeout):
		res.TimedOut = true
	case <-ctx.Done():
	}
	if werr == nil && (res.TimedOut || ctx.Err() != nil) {
		// The group may have ended by itself meanwhile.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-done
	}
	if ctx.Err() != nil {
		return nil, RunOut{}, ctx.Err()
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		res.ExitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		}
	default:
		return nil, RunOut{}, fmt.Errorf("running agentfs exec: %w", werr)
	}
	res.Output, res.Total, res.Truncated = out.String()
	what := fmt.Sprintf("exited with code %d", res.ExitCode)
	if res.TimedOut {
		what = fmt.Sprintf("ran past %v and was killed", timeout)
	}
	cut := ""
	if res.Truncated {
		cut = ", only the end"
	}
	return textResult("the command in branch %s %s; output (%d bytes%s):\n%s", in.Branch, what, res.Total, cut, res.Output), res, nil
}

// canRun checks that a command can run in branch: the branch exists,
// and a session served is running (an ended one has nothing mounted).
func (t *target) canRun(ctx context.Context, branch string) error {
	if t.opts.Session != "" {
		r, err := session.Find(t.opts.Session)
		if err != nil {
			return err
		}
		if r.Live() != session.StateRunning || !r.DaemonAlive() {
			return fmt.Errorf("session %s is not running: nothing is mounted to run a command in", r.ID)
		}
	}
	list, err := call(ctx, t, (*workspace.Client).Branches)
	if err != nil {
		return err
	}
	for _, b := range list.Branches {
		if b.Name == branch {
			return nil
		}
	}
	return fmt.Errorf("no branch %q: branch_list shows them; branch_create makes it", branch)
}

// tail keeps the last keep bytes written to it.
type tail struct {
	mu    sync.Mutex
	keep  int
	buf   []byte
	total int64
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.keep; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns what was kept (valid UTF-8), the bytes written in all,
// and whether some were dropped.
func (t *tail) String() (string, int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.buf), "\uFFFD"), t.total, t.total > int64(len(t.buf))
}
