package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/workspace"
)

// Progress of the long operations (apply, export, gc, fsck, diff).
//
// The operation runs in the daemon and holds the connection that asked
// for it; a second connection asks the daemon how far it is (the
// Progress op: one record, that the operation updates) every
// progressPoll, once it has run for progressDelay. On a terminal, the
// answer is drawn as one progress bar on stderr (the progressbar
// library), cleared when the operation ends; with --json, each answer
// that says something new is a JSON line on stderr, for tools:
//
//	{"progress":{"running":true,"op":"export","done":1200,"total":0,"unit":"files","bytes":52428800,"total_bytes":0}}
//
// Otherwise nothing is shown. An ended session's operations run in
// this process: the same client asks.

// progressDelay is how long an operation runs before its progress
// shows; progressPoll how often it is asked for then.
const (
	progressDelay = time.Second
	progressPoll  = 200 * time.Millisecond
)

// callWithProgress runs one operation, fn, on what m names, showing
// its progress on stderr (events: --json).
func callWithProgress[R any](m *mountFlag, stderr io.Writer, events bool, fn func(c *workspace.Client) (R, error)) (r R, err error) {
	c, err := m.dial()
	if err != nil {
		return r, err
	}
	defer closeClient(c)
	stop := watchProgress(c, stderr, events)
	defer stop()
	return fn(c)
}

// watchProgress shows the progress of the operation c is about to run,
// until stop is called (which clears the bar).
func watchProgress(c *workspace.Client, stderr io.Writer, events bool) (stop func()) {
	var show progressShower
	f, isFile := stderr.(*os.File)
	switch {
	case events:
		show = &progressEvents{w: stderr}
	case isFile && isTerminal(f):
		show = &progressBar{w: f}
	default:
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			return
		case <-time.After(progressDelay):
		}
		asker := c
		if root := c.Root(); root != "" {
			// The operation holds c's connection: ask on another.
			second, err := workspace.Dial(root)
			if err != nil {
				return
			}
			defer func() { _ = second.Close() }() // it only read the progress
			asker = second
		}
		tick := time.NewTicker(progressPoll)
		defer tick.Stop()
		for {
			if p, err := asker.Progress(); err == nil && p.Running {
				show.show(p)
			}
			select {
			case <-done:
				show.end()
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// progressShower shows progress answers.
type progressShower interface {
	show(p ctl.Progress)
	end()
}

// progressVerbs say what each operation does, for the bar.
var progressVerbs = map[string]string{
	"apply": "applying", "export": "exporting", "gc": "collecting garbage", "fsck": "checking the store", "diff": "comparing",
	"push": "pushing", "pull": "pulling",
}

// progressBar draws one bar: by bytes where the operation knows how
// many it will write, else by items of a known total, else a spinner
// with a count.
type progressBar struct {
	w      io.Writer
	bar    *progressbar.ProgressBar
	max    int64
	bytes  bool
	drawn  bool
	lastOp string
}

func (b *progressBar) show(p ctl.Progress) {
	max, value, bytes := int64(-1), p.Done, false
	switch {
	case p.TotalBytes > 0:
		max, value, bytes = p.TotalBytes, p.Bytes, true
	case p.Total > 0:
		max = p.Total
	}
	desc := progressVerbs[p.Op]
	if desc == "" {
		desc = p.Op
	}
	switch {
	case bytes:
		desc += fmt.Sprintf(" (%d/%d %s)", p.Done, p.Total, p.Unit)
	case max < 0 && p.Bytes > 0:
		desc += fmt.Sprintf(" (%s)", cli.HumanBytes(p.Bytes))
	}
	if b.bar == nil || b.max != max || b.bytes != bytes || b.lastOp != p.Op {
		if b.bar != nil {
			_ = b.bar.Clear() // a terminal: nothing to do about a failed write
		}
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionSetWidth(30),
			progressbar.OptionUseANSICodes(true),
			progressbar.OptionThrottle(0),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionShowBytes(bytes),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetPredictTime(max > 0),
		}
		if !bytes {
			opts = append(opts, progressbar.OptionShowCount(), progressbar.OptionSetItsString(p.Unit))
		}
		b.bar = progressbar.NewOptions64(max, opts...)
		b.max, b.bytes, b.lastOp = max, bytes, p.Op
	}
	b.bar.Describe(desc)
	_ = b.bar.Set64(value) // a terminal: nothing to do about a failed write
	b.drawn = true
}

func (b *progressBar) end() {
	if b.bar != nil && b.drawn {
		_ = b.bar.Clear() // a terminal: nothing to do about a failed write
		_ = b.bar.Exit()
	}
}

// progressEvents writes each new answer as a JSON line.
type progressEvents struct {
	w    io.Writer
	last ctl.Progress
}

func (e *progressEvents) show(p ctl.Progress) {
	if p == e.last {
		return
	}
	e.last = p
	b, err := json.Marshal(struct {
		Progress ctl.Progress `json:"progress"`
	}{p})
	if err == nil {
		fmt.Fprintf(e.w, "%s\n", b)
	}
}

func (e *progressEvents) end() {}
