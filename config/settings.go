package config

import (
	"fmt"
	"slices"
	"time"

	"github.com/agentfs/agentfs/hide"
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
	// Hide are the hide patterns: the configuration's, then --hide's
	// (From hide.FromFlag).
	Hide []hide.Pattern
	// MaxFiles and MaxBytes are the limits of each branch (0, off: no
	// limit).
	MaxFiles int64
	MaxBytes ByteLimit
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
	// Hide are the patterns of --hide, added to the configuration's.
	Hide     []string
	MaxFiles string // a count or off, as ParseMaxFiles reads it
	MaxBytes string // a size, a share or off, as ParseMaxBytes reads it
}

// FlagError is a flag's value that cannot be used: Flag names it
// ("--quiet-period"), as the user typed it.
type FlagError struct {
	Flag, Value string
	Err         error
}

func (e *FlagError) Error() string { return fmt.Sprintf("%s %s: %v", e.Flag, e.Value, e.Err) }

func (e *FlagError) Unwrap() error { return e.Err }

// Resolve applies o over c; run says whose defaults apply where neither
// a file nor a flag says: agentfs run's (automatic snapshots on, the
// limits RunMaxFiles and RunMaxBytes) or agentfs mount's (no automatic
// snapshots, no limits). Its errors are *FlagError.
func Resolve(c Config, o Overrides, run bool) (Settings, error) {
	s := Settings{
		AutoSnapshot: c.AutoSnapshotOr(run),
		MaxFiles:     c.MaxFiles,
		MaxBytes:     c.MaxBytes,
		QuietPeriod:  c.QuietPeriod,
		Keep:         c.Keep,
		LogSize:      c.LogSize,
		LogReads:     c.LogReads,
		Gitignore:    c.Gitignore,
		Ignore:       c.Ignore,
		Hide:         slices.Clone(c.Hide),
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
	for _, p := range o.Hide {
		if err := hide.Check(p); err != nil {
			return s, &FlagError{"--hide", p, err}
		}
		s.Hide = append(s.Hide, hide.Pattern{Pattern: p, From: hide.FromFlag})
	}
	if o.LogReads != nil {
		s.LogReads = *o.LogReads
	}
	if run && !c.MaxFilesSet {
		s.MaxFiles = RunMaxFiles
	}
	if run && !c.MaxBytesSet {
		s.MaxBytes = RunMaxBytes
	}
	var err error
	if o.MaxFiles != "" {
		if s.MaxFiles, err = ParseMaxFiles(o.MaxFiles); err != nil {
			return s, &FlagError{"--max-files", o.MaxFiles, err}
		}
	}
	if o.MaxBytes != "" {
		if s.MaxBytes, err = ParseMaxBytes(o.MaxBytes); err != nil {
			return s, &FlagError{"--max-bytes", o.MaxBytes, err}
		}
	}
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
