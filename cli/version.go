package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/pflag"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/kernelinfo"
)

// commit is the git commit built (-ldflags "-X
// github.com/agentfs/agentfs/cli.commit=..."); empty:
// the build's own record of it, if any.
var commit = ""

// versionOptions are the flags of agentfs version.
type versionOptions struct {
	json   bool
	stdout io.Writer
}

func (o *versionOptions) AddFlags(flags *pflag.FlagSet) {
	flags.BoolVar(&o.json, "json", false, "print JSON")
}

func init() {
	Register(&Command{
		Name:  "version",
		Usage: "[--json]",
		Help: `Version prints the agentfs version, the Go version it was built with and
the control protocol version it speaks on its first line, then the
commit it was built from, and what the running kernel offers agentfs:
FUSE passthrough, FUSE over io_uring, BPF, user namespaces, /dev/fuse
and fusermount3. Paste it whole into a bug report.

Example:
  agentfs version`,
		Setup: func(flags *pflag.FlagSet, out Streams) RunFunc {
			o := &versionOptions{stdout: out.Stdout}
			o.AddFlags(flags)
			return func(ctx context.Context, args []string) error { return runVersion(ctx, o, args) }
		},
	})
}

// versionInfo is agentfs version --json.
type versionInfo struct {
	Version  string                     `json:"version"`
	Commit   string                     `json:"commit"`
	Go       string                     `json:"go"`
	Platform string                     `json:"platform"`
	Protocol int                        `json:"control_protocol"`
	Kernel   []kernelinfo.KernelFeature `json:"kernel"`
}

func runVersion(ctx context.Context, o *versionOptions, args []string) error {
	if len(args) != 0 {
		return Usagef("version takes no arguments")
	}
	info := versionInfo{Version: Version, Commit: buildCommit(), Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, Protocol: int(ctl.Version), Kernel: kernelinfo.Features()}
	if o.json {
		return PrintJSON(o.stdout, info)
	}
	// The first line is what it always was: scripts and tests read it.
	fmt.Fprintf(o.stdout, "agentfs %s (%s, control protocol %d)\n", Version, runtime.Version(), ctl.Version)
	fmt.Fprintf(o.stdout, "%-17s %s\n", "commit:", info.Commit)
	fmt.Fprintf(o.stdout, "%-17s %s %s\n", "go:", info.Go, info.Platform)
	fmt.Fprintf(o.stdout, "%-17s %d\n", "control protocol:", info.Protocol)
	for _, f := range info.Kernel {
		if _, err := fmt.Fprintf(o.stdout, "%-17s %s\n", f.Name+":", f.Value); err != nil {
			return err
		}
	}
	return nil
}

// buildCommit is the commit agentfs was built from: as the Makefile set
// it, else as the go command recorded it, else "unknown".
func buildCommit() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += " (with uncommitted changes)"
			}
			return rev
		}
	}
	return "unknown"
}
