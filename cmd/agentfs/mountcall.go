package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/session"
	"github.com/agentfs/agentfs/workspace"
)

// mountFlag is the -C and -s flags of the commands that talk to a
// mount's daemon, and the call they make with them.
type mountFlag struct {
	dir     string
	session string
}

func (m *mountFlag) AddFlags(flags *pflag.FlagSet) {
	flags.StringVarP(&m.dir, "dir", "C", "", "a `DIR` inside the mount (default: the current directory)")
	flags.StringVarP(&m.session, "session", "s", "", "the agentfs run `SESSION` (an id, or its start or end) instead of a mount")
}

// dial connects to what the flags name: session m.session (its daemon
// while it runs, its store opened in this process once it has ended),
// else the mount that holds m.dir or the current directory. Every
// command that talks to a mount goes through here.
func (m *mountFlag) dial() (*workspace.Client, error) {
	if m.session == "" {
		return dialMount(m.dir)
	}
	if m.dir != "" {
		return nil, usagef("-C DIR and -s SESSION both name what to talk to: give one")
	}
	c, _, err := session.Dial(m.session, version)
	return c, err
}

// call runs one operation, fn, on what the flags of m name.
func call[R any](m *mountFlag, fn func(c *workspace.Client) (R, error)) (r R, err error) {
	c, err := m.dial()
	if err != nil {
		return r, err
	}
	defer closeClient(c)
	return fn(c)
}

// closeClient closes c. What the operation changed was made durable
// before it answered, so a failed close (of an ended session's store)
// loses nothing: it is a warning, and the command's outcome stands.
func closeClient(c *workspace.Client) {
	if err := c.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "agentfs: warning: the operation was done, but closing %s failed: %v\n", c.Name(), err)
	}
}

// with runs fn with a client of what the flags name.
func (m *mountFlag) with(fn func(c *workspace.Client) error) (err error) {
	c, err := m.dial()
	if err != nil {
		return err
	}
	defer closeClient(c)
	return fn(c)
}

// dialMount connects to the mount that holds dir.
func dialMount(dir string) (*workspace.Client, error) {
	root, err := ctl.FindMount(dir)
	if err != nil {
		return nil, err
	}
	return workspace.Dial(root)
}

// storeDir returns the store directory of what the flags name (for
// commands that read the store's files, such as log): a session's
// store, or the store of the mount holding m.dir.
func (m *mountFlag) storeDir() (dir string, err error) {
	if m.session != "" {
		if m.dir != "" {
			return "", usagef("-C DIR and -s SESSION both name what to talk to: give one")
		}
		r, err := session.Find(m.session)
		if err != nil {
			return "", err
		}
		if !r.HasStore() {
			return "", fmt.Errorf("session %s was discarded: its store is gone", r.ID)
		}
		return r.Store, nil
	}
	c, err := dialMount(m.dir)
	if err != nil {
		return "", err
	}
	defer closeClient(c)
	st, err := c.Status()
	return st.Store, err
}

// markApplied records, after a successful agentfs apply -s SESSION of
// all the session's changes, that the session was applied (for agentfs
// sessions). Without -s it does nothing.
func (m *mountFlag) markApplied() error {
	if m.session == "" {
		return nil
	}
	r, err := session.Find(m.session)
	if err != nil {
		return err
	}
	if r.Live() != session.StateRunning {
		r.State = session.StateApplied
	}
	return r.Save()
}

// listOptions are the flags of the commands that list things
// (snapshot list, branch list).
type listOptions struct {
	mountFlag
	json           bool
	stdout, stderr io.Writer
}

func (o *listOptions) AddFlags(flags *pflag.FlagSet) {
	o.mountFlag.AddFlags(flags)
	flags.BoolVar(&o.json, "json", false, "print JSON")
}

// mustHide hides the internal flag name, which the command has just
// defined (pflag refuses only an unknown name: a bug here).
func mustHide(flags *pflag.FlagSet, name string) {
	if err := flags.MarkHidden(name); err != nil {
		panic(err)
	}
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// timeString shows t in local time to the second, or "-" when unknown.
func timeString(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// printable returns s as it can be shown in a table row: quoted (Go
// syntax) when it has control characters, "-" when empty.
func printable(s string) string {
	switch {
	case s == "":
		return "-"
	case strings.ContainsFunc(s, unicode.IsControl):
		return strconv.Quote(s)
	}
	return s
}
