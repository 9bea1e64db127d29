package autosnap

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/internal/testenv"
)

// readDir is a ReadTreeFunc over a plain directory (one branch).
func readDir(root string) ReadTreeFunc {
	return func(_, p string) ([]byte, error) { return os.ReadFile(filepath.Join(root, filepath.FromSlash(p))) }
}

// ignoreFixture is a tree with git's ignore files: nested .gitignore
// files, .git/info/exclude and a global excludes file named by a
// GIT_CONFIG_GLOBAL of its own; env is the environment git and Ignore
// are run with.
type ignoreFixture struct {
	root string
	env  map[string]string
}

func newIgnoreFixture(t *testing.T) *ignoreFixture {
	t.Helper()
	testenv.RequireProgram(t, "git") // the rules are checked against git check-ignore
	base := t.TempDir()
	f := &ignoreFixture{root: filepath.Join(base, "proj"), env: map[string]string{
		"HOME":                filepath.Join(base, "home"),
		"XDG_CONFIG_HOME":     filepath.Join(base, "home", ".config"),
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_CONFIG_GLOBAL":   filepath.Join(base, "home", "gitconfig"),
	}}
	for _, d := range []string{f.root, f.env["XDG_CONFIG_HOME"]} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(f.env["GIT_CONFIG_GLOBAL"], []byte("[core]\n\texcludesFile = ~/global-ignore\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.git(t, "init", "-q")
	return f
}

func (f *ignoreFixture) getenv(k string) string { return f.env[k] }

func (f *ignoreFixture) write(t *testing.T, p, content string) {
	t.Helper()
	full := filepath.Join(f.root, filepath.FromSlash(p))
	if strings.HasPrefix(p, "~/") {
		full = filepath.Join(f.env["HOME"], p[2:])
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *ignoreFixture) git(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = f.root
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C"}
	for k, v := range f.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// paths lists every file and directory of the tree but .git, with
// whether each is a directory.
func (f *ignoreFixture) paths(t *testing.T) map[string]bool {
	t.Helper()
	all := map[string]bool{}
	err := filepath.WalkDir(f.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(f.root, p)
		switch rel {
		case ".":
			return nil
		case ".git":
			return filepath.SkipDir
		}
		all[filepath.ToSlash(rel)] = d.IsDir()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// compare asks git check-ignore and the Ignore about every path of the
// tree and reports where they differ.
func (f *ignoreFixture) compare(t *testing.T, ig *Ignore, what string) {
	t.Helper()
	all := f.paths(t)
	var stdin strings.Builder
	names := slices.Sorted(func(yield func(string) bool) {
		for p := range all {
			if !yield(p) {
				return
			}
		}
	})
	for _, p := range names {
		stdin.WriteString(p + "\x00")
	}
	cmd := []string{"check-ignore", "--no-index", "--stdin", "-z"}
	gitSays := map[string]bool{}
	out := f.gitStdin(t, stdin.String(), cmd...)
	for p := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if p != "" {
			gitSays[p] = true
		}
	}
	diffs := 0
	for _, p := range names {
		if got := ig.Ignored("main", p, all[p]); got != gitSays[p] {
			diffs++
			if diffs <= 20 {
				t.Errorf("%s: Ignored(%q, dir=%v) = %v, git check-ignore says %v", what, p, all[p], got, gitSays[p])
			}
		}
	}
	if diffs > 0 {
		t.Logf("%s: %d of %d paths differ; the ignore files:\n%s", what, diffs, len(names), f.ignoreFiles(t))
	}
}

func (f *ignoreFixture) gitStdin(t *testing.T, stdin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = f.root
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C"}
	for k, v := range f.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && cmd.ProcessState.ExitCode() != 1 { // 1: none ignored
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// ignoreFiles shows the ignore files of the tree, for a failure.
func (f *ignoreFixture) ignoreFiles(t *testing.T) string {
	var b strings.Builder
	for p := range f.paths(t) {
		if path.Base(p) == ".gitignore" {
			c, _ := os.ReadFile(filepath.Join(f.root, p))
			fmt.Fprintf(&b, "--- %s\n%s", p, c)
		}
	}
	for _, p := range []string{filepath.Join(f.root, ".git/info/exclude"), filepath.Join(f.env["HOME"], "global-ignore")} {
		c, _ := os.ReadFile(p)
		fmt.Fprintf(&b, "--- %s\n%s", p, c)
	}
	return b.String()
}

func (f *ignoreFixture) ignore(t *testing.T, patterns ...string) *Ignore {
	t.Helper()
	ig, err := NewIgnore(IgnoreOptions{Git: true, Patterns: patterns, Read: readDir(f.root), Env: f.getenv})
	if err != nil {
		t.Fatal(err)
	}
	return ig
}

// TestIgnoreAgreesWithGit checks a hand-made tree with every kind of
// rule against git check-ignore.
func TestIgnoreAgreesWithGit(t *testing.T) {
	f := newIgnoreFixture(t)
	f.write(t, ".gitignore", "# build output\n*.o\n!keep.o\n/bin\nbuild/\nlogs/**\n!logs/keep.txt\n**/cache\ndocs/**/*.tmp\n\\#notes\n")
	f.write(t, "src/.gitignore", "gen/\n!main.o\n*.txt\n!/readme.txt\n")
	f.write(t, "src/deep/.gitignore", "!*.txt\nsecret\n")
	f.write(t, ".git/info/exclude", "*.swp\nlocal/\n")
	f.write(t, "~/global-ignore", ".DS_Store\n*.bak\n")
	for _, p := range []string{
		"a.o", "keep.o", "main.go", "bin/tool", "src/bin/tool", "build/out", "src/build/x.go", "build.go",
		"logs/today.txt", "logs/keep.txt", "a/b/cache/x", "cache", "docs/a/b/c.tmp", "docs/c.tmp", "other/c.tmp",
		"#notes", "src/gen/x.go", "src/main.o", "src/other.o", "src/a.txt", "src/readme.txt", "src/x/readme.txt",
		"src/deep/b.txt", "src/deep/secret", "src/deep/more/secret", "x.swp", "local/y", "src/local/z",
		".DS_Store", "src/.DS_Store", "old.bak",
	} {
		f.write(t, p, "x")
	}
	f.compare(t, f.ignore(t), "hand-made tree")
	// Without git's files, only the configuration's patterns count.
	ig, err := NewIgnore(IgnoreOptions{Patterns: []string{"*.go"}, Read: readDir(f.root), Env: f.getenv})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"main.go": true, "a.o": false, "x.swp": false, "old.bak": false} {
		if got := ig.Ignored("main", p, false); got != want {
			t.Errorf("without git: Ignored(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestIgnoreAgreesWithGitGenerated checks generated trees with random
// rules at every depth against git check-ignore.
func TestIgnoreAgreesWithGitGenerated(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 8
	}
	names := []string{"a", "b", "build", "src", "logs", "gen", "x.o", "y.txt", "z.tmp", "keep.o", "cache"}
	patterns := []string{
		"*.o", "!*.o", "!keep.o", "keep.o", "build/", "/build", "build", "!build/", "logs/**", "!logs/y.txt",
		"**/cache", "cache/", "*.txt", "!*.txt", "/*.tmp", "a/*.o", "!a/x.o", "src/**/gen", "gen/", "!gen/",
		"a/b/", "b/**/*.txt", "?.o", "[xy].txt", "[a-c]", "*", "!a", "!src/", "**/b/*.tmp", "a/**",
		"[!x]*.o", "src/*/gen/", "!**/keep.o", "/**/gen", "**/logs/", "# a comment", "", "!/*.tmp",
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 30))
			f := newIgnoreFixture(t)
			var dirs []string
			var grow func(dir string, depth int)
			grow = func(dir string, depth int) {
				dirs = append(dirs, dir)
				for range 2 + rng.IntN(4) {
					name := path.Join(dir, names[rng.IntN(len(names))])
					st, err := os.Stat(filepath.Join(f.root, name))
					switch {
					case depth < 3 && rng.IntN(2) == 0 && !strings.Contains(path.Base(name), ".") && (err != nil || st.IsDir()):
						if err := os.MkdirAll(filepath.Join(f.root, name), 0o755); err != nil {
							t.Fatal(err)
						}
						grow(name, depth+1)
					case err != nil:
						f.write(t, name, "x")
					}
				}
			}
			grow("", 0)
			rules := func() string {
				var b strings.Builder
				for range 1 + rng.IntN(4) {
					b.WriteString(patterns[rng.IntN(len(patterns))] + "\n")
				}
				return b.String()
			}
			for _, d := range dirs {
				if rng.IntN(3) == 0 {
					if st, err := os.Stat(filepath.Join(f.root, d)); err == nil && st.IsDir() {
						f.write(t, path.Join(d, ".gitignore"), rules())
					}
				}
			}
			if rng.IntN(2) == 0 {
				f.write(t, ".git/info/exclude", rules())
			}
			if rng.IntN(2) == 0 {
				f.write(t, "~/global-ignore", rules())
			}
			f.compare(t, f.ignore(t), fmt.Sprintf("seed %d", seed))
		})
	}
}

// TestIgnoreReadsChangedFiles: a changed .gitignore is read again once
// Changed says so.
func TestIgnoreReadsChangedFiles(t *testing.T) {
	f := newIgnoreFixture(t)
	f.write(t, "src/.gitignore", "*.o\n")
	ig := f.ignore(t)
	if !ig.Ignored("main", "src/a.o", false) {
		t.Fatalf("src/a.o not ignored under src/.gitignore's *.o")
	}
	f.write(t, "src/.gitignore", "*.txt\n")
	ig.Changed("main", "src/.gitignore")
	if ig.Ignored("main", "src/a.o", false) || !ig.Ignored("main", "src/a.txt", false) {
		t.Errorf("after the change: a.o ignored %v (want false), a.txt %v (want true)",
			ig.Ignored("main", "src/a.o", false), ig.Ignored("main", "src/a.txt", false))
	}
	f.write(t, ".git/info/exclude", "*.go\n")
	ig.Changed("main", ".git/info/exclude")
	if !ig.Ignored("main", "main.go", false) {
		t.Errorf("main.go not ignored after .git/info/exclude said *.go")
	}
}

func TestCheckPattern(t *testing.T) {
	for _, p := range []string{"*.o", "build/", "!keep", "a/**/b", `\#x`} {
		if err := CheckPattern(p); err != nil {
			t.Errorf("CheckPattern(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"", "  ", "# comment", "[abc", `x\`} {
		if err := CheckPattern(p); err == nil {
			t.Errorf("CheckPattern(%q) = nil, want an error", p)
		}
	}
}
