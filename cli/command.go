package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// Version is agentfs's version, set at build time (-ldflags "-X
// github.com/agentfs/agentfs/cli.Version=...").
var Version = "0.1.0-dev"

// MountHelperName is the name mount(8) runs the helper of a
// "fuse.agentfs" filesystem by (/sbin/mount.fuse.agentfs): agentfs
// called by that name is the helper, which agentfs-core is.
const MountHelperName = "mount.fuse.agentfs"

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Command is one subcommand: its help, and Setup, which makes a fresh
// options struct (writing to out), adds its flags to the flag set and
// returns the command's run function bound to those options.
//
// A group ("snapshot", "branch") has no Setup: its commands are
// registered under "GROUP NAME" ("snapshot create") and run as
// `agentfs snapshot create ...`.
type Command struct {
	Name string
	// Summary is the one-line summary of a group's command; a top-level
	// command's is in the table (commands.go), and Register sets it.
	Summary string
	Usage   string // after "agentfs NAME"
	Help    string // what it does, an example
	// ExitCodes replaces exitCodesHelp for a command whose codes say
	// more (fsck).
	ExitCodes string
	Setup     func(flags *pflag.FlagSet, out Streams) RunFunc
}

// IsGroup reports whether c only groups other commands.
func (c *Command) IsGroup() bool { return c.Setup == nil }

// Subcommands returns the commands of group c, sorted by name.
func (c *Command) Subcommands() []*Command {
	var subs []*Command
	for n, sc := range commands {
		if strings.HasPrefix(n, c.Name+" ") {
			subs = append(subs, sc)
		}
	}
	sort.Slice(subs, func(i, j int) bool { return subs[i].Name < subs[j].Name })
	return subs
}

// Streams are where a command writes.
type Streams struct {
	Stdout, Stderr io.Writer
}

// RunFunc runs a command with its arguments (what its flags left).
type RunFunc func(ctx context.Context, args []string) error

var commands = map[string]*Command{}

// Register adds c to the commands this program runs. A top-level
// command gets its summary from the table (commands.go); one that is
// not there, or that brings a summary of its own, is a bug: Register
// panics.
func Register(c *Command) {
	if !strings.Contains(c.Name, " ") {
		s, ok := summaries[c.Name]
		if !ok || c.Summary != "" {
			panic(fmt.Sprintf("cli: command %q: a top-level command's summary goes in the table of cli/commands.go, and only there", c.Name))
		}
		c.Summary = s
	}
	commands[c.Name] = c
}

// Lookup returns the command registered as name ("snapshot create"),
// or nil.
func Lookup(name string) *Command { return commands[name] }

// Commands returns the commands registered, sorted by name.
func Commands() []*Command {
	out := make([]*Command, 0, len(commands))
	for _, c := range commands {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// UsageError is a mistake in how agentfs was called (exit 2).
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Usagef makes a UsageError.
func Usagef(format string, a ...any) error { return UsageError{fmt.Sprintf(format, a...)} }

// usageMistake is an error of a library that says the command was
// called wrongly (daemon.UsageError): it exits 2 as a UsageError does.
type usageMistake interface {
	error
	UsageMistake()
}

// ExitCodeError ends agentfs with its own exit code, after its message
// when there is one (none: what went wrong was said already, or the
// code is a command's, as agentfs run passes it through).
type ExitCodeError struct {
	Code int
	Msg  string
}

func (e ExitCodeError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Msg
}

// errNeedsCore says that what the command was asked needs the full
// program (agentfs-core): the front runs it there.
var errNeedsCore = errors.New("this needs agentfs-core")

const exitCodesHelp = `Exit codes:
  0  success
  1  error (the message says what went wrong and how to fix it)
  2  usage error (unknown command or flag, wrong arguments)
`

func mainUsage(w io.Writer) {
	fmt.Fprintf(w, `agentfs shows a project through a copy-on-write overlay: programs work on the
mount as on the project, and the project itself is never modified.

Usage:
  agentfs COMMAND [FLAGS] [ARGS]

Commands:
`)
	names := make([]string, 0, len(summaries))
	for n := range summaries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, summaries[n])
	}
	fmt.Fprintf(w, `
Example:
  agentfs mount --lower ~/proj /mnt/ws    # /mnt/ws shows ~/proj
  cd /mnt/ws && make && rm -rf build       # ~/proj is untouched
  agentfs status                           # from inside the mount
  agentfs snapshot create -m "it builds"   # prints the snapshot's id
  agentfs diff                             # what changed since the project
  agentfs restore ID                       # back to the snapshot
  agentfs unmount /mnt/ws                  # the changes are discarded

Run 'agentfs help COMMAND' for a command's flags and examples.

%s`, exitCodesHelp)
}

func commandUsage(w io.Writer, c *Command) {
	fmt.Fprintf(w, "Usage: agentfs %s %s\n\n%s\n", c.Name, c.Usage, strings.TrimSpace(c.Help))
	if c.IsGroup() {
		fmt.Fprintf(w, "\nCommands:\n")
		for _, sc := range c.Subcommands() {
			fmt.Fprintf(w, "  %-18s %s\n", sc.Name, sc.Summary)
		}
		fmt.Fprintf(w, "\nRun 'agentfs help %s COMMAND' for a command's flags and examples.\n\n%s", c.Name, exitCodesHelp)
		return
	}
	flags := pflag.NewFlagSet(c.Name, pflag.ContinueOnError)
	flags.SortFlags = false
	c.Setup(flags, Streams{io.Discard, io.Discard})
	flags.BoolP("help", "h", false, "show this help")
	if flags.HasAvailableFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", flags.FlagUsages())
	}
	codes := exitCodesHelp
	if c.ExitCodes != "" {
		codes = c.ExitCodes
	}
	fmt.Fprintf(w, "\n%s", codes)
}

