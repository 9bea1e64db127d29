package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// The mount flags of the activity log and automatic snapshots, and the
// settings they make with the configuration files (config.go).

// activityFlags are the flags; unset ones leave the configuration's
// value.
type activityFlags struct {
	autoSnapshot optBool
	quietPeriod  string
	keep         string
	logSize      string
	logReads     optBool
}

func (o *activityFlags) AddFlags(fs *pflag.FlagSet) {
	fs.Var(&o.autoSnapshot, "auto-snapshot", "take automatic snapshots after changes settle and after git commits\n(default: off for mount, unless the configuration turns them on)")
	fs.Lookup("auto-snapshot").NoOptDefVal = "true"
	fs.StringVar(&o.quietPeriod, "quiet-period", "", "with --auto-snapshot: snapshot once no change came for `DUR` (default 2s)")
	fs.StringVar(&o.keep, "auto-snapshot-keep", "", "keep at most `N` automatic snapshots; older ones thin out first (default 100)")
	fs.StringVar(&o.logSize, "log-size", "", "bound the activity log (agentfs log) to `SIZE`, e.g. 4M (default 16M)")
	fs.Var(&o.logReads, "log-reads", "also log lookups, opens for reading and directory listings")
	fs.Lookup("log-reads").NoOptDefVal = "true"
}

// activitySettings are the effective settings of a mount.
type activitySettings struct {
	autoSnapshot bool
	quietPeriod  time.Duration
	keep         int
	logSize      int64
	logReads     bool
	gitignore    bool
	ignore       []string // the configuration's patterns
}

// defaultActivitySettings are the settings of a mount without
// configuration files or flags.
func defaultActivitySettings() activitySettings {
	s, _ := (&activityFlags{}).resolve(defaultConfig(), false)
	return s
}

// resolve applies the flags over cfg; autoDefault is the command's
// default for automatic snapshots when neither says.
func (o *activityFlags) resolve(cfg Config, autoDefault bool) (activitySettings, error) {
	s := activitySettings{
		autoSnapshot: cfg.autoSnapshotOr(autoDefault),
		quietPeriod:  cfg.QuietPeriod,
		keep:         cfg.Keep,
		logSize:      cfg.LogSize,
		logReads:     cfg.LogReads,
		gitignore:    cfg.Gitignore,
		ignore:       cfg.Ignore,
	}
	if o.autoSnapshot.set {
		s.autoSnapshot = o.autoSnapshot.v
	}
	if o.logReads.set {
		s.logReads = o.logReads.v
	}
	var err error
	if o.quietPeriod != "" {
		if s.quietPeriod, err = parseQuietPeriod(o.quietPeriod); err != nil {
			return s, usagef("--quiet-period %s: %v", o.quietPeriod, err)
		}
	}
	if o.keep != "" {
		if s.keep, err = parseKeep(o.keep); err != nil {
			return s, usagef("--auto-snapshot-keep %s: %v", o.keep, err)
		}
	}
	if o.logSize != "" {
		if s.logSize, err = parseLogSize(o.logSize); err != nil {
			return s, usagef("--log-size %s: %v", o.logSize, err)
		}
	}
	return s, nil
}

// daemonArgs are the flags that give the daemon exactly these settings
// (the configuration files only add the ignore patterns there).
func (s activitySettings) daemonArgs() []string {
	return []string{
		"--auto-snapshot=" + strconv.FormatBool(s.autoSnapshot),
		"--quiet-period", s.quietPeriod.String(),
		"--auto-snapshot-keep", strconv.Itoa(s.keep),
		"--log-size", strconv.FormatInt(s.logSize, 10),
		"--log-reads=" + strconv.FormatBool(s.logReads),
	}
}

// optBool is a boolean flag that knows whether it was given.
type optBool struct {
	v, set bool
}

func (b *optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true or false, not %q", s)
	}
	b.v, b.set = v, true
	return nil
}

func (b *optBool) String() string {
	if !b.set {
		return ""
	}
	return strconv.FormatBool(b.v)
}

func (b *optBool) Type() string { return "bool" }
