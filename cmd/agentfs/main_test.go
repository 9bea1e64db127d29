package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// frontAllowed are the packages outside the standard library the front
// may link: each costs its init at every start of every command.
var frontAllowed = map[string]bool{
	"github.com/agentfs/agentfs/cmd/agentfs": true,
	"github.com/agentfs/agentfs/cli":         true,
	"github.com/agentfs/agentfs/ctl":         true,
	"github.com/agentfs/agentfs/kernelinfo":  true,
	"github.com/spf13/pflag":                 true,
	"golang.org/x/sys/unix":                  true,
}

// frontRefused are packages of the standard library whose init or size
// the front does without.
var frontRefused = []string{"net/http", "regexp", "text/template", "html/template", "crypto/tls", "database/sql"}

// TestFrontImports: the front links only what the commands it runs
// need; a heavy package (minio-go, parquet-go, the MCP SDK, go-git,
// cilium/ebpf, badger, go-fuse, or workspace, daemon...) that creeps in
// fails here: it belongs to agentfs-core.
func TestFrontImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(p, "/")
		std := !strings.Contains(first, ".") && first != "github.com"
		switch {
		case std:
			for _, r := range frontRefused {
				if p == r {
					t.Errorf("the front links %s: it belongs to agentfs-core", p)
				}
			}
		case !frontAllowed[p]:
			t.Errorf("the front links %s: every package linked costs its init at every start; it belongs to agentfs-core (or, if light, to frontAllowed)", p)
		}
	}
}

// TestFrontHandsOver: what the front does not run itself it runs in
// agentfs-core beside it, with the same arguments and environment; a
// missing agentfs-core is an error that says where it was looked for.
func TestFrontHandsOver(t *testing.T) {
	dir := t.TempDir()
	front := filepath.Join(dir, "agentfs")
	if out, err := exec.Command("go", "build", "-o", front, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(argv0 string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(front, args...)
		cmd.Args[0] = argv0
		cmd.Env = append(os.Environ(), "AGENTFS_CORE=", "AGENTFS_PROBE=seen")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := run("agentfs", "gc", "--json")
	if want := "agentfs: running " + filepath.Join(dir, coreName) + ": no such file or directory"; code != 1 || !strings.Contains(out, want) {
		t.Errorf("without agentfs-core: exit %d, %q; want exit 1 and %q", code, out, want)
	}
	// A stand-in agentfs-core that says what it was given (a script
	// would not see argv[0]).
	src := filepath.Join(t.TempDir(), "core.go")
	core := `package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Printf("core: %s %s\n", strings.Join(os.Args, " "), os.Getenv("AGENTFS_PROBE"))
	os.Exit(7)
}
`
	if err := os.WriteFile(src, []byte(core), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, coreName), src).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  string
		code  int
	}{
		{"agentfs", []string{"gc", "--json"}, "core: agentfs gc --json seen\n", 7},
		{"agentfs", []string{"status", "-s", "20261128"}, "core: agentfs status -s 20261128 seen\n", 7},
		{"agentfs", []string{"help", "snapshot"}, "core: agentfs help snapshot seen\n", 7},
		{"mount.fuse.agentfs", []string{"--help"}, "core: mount.fuse.agentfs --help seen\n", 7},
		{"agentfs", []string{"status", "-C", dir}, "agentfs status: not inside an agentfs mount (use -C DIR)\n", 1},
	} {
		if out, code := run(tc.argv0, tc.args...); out != tc.want || code != tc.code {
			t.Errorf("%s %q: exit %d, %q; want exit %d, %q", tc.argv0, tc.args, code, out, tc.code, tc.want)
		}
	}
	if out, code := run("agentfs", "version"); code != 0 || !strings.HasPrefix(out, "agentfs ") || strings.Contains(out, "core:") {
		t.Errorf("agentfs version went to agentfs-core, or failed: exit %d, %q", code, out)
	}
}
