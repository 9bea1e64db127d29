package main

import (
	"context"
	"embed"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/cli"
	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/session"
	"github.com/agentfs/agentfs/workspace"
)

// Shell completion.
//
// The scripts (completions/) are small: each hands the words of the
// command line, up to the one being completed, to the hidden command
// `agentfs __complete WORD...`, which prints the candidates for the
// last word, one a line, each optionally followed by a tab and a
// description. A last line of its own asks the shell to complete
// something itself: ":dirs" directories, ":files" files, ":commands"
// command names. Commands and flags come from the command registry;
// snapshot ids, tags and branches from the mount (-C, -s, or the one
// holding the current directory), sessions from the session store and
// mountpoints from the registry of running mounts. A lookup that fails
// or takes longer than completeTimeout gives no candidates, and
// __complete never prints an error: a shell's completion must stay
// quiet.

//go:embed completions/agentfs.bash completions/_agentfs completions/agentfs.fish
var completionScripts embed.FS

// completionFiles are the scripts by shell.
var completionFiles = map[string]string{
	"bash": "completions/agentfs.bash",
	"zsh":  "completions/_agentfs",
	"fish": "completions/agentfs.fish",
}

// completeCommand is the hidden command the scripts call.
const completeCommand = "__complete"

// completeTimeout bounds a lookup in a mount or the session store.
const completeTimeout = 2 * time.Second

// Directives: the shell completes these itself.
const (
	completeDirs     = ":dirs"
	completeFiles    = ":files"
	completeCommands = ":commands"
)

// completionOptions are the flags of agentfs completion (none).
type completionOptions struct {
	stdout io.Writer
}

func (o *completionOptions) AddFlags(*pflag.FlagSet) {}

func init() {
	cli.Register(&cli.Command{
		Name:  "completion",
		Usage: "bash|zsh|fish",
		Help: `Completion prints the script that makes the shell complete agentfs's
commands, flags, snapshot ids and tags, branches, session ids and
mountpoints. Ids and branches come from the mount you are in (or the
one -C DIR or -s SESSION names).

Load it in the running shell, or install it where the shell finds
completions when it starts:

  bash:  source <(agentfs completion bash)
         agentfs completion bash > ~/.local/share/bash-completion/completions/agentfs
         (for everyone: /usr/share/bash-completion/completions/agentfs)
  zsh:   source <(agentfs completion zsh)        (after compinit)
         agentfs completion zsh > "${fpath[1]}/_agentfs"
  fish:  agentfs completion fish | source
         agentfs completion fish > ~/.config/fish/completions/agentfs.fish

Example:
  agentfs completion bash > ~/.local/share/bash-completion/completions/agentfs`,
		Setup: func(flags *pflag.FlagSet, out cli.Streams) cli.RunFunc {
			o := &completionOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runCompletion(ctx, o, args) }
		},
	})
}

func runCompletion(_ context.Context, o *completionOptions, args []string) error {
	if len(args) != 1 || completionFiles[args[0]] == "" {
		return cli.Usagef("completion takes one shell: bash, zsh or fish")
	}
	b, err := completionScripts.ReadFile(completionFiles[args[0]])
	if err != nil {
		return err
	}
	_, err = o.stdout.Write(b)
	return err
}

// candidate is one completion: a word and what it is.
type candidate struct {
	word, desc string
}

// runComplete prints the candidates for the last of words (the words
// after "agentfs", the last one being completed, possibly empty). It
// always succeeds.
func runComplete(words []string, stdout io.Writer) int {
	if len(words) == 0 {
		words = []string{""}
	}
	cur := words[len(words)-1]
	cands, directive := completeWords(words[:len(words)-1], cur)
	for _, c := range cands {
		if !strings.HasPrefix(c.word, cur) {
			continue
		}
		if c.desc != "" {
			fmt.Fprintf(stdout, "%s\t%s\n", c.word, oneLine(c.desc))
		} else {
			fmt.Fprintln(stdout, c.word)
		}
	}
	if directive != "" {
		fmt.Fprintln(stdout, directive)
	}
	return cli.ExitOK
}

