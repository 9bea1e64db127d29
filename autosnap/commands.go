package autosnap

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/agentfs/agentfs/activity"
)

// # Commands
//
// With the exec trace on (package exectrace), Commands decides the
// snapshots that commands call for, as the Scheduler does for changes:
//
//   - build: a build or test command (BuildPatterns) ended with exit
//     code 0. A snapshot of the branch the command worked on, labelled
//     with the command. Only the outermost counts: a command that a
//     running build started (make's sub-make, the go test that a
//     make target runs) does not make one of its own.
//   - idle: no command started or ended, and no change came, for Idle
//     after some activity: one snapshot per idle period, of each branch
//     changed during the period (of the mount's default branch when
//     only commands ran), labelled with the last command. A build or
//     test still running keeps the mount from being idle (they are the
//     commands that run long without a word); other running processes
//     (the agent itself, a server) do not.
//
// It also remembers the git commands that ran, so that the snapshot a
// commit makes (the Scheduler sees the ref move) is labelled with the
// command as well (GitCommand).
//
// Commands is a state machine driven by the times it is given, like
// Scheduler; Runner drives both with the real clock.

// Defaults of the command triggers.
const (
	DefaultIdle = 30 * time.Second
	// maxProcs bounds the processes Commands follows at once; the
	// oldest are forgotten beyond it.
	maxProcs = 1 << 16
	// maxLabelCommand bounds a command in a label, in bytes.
	maxLabelCommand = 200
	// gitRecent is how long after it ended a git command may still be
	// the one a ref change came from.
	gitRecent = 10 * time.Second
)

// DefaultBuildPatterns are the commands that count as builds and tests
// (see ParsePattern): those of the common toolchains.
var DefaultBuildPatterns = []string{
	"make", "gmake", "ninja", "cmake --build", "meson compile", "meson test",
	"go build", "go test", "go install", "go vet",
	"cargo build", "cargo test", "cargo check", "cargo clippy", "cargo nextest",
	"npm test", "npm run build*", "npm run test*", "yarn test", "yarn build*", "yarn run build*", "yarn run test*",
	"pnpm test", "pnpm build*", "pnpm run build*", "pnpm run test*", "bun test", "bun run build*", "bun run test*",
	"deno test", "tsc",
	"mvn", "mvnw", "gradle", "gradlew", "sbt", "bazel build", "bazel test", "bazelisk build", "bazelisk test",
	"pytest", "py.test", "python* -m pytest", "tox", "nox",
	"dotnet build", "dotnet test", "swift build", "swift test", "zig build",
	"mix compile", "mix test", "rake", "rspec", "bundle exec rspec", "bundle exec rake",
	"ctest", "just",
}

// Pattern is a command that counts as a build: words, each a glob
// (path.Match), the first matched against the program's base name and
// the others against the arguments that follow it in a row, after
// options: "go test" matches "go test -run X ./..." and "go -v test",
// not "go run ./cmd test"; "python* -m pytest" matches "python3 -m
// pytest", not "python3 -m pip install pytest". An interpreter running
// a script (sh ./gradlew, node /usr/bin/npm, env) is looked through:
// the script is the program.
type Pattern struct {
	text  string
	words []string
}

// ParsePattern reads a build pattern: "make", "go test", "npm run build*".
func ParsePattern(s string) (Pattern, error) {
	words := strings.Fields(s)
	if len(words) == 0 {
		return Pattern{}, fmt.Errorf("an empty build command pattern: write the command's words, e.g. \"go test\" or \"npm run build*\"")
	}
	for _, w := range words {
		if _, err := path.Match(w, ""); err != nil {
			return Pattern{}, fmt.Errorf("build command pattern %q: %q is not a glob (%v)", s, w, err)
		}
	}
	return Pattern{text: strings.Join(words, " "), words: words}, nil
}

func (p Pattern) String() string { return p.text }

// Match reports whether argv runs the pattern's command.
func (p Pattern) Match(argv []string) bool {
	argv = program(argv)
	if len(argv) == 0 || len(p.words) == 0 {
		return false
	}
	if ok, _ := path.Match(p.words[0], path.Base(argv[0])); !ok {
		return false
	}
	rest := p.words[1:]
	if len(rest) == 0 {
		return true
	}
	// The words match a run of arguments that starts after options
	// only (an option of the pattern matches where it stands).
	for k := 1; k+len(rest) <= len(argv); k++ {
		if matchRun(rest, argv[k:]) {
			return true
		}
		if !strings.HasPrefix(argv[k], "-") {
			break // past the options: the subcommand did not match
		}
	}
	return false
}

// matchRun reports whether words match the first len(words) args.
func matchRun(words, args []string) bool {
	for i, w := range words {
		if ok, _ := path.Match(w, args[i]); !ok {
			return false
		}
	}
	return true
}

// interpreters run a script named by their first argument: the script
// is the program.
var interpreters = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true,
	"node": true, "nodejs": true, "ruby": true, "perl": true, "python": true, "python3": true, "python2": true}

