package main

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
)

// mountFlag is the -C flag of the commands that talk to a mount's
// daemon, and the call they make with it.
type mountFlag struct {
	dir string
}

func (m *mountFlag) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&m.dir, "dir", "C", "", "a `DIR` inside the mount (default: the current directory)")
}

// call runs one control operation on the mount that holds m.dir (or
// the current directory): op with args (nil for none), its result
// decoded into result (nil to ignore it).
func (m *mountFlag) call(op ctl.Op, args, result any) error {
	c, err := dialMount(m.dir)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Do(op, args, result)
}

// listOptions are the flags of the commands that list things
// (snapshot list, branch list).
type listOptions struct {
	mountFlag
	json           bool
	stdout, stderr io.Writer
}

func (o *listOptions) AddFlags(fs *pflag.FlagSet) {
	o.mountFlag.AddFlags(fs)
	fs.BoolVar(&o.json, "json", false, "print JSON")
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// timeString shows t in local time to the second, or "-" when unknown.
func timeString(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// printable returns s as it can be shown in a table row: quoted (Go
// syntax) when it has control characters, "-" when empty.
func printable(s string) string {
	switch {
	case s == "":
		return "-"
	case strings.ContainsFunc(s, unicode.IsControl):
		return strconv.Quote(s)
	}
	return s
}
