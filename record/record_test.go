package record

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// dirTree is a Tree over a plain directory.
type dirTree string

func (d dirTree) path(p string) string { return filepath.Join(string(d), filepath.FromSlash(p)) }

func (d dirTree) Lstat(p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Lstat(d.path(p), &st)
	return st, err
}
func (d dirTree) ReadFile(p string) ([]byte, error) { return os.ReadFile(d.path(p)) }
func (d dirTree) Readlink(p string) (string, error) { return os.Readlink(d.path(p)) }

func run(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// scenario makes a before-tree (a Git repository with a tracked clean
// file, a tracked file dirty before the run, an untracked and an
// ignored file) and the after-tree of a scripted run over it, with the
// run's log.
func scenario(t *testing.T) (before, after string, in Input) {
	testenv.RequireProgram(t, "git")
	base := t.TempDir()
	before, after = filepath.Join(base, "before"), filepath.Join(base, "after")
	write(t, filepath.Join(before, "clean.txt"), "clean\n")
	write(t, filepath.Join(before, "dirty.txt"), "committed\n")
	write(t, filepath.Join(before, "gone.txt"), "tracked, deleted\n")
	write(t, filepath.Join(before, "modify.txt"), "tracked, modified\n")
	write(t, filepath.Join(before, ".gitignore"), "*.log\n")
	write(t, filepath.Join(before, "src/main.go"), "package main\n")
	run(t, before, "git", "init", "-q", "-b", "main")
	run(t, before, "git", "add", ".")
	run(t, before, "git", "commit", "-q", "-m", "first")
	write(t, filepath.Join(before, "dirty.txt"), "changed before the run\n")
	write(t, filepath.Join(before, "untracked.txt"), "untracked\n")
	write(t, filepath.Join(before, "build.log"), "ignored\n")
	write(t, filepath.Join(before, "old.txt"), "renamed\n")
	run(t, base, "cp", "-a", before, after)
	// The run: reads clean.txt, dirty.txt, untracked.txt and
	// build.log; modifies modify.txt; creates new.txt; deletes
	// gone.txt; renames old.txt to renamed.txt; lists src; checks
	// that missing.txt does not exist; touches .git.
	write(t, filepath.Join(after, "modify.txt"), "tracked, modified by the run\n")
	write(t, filepath.Join(after, "new.txt"), "created\n")
	if err := os.Remove(filepath.Join(after, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(after, "old.txt"), filepath.Join(after, "renamed.txt")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(after, ".git/agent-note"), "x")
	in = Input{Project: "/repo", Command: []string{"sh", "agent.sh"}, ExitStatus: 3, StartCwd: "/repo", Uid: 1000, Gid: 1000,
		Before: dirTree(before), After: dirTree(after),
		Events: []Event{
			{Op: "lookup", Path: "clean.txt"}, {Op: "open", Path: "clean.txt"},
			{Op: "open", Path: "dirty.txt"}, {Op: "open", Path: "untracked.txt"}, {Op: "open", Path: "build.log"},
			{Op: "open", Path: "modify.txt"}, {Op: "truncate", Path: "modify.txt"}, {Op: "close", Path: "modify.txt"},
			{Op: "create", Path: "new.txt"},
			{Op: "unlink", Path: "gone.txt"},
			{Op: "rename", Path: "old.txt", Path2: "renamed.txt"},
			{Op: "lookup", Path: "src"}, {Op: "readdir", Path: "src"},
			{Op: "lookup", Path: "missing.txt"},
			{Op: "create", Path: ".git/agent-note"},
			{Op: "write", Path: "(deleted)"},
			{Op: "dropped"},
		},
		Changed: []Change{{Path: "modify.txt"}, {Path: "new.txt"}, {Path: "gone.txt", Deleted: true},
			{Path: "old.txt", Deleted: true}, {Path: "renamed.txt"}, {Path: ".git/agent-note"}},
	}
	return before, after, in
}

func readBundle(t *testing.T, dir string) (Manifest, map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("manifest: %v\n%s", err, b)
	}
	blobs := map[string]string{}
	rows, err := parquet.ReadFile[blobRow](filepath.Join(dir, BlobsName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, dup := blobs[r.Key]; dup {
			t.Errorf("blob %s twice", r.Key)
		}
		blobs[r.Key] = string(r.Content)
	}
	return m, blobs
}

func fileOf(t *testing.T, m Manifest, p string) File {
	t.Helper()
	for _, f := range m.Files {
		if f.Path == p {
			return f
		}
	}
	t.Fatalf("no record of %s", p)
	return File{}
}

func TestWriteBundle(t *testing.T) {
	_, _, in := scenario(t)
	out := filepath.Join(t.TempDir(), "bundle")
	res, err := Write(out, in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, blobs := readBundle(t, out)
	if !slices.Equal(m.Command, in.Command) || m.ExitStatus != 3 || m.StartCwd != "/repo" || m.Uid != 1000 || m.Gid != 1000 {
		t.Errorf("top level = %+v", m)
	}
	if len(m.GitRepositories) != 1 || m.GitRepositories[0].Root != "/repo" || len(m.GitRepositories[0].Head) != 40 {
		t.Errorf("git_repositories = %+v", m.GitRepositories)
	}
	head := m.GitRepositories[0].Head
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	want := []string{"/repo/build.log", "/repo/clean.txt", "/repo/dirty.txt", "/repo/gone.txt", "/repo/missing.txt",
		"/repo/modify.txt", "/repo/new.txt", "/repo/old.txt", "/repo/renamed.txt", "/repo/src", "/repo/untracked.txt"}
	if !slices.Equal(paths, want) {
		t.Errorf("paths = %q\nwant %q", paths, want)
	}
	if res.Files != len(want) {
		t.Errorf("Result.Files = %d, want %d", res.Files, len(want))
	}
	type check struct {
		ops                   []string
		beforeBlob, afterBlob string // contents, "" for none
		beforeExists, exists  bool
		tombstone             bool
		tracked, dirty, ign   bool
	}
	checks := map[string]check{
		"clean.txt":     {ops: []string{"read", "existence"}, beforeExists: true, exists: true, tracked: true},
		"dirty.txt":     {ops: []string{"read"}, beforeBlob: "changed before the run\n", afterBlob: "changed before the run\n", beforeExists: true, exists: true, tracked: true, dirty: true},
		"untracked.txt": {ops: []string{"read"}, beforeBlob: "untracked\n", afterBlob: "untracked\n", beforeExists: true, exists: true},
		"build.log":     {ops: []string{"read"}, beforeBlob: "ignored\n", afterBlob: "ignored\n", beforeExists: true, exists: true, ign: true},
		"modify.txt":    {ops: []string{"read", "write"}, afterBlob: "tracked, modified by the run\n", beforeExists: true, exists: true, tracked: true},
		"new.txt":       {ops: []string{"write"}, afterBlob: "created\n", exists: true},
		"gone.txt":      {ops: []string{"delete"}, beforeExists: true, tombstone: true, tracked: true},
		"old.txt":       {ops: []string{"delete"}, beforeBlob: "renamed\n", beforeExists: true, tombstone: true},
		"renamed.txt":   {ops: []string{"write"}, afterBlob: "renamed\n", exists: true},
		"src":           {ops: []string{"directory"}, beforeExists: true, exists: true, tracked: true},
		"missing.txt":   {ops: []string{"existence"}},
	}
	for name, c := range checks {
		f := fileOf(t, m, "/repo/"+name)
		if !slices.Equal(f.Operations, c.ops) {
			t.Errorf("%s: operations = %q, want %q", name, f.Operations, c.ops)
		}
		if f.Before.Exists != c.beforeExists || f.After.Exists != c.exists || f.After.Tombstone != c.tombstone || f.Before.Tombstone {
			t.Errorf("%s: before %+v, after %+v", name, f.Before, f.After)
		}
		for _, s := range []struct {
			state   string
			st      State
			content string
		}{{"before", f.Before, c.beforeBlob}, {"after", f.After, c.afterBlob}} {
			if s.content == "" {
				if s.st.Blob != "" {
					t.Errorf("%s: %s blob %q, want none", name, s.state, s.st.Blob)
				}
				continue
			}
			key := s.state + ":/repo/" + name
			if s.st.Blob != key {
				t.Errorf("%s: %s blob = %q, want %q", name, s.state, s.st.Blob, key)
			}
			if got := blobs[key]; got != s.content {
				t.Errorf("%s: contents of %s = %q, want %q", name, key, got, s.content)
			}
		}
		if f.Before.Exists && (f.Before.Mode == nil || f.Before.Mtime == nil || f.Before.Type == "") {
			t.Errorf("%s: before-state %+v lacks type, mode or mtime", name, f.Before)
		}
		if !f.Before.Exists && (f.Before.Mode != nil || f.Before.Type != "") {
			t.Errorf("%s: missing before-state %+v has attributes", name, f.Before)
		}
		g := f.Git
		if g == nil {
			t.Errorf("%s: no git classification", name)
			continue
		}
		if !g.InRepo || g.Root != "/repo" || g.Head != head || g.RelativePath != name || g.Tracked != c.tracked || g.Dirty != c.dirty || g.Ignored != c.ign {
			t.Errorf("%s: git = %+v, want tracked %v dirty %v ignored %v", name, *g, c.tracked, c.dirty, c.ign)
		}
	}
	f := fileOf(t, m, "/repo/clean.txt")
	if f.Before.Type != TypeFile || *f.Before.Mode != unix.S_IFREG|0o644 {
		t.Errorf("clean.txt: type %q mode %o, want file %o", f.Before.Type, *f.Before.Mode, unix.S_IFREG|0o644)
	}
	if d := fileOf(t, m, "/repo/src"); d.Before.Type != TypeDirectory {
		t.Errorf("src: type %q, want directory", d.Before.Type)
	}
	if len(blobs) != res.Blobs {
		t.Errorf("%d blobs, Result.Blobs = %d", len(blobs), res.Blobs)
	}
	// The after-states of a tombstone and of a path never there.
	raw, _ := os.ReadFile(filepath.Join(out, ManifestName))
	if !strings.Contains(string(raw), `"after": {
        "exists": false,
        "tombstone": true
      }`) {
		t.Errorf("no tombstone written as the format has it:\n%s", raw)
	}
}

// TestHiddenPathsNeverRecorded: a path Options.Hidden names has no file
// record and no contents in the bundle, whatever the command did.
func TestHiddenPathsNeverRecorded(t *testing.T) {
	_, after, in := scenario(t)
	write(t, filepath.Join(after, "secrets/key.pem"), "SECRET")
	in.Events = append(in.Events, Event{Op: "create", Path: "secrets/key.pem"}, Event{Op: "open", Path: "untracked.txt"})
	in.Changed = append(in.Changed, Change{Path: "secrets/key.pem"}, Change{Path: "secrets"})
	hidden := func(p string) bool { return p == "untracked.txt" || p == "secrets" } // secrets/key.pem is below
	out := filepath.Join(t.TempDir(), "bundle")
	if _, err := Write(out, in, Options{Hidden: hidden}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ManifestName, BlobsName} {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"untracked", "secrets", "SECRET"} {
			if strings.Contains(string(b), s) {
				t.Errorf("%s mentions %q, which is hidden", name, s)
			}
		}
	}
}

// TestRowGroupsBounded: the blobs are written in row groups whose
// contents stay within the bound (a blob larger than it alone).
func TestRowGroupsBounded(t *testing.T) {
	dir := t.TempDir()
	before, after := filepath.Join(dir, "b"), filepath.Join(dir, "a")
	var events []Event
	sizes := []int{3000, 3000, 3000, 9000, 100, 100}
	for i, n := range sizes {
		name := "f" + string(rune('0'+i))
		write(t, filepath.Join(after, name), strings.Repeat("x", n))
		events = append(events, Event{Op: "create", Path: name})
	}
	if err := os.MkdirAll(before, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bundle")
	if _, err := Write(out, Input{Project: "/p", Before: dirTree(before), After: dirTree(after), Events: events}, Options{RowGroupBytes: 6000}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(out, BlobsName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, rg := range pf.RowGroups() {
		got = append(got, rg.NumRows())
	}
	// 3000+3000 | 3000 | 9000 | 100+100
	if want := []int64{2, 1, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("rows per row group = %v, want %v", got, want)
	}
	// No copy of the contents in statistics or bounds: the contents
	// (runs of one byte) compress to far less than they are.
	if st.Size() > 18300/2 {
		t.Errorf("blobs.parquet is %d bytes for 18300 bytes of runs of x", st.Size())
	}
	for _, c := range pf.Metadata().RowGroups[0].Columns {
		if c.MetaData.Codec.String() != "SNAPPY" {
			t.Errorf("column %v: codec %v, want SNAPPY", c.MetaData.PathInSchema, c.MetaData.Codec)
		}
	}
}

// TestNoBlobsNoParquet: a run that needs no contents writes the
// manifest alone; paths that are not UTF-8 are written as Latin-1.
func TestNoBlobsNoParquet(t *testing.T) {
	dir := t.TempDir()
	name := "caf\xe9"
	write(t, filepath.Join(dir, name), "x")
	out := filepath.Join(t.TempDir(), "bundle")
	in := Input{Project: "/p", Before: dirTree(dir), After: dirTree(dir), Events: []Event{{Op: "lookup", Path: name}}}
	if _, err := Write(out, in, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, BlobsName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("blobs.parquet without blobs: %v", err)
	}
	m, _ := readBundle(t, out)
	if len(m.Files) != 1 || m.Files[0].Path != "/p/café" || !slices.Equal(m.Files[0].Operations, []string{"existence"}) || m.Files[0].Git != nil {
		t.Errorf("files = %+v", m.Files)
	}
}

func TestCheckTarget(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "full/x"), "x")
	write(t, filepath.Join(dir, "file"), "x")
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
	}{{"new", ""}, {"empty", ""}, {"full", "is not empty"}, {"file", "is not a directory"}} {
		err := CheckTarget(filepath.Join(dir, c.name))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrTarget)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	// Write refuses too, and leaves what is there alone.
	_, _, in := scenario(t)
	if _, err := Write(filepath.Join(dir, "full"), in, Options{}); !errors.Is(err, ErrTarget) {
		t.Errorf("Write to a full directory: %v", err)
	}
	if names, _ := os.ReadDir(filepath.Join(dir, "full")); len(names) != 1 {
		t.Errorf("the full directory holds %d names, want 1", len(names))
	}
}

// TestStaleBeforeStates: a before-state changed after Options.BeforeTime
// (the tree read the project through, and it changed since) is listed.
func TestStaleBeforeStates(t *testing.T) {
	before, _, in := scenario(t)
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(before, "old.txt"), &st); err != nil {
		t.Fatal(err)
	}
	since := time.Unix(st.Ctim.Unix()) // the newest file of the before-tree
	// Change dirty.txt's ctime until the (coarse) clock has moved past.
	for i := 0; ; i++ {
		if err := os.Chmod(filepath.Join(before, "dirty.txt"), 0o600|os.FileMode(i%2)<<6); err != nil {
			t.Fatal(err)
		}
		if err := unix.Lstat(filepath.Join(before, "dirty.txt"), &st); err != nil {
			t.Fatal(err)
		}
		if time.Unix(st.Ctim.Unix()).After(since) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	res, err := Write(filepath.Join(t.TempDir(), "b"), in, Options{BeforeTime: since})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Stale, []string{"/repo/dirty.txt"}) {
		t.Errorf("stale = %q, want /repo/dirty.txt", res.Stale)
	}
}

// TestNestedRepository: a repository below the project's root
// classifies the paths below it; a path outside any repository has no
// Git classification.
func TestNestedRepository(t *testing.T) {
	testenv.RequireProgram(t, "git")
	dir := t.TempDir()
	write(t, filepath.Join(dir, "top.txt"), "top\n")
	write(t, filepath.Join(dir, "sub/x.txt"), "x\n")
	run(t, filepath.Join(dir, "sub"), "git", "init", "-q")
	run(t, filepath.Join(dir, "sub"), "git", "add", ".")
	run(t, filepath.Join(dir, "sub"), "git", "commit", "-q", "-m", "x")
	if err := os.Symlink("x.txt", filepath.Join(dir, "sub/link")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "b")
	in := Input{Project: "/p", Before: dirTree(dir), After: dirTree(dir), Events: []Event{
		{Op: "open", Path: "top.txt"}, {Op: "open", Path: "sub/x.txt"}, {Op: "lookup", Path: "sub/link"}, {Op: "readdir", Path: "sub"}}}
	if _, err := Write(out, in, Options{}); err != nil {
		t.Fatal(err)
	}
	m, blobs := readBundle(t, out)
	if len(m.GitRepositories) != 1 || m.GitRepositories[0].Root != "/p/sub" {
		t.Errorf("repositories %+v, want /p/sub", m.GitRepositories)
	}
	if f := fileOf(t, m, "/p/top.txt"); f.Git != nil || f.Before.Blob == "" || blobs[f.Before.Blob] != "top\n" {
		t.Errorf("top.txt: %+v, git %+v", f, f.Git)
	}
	if f := fileOf(t, m, "/p/sub/x.txt"); f.Git == nil || f.Git.Root != "/p/sub" || f.Git.RelativePath != "x.txt" || !f.Git.Tracked || f.Git.Dirty || f.Before.Blob != "" {
		t.Errorf("sub/x.txt: %+v, git %+v", f, f.Git)
	}
	if f := fileOf(t, m, "/p/sub/link"); f.Before.Type != TypeSymlink || f.Git == nil || f.Git.Tracked || f.Before.Blob != "" || !slices.Equal(f.Operations, []string{"existence"}) {
		t.Errorf("sub/link: %+v, git %+v", f, f.Git)
	}
	if f := fileOf(t, m, "/p/sub"); f.Git == nil || f.Git.RelativePath != "." || !f.Git.Tracked || !slices.Equal(f.Operations, []string{"directory"}) {
		t.Errorf("sub: %+v, git %+v", f, f.Git)
	}
}

// failingTree fails to read one path.
type failingTree struct {
	dirTree
	fail string
}

func (f failingTree) ReadFile(p string) ([]byte, error) {
	if p == f.fail {
		return nil, unix.EIO
	}
	return f.dirTree.ReadFile(p)
}

// TestWriteFailsWhole: a content that cannot be read fails the record,
// and leaves nothing of it: no half bundle.
func TestWriteFailsWhole(t *testing.T) {
	_, after, in := scenario(t)
	in.After = failingTree{dirTree(after), "new.txt"}
	for _, made := range []bool{true, false} {
		out := filepath.Join(t.TempDir(), "bundle")
		if !made {
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Write(out, in, Options{})
		if !errors.Is(err, unix.EIO) || !strings.Contains(err.Error(), "after:/repo/new.txt") {
			t.Errorf("Write: %v, want the EIO of new.txt", err)
		}
		names, err := os.ReadDir(out)
		switch {
		case made && !errors.Is(err, os.ErrNotExist):
			t.Errorf("the directory Write made is left: %v %v", names, err)
		case !made && (err != nil || len(names) != 0):
			t.Errorf("the empty directory given holds %v (%v) after a failed Write", names, err)
		}
	}
}

// TestGitDirty: a tracked file is dirty when its contents, its
// executable bit or its type differ from the index; a tracked symlink
// is clean when its target is the index's.
func TestGitDirty(t *testing.T) {
	testenv.RequireProgram(t, "git")
	dir := t.TempDir()
	write(t, filepath.Join(dir, "run.sh"), "#!/bin/sh\n")
	write(t, filepath.Join(dir, "mode.sh"), "#!/bin/sh\n")
	write(t, filepath.Join(dir, "same.txt"), "same\n")
	for _, p := range []string{"run.sh", "mode.sh"} {
		if err := os.Chmod(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("same.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("same.txt", filepath.Join(dir, "retarget")); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "git", "init", "-q")
	run(t, dir, "git", "add", ".")
	run(t, dir, "git", "commit", "-q", "-m", "x")
	if err := os.Chmod(filepath.Join(dir, "mode.sh"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "retarget")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("run.sh", filepath.Join(dir, "retarget")); err != nil {
		t.Fatal(err)
	}
	var events []Event
	for _, p := range []string{"run.sh", "mode.sh", "same.txt", "link", "retarget"} {
		events = append(events, Event{Op: "lookup", Path: p})
	}
	out := filepath.Join(t.TempDir(), "b")
	if _, err := Write(out, Input{Project: "/p", Before: dirTree(dir), After: dirTree(dir), Events: events}, Options{}); err != nil {
		t.Fatal(err)
	}
	m, _ := readBundle(t, out)
	for p, dirty := range map[string]bool{"run.sh": false, "mode.sh": true, "same.txt": false, "link": false, "retarget": true} {
		f := fileOf(t, m, "/p/"+p)
		if f.Git == nil || !f.Git.Tracked || f.Git.Dirty != dirty {
			t.Errorf("%s: git %+v, want tracked, dirty %v", p, f.Git, dirty)
		}
	}
}
