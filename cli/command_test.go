package cli

import (
	"bytes"
	"strings"
	"testing"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Run(args, &o, &e)
	return code, o.String(), e.String()
}

// TestRunFront: the front runs what it has, and hands the rest to the
// full program having printed nothing.
func TestRunFront(t *testing.T) {
	saved := DialSession
	t.Cleanup(func() { DialSession = saved })
	DialSession = nil
	dir := t.TempDir()
	for _, tc := range []struct {
		args    []string
		handled bool
		code    int
		wantOut string
		wantErr string
	}{
		{[]string{"version"}, true, ExitOK, "agentfs " + Version, ""},
		{[]string{"--version"}, true, ExitOK, "agentfs " + Version, ""},
		{[]string{"--help"}, true, ExitOK, "mount      mount a copy-on-write view of a project", ""},
		{[]string{"help"}, true, ExitOK, "tournament", ""},
		{nil, true, ExitUsage, "", "Usage:"},
		{[]string{"help", "status"}, true, ExitOK, "Usage: agentfs status", ""},
		{[]string{"snapshot", "create", "--help"}, true, ExitOK, "-m, --message LABEL", ""},
		{[]string{"status", "-Z"}, true, ExitUsage, "", "unknown shorthand flag: 'Z'"},
		{[]string{"status", "-C", dir}, true, ExitError, "", "not inside an agentfs mount (use -C DIR)"},
		{[]string{"restore", "-C", dir, "1a2b"}, true, ExitError, "", "not inside an agentfs mount (use -C DIR)"},
		{[]string{"tag", "-C", dir}, true, ExitError, "", "not inside an agentfs mount (use -C DIR)"},
		{[]string{"tag", "--delete"}, true, ExitUsage, "", "tag --delete takes one tag NAME"},
		{[]string{"status", "-C", dir, "-s", "x"}, true, ExitUsage, "", "-C DIR and -s SESSION both name what to talk to"},
		// The full program's.
		{[]string{"status", "-s", "20261128"}, false, 0, "", ""},
		{[]string{"branch", "list", "--session", "20261128"}, false, 0, "", ""},
		{[]string{"mount", "--lower", dir, dir}, false, 0, "", ""},
		{[]string{"help", "mount"}, false, 0, "", ""},
		{[]string{"help", "snapshot"}, false, 0, "", ""},
		{[]string{"snapshot"}, false, 0, "", ""},
		{[]string{"snapshot", "prune"}, false, 0, "", ""},
		{[]string{"snapshot", "--help"}, false, 0, "", ""},
		{[]string{"bogus"}, false, 0, "", ""},
		{[]string{"--bogus"}, false, 0, "", ""},
		{[]string{"__complete", "sn"}, false, 0, "", ""},
	} {
		var o, e bytes.Buffer
		code, handled := RunFront(tc.args, &o, &e)
		if handled != tc.handled {
			t.Errorf("front %q: handled %v, want %v (stdout %q, stderr %q)", tc.args, handled, tc.handled, o.String(), e.String())
			continue
		}
		if !handled {
			if o.Len() != 0 || e.Len() != 0 {
				t.Errorf("front %q: handed over after printing %q, %q", tc.args, o.String(), e.String())
			}
			continue
		}
		if code != tc.code || !strings.Contains(o.String(), tc.wantOut) || !strings.Contains(e.String(), tc.wantErr) {
			t.Errorf("front %q: exit %d, stdout %q, stderr %q; want exit %d, %q in stdout, %q in stderr", tc.args, code, o.String(), e.String(), tc.code, tc.wantOut, tc.wantErr)
		}
	}
}

// A top-level command that is not in the table is a bug Register says.
func TestRegisterNeedsTable(t *testing.T) {
	for _, c := range []*Command{{Name: "nosuch"}, {Name: "status", Summary: "twice"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q, summary %q) did not panic", c.Name, c.Summary)
				}
			}()
			Register(c)
		}()
	}
}
