package overlay

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/internal/testenv"
)

// mergeEnv is a store with main (ours), a snapshot of it (the base) and
// a branch "theirs" created from that snapshot.
type mergeEnv struct {
	ours, theirs, base *env
}

func newMergeEnv(t *testing.T, lower map[string]string) *mergeEnv {
	t.Helper()
	if _, err := exec.LookPath("diff3"); err != nil {
		testenv.Skip(t, testenv.Program("diff3"), "diff3(1) is missing: install GNU diffutils")
	}
	e := newEnv(t, lower)
	snap, err := e.view.Snapshot("base", branch.KindManual)
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.meta.CreateLayer("theirs", snap)
	if err != nil {
		t.Fatal(err)
	}
	return &mergeEnv{ours: e, theirs: e.branchView(l), base: e.snapView(snap)}
}

// put writes content to file p, creating it (and no parents).
func (e *env) put(p, content string) {
	e.t.Helper()
	if n, err := e.walk(p); err == nil {
		e.view.release(n)
		e.write(p, content)
		return
	}
	dir, name := splitPath(p)
	_, f, _, err := e.view.Create(e.must(dir), name, unix.O_WRONLY, 0o644, Caller{})
	if err != nil {
		e.t.Fatalf("create %q: %v", p, err)
	}
	defer release(e.t, f)
	writeAt(e.t, f, []byte(content), 0)
}

func (e *env) remove(p string) {
	e.t.Helper()
	if err := e.view.removeAllPath(p); err != nil {
		e.t.Fatalf("remove %q: %v", p, err)
	}
}

func (e *env) exists(p string) bool {
	n, _, err := e.view.lookupPath(p)
	if err != nil {
		e.t.Fatalf("lookup %q: %v", p, err)
	}
	e.view.release(n)
	return n != nil
}

// merge plans and applies theirs into ours.
func (m *mergeEnv) merge(t *testing.T, o MergeOptions) *MergePlan {
	t.Helper()
	p, err := PlanMerge(m.base.view, m.ours.view, m.theirs.view, o)
	if err != nil {
		t.Fatalf("PlanMerge: %v", err)
	}
	closeAtEnd(t, p)
	if _, err := m.ours.view.ApplyMerge(p); err != nil {
		t.Fatalf("ApplyMerge: %v", err)
	}
	return p
}

// planAgainstSafety plans the merge as the workspace does: ours read
// from a safety snapshot of it, so that ours can change after the plan.
func (m *mergeEnv) planAgainstSafety(t *testing.T) *MergePlan {
	t.Helper()
	safety, err := m.ours.view.Snapshot("safety", branch.KindSafety)
	if err != nil {
		t.Fatal(err)
	}
	p, err := PlanMerge(m.base.view, m.ours.snapView(safety).view, m.theirs.view, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, p)
	return p
}

// closeAtEnd closes plan p when the test ends.
func closeAtEnd(t *testing.T, p *MergePlan) {
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
}

func conflictSummary(p *MergePlan) string {
	var b strings.Builder
	for _, c := range p.Conflicts {
		b.WriteString(string(c.Kind) + " " + c.Path)
		if c.Resolved != "" {
			b.WriteString(" resolved:" + c.Resolved)
		}
		b.WriteString("\n")
	}
	return b.String()
}

const funcs = "func a() {\n\treturn 1\n}\n\nfunc b() {\n\treturn 2\n}\n\nfunc c() {\n\treturn 3\n}\n"

