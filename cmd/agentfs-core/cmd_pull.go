package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/remote"
	"github.com/agentfs/agentfs/session"
)

// pullOptions are the flags of agentfs pull.
type pullOptions struct {
	project        string
	parallel       int
	json           bool
	stdout, stderr io.Writer
}

func (o *pullOptions) AddFlags(flags *pflag.FlagSet) {
	flags.StringVar(&o.project, "project", "", "this machine's checkout of the project, `DIR` (default: the current directory)")
	flags.IntVar(&o.parallel, "parallel", 0, fmt.Sprintf("fetch `N` objects at once (default %d)", remote.DefaultParallel))
	flags.BoolVar(&o.json, "json", false, "print the result as JSON, and the progress as JSON lines on stderr")
}

func init() {
	cli.Register(&cli.Command{
		Name:  "pull",
		Usage: "[--project DIR] REMOTE/SESSION",
		Help: `Pull makes the session SESSION of the remote REMOTE (agentfs push put
it there from another machine) a session of this machine, over this
machine's checkout of the project (--project, default the current
directory): agentfs diff, export, apply, restore, branch and record work
on it as on a session run here (-s SESSION). Its snapshots keep their
labels and kinds and get new ids (the output maps them).

Every object is checked against its SHA-256 as it arrives: a damaged
object is refused, naming it, and nothing is made. An interrupted pull
leaves no session; pulling again resumes with the objects it fetched.

Where this checkout's files differ from those the changes were made
over on the other machine (compared by content, not by inode numbers or
times), apply reports the paths as conflicts; the output lists them.

Examples:
  cd ~/proj && agentfs pull team/20261121-140305-a3f9
  agentfs diff -s 20261121-140305-a3f9
  agentfs apply -s 20261121-140305-a3f9`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &pullOptions{stdout: out.Stdout, stderr: out.Stderr}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runPull(ctx, o, args) }
		},
	})
}

// pullReply is what pull --json prints.
type pullReply struct {
	Session   string            `json:"session"`
	Remote    string            `json:"remote"`
	Project   string            `json:"project"`
	Snapshots map[string]string `json:"snapshots"` // the pushed id → the id here
	Branches  []string          `json:"branches"`
	Fetched   int               `json:"fetched"`
	Bytes     int64             `json:"fetched_bytes"`
	Skipped   int               `json:"skipped"`
	Conflicts []string          `json:"conflicts"`
}

func runPull(ctx context.Context, o *pullOptions, args []string) error {
	if len(args) != 1 {
		return cli.Usagef("pull takes one REMOTE/SESSION, got %d arguments", len(args))
	}
	name, id, ok := strings.Cut(args[0], "/")
	if !ok || name == "" || id == "" {
		return cli.Usagef("pull takes REMOTE/SESSION (agentfs remote ls REMOTE lists the sessions), got %q", args[0])
	}
	project := o.project
	if project == "" {
		project = "."
	}
	project, err := filepath.Abs(project)
	if err != nil {
		return err
	}
	if st, err := os.Stat(project); err != nil || !st.IsDir() {
		return fmt.Errorf("the project %s is not a directory: give this machine's checkout with --project DIR", project)
	}
	cfg, err := remote.Find(name)
	if err != nil {
		return err
	}
	r, err := remote.Open(cfg)
	if err != nil {
		return err
	}
	show := newTransferProgress(o.stderr, o.json, "pull")
	res, err := session.Pull(ctx, session.PullArgs{Remote: r, RemoteName: cfg.Name, Session: id, Project: project,
		Parallel: o.parallel, Progress: show.update, Version: cli.Version})
	show.end()
	if err != nil {
		return err
	}
	rep := pullReply{Session: id, Remote: cfg.Name, Project: project, Snapshots: res.Snapshots, Branches: res.Branches,
		Fetched: res.Fetched.Fetched, Bytes: res.Fetched.FetchedBytes, Skipped: res.Fetched.Skipped, Conflicts: res.Conflicts}
	if rep.Conflicts == nil {
		rep.Conflicts = []string{}
	}
	if o.json {
		return cli.PrintJSON(o.stdout, rep)
	}
	fmt.Fprintf(o.stdout, "pulled session %s from %s into the project %s: %d snapshots, %d objects fetched (%s)\n",
		id, cfg.Name, project, len(res.Snapshots), rep.Fetched, cli.HumanBytes(rep.Bytes))
	for _, pushed := range res.Doc.Snapshots {
		fmt.Fprintf(o.stdout, "  snapshot %s is %s here\n", pushed, res.Snapshots[pushed])
	}
	for _, c := range rep.Conflicts {
		fmt.Fprintf(o.stdout, "  conflict: %s differs here from the project the changes were made over\n", cli.Printable(c))
	}
	fmt.Fprintf(o.stdout, "review: agentfs diff -s %s\napply:  agentfs apply -s %s\n", id, id)
	return nil
}

// transferProgress shows a transfer's progress that this process makes
// itself (a pull): a bar on a terminal, JSON lines with --json, as the
// operations of a store show theirs, at most every progressPoll.
type transferProgress struct {
	mu   sync.Mutex
	op   string
	show progressShower
	last time.Time
}

func newTransferProgress(stderr io.Writer, events bool, op string) *transferProgress {
	t := &transferProgress{op: op}
	f, isFile := stderr.(*os.File)
	switch {
	case events:
		t.show = &progressEvents{w: stderr}
	case isFile && isTerminal(f):
		t.show = &progressBar{w: f}
	}
	return t
}

func (t *transferProgress) update(p remote.Progress) {
	if t.show == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	done := p.ObjectsDone == p.Objects && p.BytesDone == p.Bytes
	if now := time.Now(); done || now.Sub(t.last) >= progressPoll {
		t.last = now
		// A fetch knows how many objects, not how many bytes: the bar
		// counts objects, and says the bytes.
		t.show.show(ctl.Progress{Running: true, Op: t.op, Unit: "objects", Done: int64(p.ObjectsDone), Total: int64(p.Objects),
			Bytes: p.BytesDone})
	}
}

func (t *transferProgress) end() {
	if t.show != nil {
		t.show.end()
	}
}