// oneLine makes a description fit a line of a completion menu.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// completeWords returns the candidates (unfiltered) and a directive
// for cur, after the words before it.
func completeWords(before []string, cur string) ([]candidate, string) {
	if len(before) == 0 {
		return topCommands(), ""
	}
	c := cli.Lookup(before[0])
	rest := before[1:]
	if before[0] == "help" {
		return helpTopics(rest), ""
	}
	if c == nil {
		return nil, ""
	}
	if c.IsGroup() {
		if len(rest) == 0 {
			return subcommandsOf(c), ""
		}
		if c = cli.Lookup(c.Name + " " + rest[0]); c == nil {
			return nil, ""
		}
		rest = rest[1:]
	}
	flags := pflag.NewFlagSet(c.Name, pflag.ContinueOnError)
	flags.SetOutput(io.Discard)
	c.Setup(flags, cli.Streams{Stdout: io.Discard, Stderr: io.Discard})
	flags.BoolP("help", "h", false, "show this help")
	flags.ParseErrorsAllowlist.UnknownFlags = true

	// The value of a flag: the word before cur is a flag that takes one.
	if n := len(rest); n > 0 && !containsDash(rest[:n-1]) {
		if f := flagNamed(flags, rest[n-1]); f != nil && f.NoOptDefVal == "" {
			_ = flags.Parse(rest[:n-1])
			return flagValues(c, f, flags)
		}
	}
	_ = flags.Parse(rest)
	args := flags.Args()
	if dash := flags.ArgsLenAtDash(); dash >= 0 {
		// After --: a command and its arguments (run, exec, tournament).
		if len(args)-dash == 0 {
			return nil, completeCommands
		}
		return nil, completeFiles
	}
	if strings.HasPrefix(cur, "-") {
		return flagCandidates(flags), ""
	}
	return positionals(c, flags, args)
}

// containsDash reports whether words hold "--" (what follows are not
// flags).
func containsDash(words []string) bool {
	for _, w := range words {
		if w == "--" {
			return true
		}
	}
	return false
}

// flagNamed returns the flag word names (--name or -x), if any.
func flagNamed(flags *pflag.FlagSet, word string) *pflag.Flag {
	switch {
	case strings.HasPrefix(word, "--") && !strings.Contains(word, "="):
		return flags.Lookup(word[2:])
	case len(word) == 2 && word[0] == '-' && word[1] != '-':
		return flags.ShorthandLookup(word[1:])
	}
	return nil
}

func topCommands() []candidate {
	var out []candidate
	for _, c := range cli.Commands() {
		if !strings.Contains(c.Name, " ") {
			out = append(out, candidate{c.Name, c.Summary})
		}
	}
	out = append(out, candidate{"help", "what a command does, its flags and exit codes"})
	sort.Slice(out, func(i, j int) bool { return out[i].word < out[j].word })
	return out
}

func subcommandsOf(g *cli.Command) []candidate {
	var out []candidate
	for _, sc := range g.Subcommands() {
		out = append(out, candidate{strings.TrimPrefix(sc.Name, g.Name+" "), sc.Summary})
	}
	return out
}

// helpTopics completes agentfs help [GROUP] COMMAND.
func helpTopics(rest []string) []candidate {
	switch {
	case len(rest) == 0:
		var out []candidate
		for _, c := range topCommands() {
			if c.word != "help" {
				out = append(out, c)
			}
		}
		return out
	case len(rest) == 1 && cli.Lookup(rest[0]) != nil && cli.Lookup(rest[0]).IsGroup():
		return subcommandsOf(cli.Lookup(rest[0]))
	}
	return nil
}

func flagCandidates(flags *pflag.FlagSet) []candidate {
	var out []candidate
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		_, usage := pflag.UnquoteUsage(f)
		usage = strings.SplitN(usage, "\n", 2)[0]
		out = append(out, candidate{"--" + f.Name, usage})
		if f.Shorthand != "" {
			out = append(out, candidate{"-" + f.Shorthand, usage})
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].word < out[j].word })
	return out
}

// flagValues completes the value of flag f of command c.
func flagValues(c *cli.Command, f *pflag.Flag, flags *pflag.FlagSet) ([]candidate, string) {
	switch f.Name {
	case "dir", "lower", "store", "to", "record":
		return nil, completeDirs
	case "session":
		return sessionCandidates(), ""
	case "backstore":
		return []candidate{{"hostfs", "a directory in the store"}, {"ramdisk", "a size-limited tmpfs"}}, ""
	case "branch", "into":
		return fromMount(flags, branchCandidates), ""
	case "base":
		return fromMount(flags, refCandidates), ""
	case "from":
		if c.Name == "branch create" {
			return fromMount(flags, snapshotCandidates), ""
		}
		return fromMount(flags, refCandidates), ""
	}
	return nil, ""
}

