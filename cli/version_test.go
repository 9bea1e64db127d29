package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/ctl"
)

// TestVersionReport: the first line stays as it was (scripts read it);
// the lines after it say what a bug report needs.
func TestVersionReport(t *testing.T) {
	code, out, errOut := runArgs("version")
	if code != ExitOK {
		t.Fatalf("agentfs version: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if want := fmt.Sprintf("agentfs %s (%s, control protocol %d)", Version, runtime.Version(), ctl.Version); lines[0] != want {
		t.Errorf("first line = %q, want %q", lines[0], want)
	}
	for _, name := range []string{"commit:", "go:", "control protocol:", "kernel:", "passthrough:", "io_uring:", "bpf:", "user namespaces:", "fuse:"} {
		found := false
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, name) && strings.TrimSpace(strings.TrimPrefix(l, name)) != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("agentfs version has no %q line with a value:\n%s", name, out)
		}
	}
	code, out, errOut = runArgs("version", "--json")
	if code != ExitOK {
		t.Fatalf("agentfs version --json: exit %d: %s", code, errOut)
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("agentfs version --json: %v:\n%s", err, out)
	}
	if v.Version != Version || v.Protocol != int(ctl.Version) || len(v.Kernel) < 5 {
		t.Errorf("agentfs version --json = %+v, want version %s, protocol %d and the kernel's features", v, Version, ctl.Version)
	}
}
