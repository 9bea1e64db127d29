package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
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
		{nil, exitUsage, "", "Usage:"},
		{[]string{"--help"}, exitOK, "Commands:", ""},
		{[]string{"-h"}, exitOK, "Exit codes:", ""},
		{[]string{"help"}, exitOK, "Commands:", ""},
		{[]string{"help", "mount"}, exitOK, "--lower", ""},
		{[]string{"mount", "--help"}, exitOK, "Examples:", ""},
		{[]string{"unmount", "-h"}, exitOK, "Example:", ""},
		{[]string{"help", "bogus"}, exitUsage, "", `unknown command "bogus"`},
		{[]string{"bogus"}, exitUsage, "", `unknown command "bogus"`},
		{[]string{"--bogus"}, exitUsage, "", "unknown flag: --bogus"},
		{[]string{"mount", "--bogus", "x"}, exitUsage, "", "unknown flag: --bogus"},
		{[]string{"status", "-Z"}, exitUsage, "", "-Z"},
		{[]string{"mount", "--lower"}, exitUsage, "", "--lower"},
		{[]string{"mount", "--lower", "/x"}, exitUsage, "", "mount takes one MOUNTPOINT"},
		{[]string{"unmount"}, exitUsage, "", "unmount takes one MOUNTPOINT"},
		// Usage errors the library finds (daemon.UsageError) exit 2 too.
		{[]string{"mount", "--lower", "/", "--backstore", "floppy", "/mnt"}, exitUsage, "", `--backstore "floppy": must be hostfs or ramdisk: run 'agentfs help mount'`},
		{[]string{"run", "--quiet-period", "soon", "--", "true"}, exitUsage, "", "--quiet-period soon: not a duration"},
		// A stop longer than the daemon waits for it is refused.
		{[]string{"run", "--supervise", "--stop-grace", "2m", "--", "true"}, exitUsage, "", "--stop-grace 2m0s: give a duration from 0 to 1m30s"},
		{[]string{"status", "extra"}, exitUsage, "", "status takes no arguments"},
		{[]string{"version"}, exitOK, "agentfs " + version, ""},
		{[]string{"--version"}, exitOK, "agentfs " + version, ""},
		{[]string{"version", "x"}, exitUsage, "", "version takes no arguments"},
		{[]string{"snapshot"}, exitUsage, "", "which one? create, delete, list"},
		{[]string{"snapshot", "--help"}, exitOK, "snapshot create", ""},
		{[]string{"snapshot", "bogus"}, exitUsage, "", `unknown command "bogus"`},
		{[]string{"snapshot", "create", "--help"}, exitOK, "Usage: agentfs snapshot create", ""},
		{[]string{"help", "snapshot", "create"}, exitOK, "-m, --message LABEL", ""},
		{[]string{"snapshot", "create", "x"}, exitUsage, "", "snapshot create takes no arguments"},
		{[]string{"snapshot", "delete"}, exitUsage, "", "snapshot delete takes one snapshot ID"},
		{[]string{"branch", "create"}, exitUsage, "", "branch create takes one branch NAME"},
		{[]string{"branch", "switch", "a", "b"}, exitUsage, "", "branch switch takes one branch NAME"},
		{[]string{"tag", "x"}, exitUsage, "", "tag takes a NAME and a snapshot ID"},
		{[]string{"tag", "--delete"}, exitUsage, "", "tag --delete takes one tag NAME"},
		{[]string{"restore"}, exitUsage, "", "restore takes one snapshot ID"},
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
	for name := range commands {
		code, out, _ := runArgs("help", name)
		if code != exitOK {
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
	if code != exitError {
		t.Errorf("mount of a missing lower: exit %d, want %d", code, exitError)
	}
	if want := "agentfs mount: the lower directory " + filepath.Join(dir, "nope") + " does not exist"; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want it to contain %q", errOut, want)
	}
	code, _, errOut = runArgs("status", "-C", dir)
	if code != exitError || !strings.Contains(errOut, "not inside an agentfs mount (use -C DIR)") {
		t.Errorf("status outside a mount: exit %d, stderr %q; want exit 1, 'not inside an agentfs mount (use -C DIR)'", code, errOut)
	}
	for _, args := range [][]string{{"snapshot", "create"}, {"snapshot", "list"}, {"branch", "list"}, {"restore", "1a2b"}, {"tag"}} {
		code, _, errOut = runArgs(append(args, "-C", dir)...)
		if code != exitError || !strings.Contains(errOut, "not inside an agentfs mount (use -C DIR)") {
			t.Errorf("%s outside a mount: exit %d, stderr %q; want exit 1, 'not inside an agentfs mount (use -C DIR)'", args, code, errOut)
		}
	}
	code, _, errOut = runArgs("unmount", dir)
	if code != exitError || !strings.Contains(errOut, "is not mounted") {
		t.Errorf("unmount of a plain directory: exit %d, stderr %q; want exit 1, 'is not mounted'", code, errOut)
	}
}
