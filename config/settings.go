package config

import (
	"fmt"
	"time"
)

// Settings are the effective settings of a mount's activity log and
// automatic snapshots: the configuration files' over the defaults, and
// the command's flags over both.
type Settings struct {
	AutoSnapshot bool
	QuietPeriod  time.Duration
	Keep         int   // automatic snapshots kept at most
	LogSize      int64 // the activity log's bound, bytes
	LogReads     bool
	Gitignore    bool     // honour the project's .gitignore and .git/info/exclude
	Ignore       []string // the configuration's patterns
	Triggers
}

// Overrides are the command's flags: a nil pointer or an empty string
// leaves the configuration's value.
type Overrides struct {
	AutoSnapshot *bool
	QuietPeriod  string // a duration, as ParseQuietPeriod reads it
	Keep         string // a count, as ParseKeep reads it
	LogSize      string // a size, as ParseLogSize reads it
	LogReads     *bool
	Trace        *bool
	Hash         *bool
}

// FlagError is a flag's value that cannot be used: Flag names it
// ("--quiet-period"), as the user typed it.
type FlagError struct {
	Flag, Value string
	Err         error
}

func (e *FlagError) Error() string { return fmt.Sprintf("%s %s: %v", e.Flag, e.Value, e.Err) }

func (e *FlagError) Unwrap() error { return e.Err }

// Resolve applies o over c; autoDefault is the command's default for
// automatic snapshots when neither a file nor a flag says (on for
// agentfs run, off for agentfs mount). Its errors are *FlagError.
func Resolve(c Config, o Overrides, autoDefault bool) (Settings, error) {
	s := Settings{
		AutoSnapshot: c.AutoSnapshotOr(autoDefault),
		QuietPeriod:  c.QuietPeriod,
		Keep:         c.Keep,
		LogSize:      c.LogSize,
		LogReads:     c.LogReads,
		Gitignore:    c.Gitignore,
		Ignore:       c.Ignore,
		Triggers:     c.Triggers,
	}
	if o.Trace != nil {
		s.Trace = *o.Trace
	}
	if o.Hash != nil {
		s.Hash = *o.Hash
	}
	if o.AutoSnapshot != nil {
		s.AutoSnapshot = *o.AutoSnapshot
	}
	if o.LogReads != nil {
		s.LogReads = *o.LogReads
	}
	var err error
	if o.QuietPeriod != "" {
		if s.QuietPeriod, err = ParseQuietPeriod(o.QuietPeriod); err != nil {
			return s, &FlagError{"--quiet-period", o.QuietPeriod, err}
		}
	}
	if o.Keep != "" {
		if s.Keep, err = ParseKeep(o.Keep); err != nil {
			return s, &FlagError{"--auto-snapshot-keep", o.Keep, err}
		}
	}
	if o.LogSize != "" {
		if s.LogSize, err = ParseLogSize(o.LogSize); err != nil {
			return s, &FlagError{"--log-size", o.LogSize, err}
		}
	}
	return s, nil
}

// DefaultSettings are the settings of a mount without configuration
// files or flags.
func DefaultSettings() Settings {
	s, _ := Resolve(Default(), Overrides{}, false)
	return s
}
