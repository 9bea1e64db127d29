package integration

// agentfs merge (issue 29): a three-way merge of one branch into
// another from the snapshot both come from, and tournament --merge.

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
)

// goFuncs is a file of three functions that attempts edit apart.
const goFuncs = "package p\n\nfunc a() int {\n\treturn 1\n}\n\nfunc b() int {\n\treturn 2\n}\n\nfunc c() int {\n\treturn 3\n}\n"

// inBranch runs shell script in branch (bound through the mount root,
// in the mount's root directory) and fails the test unless it exits 0.
func inBranch(t *testing.T, m *harness.Mount, branch, script string) string {
	t.Helper()
	r := harness.RunCmd(t, execRootIn(m, branch, m.Dir, "sh", "-c", script), []string{"exec", "-b", branch, "sh", "-c", script})
	if r.Code != 0 {
		t.Fatalf("in branch %s: %s", branch, r)
	}
	return r.Stdout
}

var undoRe = regexp.MustCompile(`to undo: agentfs restore ([0-9a-f]{8})`)

// mergeJSON is agentfs merge --json.
type mergeJSON struct {
	Branch, Into, Base string
	Safety             *struct{ ID string }
	Changes            []struct{ Path, Action string }
	Conflicts          []struct {
		Path, Kind, Detail, Resolved string
		Markers                      bool
	}
	Unresolved int
}

func mustMergeJSON(t *testing.T, r harness.Result) mergeJSON {
	t.Helper()
	var got mergeJSON
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("merge --json: %v:\n%s", err, r)
	}
	return got
}

// One-sided changes are taken, a text file both changed is merged line
// by line, the merge is undone with the restore it prints, and a process
// bound to the target sees the merge at once (its kernel caches of the
// old state are dropped).
func TestMergeCleanAndUndo(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("code.go", goFuncs),
		harness.LowerFile("keep.txt", "keep\n"),
		harness.LowerFile("gone.txt", "gone\n"),
		harness.LowerFile("ours.txt", "ours\n"),
		harness.LowerFile("sub/s.txt", "s\n"),
	))
	base := branchesFrom(t, m, "try")
	inBranch(t, m, "try", `sed -i 's/return 1/return 10/' code.go && echo new > new.txt && rm gone.txt && echo theirs > keep.txt && mkdir -p pkg/sub && echo x > pkg/sub/x.go`)
	inBranch(t, m, "try", `echo theirs > sub/t.txt`)
	harness.WriteFile(t, m.Path("code.go"), strings.Replace(goFuncs, "return 3", "return 30", 1))
	harness.WriteFile(t, m.Path("ours.txt"), "ours changed\n")
	// A program working in a directory of the target: it lists it
	// before and after the merge, from the same working directory.
	worker := exec.Command("sh", "-c", "ls; read go; ls; cat s.txt t.txt")
	worker.Dir = m.Path("sub")
	workerIn, err := worker.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var workerOut strings.Builder
	worker.Stdout, worker.Stderr = &workerOut, &workerOut
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	before := map[string]string{"code.go": harness.ReadFile(t, m.Path("code.go")), "keep.txt": harness.ReadFile(t, m.Path("keep.txt"))}

	dry := mustC(t, m.Dir, "merge", "--dry-run", "try")
	if !strings.Contains(dry.Stdout, "would make these changes (none made)") || !strings.Contains(dry.Stdout, "take     new.txt") {
		t.Errorf("dry run:\n%s", dry)
	}
	if _, err := os.Stat(m.Path("new.txt")); err == nil || harness.ReadFile(t, m.Path("code.go")) != before["code.go"] {
		t.Errorf("the dry run changed the branch")
	}

	r := mustC(t, m.Dir, "merge", "try")
	for _, want := range []string{"merged branch try into main (from snapshot " + base + ")", "take     new.txt", "merge    code.go", "delete   gone.txt", "take     keep.txt", "take     pkg/sub/x.go"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("merge output lacks %q:\n%s", want, r)
		}
	}
	if strings.Contains(r.Stdout, "conflicts") {
		t.Errorf("a clean merge lists conflicts:\n%s", r)
	}
	if _, err := workerIn.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if err := worker.Wait(); err != nil || workerOut.String() != "s.txt\ns.txt\nt.txt\ns\ntheirs\n" {
		t.Errorf("a program working in sub/ during the merge saw %q (%v), want its directory before and after", workerOut.String(), err)
	}
	want := strings.Replace(strings.Replace(goFuncs, "return 1", "return 10", 1), "return 3", "return 30", 1)
	checks := map[string]string{"code.go": want, "new.txt": "new\n", "keep.txt": "theirs\n", "ours.txt": "ours changed\n", "pkg/sub/x.go": "x\n", "sub/t.txt": "theirs\n"}
	for p, w := range checks {
		if got := harness.ReadFile(t, m.Path(p)); got != w {
			t.Errorf("%s after the merge = %q, want %q", p, got, w)
		}
	}
	if _, err := os.Stat(m.Path("gone.txt")); !os.IsNotExist(err) {
		t.Errorf("gone.txt after the merge: %v, want it gone", err)
	}
	if got := inBranch(t, m, "try", "cat ours.txt"); got != "ours\n" {
		t.Errorf("the merge changed branch try: ours.txt = %q", got)
	}

	undo := undoRe.FindStringSubmatch(r.Stdout)
	if undo == nil {
		t.Fatalf("merge does not print its undo:\n%s", r)
	}
	mustC(t, m.Dir, "restore", undo[1])
	for p, w := range before {
		if got := harness.ReadFile(t, m.Path(p)); got != w {
			t.Errorf("%s after the undo = %q, want %q", p, got, w)
		}
	}
	if _, err := os.Stat(m.Path("new.txt")); !os.IsNotExist(err) {
		t.Errorf("new.txt after the undo: %v, want it gone", err)
	}
	if harness.ReadFile(t, m.Path("gone.txt")) != "gone\n" {
		t.Errorf("gone.txt not back after the undo")
	}
	m.AssertLowerUnchanged()
}

