// Package config reads agentfs's configuration files and resolves the
// settings of a mount from them and the command's flags.
//
// Defaults for automatic snapshots, the activity log and the ignore
// patterns come from two optional files, both in the same format:
//
//	${XDG_CONFIG_HOME:-~/.config}/agentfs/config   the user's
//	<lower>/.agentfs.conf                           the project's (read, never written)
//
// Precedence: command-line flags, then the project's file, then the
// user's, then the built-in defaults. Ignore patterns add up (the
// user's, then the project's, then the project's .gitignore).
//
// The format is "key = value" lines under [section] headers; a line
// starting with # or ; is a comment (comments take whole lines, so a
// value may contain #). The keys:
//
//	[auto-snapshot]
//	enabled = true|false     (agentfs run: on unless set; agentfs mount: off unless set)
//	quiet-period = 2s        (a duration: 500ms, 2s, 1m)
//	keep = 100               (automatic snapshots kept at most)
//	git = true               (a snapshot, kind git, when a commit, tag or checkout moves a ref)
//	build = true             (a snapshot, kind build, when a build or test command succeeds; needs the trace)
//	build-command = just ci  (one more command that counts as a build; repeat the key for more)
//	idle = 30s               (a snapshot, kind idle, after this long with no command and no change; off: none)
//	post-run = true          (agentfs run: a snapshot of the end, kind post-run, if it changed since the last one)
//
//	[trace]
//	enabled = true           (trace the commands of a session or mount: needs root and eBPF;
//	                          the user's file only: a project cannot turn it off)
//	size = 16M               (the exec log's bound)
//
//	[hash]
//	enabled = true           (compute the content hashes and Merkle root of each snapshot in
//	                          the background; the user's file only, as [trace])
//
//	[log]
//	size = 16M               (the activity log's bound)
//	reads = false            (also log lookups, opens for reading, listings)
//
//	[ignore]
//	gitignore = true         (honour the project's .gitignore and .git/info/exclude)
//	pattern = build/         (a gitignore-style pattern; repeat the key for more)
//
//	[hide]
//	pattern = .env           (a gitignore-style pattern of project paths that do not
//	                          exist in the view; repeat the key for more)
//
//	[limits]
//	max-files = 300000       (objects a branch may hold: files, directories, links; off: none)
//	max-bytes = 20G          (bytes of its files' data; a share of the backstore's free
//	                          space such as 50%; off: none. agentfs run: 300000 and 50%
//	                          unless set; agentfs mount: off unless set)
//
// Hide patterns add up too, and none takes back what another file hides:
// the user's patterns, the project's and --hide are each matched on
// their own, and a path any of them hides is hidden (package hide), so
// that a project's "!" cannot show what the user's file hides.
// A file that cannot be read or parsed is an error that names the file
// and the line: nothing is mounted.
package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/autosnap"
	"github.com/agentfs/agentfs/hide"
	"github.com/agentfs/agentfs/hostpath"
)

// Config is the configuration of a mount.
type Config struct {
	// AutoSnapshot is whether automatic snapshots are on; when
	// AutoSnapshotSet is false no file said, and the command decides
	// (AutoSnapshotOr).
	AutoSnapshot    bool
	AutoSnapshotSet bool
	QuietPeriod     time.Duration
	Keep            int   // automatic snapshots kept at most
	LogSize         int64 // bound of the activity log, bytes
	LogReads        bool
	Gitignore       bool     // honour the project's .gitignore
	Ignore          []string // patterns of the config files
	// Hide are the hide patterns of the config files, the user's then
	// the project's, each with its source.
	Hide []hide.Pattern
	// MaxFiles and MaxBytes are the limits of a branch; when ...Set is
	// false no file said, and the command decides (agentfs run has
	// limits, agentfs mount none).
	MaxFiles    int64
	MaxFilesSet bool
	MaxBytes    ByteLimit
	MaxBytesSet bool
	Triggers
	// Files are the configuration files read, in order.
	Files []string

	project bool // the file being read is the project's
}

// Triggers are the settings of the exec trace and of the snapshots that
// commands and git make.
type Triggers struct {
	Trace       bool  // trace the commands (as root)
	Hash        bool  // compute snapshots' content hashes and roots in the background
	ExecLogSize int64 // the exec log's bound, bytes
	Git         bool  // git snapshots when a ref moves
	Build       bool  // build snapshots when a build succeeds
	// BuildCommands are patterns (autosnap.ParsePattern) added to
	// autosnap.DefaultBuildPatterns.
	BuildCommands []string
	Idle          time.Duration // the idle snapshot's threshold; 0: off
	PostRun       bool          // agentfs run's post-run snapshot
}

// DefaultTriggers are the trigger settings without any file.
func DefaultTriggers() Triggers {
	return Triggers{Trace: true, Hash: true, ExecLogSize: activity.DefaultMaxBytes, Git: true, Build: true, Idle: autosnap.DefaultIdle, PostRun: true}
}

