package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/session"
	"github.com/agentfs/agentfs/workspace"
)

// Options say what a server serves.
type Options struct {
	// Dir is a directory inside the mount to serve ("": the server's
	// working directory); Session names a session instead (its id, or
	// its start or end). At most one of them.
	Dir, Session string
	// AllowApply adds the apply tool, which writes the user's project.
	AllowApply bool
	// Agentfs is the agentfs binary run_in_branch runs (agentfs exec).
	Agentfs string
	// Version is agentfs's, told to clients and to status.
	Version string
	Logger  *slog.Logger
}

// New makes the server and its tools.
func New(o Options) (*mcp.Server, error) {
	return newServer(o, nil)
}

// newServer is New with the dialling of the workspace replaced (tests
// serve a workspace of their own).
func newServer(o Options, dial func() (*workspace.Client, error)) (*mcp.Server, error) {
	if o.Dir != "" && o.Session != "" {
		return nil, errors.New("-C DIR and -s SESSION both name what to serve: give one")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	t := &target{opts: o, testDial: dial}
	s := mcp.NewServer(&mcp.Implementation{Name: "agentfs", Title: "agentfs: checkpoints, rewinds and branches of a workspace", Version: o.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: o.Logger})
	t.addTools(s)
	return s, nil
}

// Serve serves over stdin and stdout until the client closes them or
// ctx ends.
func Serve(ctx context.Context, o Options) error {
	s, err := New(o)
	if err != nil {
		return err
	}
	return s.Run(ctx, &mcp.StdioTransport{})
}

// instructions tell a model what the server is for.
const instructions = `agentfs shows the project you work on through a copy-on-write view: your changes land in the view, never in the user's project, until the user applies them. These tools let you take checkpoints (instant snapshots of the whole workspace), see what changed since one, rewind to one, and try things in branches. Take a checkpoint before a risky step; rewind when it goes wrong.`

// target is what a server serves; each tool call dials it anew.
type target struct {
	opts     Options
	testDial func() (*workspace.Client, error)
}

// lockedRetry bounds how long a call waits for an ended session's store
// that another agentfs command holds.
const lockedRetry = 10 * time.Second

// dial connects to the workspace for one call: the session's daemon or
// store, or the mount that holds the directory.
func (t *target) dial(ctx context.Context) (*workspace.Client, error) {
	if t.testDial != nil {
		return t.testDial()
	}
	if t.opts.Session == "" {
		root, err := t.root()
		if err != nil {
			return nil, err
		}
		return workspace.Dial(root)
	}
	deadline := time.Now().Add(lockedRetry)
	for {
		c, _, err := session.Dial(t.opts.Session, t.opts.Version)
		if !errors.Is(err, branch.ErrLocked) || time.Now().After(deadline) {
			return c, err
		}
		// Another call (or command) has the ended session's store:
		// it holds it for one operation.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// root returns the root of the mount served.
func (t *target) root() (string, error) {
	return ctl.FindMount(t.opts.Dir)
}

// call runs fn on a client of the target, closing it after.
func call[R any](ctx context.Context, t *target, fn func(c *workspace.Client) (R, error)) (R, error) {
	c, err := t.dial(ctx)
	if err != nil {
		var zero R
		return zero, err
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.opts.Logger.Warn("closing the workspace after a tool call", "err", err)
		}
	}()
	return fn(c)
}

// textResult is a tool result whose text is text; the structured output
// is the handler's.
func textResult(format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, a...)}}}
}

// agentfsBinary is the agentfs binary run_in_branch runs.
func (t *target) agentfsBinary() (string, error) {
	if t.opts.Agentfs != "" {
		return t.opts.Agentfs, nil
	}
	return os.Executable()
}