func TestMergeOneSidedAndCleanText(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"code.go": funcs, "keep": "k", "gone": "g", "d/x": "x", "mine": "m"})
	m.theirs.put("new", "from theirs")
	m.theirs.put("keep", "changed in theirs")
	m.theirs.remove("gone")
	m.theirs.remove("d")
	m.theirs.put("code.go", strings.Replace(funcs, "return 1", "return 10", 1))
	m.ours.put("code.go", strings.Replace(funcs, "return 3", "return 30", 1))
	m.ours.put("mine", "changed in ours")

	p := m.merge(t, MergeOptions{})
	if got := conflictSummary(p); got != "" {
		t.Errorf("conflicts:\n%s", got)
	}
	eq(t, "new", m.ours.read("new"), "from theirs")
	eq(t, "keep", m.ours.read("keep"), "changed in theirs")
	eq(t, "mine", m.ours.read("mine"), "changed in ours")
	eq(t, "gone exists", m.ours.exists("gone"), false)
	eq(t, "d exists", m.ours.exists("d"), false)
	want := strings.Replace(strings.Replace(funcs, "return 1", "return 10", 1), "return 3", "return 30", 1)
	eq(t, "code.go merged", m.ours.read("code.go"), want)
	eq(t, "theirs untouched", m.theirs.read("mine"), "m")
}

func TestMergeConflicts(t *testing.T) {
	m := newMergeEnv(t, map[string]string{
		"text": "one\ntwo\nthree\n", "bin": "\x00a", "typ": "t", "del": "d", "edit": "e", "r1": "rename me", "r2": "and me",
	})
	m.theirs.put("text", "one\nTWO theirs\nthree\n")
	m.ours.put("text", "one\nTWO ours\nthree\n")
	m.theirs.put("bin", "\x00theirs")
	m.ours.put("bin", "\x00ours")
	m.theirs.remove("typ")
	if _, _, err := m.theirs.view.Mkdir(m.theirs.view.Root(), "typ", 0o755, Caller{}); err != nil {
		t.Fatal(err)
	}
	m.ours.put("typ", "ours")
	m.theirs.remove("del")
	m.ours.put("del", "edited in ours")
	m.theirs.put("edit", "edited in theirs")
	m.ours.remove("edit")
	// Two files renamed to one name.
	if err := m.ours.view.Rename(m.ours.view.Root(), "r1", m.ours.view.Root(), "same", 0); err != nil {
		t.Fatal(err)
	}
	if err := m.theirs.view.Rename(m.theirs.view.Root(), "r2", m.theirs.view.Root(), "same", 0); err != nil {
		t.Fatal(err)
	}

	p := m.merge(t, MergeOptions{OursLabel: "main", TheirsLabel: "try"})
	want := "binary bin\ndelete del\ndelete edit\nrename same\ncontent text\ntype typ\n"
	if got := conflictSummary(p); got != want {
		t.Errorf("conflicts:\n%s\nwant:\n%s", got, want)
	}
	if p.Unresolved() != 6 {
		t.Errorf("unresolved = %d, want 6", p.Unresolved())
	}
	text := m.ours.read("text")
	for _, s := range []string{"<<<<<<< main\nTWO ours\n", "||||||| base\ntwo\n", "=======\nTWO theirs\n>>>>>>> try\n"} {
		if !strings.Contains(text, s) {
			t.Errorf("text lacks %q:\n%s", s, text)
		}
	}
	eq(t, "bin (ours kept)", m.ours.read("bin"), "\x00ours")
	eq(t, "typ (ours kept)", m.ours.read("typ"), "ours")
	eq(t, "del (ours kept)", m.ours.read("del"), "edited in ours")
	eq(t, "edit stays deleted", m.ours.exists("edit"), false)
	eq(t, "same (ours kept)", m.ours.read("same"), "rename me")
	eq(t, "r2 kept where ours has it", m.ours.read("r2"), "and me")
}

func TestMergeOursTheirs(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"a/text": "x\n", "b/text": "x\n", "c": "c"})
	for _, p := range []string{"a/text", "b/text"} {
		m.theirs.put(p, "theirs\n")
		m.ours.put(p, "ours\n")
	}
	m.theirs.remove("c")
	m.ours.put("c", "ours c")
	p := m.merge(t, MergeOptions{Ours: []string{"a"}, Theirs: []string{"b/text", "c"}})
	want := "content a/text resolved:ours\ncontent b/text resolved:theirs\ndelete c resolved:theirs\n"
	if got := conflictSummary(p); got != want {
		t.Errorf("conflicts:\n%s\nwant:\n%s", got, want)
	}
	if p.Unresolved() != 0 {
		t.Errorf("unresolved = %d, want 0", p.Unresolved())
	}
	eq(t, "a/text", m.ours.read("a/text"), "ours\n")
	eq(t, "b/text", m.ours.read("b/text"), "theirs\n")
	eq(t, "c exists", m.ours.exists("c"), false)
}