// --into merges into a branch other than the one the mount shows, and
// a process bound to that branch, which has read the files before,
// sees the merge.
func TestMergeIntoBoundBranch(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f.txt", "one\ntwo\nthree\n")))
	branchesFrom(t, m, "a", "b")
	inBranch(t, m, "a", `printf 'ONE\ntwo\nthree\n' > f.txt && echo a > only-a`)
	inBranch(t, m, "b", `printf 'one\ntwo\nTHREE\n' > f.txt`)
	if got := inBranch(t, m, "b", "cat f.txt; ls"); got != "one\ntwo\nTHREE\nf.txt\n" {
		t.Fatalf("branch b before = %q", got)
	}
	r := mustC(t, m.Dir, "merge", "a", "--into", "b", "--json")
	got := mustMergeJSON(t, r)
	if got.Into != "b" || got.Branch != "a" || got.Unresolved != 0 || got.Safety == nil {
		t.Errorf("merge --json: %+v", got)
	}
	if out := inBranch(t, m, "b", "cat f.txt; ls"); out != "ONE\ntwo\nTHREE\nf.txt\nonly-a\n" {
		t.Errorf("branch b after the merge, read by a bound process = %q", out)
	}
	if main := harness.ReadFile(t, m.Path("f.txt")); main != "one\ntwo\nthree\n" {
		t.Errorf("main changed by a merge into b: %q", main)
	}
	m.AssertLowerUnchanged()
}

// Conflicts: text (markers), binary, a type change, a deletion against
// an edit, renames that collide; listed in text and JSON, exit 1; then
// --ours and --theirs resolve them.
func TestMergeConflicts(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(
		harness.LowerFile("text.txt", "one\ntwo\nthree\n"),
		harness.LowerFile("data.bin", "\x00\x01base"),
		harness.LowerFile("kind", "a file\n"),
		harness.LowerFile("del.txt", "d\n"),
		harness.LowerFile("r1", "first\n"),
		harness.LowerFile("r2", "second\n"),
	))
	branchesFrom(t, m, "try")
	inBranch(t, m, "try", `printf 'one\nTWO try\nthree\n' > text.txt && printf '\000try' > data.bin && rm kind && mkdir kind && rm del.txt && mv r2 same`)
	harness.WriteFile(t, m.Path("text.txt"), "one\nTWO main\nthree\n")
	harness.WriteFile(t, m.Path("data.bin"), "\x00main")
	harness.WriteFile(t, m.Path("kind"), "edited\n")
	harness.WriteFile(t, m.Path("del.txt"), "edited\n")
	if err := os.Rename(m.Path("r1"), m.Path("same")); err != nil {
		t.Fatal(err)
	}

	r := agentfsC(t, m.Dir, "merge", "try")
	if r.Code != 1 {
		t.Fatalf("a merge with conflicts: exit %d, want 1:\n%s", r.Code, r)
	}
	for _, want := range []string{"conflicts (5 remain)", "content  text.txt", "(conflict markers in the file)", "binary   data.bin", "type     kind", "delete   del.txt", "rename   same", "to undo: agentfs restore"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("merge output lacks %q:\n%s", want, r)
		}
	}
	text := harness.ReadFile(t, m.Path("text.txt"))
	if want := "one\n<<<<<<< main\nTWO main\n||||||| "; !strings.HasPrefix(text, want) || !strings.Contains(text, "=======\nTWO try\n>>>>>>> try\nthree\n") {
		t.Errorf("text.txt = %q, want conflict markers", text)
	}
	for p, w := range map[string]string{"data.bin": "\x00main", "kind": "edited\n", "del.txt": "edited\n", "same": "first\n", "r2": "second\n"} {
		if got := harness.ReadFile(t, m.Path(p)); got != w {
			t.Errorf("%s = %q, want main's %q", p, got, w)
		}
	}
	undo := undoRe.FindStringSubmatch(r.Stdout)
	if undo == nil {
		t.Fatalf("no undo printed:\n%s", r)
	}
	mustC(t, m.Dir, "restore", undo[1])

	r = agentfsC(t, m.Dir, "merge", "try", "--json", "--ours", "text.txt", "--theirs", "data.bin", "--theirs", "kind")
	if r.Code != 1 {
		t.Fatalf("merge --json with conflicts left: exit %d:\n%s", r.Code, r)
	}
	got := mustMergeJSON(t, r)
	kinds := map[string]string{}
	for _, c := range got.Conflicts {
		kinds[c.Path] = c.Kind + "/" + c.Resolved
	}
	wantKinds := map[string]string{"text.txt": "content/ours", "data.bin": "binary/theirs", "kind": "type/theirs", "del.txt": "delete/", "same": "rename/"}
	if len(kinds) != len(wantKinds) || got.Unresolved != 2 {
		t.Errorf("conflicts %v (unresolved %d), want %v (2)", kinds, got.Unresolved, wantKinds)
	}
	for p, w := range wantKinds {
		if kinds[p] != w {
			t.Errorf("conflict at %s: %q, want %q", p, kinds[p], w)
		}
	}
	if got := harness.ReadFile(t, m.Path("text.txt")); got != "one\nTWO main\nthree\n" {
		t.Errorf("text.txt with --ours = %q", got)
	}
	if got := harness.ReadFile(t, m.Path("data.bin")); got != "\x00try" {
		t.Errorf("data.bin with --theirs = %q", got)
	}
	if st, err := os.Stat(m.Path("kind")); err != nil || !st.IsDir() {
		t.Errorf("kind with --theirs: %v, want the directory", err)
	}
	m.AssertLowerUnchanged()
}

