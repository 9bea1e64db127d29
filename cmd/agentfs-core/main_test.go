package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/cli"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestExitCodesAndHelp(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		code    int
		wantOut string // in stdout
		wantErr string // in stderr
	}{
		{nil, cli.ExitUsage, "", "Usage:"},
		{[]string{"--help"}, cli.ExitOK, "Commands:", ""},
		{[]string{"-h"}, cli.ExitOK, "Exit codes:", ""},
		{[]string{"help"}, cli.ExitOK, "Commands:", ""},
		{[]string{"help", "mount"}, cli.ExitOK, "--lower", ""},
		{[]string{"mount", "--help"}, cli.ExitOK, "Examples:", ""},
		{[]string{"unmount", "-h"}, cli.ExitOK, "Example:", ""},
		{[]string{"help", "bogus"}, cli.ExitUsage, "", `unknown command "bogus"`},
		{[]string{"bogus"}, cli.ExitUsage, "", `unknown command "bogus"`},
		{[]string{"--bogus"}, cli.ExitUsage, "", "unknown flag: --bogus"},
		{[]string{"mount", "--bogus", "x"}, cli.ExitUsage, "", "unknown flag: --bogus"},
		{[]string{"status", "-Z"}, cli.ExitUsage, "", "-Z"},
		{[]string{"mount", "--lower"}, cli.ExitUsage, "", "--lower"},
		{[]string{"mount", "--lower", "/x"}, cli.ExitUsage, "", "mount takes one MOUNTPOINT"},
		{[]string{"unmount"}, cli.ExitUsage, "", "unmount takes one MOUNTPOINT"},
		// Usage errors the library finds (daemon.UsageError) exit 2 too.
		{[]string{"mount", "--lower", "/", "--backstore", "floppy", "/mnt"}, cli.ExitUsage, "", `--backstore "floppy": must be hostfs or ramdisk: run 'agentfs help mount'`},
		{[]string{"run", "--quiet-period", "soon", "--", "true"}, cli.ExitUsage, "", "--quiet-period soon: not a duration"},
		// A stop longer than the daemon waits for it is refused.
		{[]string{"run", "--supervise", "--stop-grace", "2m", "--", "true"}, cli.ExitUsage, "", "--stop-grace 2m0s: give a duration from 0 to 1m30s"},
		{[]string{"status", "extra"}, cli.ExitUsage, "", "status takes no arguments"},
		{[]string{"version"}, cli.ExitOK, "agentfs " + cli.Version, ""},
		{[]string{"--version"}, cli.ExitOK, "agentfs " + cli.Version, ""},
		{[]string{"version", "x"}, cli.ExitUsage, "", "version takes no arguments"},
		{[]string{"snapshot"}, cli.ExitUsage, "", "which one? create, delete, list"},
		{[]string{"snapshot", "--help"}, cli.ExitOK, "snapshot create", ""},
		{[]string{"snapshot", "bogus"}, cli.ExitUsage, "", `unknown command "bogus"`},
		{[]string{"snapshot", "create", "--help"}, cli.ExitOK, "Usage: agentfs snapshot create", ""},
		{[]string{"help", "snapshot", "create"}, cli.ExitOK, "-m, --message LABEL", ""},
		{[]string{"snapshot", "create", "x"}, cli.ExitUsage, "", "snapshot create takes no arguments"},
		{[]string{"snapshot", "delete"}, cli.ExitUsage, "", "snapshot delete takes one snapshot ID"},
		{[]string{"branch", "create"}, cli.ExitUsage, "", "branch create takes one branch NAME"},
		{[]string{"branch", "switch", "a", "b"}, cli.ExitUsage, "", "branch switch takes one branch NAME"},
		{[]string{"tag", "x"}, cli.ExitUsage, "", "tag takes a NAME and a snapshot ID"},
		{[]string{"tag", "--delete"}, cli.ExitUsage, "", "tag --delete takes one tag NAME"},
		{[]string{"restore"}, cli.ExitUsage, "", "restore takes one snapshot ID"},
	} {
		code, out, errOut := runArgs(tc.args...)
		if code != tc.code {
			t.Errorf("agentfs %q: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errOut)
		}
		if !strings.Contains(out, tc.wantOut) {
			t.Errorf("agentfs %q: stdout %q, want it to contain %q", tc.args, out, tc.wantOut)
		}
		if !strings.Contains(errOut, tc.wantErr) {
			t.Errorf("agentfs %q: stderr %q, want it to contain %q", tc.args, errOut, tc.wantErr)
		}
	}
}

// Every command's help says what it does, shows an example and lists the
// exit codes.
func TestCommandHelp(t *testing.T) {
	for _, c := range cli.Commands() {
		name := c.Name
		code, out, _ := runArgs("help", name)
		if code != cli.ExitOK {
			t.Errorf("help %s: exit %d", name, code)
		}
		for _, want := range []string{"Usage: agentfs " + name, "Example", "Exit codes:", "2  usage error"} {
			if !strings.Contains(out, want) {
				t.Errorf("help %s does not contain %q:\n%s", name, want, out)
			}
		}
	}
}

func TestErrorExit(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runArgs("mount", "--lower", filepath.Join(dir, "nope"), dir)
	if code != cli.ExitError {
		t.Errorf("mount of a missing lower: exit %d, want %d", code, cli.ExitError)
	}
	if want := "agentfs mount: the lower directory " + filepath.Join(dir, "nope") + " does not exist"; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want it to contain %q", errOut, want)
	}
	code, _, errOut = runArgs("status", "-C", dir)
	if code != cli.ExitError || !strings.Contains(errOut, "not inside an agentfs mount (use -C DIR)") {
		t.Errorf("status outside a mount: exit %d, stderr %q; want exit 1, 'not inside an agentfs mount (use -C DIR)'", code, errOut)
	}
	for _, args := range [][]string{{"snapshot", "create"}, {"snapshot", "list"}, {"branch", "list"}, {"restore", "1a2b"}, {"tag"}} {
		code, _, errOut = runArgs(append(args, "-C", dir)...)
		if code != cli.ExitError || !strings.Contains(errOut, "not inside an agentfs mount (use -C DIR)") {
			t.Errorf("%s outside a mount: exit %d, stderr %q; want exit 1, 'not inside an agentfs mount (use -C DIR)'", args, code, errOut)
		}
	}
	code, _, errOut = runArgs("unmount", dir)
	if code != cli.ExitError || !strings.Contains(errOut, "is not mounted") {
		t.Errorf("unmount of a plain directory: exit %d, stderr %q; want exit 1, 'is not mounted'", code, errOut)
	}
}

// TestCommandTable: every command of the table (cli/commands.go), which
// agentfs --help lists, is registered in this program; Register itself
// refuses a top-level command that is not in the table.
func TestCommandTable(t *testing.T) {
	code, out, _ := runArgs("--help")
	if code != cli.ExitOK {
		t.Fatalf("agentfs --help: exit %d", code)
	}
	_, list, _ := strings.Cut(out, "Commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	n := 0
	for _, line := range strings.Split(list, "\n") {
		name := strings.Fields(line)[0]
		n++
		if c := cli.Lookup(name); c == nil {
			t.Errorf("agentfs --help lists %q, which agentfs-core does not register", name)
		}
	}
	if n < 25 {
		t.Errorf("agentfs --help lists %d commands:\n%s", n, out)
	}
}