// A plan changes nothing until it is applied.
func TestMergePlanChangesNothing(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"f": "base\n"})
	m.theirs.put("f", "theirs\n")
	m.theirs.put("g", "new\n")
	p, err := PlanMerge(m.base.view, m.ours.view, m.theirs.view, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range p.Changes {
		got = append(got, string(c.Action)+" "+c.Path)
	}
	eq(t, "changes", strings.Join(got, ","), "take f,take g")
	eq(t, "f before applying", m.ours.read("f"), "base\n")
	eq(t, "g before applying", m.ours.exists("g"), false)
}

// A directory one side deleted and the other changed inside is a
// conflict, whichever side deleted it, and nothing inside is lost.
func TestMergeDeletedDirectory(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"d/x": "x\n", "d/y": "y\n", "e/x": "x\n", "f/x": "x\n"})
	m.theirs.remove("d")
	m.ours.put("d/x", "ours\n")
	m.theirs.remove("e")
	m.ours.put("e/new", "ours new\n")
	m.ours.remove("f")
	m.theirs.put("f/x", "theirs\n")
	m.theirs.put("f/new", "theirs new\n")
	p := m.merge(t, MergeOptions{})
	want := "delete d\ndelete e\ndelete f/new\ndelete f/x\n"
	if got := conflictSummary(p); got != want {
		t.Errorf("conflicts:\n%s\nwant:\n%s", got, want)
	}
	eq(t, "d/x", m.ours.read("d/x"), "ours\n")
	eq(t, "d/y", m.ours.read("d/y"), "y\n")
	eq(t, "e/new", m.ours.read("e/new"), "ours new\n")
	eq(t, "f exists", m.ours.exists("f"), false)
}

func (e *env) chmod(p string, mode uint32) {
	e.t.Helper()
	if _, err := e.view.Setattr(e.must(p), SetAttr{Mode: &mode}, nil); err != nil {
		e.t.Fatalf("chmod %q: %v", p, err)
	}
}

func (e *env) mode(p string) uint32 {
	e.t.Helper()
	st, err := e.view.Getattr(e.must(p))
	if err != nil {
		e.t.Fatal(err)
	}
	return st.Mode & 07777
}

// Modes: one side's chmod is taken beside the other side's data; two
// different chmods are a conflict that keeps ours.
func TestMergeModes(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"a": "a\n", "b": "b\n", "c": "c\n"})
	m.theirs.chmod("a", 0o600)
	m.ours.put("a", "ours a\n")
	m.theirs.put("b", "theirs b\n")
	m.ours.chmod("b", 0o640)
	m.theirs.chmod("c", 0o600)
	m.ours.chmod("c", 0o755)
	p := m.merge(t, MergeOptions{})
	if got := conflictSummary(p); got != "mode c\n" {
		t.Errorf("conflicts:\n%s\nwant mode c", got)
	}
	eq(t, "a data", m.ours.read("a"), "ours a\n")
	eq(t, "a mode", m.ours.mode("a"), uint32(0o600))
	eq(t, "b data", m.ours.read("b"), "theirs b\n")
	eq(t, "b mode", m.ours.mode("b"), uint32(0o640))
	eq(t, "c mode", m.ours.mode("c"), uint32(0o755))
}