// positionals completes the next argument of command c, after args.
func positionals(c *cli.Command, flags *pflag.FlagSet, args []string) ([]candidate, string) {
	n := len(args)
	switch c.Name {
	case "completion":
		if n == 0 {
			return []candidate{{"bash", ""}, {"fish", ""}, {"zsh", ""}}, ""
		}
	case "mount":
		if n == 0 {
			return nil, completeDirs
		}
	case "unmount":
		if n == 0 {
			var out []candidate
			for _, e := range daemon.RunningMounts() {
				out = append(out, candidate{e.Mountpoint, "agentfs mount of " + e.Lower})
			}
			return out, completeDirs
		}
	case "apply":
		return nil, completeFiles
	case "restore", "snapshot delete", "snapshot show":
		if n == 0 {
			return fromMount(flags, snapshotCandidates), ""
		}
	case "verify":
		if tree, _ := flags.GetString("tree"); tree == "" || n == 0 {
			return fromMount(flags, snapshotCandidates), ""
		}
	case "tag":
		if del, _ := flags.GetBool("delete"); del || n == 0 {
			if n == 0 {
				return fromMount(flags, tagCandidates), ""
			}
			return nil, ""
		}
		if n == 1 {
			return fromMount(flags, snapshotCandidates), ""
		}
	case "diff":
		if n < 2 {
			return fromMount(flags, refCandidates), ""
		}
	case "export":
		if n == 0 {
			return fromMount(flags, refCandidates), ""
		}
	case "branch delete", "branch switch", "branch bind", "merge":
		if n == 0 {
			return fromMount(flags, branchCandidates), ""
		}
	}
	return nil, ""
}

// fromMount runs list on the mount that the -C and -s flags (or the
// current directory) name, within completeTimeout; nothing when it
// cannot.
func fromMount(flags *pflag.FlagSet, list func(c *workspace.Client) []candidate) []candidate {
	m := mountFlag{}
	if f := flags.Lookup("dir"); f != nil {
		m.Dir = f.Value.String()
	}
	if f := flags.Lookup("session"); f != nil {
		m.Session = f.Value.String()
	}
	return withTimeout(func() []candidate {
		c, err := m.dial()
		if err != nil {
			return nil
		}
		defer func() { _ = c.Close() }() // only read from; nothing to lose
		return list(c)
	})
}

// withTimeout returns what fn returns, or nothing once completeTimeout
// passed (fn goes on, and is dropped when the process exits).
func withTimeout(fn func() []candidate) []candidate {
	done := make(chan []candidate, 1)
	go func() { done <- fn() }()
	select {
	case c := <-done:
		return c
	case <-time.After(completeTimeout):
		return nil
	}
}

// snapshotCandidates are the snapshots' ids, then their tags.
func snapshotCandidates(c *workspace.Client) []candidate {
	ids, tags := snapshotsAndTags(c)
	return append(ids, tags...)
}

// tagCandidates are the tags.
func tagCandidates(c *workspace.Client) []candidate {
	_, tags := snapshotsAndTags(c)
	return tags
}

// snapshotsAndTags lists the snapshots' ids and their tags.
func snapshotsAndTags(c *workspace.Client) (ids, tags []candidate) {
	list, err := c.Snapshots()
	if err != nil {
		return nil, nil
	}
	for _, s := range list.Snapshots {
		desc := s.Kind + " " + s.Created.Local().Format("2006-01-02 15:04")
		if s.Label != "" {
			desc += ": " + s.Label
		}
		ids = append(ids, candidate{s.ID, desc})
		for _, t := range s.Tags {
			tags = append(tags, candidate{t, "tag of snapshot " + s.ID})
		}
	}
	return ids, tags
}

func branchCandidates(c *workspace.Client) []candidate {
	list, err := c.Branches()
	if err != nil {
		return nil
	}
	var out []candidate
	for _, b := range list.Branches {
		desc := "branch"
		if b.Origin != "" {
			desc += " from snapshot " + b.Origin
		}
		out = append(out, candidate{b.Name, desc})
	}
	return out
}

// refCandidates are what diff and export take: lower, snapshots, tags
// and branches.
func refCandidates(c *workspace.Client) []candidate {
	out := []candidate{{"lower", "the project as it is"}}
	out = append(out, snapshotCandidates(c)...)
	return append(out, branchCandidates(c)...)
}

func sessionCandidates() []candidate {
	return withTimeout(func() []candidate {
		recs, err := session.List()
		if err != nil {
			return nil
		}
		var out []candidate
		for _, r := range recs {
			if !r.HasStore() {
				continue
			}
			out = append(out, candidate{r.ID, r.Live() + ": " + r.CommandString() + " in " + r.Project})
		}
		return out
	})
}
