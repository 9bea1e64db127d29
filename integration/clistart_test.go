package integration

// The CLI's own start (issue 29): what every command pays before it
// does anything. Its time is measured by agentfs-bench --only cli-start
// (no timed assertions here); these tests keep out what made it slow.

import (
	"debug/elf"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
)

// heavyInits are packages whose init does system calls in every agentfs
// process (cilium/ebpf/rlimit creates a BPF map and reads
// /proc/self/mountinfo): agentfs must not link them.
var heavyInits = []string{"github.com/cilium/ebpf/rlimit"}

// ownInitAllocs and ownInitBytes bound what the init of one package of
// this module may allocate at every start (the largest, daemon's
// tables, are 13 allocations and 2.9 KiB): a compiled regexp, a Parquet
// schema or a table built at start goes past it.
const (
	ownInitAllocs = 32
	ownInitBytes  = 8 << 10
)

// TestCLIStartInits: agentfs version runs no heavy package init (as
// GODEBUG=inittrace=1 lists them; this module's packages within
// ownInitAllocs and ownInitBytes), neither in the front (bin/agentfs,
// which runs it) nor in agentfs-core beside it (which runs every other
// command), and both are linked statically (the dynamic loader took
// 0.8 ms of every command). The front runs the init of no package of
// daemon, workspace or the store: cmd/agentfs's TestFrontImports keeps
// them out of its link.
func TestCLIStartInits(t *testing.T) {
	core := filepath.Join(filepath.Dir(harness.Bin()), "agentfs-core")
	for _, tc := range []struct {
		bin       string
		must, not []string
	}{
		{harness.Bin(), []string{"github.com/agentfs/agentfs/cli"}, []string{"github.com/agentfs/agentfs/daemon", "github.com/agentfs/agentfs/workspace"}},
		{core, []string{"main", "github.com/agentfs/agentfs/cli", "github.com/agentfs/agentfs/daemon"}, nil},
	} {
		inits := initsOf(t, tc.bin)
		for _, p := range tc.must {
			if !inits[p] {
				t.Fatalf("GODEBUG=inittrace=1 lists no init of %s in %s version: the check would see nothing", p, tc.bin)
			}
		}
		for _, p := range append(tc.not, heavyInits...) {
			if inits[p] {
				t.Errorf("%s version runs the init of %s at every start", tc.bin, p)
			}
		}
		f, err := elf.Open(tc.bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is linked dynamically (it has a program interpreter): build it with CGO_ENABLED=0, as make build does", tc.bin)
			}
		}
		_ = f.Close() // read only
	}
}

// initsOf runs bin version with GODEBUG=inittrace=1 and returns the
// packages whose init ran, checking this module's against ownInitAllocs
// and ownInitBytes.
func initsOf(t *testing.T, bin string) map[string]bool {
	t.Helper()
	cmd := exec.Command(bin, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	r := harness.RunCmd(t, cmd, []string{"version"})
	if r.Code != 0 {
		t.Fatalf("%s version: %s", bin, r)
	}
	inits := map[string]bool{}
	for _, line := range strings.Split(r.Stderr, "\n") {
		f := strings.Fields(line)
		if len(f) < 11 || f[0] != "init" {
			continue
		}
		inits[f[1]] = true
		// init PKG @T ms, C ms clock, B bytes, A allocs
		bytes, errB := strconv.Atoi(f[7])
		allocs, errA := strconv.Atoi(f[9])
		if errB != nil || errA != nil {
			t.Fatalf("GODEBUG=inittrace=1 line not understood: %q", line)
		}
		if strings.HasPrefix(f[1], "github.com/agentfs/agentfs/") && (allocs > ownInitAllocs || bytes > ownInitBytes) {
			t.Errorf("the init of %s allocates %d bytes in %d allocations at every start of %s (at most %d, %d): build what it makes at its first use (sync.OnceValue)",
				f[1], bytes, allocs, bin, ownInitBytes, ownInitAllocs)
		}
	}
	return inits
}

// heavyInitializers are the packages whose functions a package-level
// variable of agentfs must not call: what they build (a regexp, a
// template, a Parquet or JSON schema, a decoded document) would be built
// at every command's start. Build it at its first use (sync.OnceValue).
var heavyInitializers = map[string]bool{"regexp": true, "template": true, "parquet": true, "jsonschema": true, "json": true, "xml": true, "gob": true, "mcp": true, "minio": true, "ebpf": true}

// TestCLIStartNoHeavyVars: no package-level variable of the agentfs
// binary's packages is initialised by a call into heavyInitializers
// (the Parquet schema of record's blobs was, 17 allocations at every
// start). agentfs-bench and the tests are not the binary.
func TestCLIStartNoHeavyVars(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod in %s: not the module", root)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", "integration", "cmd/agentfs-bench", "internal/testenv", "internal/s3test":
				return filepath.SkipDir
			}
			if d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, v := range spec.(*ast.ValueSpec).Values {
					ast.Inspect(v, func(n ast.Node) bool {
						if _, ok := n.(*ast.FuncLit); ok {
							return false // runs when called, not at start
						}
						call, ok := n.(*ast.CallExpr)
						if !ok {
							return true
						}
						if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
							if pkg, ok := sel.X.(*ast.Ident); ok && heavyInitializers[pkg.Name] {
								t.Errorf("%s:%d: a package-level variable calls %s.%s at every agentfs start: build it at its first use (sync.OnceValue)",
									rel, fset.Position(call.Pos()).Line, pkg.Name, sel.Sel.Name)
							}
						}
						return true
					})
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("read %d Go files under %s: not the module", files, root)
	}
}
