package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/config"
)

// The flags of the activity log and automatic snapshots (agentfs mount
// and run); package config resolves them with the configuration files.

// activityFlags are the flags; unset ones leave the configuration's
// value.
type activityFlags struct {
	autoSnapshot optBool
	quietPeriod  string
	keep         string
	logSize      string
	logReads     optBool
	trace        optBool
	hash         optBool
	hide         []string
	maxFiles     string
	maxBytes     string
}

func (o *activityFlags) AddFlags(flags *pflag.FlagSet) {
	flags.Var(&o.autoSnapshot, "auto-snapshot", "take automatic snapshots after changes settle and after git commits\n(default: off for mount, unless the configuration turns them on)")
	flags.Lookup("auto-snapshot").NoOptDefVal = "true"
	flags.StringVar(&o.quietPeriod, "quiet-period", "", "with --auto-snapshot: snapshot once no change came for `DUR` (default 2s)")
	flags.StringVar(&o.keep, "auto-snapshot-keep", "", "keep at most `N` automatic snapshots; older ones thin out first (default 100)")
	flags.StringVar(&o.logSize, "log-size", "", "bound the activity log (agentfs log) to `SIZE`, e.g. 4M (default 16M)")
	flags.Var(&o.logReads, "log-reads", "also log lookups, opens for reading and directory listings")
	flags.Lookup("log-reads").NoOptDefVal = "true"
	flags.Var(&o.trace, "trace", "trace every command the processes run (agentfs log --exec; as root, with eBPF)\n(default: on, unless the configuration turns it off; --trace=false turns it off)")
	flags.Lookup("trace").NoOptDefVal = "true"
	flags.Var(&o.hash, "hash", "compute each snapshot's content hashes and Merkle root in the background (agentfs snapshot show, verify)\n(default: on, unless the configuration turns it off; --hash=false turns it off)")
	flags.Lookup("hash").NoOptDefVal = "true"
	flags.StringArrayVar(&o.hide, "hide", nil, "hide the project paths that gitignore-style `PATTERN` matches (.env, *.pem, secrets/):\nthey do not exist in the view; repeat for more; added to [hide] of the configuration")
	flags.StringVar(&o.maxFiles, "max-files", "", "let the branch hold at most `N` files (directories, links... each counts; past it: EDQUOT), or off\n(default: 300000 for run, off for mount, unless the configuration says)")
	flags.StringVar(&o.maxBytes, "max-bytes", "", "let the branch's files hold at most `SIZE` bytes, e.g. 20G, or a share of the backstore's free space, e.g. 50%, or off\n(default: 50% for run, off for mount, unless the configuration says)")
}

// overrides are the flags as configuration overrides: unset ones
// leave the configuration's value.
func (o *activityFlags) overrides() config.Overrides {
	c := config.Overrides{QuietPeriod: o.quietPeriod, Keep: o.keep, LogSize: o.logSize, Hide: o.hide, MaxFiles: o.maxFiles, MaxBytes: o.maxBytes}
	if o.autoSnapshot.set {
		c.AutoSnapshot = &o.autoSnapshot.v
	}
	if o.logReads.set {
		c.LogReads = &o.logReads.v
	}
	if o.trace.set {
		c.Trace = &o.trace.v
	}
	if o.hash.set {
		c.Hash = &o.hash.v
	}
	return c
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
