package testenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSkipsGoThroughTestenv: no test of the module calls Skip, Skipf or
// SkipNow itself; every skip goes through this package, which decides
// whether CI fails it.
func TestSkipsGoThroughTestenv(t *testing.T) {
	root := moduleRoot(t)
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "testdata", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || filepath.Dir(p) == self && !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if ok && (sel.Sel.Name == "Skip" || sel.Sel.Name == "Skipf" || sel.Sel.Name == "SkipNow") {
				if _, isPkg := sel.X.(*ast.Ident); isPkg && sel.X.(*ast.Ident).Name == "testenv" {
					return true
				}
				rel, _ := filepath.Rel(root, fset.Position(call.Pos()).Filename)
				t.Errorf("%s:%d: %s.%s: skip through testenv (Skip, SkipByDesign, ...), which fails it on CI unless expected",
					rel, fset.Position(call.Pos()).Line, exprString(sel.X), sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("read %d Go files under %s: not the module", files, root)
	}
}

func exprString(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "…"
}

// moduleRoot is the directory of the module's go.mod, found from the
// working directory (the package's) up.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// TestMustRun: without the switch nothing fails; with it, a skip fails
// unless its test (or a parent) and condition are listed.
func TestMustRun(t *testing.T) {
	list := []expectedSkip{{test: "TestA/sub", cond: UserXattrs, why: "no xattrs on CI"}}
	for _, c := range []struct {
		required bool
		name     string
		cond     Condition
		fail     bool
		why      string
	}{
		{false, "TestB", Root, false, ""},
		{false, "TestA/sub", UserXattrs, false, ""},
		{true, "TestB", Root, true, ""},
		{true, "TestA/sub", UserXattrs, false, "no xattrs on CI"},
		{true, "TestA/sub/deeper", UserXattrs, false, "no xattrs on CI"},
		{true, "TestA/subway", UserXattrs, true, ""},
		{true, "TestA", UserXattrs, true, ""},
		{true, "TestA/sub", Root, true, ""},
	} {
		fail, why := mustRun(list, c.required, c.name, c.cond)
		if fail != c.fail || why != c.why {
			t.Errorf("mustRun(required %v, %s, %s) = %v, %q; want %v, %q", c.required, c.name, c.cond, fail, why, c.fail, c.why)
		}
	}
}

// TestSeeds: fixed seeds first, then the replayed and fresh ones the
// variable asks for.
func TestSeeds(t *testing.T) {
	const env = "AGENTFS_TESTENV_TEST_SEEDS"
	t.Setenv(env, "")
	if got := Seeds(t, 3, env); len(got) != 3 || got[0] != 0 || got[2] != 2 {
		t.Errorf("Seeds(3) without %s = %v, want [0 1 2]", env, got)
	}
	t.Setenv(env, "77, fresh:2")
	got := Seeds(t, 2, env)
	if len(got) != 5 || got[2] != 77 || got[3] == got[4] || got[3] < 2 {
		t.Errorf("Seeds(2) with %s=%q = %v, want 0, 1, 77 and two fresh seeds", env, "77, fresh:2", got)
	}
	t.Setenv(env, "123")
	if got := Seed(t, env); got != 123 {
		t.Errorf("Seed with %s=123 = %d", env, got)
	}
}