// A program writing ours between the plan (made against a snapshot of
// ours, as the workspace does) and its application keeps what it
// wrote: the merge refuses, changing nothing, rather than writing the
// plan over it.
func TestMergeRefusesPathsChangedSincePlan(t *testing.T) {
	for _, tc := range []struct{ name, path string }{
		{"a file theirs changed", "keep"},
		{"a file both changed", "code.go"},
		{"a file inside a directory theirs deleted", "d/x"},
		{"a new file inside a directory theirs deleted", "d/new"},
		{"a path theirs created", "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMergeEnv(t, map[string]string{"code.go": funcs, "keep": "k", "d/x": "x"})
			m.theirs.put("new", "from theirs")
			m.theirs.put("keep", "changed in theirs")
			m.theirs.remove("d")
			m.theirs.put("code.go", strings.Replace(funcs, "return 1", "return 10", 1))
			m.ours.put("code.go", strings.Replace(funcs, "return 3", "return 30", 1))
			p := m.planAgainstSafety(t)
			m.ours.put(tc.path, "written meanwhile")
			_, err := m.ours.view.ApplyMerge(p)
			if !errors.Is(err, ErrMergeStale) {
				t.Fatalf("ApplyMerge after %s changed: %v, want ErrMergeStale", tc.path, err)
			}
			eq(t, tc.path, m.ours.read(tc.path), "written meanwhile")
			eq(t, "new taken", m.ours.exists("new"), tc.path == "new")
			eq(t, "keep", m.ours.read("keep"), map[bool]string{true: "written meanwhile", false: "k"}[tc.path == "keep"])
		})
	}
}

// Ours changed a file's mode only, theirs its data and its mode to
// another: the modes conflict (the data is theirs), as when neither
// changed the data.
func TestMergeModeAgainstDataAndMode(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"f": "base\n"})
	m.ours.chmod("f", 0o600)
	m.theirs.put("f", "theirs\n")
	m.theirs.chmod("f", 0o755)
	p := m.merge(t, MergeOptions{})
	eq(t, "conflicts", conflictSummary(p), "mode f\n")
	eq(t, "data", m.ours.read("f"), "theirs\n")
	eq(t, "mode (ours stays)", m.ours.mode("f"), uint32(0o600))
}

// The same with --theirs: theirs' data and mode, taken once.
func TestMergeModeAgainstDataAndModeTheirs(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"f": "base\n"})
	m.ours.chmod("f", 0o600)
	m.theirs.put("f", "theirs\n")
	m.theirs.chmod("f", 0o755)
	p := m.merge(t, MergeOptions{Theirs: []string{"f"}})
	eq(t, "conflicts", conflictSummary(p), "mode f resolved:theirs\n")
	eq(t, "changes", len(p.Changes), 1)
	eq(t, "data", m.ours.read("f"), "theirs\n")
	eq(t, "mode", m.ours.mode("f"), uint32(0o755))
}

// An xattr theirs set on a file whose data and mode nobody changed is
// taken, as a chmod is; both setting it differently is a mode
// conflict that keeps ours.
func TestMergeXattrs(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"a": "a\n", "c": "c\n"})
	setx := func(e *env, p, val string) {
		t.Helper()
		if err := e.view.Setxattr(e.must(p), "user.k", []byte(val), 0); err != nil {
			t.Fatal(err)
		}
	}
	setx(m.theirs, "a", "theirs")
	setx(m.ours, "c", "ours")
	setx(m.theirs, "c", "theirs")
	p := m.merge(t, MergeOptions{})
	eq(t, "conflicts", conflictSummary(p), "mode c\n")
	xa, _ := m.ours.view.xattrs(m.ours.must("a"))
	eq(t, "a's xattrs", fmt.Sprint(xa), "map[user.k:theirs]")
	xc, _ := m.ours.view.xattrs(m.ours.must("c"))
	eq(t, "c's xattrs (ours stays)", fmt.Sprint(xc), "map[user.k:ours]")
}

// Type changes one side made alone are taken: a directory made a file
// (with what was in it), a file made a directory (with what is in it).
func TestMergeTypeChangesTaken(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"d/x": "x", "d/e/y": "y", "f": "f"})
	m.theirs.remove("d")
	m.theirs.put("d", "now a file")
	m.theirs.remove("f")
	if _, _, err := m.theirs.view.Mkdir(m.theirs.must(""), "f", 0o755, Caller{}); err != nil {
		t.Fatal(err)
	}
	m.theirs.put("f/z", "z")
	p := m.merge(t, MergeOptions{})
	eq(t, "conflicts", conflictSummary(p), "")
	eq(t, "d", m.ours.read("d"), "now a file")
	eq(t, "f/z", m.ours.read("f/z"), "z")
}

