package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
)

// MountFlag is the -C and -s flags of the commands that talk to a
// mount's daemon, and the call they make with them.
type MountFlag struct {
	Dir     string
	Session string
}

// AddFlags adds -C DIR and -s SESSION to flags.
func (m *MountFlag) AddFlags(flags *pflag.FlagSet) {
	flags.StringVarP(&m.Dir, "dir", "C", "", "a `DIR` inside the mount (default: the current directory)")
	flags.StringVarP(&m.Session, "session", "s", "", "the agentfs run `SESSION` (an id, or its start or end) instead of a mount")
}

// CheckOne refuses -C DIR and -s SESSION together.
func (m *MountFlag) CheckOne() error {
	if m.Session != "" && m.Dir != "" {
		return Usagef("-C DIR and -s SESSION both name what to talk to: give one")
	}
	return nil
}

// DialSession connects to the agentfs run session id: its daemon while
// it runs, its store opened in this process once it has ended. The
// full program sets it (cmd/agentfs-core); the thin front leaves it
// nil, and a command given -s SESSION runs in the full program.
var DialSession func(id string) (*ctl.Client, error)

// Dial connects to what the flags name: session m.Session (through
// DialSession), else the mount that holds m.Dir or the current
// directory.
func (m *MountFlag) Dial() (*ctl.Client, error) {
	if err := m.CheckOne(); err != nil {
		return nil, err
	}
	if m.Session != "" {
		if DialSession == nil {
			return nil, errNeedsCore
		}
		return DialSession(m.Session)
	}
	root, err := ctl.FindMount(m.Dir)
	if err != nil {
		return nil, err
	}
	return ctl.Dial(root)
}

// call runs one operation, op with args, on what the flags of m name,
// and decodes its reply.
func call[R any](m *MountFlag, op ctl.Op, args any) (r R, err error) {
	c, err := m.Dial()
	if err != nil {
		return r, err
	}
	defer CloseClient(c, c.Root())
	err = c.Do(op, args, &r)
	return r, err
}

// CloseClient closes c, a client of what name names. What the
// operation changed was made durable before it answered, so a failed
// close (of an ended session's store) loses nothing: it is a warning,
// and the command's outcome stands.
func CloseClient(c io.Closer, name string) {
	if err := c.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "agentfs: warning: the operation was done, but closing %s failed: %v\n", name, err)
	}
}

// listOptions are the flags of the commands that list things
// (snapshot list, branch list).
type listOptions struct {
	MountFlag
	json           bool
	stdout, stderr io.Writer
}

func (o *listOptions) AddFlags(flags *pflag.FlagSet) {
	o.MountFlag.AddFlags(flags)
	flags.BoolVar(&o.json, "json", false, "print JSON")
}