// envWithValue are env's options that take the next argument.
var envWithValue = map[string]bool{"-u": true, "--unset": true, "-C": true, "--chdir": true, "-S": true, "--split-string": true}

// program strips what runs a command without being it: env (its
// options and NAME=VALUE assignments) and an interpreter given a
// script (sh ./gradlew build → ./gradlew build); "sh -c ..." and
// "python -m ..." are left as they are.
func program(argv []string) []string {
	for len(argv) > 0 {
		base := path.Base(argv[0])
		switch {
		case base == "env":
			argv = argv[1:]
			for len(argv) > 0 && (strings.HasPrefix(argv[0], "-") || strings.Contains(argv[0], "=")) {
				if envWithValue[argv[0]] {
					argv = argv[1:] // and its value
				}
				argv = argv[1:]
			}
		case (interpreters[base] || strings.HasPrefix(base, "python3.")) && len(argv) > 1 && !strings.HasPrefix(argv[1], "-"):
			argv = argv[1:]
		default:
			return argv
		}
	}
	return argv
}

// gitCommands are the git subcommands that move a ref.
var gitCommands = map[string]bool{"commit": true, "merge": true, "rebase": true, "cherry-pick": true, "revert": true,
	"tag": true, "checkout": true, "switch": true, "reset": true, "pull": true, "am": true, "stash": true}

// gitSubcommand returns the subcommand of a git command line, or "".
func gitSubcommand(argv []string) string {
	argv = program(argv)
	if len(argv) == 0 || path.Base(argv[0]) != "git" {
		return ""
	}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-C" || a == "-c" || a == "--git-dir" || a == "--work-tree" || a == "--namespace":
			i++ // and its value
		case strings.HasPrefix(a, "-"):
		default:
			return a
		}
	}
	return ""
}

// Command is what the exec trace saw: a program started (End false),
// or one that ended.
type Command struct {
	Time      time.Time
	Pid, Ppid int
	Argv      []string // of a start
	// Branch is the branch a build works on ("" the default), found
	// as it starts (IsBuild says whether the caller need look).
	Branch string
	End    bool
	OK     bool      // of an end: exit code 0
	Start  time.Time // of an end: when its program started
}

// Commands decides the snapshots of the command triggers.
type Commands struct {
	// Build turns the build trigger on; BuildPatterns are the commands
	// that count (DefaultBuildPatterns when nil).
	Build         bool
	BuildPatterns []Pattern
	// Idle is the idle trigger's threshold; 0 turns it off.
	Idle time.Duration

	procs map[int]*proc
	order []int // pids in the order they started, to forget the oldest
	due   []Due

	// The idle period.
	last     time.Time     // the last activity
	active   bool          // activity since the last idle snapshot
	branches []string      // changed since the last idle snapshot
	lastCmd  string        // the last command started
	builds   map[int]*proc // the builds running, by pid

	git *gitCommand // the last git command that moves refs
}

type proc struct {
	pid, ppid int
	argv      []string
	start     time.Time
	build     bool // it matches a build pattern
	branch    string
}

type gitCommand struct {
	pid     int
	command string
	start   time.Time
	end     time.Time // zero while it runs
}

// DefaultPatterns parses DefaultBuildPatterns.
func DefaultPatterns() []Pattern {
	ps := make([]Pattern, 0, len(DefaultBuildPatterns))
	for _, s := range DefaultBuildPatterns {
		p, err := ParsePattern(s)
		if err != nil {
			panic(err) // the defaults parse: TestDefaultPatterns
		}
		ps = append(ps, p)
	}
	return ps
}

// IsBuild reports whether argv runs a build, with the build trigger on.
// It only reads the patterns: safe beside Add once they are set (Runner
// sets them when it starts).
func (c *Commands) IsBuild(argv []string) bool {
	if !c.Build {
		return false
	}
	for _, p := range c.BuildPatterns {
		if p.Match(argv) {
			return true
		}
	}
	return false
}

func (c *Commands) init() {
	if c.procs == nil {
		c.procs, c.builds = map[int]*proc{}, map[int]*proc{}
	}
	if c.BuildPatterns == nil {
		c.BuildPatterns = DefaultPatterns()
	}
}

// Add records what the trace saw.
func (c *Commands) Add(cmd Command) {
	c.init()
	if cmd.End {
		c.end(cmd)
		return
	}
	c.activity(cmd.Time)
	c.lastCmd = commandLabel(cmd.Argv)
	if sub := gitSubcommand(cmd.Argv); gitCommands[sub] {
		c.git = &gitCommand{pid: cmd.Pid, command: c.lastCmd, start: cmd.Time}
	}
	p := &proc{pid: cmd.Pid, ppid: cmd.Ppid, argv: cmd.Argv, start: cmd.Time, build: c.IsBuild(cmd.Argv), branch: cmd.Branch}
	if old := c.procs[cmd.Pid]; old != nil {
		// A second program in the same process: sh -c exec'ing make
		// (make is the build), or mvn's script exec'ing java (the
		// build it started goes on: still mvn, to its end).
		if old.build && !p.build {
			p.argv, p.start, p.build, p.branch = old.argv, old.start, true, old.branch
		}
		c.forget(old)
	}
	if p.build {
		c.builds[p.pid] = p
	}
	c.procs[cmd.Pid] = p
	c.order = append(c.order, cmd.Pid)
	c.trim()
}

