package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/hide"
)

// hideFiles is a project with secrets among ordinary files.
var hideFiles = map[string]string{
	".env":             "TOKEN=lower-secret",
	".env.example":     "TOKEN=",
	"main.go":          "package main",
	"app/.env":         "APP=lower-secret",
	"app/main.go":      "package app",
	"certs/server.pem": "lower-secret pem",
	"certs/README":     "certificates",
	"secrets/token":    "lower-secret token",
	"secrets/sub/key":  "lower-secret key",
	"config/prod.key":  "lower-secret prod key",
	"config/dev.conf":  "dev",
}

// newHideEnv builds a view over files whose paths patterns hide (as
// the user's configuration would), with the project scanned for its
// hidden inodes as a store open does; prepare runs on the lower tree
// before the scan.
func newHideEnv(t testing.TB, files map[string]string, prepare func(lower string), patterns ...string) *env {
	t.Helper()
	e := newEnv(t, files)
	if prepare != nil {
		prepare(e.lower)
	}
	var ps []hide.Pattern
	for _, p := range patterns {
		ps = append(ps, hide.Pattern{Pattern: p, From: hide.FromUser})
	}
	rules, err := hide.New(ps)
	if err != nil {
		t.Fatal(err)
	}
	e.hide = rules
	if e.hidden, err = hide.Scan(rules, e.lower); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	return e
}

var defaultHide = []string{".env", "*.pem", "secrets/", "/config/prod.key"}

// checkHidden checks that every path of ps is absent from e's view:
// ENOENT on lookup, not listed in its directory.
func checkHidden(t *testing.T, e *env, ps ...string) {
	t.Helper()
	for _, p := range ps {
		if _, err := e.walk(p); !errors.Is(err, unix.ENOENT) {
			t.Errorf("lookup %s: %v, want ENOENT", p, err)
		}
		dir, name := filepath.Split(p)
		dir = strings.TrimSuffix(dir, "/")
		if _, err := e.walk(dir); err != nil {
			continue
		}
		for _, n := range e.names(dir) {
			if n == name {
				t.Errorf("readdir %q lists hidden %s", dir, name)
			}
		}
	}
}

// TestHideLookupAndReaddir: hidden project paths do not exist in the
// view; the others show as ever.
func TestHideLookupAndReaddir(t *testing.T) {
	e := newHideEnv(t, hideFiles, nil, defaultHide...)
	checkHidden(t, e, ".env", "app/.env", "certs/server.pem", "secrets", "secrets/token", "secrets/sub/key", "config/prod.key")
	eq(t, "root", e.names(""), []string{".env.example", "app", "certs", "config", "main.go"})
	eq(t, "app", e.names("app"), []string{"main.go"})
	eq(t, "certs", e.names("certs"), []string{"README"})
	eq(t, "config", e.names("config"), []string{"dev.conf"})
	eq(t, "main.go", e.read("main.go"), "package main")
	eq(t, ".env.example", e.read(".env.example"), "TOKEN=")
	// st_nlink of the root counts the shown subdirectories only: 2 +
	// app, certs, config (not secrets).
	st, err := e.view.Getattr(e.view.Root())
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "root st_nlink", st.Nlink, uint64(5))
	// The same once the root is an upper directory (a file made in it).
	_, f, _, err := e.view.Create(e.view.Root(), "new.txt", unix.O_RDWR, 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	release(t, f)
	if st, err = e.view.Getattr(e.view.Root()); err != nil {
		t.Fatal(err)
	}
	eq(t, "upper root st_nlink", st.Nlink, uint64(5))

	// The view opens no hidden lower file, whatever asks: not even to
	// close it again (inotify would hear the open).
	ino, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ino)
	for _, p := range []string{".env", "secrets", "secrets/token", "certs/server.pem"} {
		if _, err := unix.InotifyAddWatch(ino, filepath.Join(e.lower, p), unix.IN_OPEN); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{".env", "secrets/token", "certs/server.pem"} {
		if f, err := e.view.openLower(p, unix.O_RDONLY); !errors.Is(err, unix.ENOENT) {
			if f != nil {
				f.Close()
			}
			t.Errorf("openLower(%s) = %v, want ENOENT", p, err)
		}
	}
	if f, err := e.view.openLower("secrets", unix.O_RDONLY|unix.O_DIRECTORY); !errors.Is(err, unix.ENOENT) {
		if f != nil {
			f.Close()
		}
		t.Errorf("openLower(secrets/) = %v, want ENOENT", err)
	}
	if n, _ := unix.Read(ino, make([]byte, 4096)); n > 0 {
		t.Errorf("a hidden lower file was opened (%d bytes of inotify events)", n)
	}
}

