package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
)

// statusOptions are the flags of agentfs status.
type statusOptions struct {
	MountFlag
	json   bool
	stdout io.Writer
}

func (o *statusOptions) AddFlags(flags *pflag.FlagSet) {
	o.MountFlag.AddFlags(flags)
	flags.BoolVar(&o.json, "json", false, "print JSON")
}

func init() {
	Register(&Command{
		Name:  "status",
		Usage: "[-C DIR | -s SESSION] [--json]",
		Help: `Status describes the mount that holds the current directory (or DIR):
its lower directory, the branch it shows, its store (kept, or private and deleted at
unmount), the backstore and whether it can clone files (reflink), how
file I/O is served (FUSE passthrough, or the page cache), how much the
changed files take, the hide patterns (the project paths that do not
exist in the view), and the daemon's pid.

Examples:
  cd /mnt/ws && agentfs status
  agentfs status -C /mnt/ws --json`,
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &statusOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runStatus(ctx, o, args) }
		},
	})
}

func runStatus(ctx context.Context, o *statusOptions, args []string) error {
	if len(args) != 0 {
		return Usagef("status takes no arguments")
	}
	st, err := call[ctl.Status](&o.MountFlag, ctl.OpStatus, nil)
	if err != nil {
		return err
	}
	if o.json {
		enc := json.NewEncoder(o.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	store := st.Store + " (kept: mount it again with --store)"
	switch {
	case st.Ephemeral:
		store = st.Store + " (private: deleted at unmount)"
	case st.Session:
		store = st.Store + " (an agentfs run session's: agentfs discard -s deletes it)"
	}
	back := st.Backstore + " (" + st.BackingMode + ", " + st.BackingRoot + ")"
	if st.SizeLimit > 0 {
		back += ", limit " + HumanBytes(st.SizeLimit)
	}
	fmt.Fprintf(w, "mountpoint:\t%s\n", st.Mountpoint)
	fmt.Fprintf(w, "lower:\t%s\n", st.Lower)
	fmt.Fprintf(w, "branch:\t%s (unbound processes)\n", Printable(st.Branch))
	for _, b := range st.Bindings {
		fmt.Fprintf(w, "bound:\tprocess %d %s sees branch %s\n", b.Pid, ShortCommand(b.Command), Printable(b.Branch))
	}
	fmt.Fprintf(w, "store:\t%s\n", store)
	fmt.Fprintf(w, "backstore:\t%s\n", back)
	fmt.Fprintf(w, "reflink:\t%s\n", yesNo(st.Reflink))
	fmt.Fprintf(w, "passthrough:\t%s\n", onOff(st.Passthrough))
	fmt.Fprintf(w, "io mode:\t%s\n", st.IOMode)
	if !st.Offline {
		fmt.Fprintf(w, "requests:\t%s\n", st.Transport)
	}
	if !st.Offline {
		fmt.Fprintf(w, "daemon reads:\t%d (%d spliced, %d from the disk)\n", st.Reads, st.ReadsSpliced, st.ReadsFromDisk)
	}
	if len(st.Hide) == 0 {
		fmt.Fprintf(w, "hide:\tnothing (no hide patterns)\n")
	}
	for i, p := range st.Hide {
		label := ""
		if i == 0 {
			label = "hide:"
		}
		fmt.Fprintf(w, "%s\t%s (%s)\n", label, Printable(p.Pattern), hideSource(p.From))
	}
	fmt.Fprintf(w, "usage:\t%d objects, %s; %s free in the backstore\n", st.Objects, HumanBytes(st.Bytes), HumanBytes(st.FsFree))
	fmt.Fprintf(w, "branch holds:\t%s files of %s, %s of %s\n", strconv.FormatInt(st.BranchFiles, 10), limitOf(st.MaxFiles, strconv.FormatInt(st.MaxFiles, 10)),
		HumanBytes(st.BranchBytes), limitOf(st.MaxBytes, HumanBytes(st.MaxBytes)))
	if !st.Offline {
		fmt.Fprintf(w, "open for writing:\t%d files (a snapshot stores its own copy of these)\n", st.OpenForWriting)
	}
	switch {
	case strings.HasPrefix(st.Trace, "on"):
		fmt.Fprintf(w, "commands:\ttraced (agentfs log --exec), %s\n", Printable(strings.TrimPrefix(st.Trace, "on: ")))
	case st.Trace != "":
		fmt.Fprintf(w, "commands:\tNOT traced: %s\n", Printable(strings.TrimPrefix(st.Trace, "off: ")))
	}
	if st.Supervised {
		fmt.Fprintf(w, "supervised:\tyes: a restore of branch %s stops the session's command and starts it again\n", Printable(st.Branch))
	}
	if st.Offline {
		fmt.Fprintf(w, "daemon:\tnone (the session has ended; its store was opened by this command)\n")
	} else {
		fmt.Fprintf(w, "daemon:\tpid %d, uid %d, agentfs %s\n", st.Pid, st.Owner, st.Version)
	}
	return w.Flush()
}

// hideSource says where a hide pattern came from, in words.
func hideSource(from string) string {
	switch from {
	case "user":
		return "your configuration"
	case "project":
		return "the project's .agentfs.conf"
	case "flag":
		return "--hide"
	}
	return from
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// limitOf writes a limit of status: s, or "no limit" for 0.
func limitOf(n int64, s string) string {
	if n == 0 {
		return "no limit"
	}
	return s + " allowed"
}
