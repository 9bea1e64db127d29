package overlay

import (
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
	if _, err := m.ours.view.ApplyMerge(p); err != nil {
		t.Fatalf("ApplyMerge: %v", err)
	}
	return p
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