// TestHideWithoutRules: the same project without rules shows all
// (what the test above checks is the rules' doing).
func TestHideWithoutRules(t *testing.T) {
	e := newHideEnv(t, hideFiles, nil)
	eq(t, ".env", e.read(".env"), "TOKEN=lower-secret")
	eq(t, "secrets/token", e.read("secrets/token"), "lower-secret token")
}

// TestHideHardLinks: a lower file linked to a hidden one is hidden
// under its visible name too, whether the link was there at the scan
// or made after it; a hidden file seen by a lookup is recorded too.
func TestHideHardLinks(t *testing.T) {
	e := newHideEnv(t, hideFiles, func(lower string) {
		if err := os.Link(filepath.Join(lower, ".env"), filepath.Join(lower, "leak.txt")); err != nil {
			t.Fatal(err)
		}
	}, defaultHide...)
	checkHidden(t, e, "leak.txt")
	// A link made after the scan, from outside, to a hidden file.
	if err := os.Link(filepath.Join(e.lower, "secrets/token"), filepath.Join(e.lower, "app/later.txt")); err != nil {
		t.Fatal(err)
	}
	checkHidden(t, e, "app/later.txt")
	// A hidden file made after the scan: recorded once looked up.
	if err := os.WriteFile(filepath.Join(e.lower, "new.pem"), []byte("lower-secret new"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkHidden(t, e, "new.pem")
	if err := os.Link(filepath.Join(e.lower, "new.pem"), filepath.Join(e.lower, "new.txt")); err != nil {
		t.Fatal(err)
	}
	checkHidden(t, e, "new.txt")
	// An ordinary hard link stays visible.
	if err := os.Link(filepath.Join(e.lower, "main.go"), filepath.Join(e.lower, "main2.go")); err != nil {
		t.Fatal(err)
	}
	eq(t, "main2.go", e.read("main2.go"), "package main")
}

// TestHideOwnFile: a program may make its own file at a hidden path;
// it is an ordinary new file, and removing it leaves no whiteout.
func TestHideOwnFile(t *testing.T) {
	e := newHideEnv(t, hideFiles, nil, defaultHide...)
	_, f, _, err := e.view.Create(e.view.Root(), ".env", unix.O_RDWR|unix.O_EXCL, 0o644, Caller{})
	if err != nil {
		t.Fatalf("create .env over a hidden one: %v", err)
	}
	writeAt(t, f, []byte("mine"), 0)
	release(t, f)
	eq(t, ".env", e.read(".env"), "mine")
	if _, _, err := e.view.Mkdir(e.view.Root(), "secrets", 0o755, Caller{}); err != nil {
		t.Fatalf("mkdir secrets over a hidden one: %v", err)
	}
	eq(t, "own secrets/", e.names("secrets"), []string(nil))
	checkHidden(t, e, "secrets/token")
	if err := e.view.Unlink(e.view.Root(), ".env"); err != nil {
		t.Fatal(err)
	}
	for _, p := range e.entryPaths() {
		if p == ".env" {
			t.Errorf("removing its own .env left an entry (a whiteout) at .env")
		}
	}
	eq(t, "lower .env", e.lowerContent(".env"), "TOKEN=lower-secret")
}

// TestHideRenamedDir: a directory renamed in the view keeps its lower
// path, and its hidden files stay hidden under the new name; rmdir of a
// directory whose only lower names are hidden works (it is empty in
// the view).
func TestHideRenamedDir(t *testing.T) {
	e := newHideEnv(t, hideFiles, nil, defaultHide...)
	if err := e.view.Rename(e.view.Root(), "config", e.view.Root(), "cfg", 0); err != nil {
		t.Fatal(err)
	}
	checkHidden(t, e, "cfg/prod.key")
	eq(t, "cfg", e.names("cfg"), []string{"dev.conf"})
	if err := e.view.Rename(e.must("app"), "main.go", e.view.Root(), "app.go", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rmdir(e.view.Root(), "app"); err != nil {
		t.Errorf("rmdir app (only hidden .env left in the project): %v", err)
	}
}

// TestHideSnapshotsAndBranches: snapshot and branch views hide as the
// live one does.
func TestHideSnapshotsAndBranches(t *testing.T) {
	e := newHideEnv(t, hideFiles, nil, defaultHide...)
	e.write("main.go", "changed")
	snap, err := e.view.Snapshot("s1", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	sv := e.snapView(snap)
	checkHidden(t, sv, ".env", "secrets", "certs/server.pem")
	eq(t, "snapshot main.go", sv.read("main.go"), "changed")
	l, err := e.meta.CreateLayer("b", snap)
	if err != nil {
		t.Fatal(err)
	}
	checkHidden(t, e.branchView(l), ".env", "app/.env", "config/prod.key")
	checkHidden(t, e.lowerView(), ".env", "secrets/sub/key")
}

// TestHideDiffAndExport: Diff marks the view's own files at hidden
// paths; Export writes no hidden project file.
func TestHideDiffAndExport(t *testing.T) {
	e := newHideEnv(t, hideFiles, nil, defaultHide...)
	_, f, _, err := e.view.Create(e.view.Root(), "own.pem", unix.O_RDWR, 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	release(t, f)
	e.write("main.go", "changed")
	var marks []string
	for _, c := range diffOf(t, e.lowerView().view, e.view) {
		if c.Hidden {
			marks = append(marks, "hidden "+c.Path)
		} else {
			marks = append(marks, c.Path)
		}
	}
	eq(t, "diff", marks, []string{"main.go", "hidden own.pem"})

	to := filepath.Join(t.TempDir(), "out")
	if err := Export(e.view, to); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := filepath.Walk(to, func(p string, _ os.FileInfo, err error) error {
		if err == nil && p != to {
			rel, _ := filepath.Rel(to, p)
			got = append(got, rel)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eq(t, "exported", got, []string{".env.example", "app", "app/main.go", "certs", "certs/README", "config", "config/dev.conf", "main.go", "own.pem"})
}

// TestHideApply: apply never writes over or removes a hidden project
// file, even forced; a file of the view's own at a hidden path is
// applied only when forced.
func TestHideApply(t *testing.T) {
	e := newHideEnv(t, hideFiles, nil, defaultHide...)
	create := func(dir *Node, name, data string) {
		t.Helper()
		_, f, _, err := e.view.Create(dir, name, unix.O_RDWR, 0o644, Caller{})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		writeAt(t, f, []byte(data), 0)
		release(t, f)
	}
	create(e.view.Root(), ".env", "agent's own")      // over a hidden project file
	create(e.must("certs"), "new.pem", "agent's pem") // a hidden path, nothing in the project
	e.write("main.go", "changed")
	// Remove app whole: app/.env is hidden in it.
	if err := e.view.Unlink(e.must("app"), "main.go"); err != nil {
		t.Fatal(err)
	}
	if err := e.view.Rmdir(e.view.Root(), "app"); err != nil {
		t.Fatal(err)
	}
	before := map[string]string{}
	for _, p := range []string{".env", "app/.env", "secrets/token", "certs/server.pem", "config/prod.key"} {
		before[p] = e.lowerContent(p)
	}

	res := e.apply(ApplyOptions{})
	eq(t, "applied", itemPaths(res.Applied), lines("deleted app/main.go", "modified main.go"))
	eq(t, "conflicts", itemPaths(res.Conflicts), lines("created .env", "deleted app", "created certs/new.pem"))
	for _, c := range res.Conflicts {
		if !strings.Contains(c.Reason, "hide") {
			t.Errorf("conflict %s: reason %q does not name the hide pattern", c.Path, c.Reason)
		}
	}
	res = e.apply(ApplyOptions{Force: true})
	eq(t, "applied with force", itemPaths(res.Applied), lines("created certs/new.pem"))
	eq(t, "conflicts with force", itemPaths(res.Conflicts), lines("created .env", "deleted app"))
	for p, want := range before {
		eq(t, "lower "+p, e.lowerContent(p), want)
	}
	eq(t, "lower certs/new.pem", e.lowerContent("certs/new.pem"), "agent's pem")
	eq(t, "lower main.go", e.lowerContent("main.go"), "changed")
	if _, err := os.Lstat(filepath.Join(e.lower, "app/main.go")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lower app/main.go: %v, want it removed", err)
	}
}

// BenchmarkLookupHidden: listing a directory of 1,000 project files and
// looking each up, without hide patterns and with four (the cost of
// judging each lower name).
func BenchmarkLookupHidden(b *testing.B) {
	files := map[string]string{}
	for i := range 1000 {
		files[fmt.Sprintf("src/pkg/file%04d.go", i)] = "package pkg"
	}
	for _, c := range []struct {
		name     string
		patterns []string
	}{{"none", nil}, {"patterns", defaultHide}} {
		b.Run(c.name, func(b *testing.B) {
			e := newHideEnv(b, files, nil, c.patterns...)
			dir := e.must("src/pkg")
			b.ResetTimer()
			for b.Loop() {
				ents, err := e.view.ReadDir(dir)
				if err != nil {
					b.Fatal(err)
				}
				for _, de := range ents[2:] {
					n, _, err := e.view.Lookup(dir, de.Name)
					if err != nil {
						b.Fatal(err)
					}
					e.view.Forget(n, 1)
				}
			}
		})
	}
}
