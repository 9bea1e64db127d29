package integration

// The CLI's own start (issue 29): what every command pays before it
// does anything. Its time is measured by agentfs-bench --only cli-start
// (no timed assertions here); these tests keep out what made it slow.

import (
	"debug/elf"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
)

// heavyInits are packages whose init does system calls in every agentfs
// process (cilium/ebpf/rlimit creates a BPF map and reads
// /proc/self/mountinfo): agentfs must not link them.
var heavyInits = []string{"github.com/cilium/ebpf/rlimit"}

// TestCLIStartInits: agentfs version runs no heavy package init (as
// GODEBUG=inittrace=1 lists them), and the binary is linked statically
// (the dynamic loader took 0.8 ms of every command).
func TestCLIStartInits(t *testing.T) {
	cmd := exec.Command(harness.Bin(), "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	r := harness.RunCmd(t, cmd, []string{"version"})
	if r.Code != 0 {
		t.Fatalf("agentfs version: %s", r)
	}
	inits := map[string]bool{}
	for _, line := range strings.Split(r.Stderr, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "init" {
			inits[f[1]] = true
		}
	}
	if !inits["main"] || !inits["github.com/agentfs/agentfs/daemon"] {
		t.Fatalf("GODEBUG=inittrace=1 lists no init of main or daemon: the check would see nothing:\n%s", r.Stderr)
	}
	for _, p := range heavyInits {
		if inits[p] {
			t.Errorf("agentfs version runs the init of %s, which does system calls in every command", p)
		}
	}
	f, err := elf.Open(harness.Bin())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read only
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is linked dynamically (it has a program interpreter): build it with CGO_ENABLED=0, as make build does", harness.Bin())
		}
	}
}
