// Command agentfs mounts a copy-on-write view of a project, so that a
// coding agent (or any risky program) can work on it while the project
// itself is never modified.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/contenthash"
	"github.com/agentfs/agentfs/daemon"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "0.1.0-dev"

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// command is one subcommand: its help, and setup, which makes a fresh
// options struct (writing to out), adds its flags to the flag set and
// returns the command's run function bound to those options.
//
// A group ("snapshot", "branch") has no setup: its commands are
// registered under "GROUP NAME" ("snapshot create") and run as
// `agentfs snapshot create ...`.
type command struct {
	name    string
	summary string
	usage   string // after "agentfs NAME"
	help    string // what it does, an example
	// exitCodes replaces exitCodesHelp for a command whose codes say
	// more (fsck).
	exitCodes string
	setup     func(flags *pflag.FlagSet, out streams) runFunc
}

// isGroup reports whether c only groups other commands.
func (c *command) isGroup() bool { return c.setup == nil }

// subcommands returns the commands of group c, sorted by name.
func (c *command) subcommands() []*command {
	var subs []*command
	for n, sc := range commands {
		if strings.HasPrefix(n, c.name+" ") {
			subs = append(subs, sc)
		}
	}
	sort.Slice(subs, func(i, j int) bool { return subs[i].name < subs[j].name })
	return subs
}

// streams are where a command writes.
type streams struct {
	stdout, stderr io.Writer
}

type runFunc func(ctx context.Context, args []string) error

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// usageError is a mistake in how agentfs was called (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// exitCodeError ends agentfs with its own exit code, after its message
// when there is one (none: what went wrong was said already, or the
// code is a command's, as agentfs run passes it through).
type exitCodeError struct {
	code int
	msg  string
}

func (e exitCodeError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.msg
}

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
	var names []string
	for n := range commands {
		if !strings.Contains(n, " ") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
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

func commandUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: agentfs %s %s\n\n%s\n", c.name, c.usage, strings.TrimSpace(c.help))
	if c.isGroup() {
		fmt.Fprintf(w, "\nCommands:\n")
		for _, sc := range c.subcommands() {
			fmt.Fprintf(w, "  %-18s %s\n", sc.name, sc.summary)
		}
		fmt.Fprintf(w, "\nRun 'agentfs help %s COMMAND' for a command's flags and examples.\n\n%s", c.name, exitCodesHelp)
		return
	}
	flags := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
	flags.SortFlags = false
	c.setup(flags, streams{io.Discard, io.Discard})
	flags.BoolP("help", "h", false, "show this help")
	if flags.HasAvailableFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", flags.FlagUsages())
	}
	codes := exitCodesHelp
	if c.exitCodes != "" {
		codes = c.exitCodes
	}
	fmt.Fprintf(w, "\n%s", codes)
}

func main() {
	if isMountHelper() {
		os.Exit(runMountHelper(os.Args[1:], os.Stdout, os.Stderr))
	}
	if len(os.Args) == 2 && os.Args[1] == contenthash.HelperCommand {
		// The daemon's hashing process (contenthash/helper.go).
		os.Exit(contenthash.RunHelper())
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		mainUsage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "--help":
		mainUsage(stdout)
		return exitOK
	case "--version":
		if err := runVersion(context.Background(), &versionOptions{stdout: stdout}, nil); err != nil {
			return exitError
		}
		return exitOK
	case completeCommand:
		// The shell's completion (cmd_completion.go): the words are
		// not agentfs's flags.
		return runComplete(args[1:], stdout)
	case "help":
		if len(args) < 2 {
			mainUsage(stdout)
			return exitOK
		}
		name := strings.Join(args[1:], " ")
		c := commands[name]
		if c == nil {
			fmt.Fprintf(stderr, "agentfs: unknown command %q: run 'agentfs --help' for the list\n", name)
			return exitUsage
		}
		commandUsage(stdout, c)
		return exitOK
	}
	c := commands[name]
	if c == nil && strings.HasPrefix(name, "-") {
		fmt.Fprintf(stderr, "agentfs: unknown flag: %s (flags go after the command): run 'agentfs --help'\n", name)
		return exitUsage
	}
	if c == nil {
		fmt.Fprintf(stderr, "agentfs: unknown command %q: run 'agentfs --help' for the list\n", name)
		return exitUsage
	}
	if c.isGroup() {
		var code int
		if c, args, code = pickSubcommand(c, args, stdout, stderr); c == nil {
			return code
		}
		name = c.name
	}
	flags := pflag.NewFlagSet(name, pflag.ContinueOnError)
	flags.SetOutput(io.Discard)
	runCmd := c.setup(flags, streams{stdout, stderr})
	help := flags.BoolP("help", "h", false, "show this help")
	if err := flags.Parse(args[1:]); err != nil {
		fmt.Fprintf(stderr, "agentfs %s: %v: run 'agentfs help %s'\n", name, err, name)
		return exitUsage
	}
	if *help {
		commandUsage(stdout, c)
		return exitOK
	}
	err := runCmd(context.Background(), flags.Args())
	if err == nil {
		return exitOK
	}
	var ce exitCodeError
	if errors.As(err, &ce) {
		if ce.msg != "" {
			fmt.Fprintf(stderr, "agentfs %s: %s\n", name, ce.msg)
		}
		return ce.code
	}
	var ue usageError
	var due *daemon.UsageError
	if errors.As(err, &ue) || errors.As(err, &due) {
		fmt.Fprintf(stderr, "agentfs %s: %v: run 'agentfs help %s'\n", name, err, name)
		return exitUsage
	}
	fmt.Fprintf(stderr, "agentfs %s: %v\n", name, err)
	return exitError
}

// pickSubcommand returns the command of group g that args (["snapshot",
// "create", ...]) name, with args starting at its name; or nil and the
// exit code after printing the group's help or a usage error.
func pickSubcommand(g *command, args []string, stdout, stderr io.Writer) (*command, []string, int) {
	if len(args) < 2 || strings.HasPrefix(args[1], "-") {
		if len(args) >= 2 && (args[1] == "-h" || args[1] == "--help") {
			commandUsage(stdout, g)
			return nil, nil, exitOK
		}
		var names []string
		for _, sc := range g.subcommands() {
			names = append(names, strings.TrimPrefix(sc.name, g.name+" "))
		}
		fmt.Fprintf(stderr, "agentfs %s: which one? %s: run 'agentfs help %s'\n", g.name, strings.Join(names, ", "), g.name)
		return nil, nil, exitUsage
	}
	c := commands[g.name+" "+args[1]]
	if c == nil {
		fmt.Fprintf(stderr, "agentfs %s: unknown command %q: run 'agentfs help %s' for the list\n", g.name, args[1], g.name)
		return nil, nil, exitUsage
	}
	return c, args[1:], exitOK
}
