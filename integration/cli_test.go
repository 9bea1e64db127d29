package integration

import (
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
)

// TestHelp: agentfs --help and agentfs help CMD explain each command
// with an example and the exit codes (issue 2).
func TestHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"mount", "unmount", "status", "xample", "xit code"}},
		{[]string{"help", "mount"}, []string{"--lower", "--store", "--backstore", "--ramdisk-size", "--foreground", "--debug", "xample", "xit code"}},
		{[]string{"help", "unmount"}, []string{"xample", "xit code"}},
		{[]string{"help", "status"}, []string{"-C", "--json", "xample", "xit code"}},
		{[]string{"mount", "--help"}, []string{"--lower", "xample"}},
	} {
		r := harness.Run(t, c.args...)
		if r.Code != 0 {
			t.Errorf("agentfs %s: exit %d, want 0", strings.Join(c.args, " "), r.Code)
		}
		for _, w := range c.want {
			if !strings.Contains(r.Stdout, w) {
				t.Errorf("agentfs %s does not mention %q on stdout:\n%s", strings.Join(c.args, " "), w, r)
			}
		}
	}
}
