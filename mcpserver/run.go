package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
	// OutputLeftOpen: processes the command started (in the
	// background) still held its output a moment after it ended.
	OutputLeftOpen bool `json:"output_left_open,omitempty" jsonschema:"processes it started in the background still held its output after it ended: they may still run, and what they wrote later is not here"`
}

// Limits of run_in_branch.
const (
	defaultRunTimeout = 60 * time.Second
	maxRunTimeout     = time.Hour
	defaultRunOutput  = 8 << 10
	maxRunOutput      = 1 << 20
	// outputWait is how long the output is read after the command
	// ended (or was killed): processes it left in the background may
	// hold it open, and are not waited for.
	outputWait = 2 * time.Second
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
	args := []string{agentfs, "exec", "-b", in.Branch}
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
	res, err := runCommand(ctx, append(args, "--", "sh", "-c", in.Command), dir, timeout, keep)
	if err != nil {
		return nil, RunOut{}, err
	}
	res.Branch = in.Branch
	what := fmt.Sprintf("exited with code %d", res.ExitCode)
	if res.TimedOut {
		what = fmt.Sprintf("ran past %v and was killed", timeout)
	}
	cut := ""
	if res.Truncated {
		cut = ", only the end"
	}
	if res.OutputLeftOpen {
		cut += "; processes it left in the background held the output open, and what they wrote after is not here"
	}
	return textResult("the command in branch %s %s; output (%d bytes%s):\n%s", in.Branch, what, res.Total, cut, res.Output), res, nil
}

// runCommand runs argv (agentfs exec, which becomes the command) in a
// process group of its own, from dir, keeping the last keep bytes of
// its output. Past timeout the group is killed, every process of it;
// the command timed out only when it was itself still running then.
// Once the command has ended, what it left in the background is
// neither waited for nor killed: its output is read for outputWait
// more, and then no longer. So the call ends by timeout plus
// outputWait, whatever the command started.
func runCommand(ctx context.Context, argv []string, dir string, timeout time.Duration, keep int) (RunOut, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return RunOut{}, fmt.Errorf("running agentfs exec: %w", err)
	}
	defer pr.Close()
	out := &tail{keep: keep}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pw.Close() // the command has its copy
	if err != nil {
		return RunOut{}, fmt.Errorf("running agentfs exec: %w", err)
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, pr) // ends at EOF, or when pr is closed below
		close(copied)
	}()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // its status is read from ProcessState
		close(exited)
	}()
	killGroup := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) } // the group may be gone
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	killed := false
	select {
	case <-exited:
	case <-timer.C:
		killGroup()
		killed = true
		<-exited
	case <-ctx.Done():
		killGroup()
		<-exited
		return RunOut{}, ctx.Err()
	}
	res := RunOut{}
	select {
	case <-copied:
	case <-time.After(outputWait):
		res.OutputLeftOpen = true
		pr.Close() // ends the copy
		<-copied
	}
	st := cmd.ProcessState
	if st == nil {
		return RunOut{}, errors.New("running agentfs exec: no exit status")
	}
	res.ExitCode = st.ExitCode()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.ExitCode = 128 + int(ws.Signal())
		// Killed by the limit, not ended by itself just before it.
		res.TimedOut = killed && ws.Signal() == syscall.SIGKILL
	}
	res.Output, res.Total, res.Truncated = out.String()
	return res, nil
}

// canRun checks that a command can run in branch: the branch exists,
// and a session served can be entered (it runs: an ended one has
// nothing mounted; this process is root; see session.Record.Enter).
func (t *target) canRun(ctx context.Context, branch string) error {
	if t.opts.Session != "" {
		r, err := session.Find(t.opts.Session)
		if err != nil {
			return err
		}
		// What agentfs exec -s checks before entering the session
		// (running, not in a user namespace, root, its record and
		// daemon what they claim).
		if err := r.CheckEnter(); err != nil {
			return err
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