// Bad input: a clear error, nothing changed.
func TestMergeBadInput(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("f", "x")))
	failC(t, m.Dir, []string{`no branch "nope"`, "agentfs branch list"}, "merge", "nope")
	failC(t, m.Dir, []string{"cannot be merged into itself"}, "merge", "main")
	if r := agentfsC(t, m.Dir, "merge"); r.Code != 2 {
		t.Errorf("merge without a branch: exit %d, want 2:\n%s", r.Code, r)
	}
	m.AssertLowerUnchanged()
}

// Two attempts of a scripted agent, each editing another function of
// one file (and one the same line), run as a tournament whose winners
// are merged into main: both functions' edits land, the shared line is
// a conflict with markers.
func TestTournamentMerge(t *testing.T) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("code.go", goFuncs), harness.LowerFile("VERSION", "1\n")))
	id := takeSnapshot(t, m.Dir, "start")
	agentA := `sed -i 's/return 1/return 100/' code.go && echo 2a > VERSION && echo a > notes-a`
	agentB := `sed -i 's/return 3/return 300/' code.go && echo 2b > VERSION && echo b > notes-b`
	r := harness.Run(t, "tournament", "--from", id, "--test", "grep -q 'return [13]00' code.go", "--name", "t", "--merge", "-C", m.Dir, "--", agentA, agentB)
	if r.Code != 1 {
		t.Fatalf("tournament --merge with a conflict: exit %d, want 1:\n%s", r.Code, r)
	}
	for _, want := range []string{"winner: candidate 1", "merged branch t-1 into main", "merged branch t-2 into main", "content  VERSION", "merge    code.go", "to undo every merge: agentfs restore"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("tournament output lacks %q:\n%s", want, r)
		}
	}
	want := strings.Replace(strings.Replace(goFuncs, "return 1", "return 100", 1), "return 3", "return 300", 1)
	if got := harness.ReadFile(t, m.Path("code.go")); got != want {
		t.Errorf("code.go after merging both attempts:\n%s\nwant:\n%s", got, want)
	}
	if got := harness.ReadFile(t, m.Path("VERSION")); !strings.Contains(got, "<<<<<<< main\n2a\n") || !strings.Contains(got, "=======\n2b\n>>>>>>> t-2\n") {
		t.Errorf("VERSION = %q, want conflict markers", got)
	}
	for _, p := range []string{"notes-a", "notes-b"} {
		if _, err := os.Stat(m.Path(p)); err != nil {
			t.Errorf("%s after merging both attempts: %v", p, err)
		}
	}
	undo := regexp.MustCompile(`to undo every merge: agentfs restore ([0-9a-f]{8})`).FindStringSubmatch(r.Stdout)
	if undo == nil {
		t.Fatalf("no undo of every merge:\n%s", r)
	}
	mustC(t, m.Dir, "restore", undo[1])
	if got := harness.ReadFile(t, m.Path("code.go")); got != goFuncs {
		t.Errorf("code.go after undoing every merge = %q, want the start", got)
	}
	if _, err := os.Stat(m.Path("notes-a")); !os.IsNotExist(err) {
		t.Errorf("notes-a after undoing every merge: %v, want it gone", err)
	}
	m.AssertLowerUnchanged()
}