// end records the end of a program.
func (c *Commands) end(cmd Command) {
	c.activity(cmd.Time)
	if c.git != nil && c.git.pid == cmd.Pid && c.git.end.IsZero() {
		c.git.end = cmd.Time
	}
	p := c.procs[cmd.Pid]
	if p == nil {
		return
	}
	c.forget(p)
	if !p.build || !cmd.OK || c.underBuild(p) {
		return
	}
	d := Due{Branch: p.branch, Kind: KindBuild, Command: commandLabel(p.argv), Took: cmd.Time.Sub(p.start)}
	// Several builds that end together: one snapshot of the branch.
	for i := range c.due {
		if c.due[i].Kind == KindBuild && c.due[i].Branch == d.Branch {
			d.More = c.due[i].More + 1
			c.due = append(c.due[:i], c.due[i+1:]...)
			break
		}
	}
	c.due = append(c.due, d)
	// The build's snapshot holds what its branch did so far: the idle
	// period starts again (for that branch).
	c.branches = slices.DeleteFunc(c.branches, func(b string) bool { return b == d.Branch })
	if len(c.branches) == 0 {
		c.active = false
	}
}

// forget drops p from the processes followed.
func (c *Commands) forget(p *proc) {
	if c.procs[p.pid] == p {
		delete(c.procs, p.pid)
	}
	if c.builds[p.pid] == p {
		delete(c.builds, p.pid)
	}
}

// underBuild reports whether a build that is still running started p.
func (c *Commands) underBuild(p *proc) bool {
	seen := 0
	for pid := p.ppid; pid > 1 && seen < 64; seen++ {
		a := c.procs[pid]
		if a == nil {
			return false
		}
		if a.build {
			return true
		}
		pid = a.ppid
	}
	return false
}

// trim forgets the oldest processes beyond maxProcs (their exit was
// lost, or they outlive the trace's memory).
func (c *Commands) trim() {
	for len(c.procs) > maxProcs && len(c.order) > 0 {
		pid := c.order[0]
		c.order = c.order[1:]
		if p := c.procs[pid]; p != nil {
			c.forget(p)
		}
	}
	if len(c.order) > 2*maxProcs {
		live := c.order[:0]
		for _, pid := range c.order {
			if c.procs[pid] != nil {
				live = append(live, pid)
			}
		}
		c.order = live
	}
}

// Change records a change on branch (for the idle trigger).
func (c *Commands) Change(at time.Time, branch string) {
	c.activity(at)
	for _, b := range c.branches {
		if b == branch {
			return
		}
	}
	c.branches = append(c.branches, branch)
}

func (c *Commands) activity(at time.Time) {
	if at.After(c.last) {
		c.last = at
	}
	c.active = true
}

// idleAt is when the idle snapshot falls due: Idle after the last
// activity, and not while a build that started less than
// idleBuildSpan ago runs (a build can run long without a word; one
// that runs for ever, make serve or a watcher, or whose end was lost,
// stops holding the mount busy then).
func (c *Commands) idleAt() (time.Time, bool) {
	if c.Idle <= 0 || !c.active {
		return time.Time{}, false
	}
	at := c.last.Add(c.Idle)
	for _, b := range c.builds {
		if until := b.start.Add(idleBuildSpan * c.Idle); until.After(at) {
			at = until
		}
	}
	return at, true
}

// idleBuildSpan is how many idle thresholds a running build keeps the
// mount from being idle.
const idleBuildSpan = 10

// Next returns when the next snapshot is due; false when none is.
func (c *Commands) Next() (time.Time, bool) {
	if len(c.due) > 0 {
		return time.Time{}, true // now
	}
	return c.idleAt()
}

// Take returns the snapshots due at now.
func (c *Commands) Take(now time.Time) []Due {
	due := c.due
	c.due = nil
	if at, ok := c.idleAt(); ok && !now.Before(at) {
		branches := c.branches
		if len(branches) == 0 {
			branches = []string{""}
		}
		for _, b := range branches {
			due = append(due, Due{Branch: b, Kind: KindIdle, Command: c.lastCmd, Took: now.Sub(c.last)})
		}
		c.active, c.branches = false, nil
	}
	return due
}

// GitCommand returns the git command a ref change at at came from: the
// last one that moves refs, if it was running then or ended shortly
// before.
func (c *Commands) GitCommand(at time.Time) (string, bool) {
	g := c.git
	if g == nil || g.start.After(at.Add(time.Second)) || (!g.end.IsZero() && at.Sub(g.end) > gitRecent) {
		return "", false
	}
	return g.command, true
}

// commandLabel writes argv for a label.
func commandLabel(argv []string) string {
	return activity.CommandLine(argv, maxLabelCommand)
}