// Default is the configuration without any file.
func Default() Config {
	return Config{
		QuietPeriod: autosnap.DefaultQuiet,
		Keep:        autosnap.DefaultKeep,
		LogSize:     activity.DefaultMaxBytes,
		Gitignore:   true,
		Triggers:    DefaultTriggers(),
	}
}

// AutoSnapshotOr is whether automatic snapshots are on, def when no
// file said.
func (c Config) AutoSnapshotOr(def bool) bool {
	if c.AutoSnapshotSet {
		return c.AutoSnapshot
	}
	return def
}

// ProjectFile is the project's configuration file, in the lower
// directory.
const ProjectFile = ".agentfs.conf"

// UserFile returns the user's configuration file.
func UserFile() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "agentfs", "config")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".config", "agentfs", "config")
}

// Load reads the user's and the project's configuration files
// (those that exist) over the defaults. lowerDir is the project.
func Load(lowerDir string) (Config, error) {
	c := Default()
	for i, p := range []string{UserFile(), filepath.Join(lowerDir, ProjectFile)} {
		if p == "" {
			continue
		}
		c.project = i == 1
		f, err := hostpath.OpenNoatime(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return Config{}, fmt.Errorf("the configuration file %s: %w: fix its permissions, or remove it", p, err)
		}
		err = parseConfig(&c, p, f)
		f.Close()
		if err != nil {
			return Config{}, err
		}
		c.Files = append(c.Files, p)
	}
	return c, nil
}

// configError is a mistake in a configuration file: file:line: what,
// and the fix.
func configError(file string, line int, format string, a ...any) error {
	return fmt.Errorf("%s:%d: %s", file, line, fmt.Sprintf(format, a...))
}

// configKeys lists the keys of each section (for errors).
var configKeys = map[string][]string{
	"auto-snapshot": {"enabled", "quiet-period", "keep", "git", "build", "build-command", "idle", "post-run"},
	"log":           {"size", "reads"},
	"ignore":        {"gitignore", "pattern"},
	"hide":          {"pattern"},
	"trace":         {"enabled", "size"},
	"hash":          {"enabled"},
	"limits":        {"max-files", "max-bytes"},
}

