package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/session"
	"github.com/agentfs/agentfs/workspace"
)

// mountFlag is the -C and -s flags of the commands that talk to a
// mount's daemon (cli.MountFlag), with the calls this program's
// commands make through a workspace client.
type mountFlag struct{ cli.MountFlag }

// dial connects to what the flags name: session m.Session (its daemon
// while it runs, its store opened in this process once it has ended),
// else the mount that holds m.Dir or the current directory. Every
// command of this program that talks to a mount goes through here.
func (m *mountFlag) dial() (*workspace.Client, error) {
	if err := m.CheckOne(); err != nil {
		return nil, err
	}
	if m.Session == "" {
		return dialMount(m.Dir)
	}
	c, _, err := session.Dial(m.Session, cli.Version)
	return c, err
}

// dialSession is cli.DialSession in this program: what the commands of
// package cli given -s SESSION talk to.
func dialSession(id string) (*ctl.Client, error) {
	c, _, err := session.Dial(id, cli.Version)
	if err != nil {
		return nil, err
	}
	return c.Ctl(), nil
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

// closeClient closes c (see cli.CloseClient).
func closeClient(c *workspace.Client) { cli.CloseClient(c, c.Name()) }

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
// store, or the store of the mount holding m.Dir.
func (m *mountFlag) storeDir() (dir string, err error) {
	if m.Session != "" {
		if err := m.CheckOne(); err != nil {
			return "", err
		}
		r, err := session.Find(m.Session)
		if err != nil {
			return "", err
		}
		if !r.HasStore() {
			return "", fmt.Errorf("session %s was discarded: its store is gone", r.ID)
		}
		return r.Store, nil
	}
	c, err := dialMount(m.Dir)
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
	if m.Session == "" {
		return nil
	}
	r, err := session.Find(m.Session)
	if err != nil {
		return err
	}
	if r.Live() != session.StateRunning {
		r.State = session.StateApplied
	}
	return r.Save()
}

// mustHide hides the internal flag name, which the command has just
// defined (pflag refuses only an unknown name: a bug here).
func mustHide(flags *pflag.FlagSet, name string) {
	if err := flags.MarkHidden(name); err != nil {
		panic(err)
	}
}