// Run runs the agentfs command line args (without the program's name)
// with every command registered, and returns the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	code, _ := run(args, stdout, stderr, false)
	return code
}

// RunFront runs args as Run does if this program (the thin front) has
// what they need; if not, it prints nothing and returns handled false:
// the caller runs the full program with the same arguments. Groups, a
// command not registered here and a command's errNeedsCore are the
// full program's.
func RunFront(args []string, stdout, stderr io.Writer) (code int, handled bool) {
	return run(args, stdout, stderr, true)
}

// run is Run, and RunFront when front is set.
func run(args []string, stdout, stderr io.Writer, front bool) (int, bool) {
	if len(args) == 0 {
		mainUsage(stderr)
		return ExitUsage, true
	}
	name := args[0]
	switch name {
	case "-h", "--help":
		mainUsage(stdout)
		return ExitOK, true
	case "--version":
		if err := runVersion(context.Background(), &versionOptions{stdout: stdout}, nil); err != nil {
			return ExitError, true
		}
		return ExitOK, true
	case "help":
		if len(args) < 2 {
			mainUsage(stdout)
			return ExitOK, true
		}
		name := strings.Join(args[1:], " ")
		c := commands[name]
		if front && (c == nil || c.IsGroup()) {
			// A group's help lists its commands, of which the front
			// may lack some.
			return 0, false
		}
		if c == nil {
			fmt.Fprintf(stderr, "agentfs: unknown command %q: run 'agentfs --help' for the list\n", name)
			return ExitUsage, true
		}
		commandUsage(stdout, c)
		return ExitOK, true
	}
	c := commands[name]
	if front && (c == nil || c.IsGroup() && (len(args) < 2 || commands[name+" "+args[1]] == nil)) {
		return 0, false
	}
	if c == nil && strings.HasPrefix(name, "-") {
		fmt.Fprintf(stderr, "agentfs: unknown flag: %s (flags go after the command): run 'agentfs --help'\n", name)
		return ExitUsage, true
	}
	if c == nil {
		fmt.Fprintf(stderr, "agentfs: unknown command %q: run 'agentfs --help' for the list\n", name)
		return ExitUsage, true
	}
	if c.IsGroup() {
		var code int
		if c, args, code = pickSubcommand(c, args, stdout, stderr); c == nil {
			return code, true
		}
		name = c.Name
	}
	flags := pflag.NewFlagSet(name, pflag.ContinueOnError)
	flags.SetOutput(io.Discard)
	runCmd := c.Setup(flags, Streams{stdout, stderr})
	help := flags.BoolP("help", "h", false, "show this help")
	if err := flags.Parse(args[1:]); err != nil {
		fmt.Fprintf(stderr, "agentfs %s: %v: run 'agentfs help %s'\n", name, err, name)
		return ExitUsage, true
	}
	if *help {
		commandUsage(stdout, c)
		return ExitOK, true
	}
	err := runCmd(context.Background(), flags.Args())
	if err == nil {
		return ExitOK, true
	}
	if errors.Is(err, errNeedsCore) {
		if front {
			return 0, false
		}
		// The full program has every hook set: this is a bug.
		fmt.Fprintf(stderr, "agentfs %s: %v (a bug: agentfs-core must not say this)\n", name, err)
		return ExitError, true
	}
	var ce ExitCodeError
	if errors.As(err, &ce) {
		if ce.Msg != "" {
			fmt.Fprintf(stderr, "agentfs %s: %s\n", name, ce.Msg)
		}
		return ce.Code, true
	}
	var ue UsageError
	var um usageMistake
	if errors.As(err, &ue) || errors.As(err, &um) {
		fmt.Fprintf(stderr, "agentfs %s: %v: run 'agentfs help %s'\n", name, err, name)
		return ExitUsage, true
	}
	fmt.Fprintf(stderr, "agentfs %s: %v\n", name, err)
	return ExitError, true
}

// pickSubcommand returns the command of group g that args (["snapshot",
// "create", ...]) name, with args starting at its name; or nil and the
// exit code after printing the group's help or a usage error.
func pickSubcommand(g *Command, args []string, stdout, stderr io.Writer) (*Command, []string, int) {
	if len(args) < 2 || strings.HasPrefix(args[1], "-") {
		if len(args) >= 2 && (args[1] == "-h" || args[1] == "--help") {
			commandUsage(stdout, g)
			return nil, nil, ExitOK
		}
		var names []string
		for _, sc := range g.Subcommands() {
			names = append(names, strings.TrimPrefix(sc.Name, g.Name+" "))
		}
		fmt.Fprintf(stderr, "agentfs %s: which one? %s: run 'agentfs help %s'\n", g.Name, strings.Join(names, ", "), g.Name)
		return nil, nil, ExitUsage
	}
	c := commands[g.Name+" "+args[1]]
	if c == nil {
		fmt.Fprintf(stderr, "agentfs %s: unknown command %q: run 'agentfs help %s' for the list\n", g.Name, args[1], g.Name)
		return nil, nil, ExitUsage
	}
	return c, args[1:], ExitOK
}