// parseConfig reads one configuration file (named file in errors) over c.
func parseConfig(c *Config, file string, r io.Reader) error {
	sc := bufio.NewScanner(r)
	section := ""
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") {
			name, ok := strings.CutSuffix(line[1:], "]")
			name = strings.TrimSpace(name)
			if !ok {
				return configError(file, n, "%q: a section header is [name]", line)
			}
			if _, known := configKeys[name]; !known {
				return configError(file, n, "unknown section [%s]: the sections are %s", name, sectionNames())
			}
			section = name
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return configError(file, n, "%q: write key = value (or a [section] header, or a # comment)", line)
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if section == "" {
			return configError(file, n, "%q comes before any section: put it under one of %s", key, sectionNames())
		}
		if err := c.set(section, key, value); err != nil {
			return configError(file, n, "%v", err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the configuration file %s: %w", file, err)
	}
	return nil
}

func sectionNames() string {
	var names []string
	for s := range configKeys {
		names = append(names, "["+s+"]")
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// set applies one key of section.
func (c *Config) set(section, key, value string) error {
	var err error
	switch section + "." + key {
	case "auto-snapshot.enabled":
		c.AutoSnapshot, err = parseConfigBool(key, value)
		c.AutoSnapshotSet = true
	case "auto-snapshot.quiet-period":
		c.QuietPeriod, err = ParseQuietPeriod(value)
		if err != nil {
			err = fmt.Errorf("quiet-period = %s: %v", value, err)
		}
	case "auto-snapshot.keep":
		c.Keep, err = ParseKeep(value)
		if err != nil {
			err = fmt.Errorf("keep = %s: %v", value, err)
		}
	case "auto-snapshot.git":
		c.Git, err = parseConfigBool(key, value)
	case "auto-snapshot.build":
		c.Build, err = parseConfigBool(key, value)
	case "auto-snapshot.build-command":
		if _, err := autosnap.ParsePattern(value); err != nil {
			return fmt.Errorf("build-command = %s: %v", value, err)
		}
		c.BuildCommands = append(c.BuildCommands, value)
	case "auto-snapshot.idle":
		c.Idle, err = ParseIdle(value)
		if err != nil {
			err = fmt.Errorf("idle = %s: %v", value, err)
		}
	case "auto-snapshot.post-run":
		c.PostRun, err = parseConfigBool(key, value)
	case "trace.enabled":
		if c.project {
			// The trace is the record of what ran in the project: a
			// project (an agent's change to it) must not turn it off.
			return fmt.Errorf("enabled in [trace] is not the project's to set: put it in your own configuration file (%s), or use --trace=false", UserFile())
		}
		c.Trace, err = parseConfigBool(key, value)
	case "hash.enabled":
		if c.project {
			// The roots are what proves a snapshot is what it was: a
			// project (an agent's change to it) must not turn them off.
			return fmt.Errorf("enabled in [hash] is not the project's to set: put it in your own configuration file (%s), or use --hash=false", UserFile())
		}
		c.Hash, err = parseConfigBool(key, value)
	case "trace.size":
		c.ExecLogSize, err = ParseLogSize(value)
		if err != nil {
			err = fmt.Errorf("size = %s: %v", value, err)
		}
	case "log.size":
		c.LogSize, err = ParseLogSize(value)
		if err != nil {
			err = fmt.Errorf("size = %s: %v", value, err)
		}
	case "limits.max-files", "limits.max-bytes":
		if c.project {
			// The limits protect the machine from what runs in the
			// project: a project (or an agent's change to it) must not
			// lift or raise them.
			return fmt.Errorf("%s in [limits] is not the project's to set: put it in your own configuration file (%s), or use --%s", key, UserFile(), key)
		}
		if key == "max-bytes" {
			c.MaxBytes, err = ParseMaxBytes(value)
			if err != nil {
				err = fmt.Errorf("max-bytes = %s: %v", value, err)
			}
			c.MaxBytesSet = true
			break
		}
		c.MaxFiles, err = ParseMaxFiles(value)
		if err != nil {
			err = fmt.Errorf("max-files = %s: %v", value, err)
		}
		c.MaxFilesSet = true
	case "log.reads":
		c.LogReads, err = parseConfigBool(key, value)
	case "ignore.gitignore":
		c.Gitignore, err = parseConfigBool(key, value)
	case "ignore.pattern":
		if strings.TrimSpace(value) == "" || strings.HasPrefix(value, "#") {
			return fmt.Errorf("pattern = %q: empty, or a comment: write a gitignore-style pattern, or remove the line", value)
		}
		if err := autosnap.CheckPattern(value); err != nil {
			return fmt.Errorf("pattern = %s: %v: write a gitignore-style pattern (see gitignore(5))", value, err)
		}
		c.Ignore = append(c.Ignore, value)
	case "hide.pattern":
		if err := hide.Check(value); err != nil {
			return fmt.Errorf("pattern = %q: %v", value, err)
		}
		from := hide.FromUser
		if c.project {
			from = hide.FromProject
		}
		c.Hide = append(c.Hide, hide.Pattern{Pattern: value, From: from})
	default:
		return fmt.Errorf("unknown key %q in [%s]: the keys there are %s", key, section, strings.Join(configKeys[section], ", "))
	}
	return err
}

func parseConfigBool(key, value string) (bool, error) {
	switch strings.ToLower(value) {
	case "true", "yes", "on", "1":
		return true, nil
	case "false", "no", "off", "0":
		return false, nil
	}
	return false, fmt.Errorf("%s = %s: write true or false", key, value)
}

// Bounds of the settings (shared by the files and the flags).
const (
	minQuietPeriod = 10 * time.Millisecond
	maxQuietPeriod = 24 * time.Hour
	maxKeep        = 100000
)

// ParseQuietPeriod parses a quiet period such as 500ms or 2s.
func ParseQuietPeriod(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, errors.New("not a duration: write e.g. 500ms, 2s or 1m")
	case d < minQuietPeriod || d > maxQuietPeriod:
		return 0, fmt.Errorf("out of range: write a duration from %v to %v", minQuietPeriod, maxQuietPeriod)
	}
	return d, nil
}

// Bounds of the idle threshold.
const (
	minIdle = time.Second
	maxIdle = 24 * time.Hour
)

// ParseIdle parses the idle snapshot's threshold: a duration, or off
// (0, none).
func ParseIdle(s string) (time.Duration, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off", "0", "false", "no", "none":
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, errors.New("not a duration: write e.g. 30s or 2m, or off")
	case d < minIdle || d > maxIdle:
		return 0, fmt.Errorf("out of range: write a duration from %v to %v, or off", minIdle, maxIdle)
	}
	return d, nil
}

// ParseKeep parses a retention count.
func ParseKeep(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxKeep {
		return 0, fmt.Errorf("write a count from 1 to %d", maxKeep)
	}
	return n, nil
}

// splitSize splits a size such as 16M, 512KiB, 20GB or 4096 into its
// number and the multiplier of its suffix (K, M, G, T: powers of 1024).
func splitSize(s string) (v, mult int64, err error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult = 1
	if n := len(t); n > 0 {
		if i := strings.IndexByte("KMGT", t[n-1]); i >= 0 {
			mult = int64(1) << (10 * (i + 1))
			t = t[:n-1]
		}
	}
	v, err = strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	return v, mult, err
}

// ParseLogSize parses the activity log's bound: 16M, 512K, 1G.
func ParseLogSize(s string) (int64, error) {
	v, mult, err := splitSize(s)
	if err != nil || v <= 0 || v > (1<<40)/mult {
		return 0, errors.New("not a size: write e.g. 512K, 16M or 1G")
	}
	if v*mult < activity.MinMaxBytes {
		return 0, fmt.Errorf("too small: at least %dK", activity.MinMaxBytes>>10)
	}
	return v * mult, nil
}