// A directory theirs made read-only, with files in it, is taken whole:
// its mode is set after what goes in it.
func TestMergeReadOnlyDirectory(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"f": "f"})
	if _, _, err := m.theirs.view.Mkdir(m.theirs.must(""), "ro", 0o755, Caller{Uid: 1000, Gid: 1000}); err != nil {
		t.Fatal(err)
	}
	m.theirs.put("ro/x", "x")
	m.theirs.chmod("ro", 0o555)
	p := m.merge(t, MergeOptions{})
	eq(t, "conflicts", conflictSummary(p), "")
	eq(t, "ro/x", m.ours.read("ro/x"), "x")
	eq(t, "ro's mode", m.ours.mode("ro"), uint32(0o555))
}

// A plan holds its merged texts in files of its own, not in memory;
// Close removes them.
func TestMergePlanClose(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"code.go": funcs})
	m.theirs.put("code.go", strings.Replace(funcs, "return 1", "return 10", 1))
	m.ours.put("code.go", strings.Replace(funcs, "return 3", "return 30", 1))
	p, err := PlanMerge(m.base.view, m.ours.view, m.theirs.view, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names, err := os.ReadDir(p.dir)
	if err != nil || len(names) != 1 {
		t.Fatalf("the plan's directory %q holds %v, %v; want the merged code.go", p.dir, names, err)
	}
	if _, err := m.ours.view.ApplyMerge(p); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
		t.Errorf("the plan's directory after Close: %v, want it gone", err)
	}
	want := strings.Replace(strings.Replace(funcs, "return 1", "return 10", 1), "return 3", "return 30", 1)
	eq(t, "code.go", m.ours.read("code.go"), want)
}

// A binary file both sides changed to the same data, one of them its
// mode too: the mode is taken, as for text.
func TestMergeSameBinaryAttrs(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"bin": "a\x00b"})
	m.ours.put("bin", "new\x00data")
	m.theirs.put("bin", "new\x00data")
	m.theirs.chmod("bin", 0o755)
	p := m.merge(t, MergeOptions{})
	eq(t, "conflicts", conflictSummary(p), "")
	eq(t, "bin's mode", m.ours.mode("bin"), uint32(0o755))
}

// Files without a newline at their end: conflict markers stand on
// lines of their own (diff3 glues them to the last line otherwise),
// and a clean merge ends as the sides say (three-way, on the final
// newline too).
func TestMergeNoFinalNewline(t *testing.T) {
	m := newMergeEnv(t, map[string]string{"c": "x\na", "both": "1\n2\n3\n4\n5", "added": "1\n2\n3\n4\n5", "removed": "1\n2\n3\n4\n5\n", "top": "1\n2\n3"})
	m.ours.put("top", "1!\n2\n3")
	m.theirs.put("top", "1?\n2\n3")
	m.ours.put("c", "x\nb")
	m.theirs.put("c", "x\nc")
	m.ours.put("both", "1!\n2\n3\n4\n5")
	m.theirs.put("both", "1\n2\n3\n4\n5!")
	m.ours.put("added", "1!\n2\n3\n4\n5")
	m.theirs.put("added", "1\n2\n3\n4\n5\n")
	m.ours.put("removed", "1!\n2\n3\n4\n5\n")
	m.theirs.put("removed", "1\n2\n3\n4\n5")
	p := m.merge(t, MergeOptions{})
	eq(t, "conflicts", conflictSummary(p), "content c\ncontent top\n")
	eq(t, "top", m.ours.read("top"), "<<<<<<< ours\n1!\n||||||| base\n1\n=======\n1?\n>>>>>>> theirs\n2\n3")
	eq(t, "c", m.ours.read("c"), "x\n<<<<<<< ours\nb\n||||||| base\na\n=======\nc\n>>>>>>> theirs\n")
	eq(t, "both", m.ours.read("both"), "1!\n2\n3\n4\n5!")
	eq(t, "added", m.ours.read("added"), "1!\n2\n3\n4\n5\n")
	eq(t, "removed", m.ours.read("removed"), "1!\n2\n3\n4\n5")
}
