package overlay

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

func (e *env) fsck(repair bool) FsckReport {
	e.t.Helper()
	r, err := Fsck(FsckOptions{Objects: e.bs, Meta: e.meta, Lower: e.lower, Repair: repair, Grace: -1})
	if err != nil {
		e.t.Fatalf("Fsck(repair %v): %v", repair, err)
	}
	return r
}

// problems lists a report's problems as "where path kind" lines.
func problems(r FsckReport) []string {
	var out []string
	for _, p := range r.Problems {
		where := p.Branch
		if p.Snapshot != "" {
			where = "snapshot"
		}
		out = append(out, where+" "+p.Path+" "+string(p.Kind))
	}
	slices.Sort(out)
	return out
}

func TestFsck(t *testing.T) {
	e := newEnv(t, map[string]string{"f": "lower f", "m": "meta", "keep": "k"})
	r := e.view.Root()
	e.write("f", "upper f")
	nd, _, err := e.view.Mkdir(r, "nd", 0750, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  *Node
		name string
	}{{r, "new"}, {nd, "c"}} {
		_, f, _, err := e.view.Create(c.dir, c.name, unix.O_RDWR, 0644, Caller{})
		if err != nil {
			t.Fatal(err)
		}
		release(t, f) // (a file open for writing gets its own clone in a snapshot)
	}
	e.write("nd/c", "kept")
	mode := uint32(0600)
	if _, err := e.view.Setattr(e.must("m"), SetAttr{Mode: &mode}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.view.Snapshot("before the damage", branch.KindManual); err != nil {
		t.Fatal(err)
	}
	if clean := e.fsck(false); !clean.Clean() {
		t.Fatalf("fsck of a healthy store:\n%s", clean)
	}

	// The damage.
	for _, p := range []string{"f", "new", "nd"} {
		if err := e.bs.Remove(e.must(p).object); err != nil {
			t.Fatal(err)
		}
	}
	dirObj, err := e.bs.Mkdir(0755, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	var b branch.Batch
	b.Put("wt", &branch.Entry{Type: branch.TypeFile, Ino: 1<<63 | 99, Object: dirObj})
	if err := e.view.Layer().Commit(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(e.lower, "m")); err != nil {
		t.Fatal(err)
	}
	garbage, f, err := e.bs.CreateFile(0644, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()

	found := e.fsck(false)
	want := []string{
		"main f missing-object", "main m origin-gone", "main nd missing-object", "main new missing-object", "main wt wrong-type",
		"snapshot f missing-object", "snapshot m origin-gone", "snapshot nd missing-object", "snapshot new missing-object",
	}
	if got := problems(found); !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(found.Garbage) != 1 || found.Garbage[0].ID != garbage || found.Garbage[0].Removed {
		t.Errorf("garbage = %+v, want %s, not removed", found.Garbage, garbage)
	}
	if found.Branches != 1 || found.Snapshots != 1 {
		t.Errorf("checked %d branches and %d snapshots, want 1 and 1", found.Branches, found.Snapshots)
	}

	fixed := e.fsck(true)
	repairs := map[string]string{}
	for _, p := range fixed.Problems {
		if p.Snapshot == "" {
			repairs[p.Path] = p.Repair
		} else if p.Repair != "" {
			t.Errorf("a snapshot's entry was repaired: %v", p)
		}
	}
	for p, want := range map[string]string{
		"f": "replaced by a whiteout", "new": "entry deleted", "nd": "new empty directory object", "wt": "entry deleted", "m": "",
	} {
		if got := repairs[p]; want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("repair of %s: %q, want %q", p, got, want)
		}
	}
	if len(fixed.Garbage) != 2 {
		t.Errorf("garbage removed by the repair: %+v, want the planted file and wt's directory", fixed.Garbage)
	}
	for _, g := range fixed.Garbage {
		if !g.Removed {
			t.Errorf("garbage %s not removed", g.ID)
		}
	}
	if s := fixed.String(); !strings.Contains(s, "repaired: entry replaced by a whiteout") || !strings.Contains(s, "2 removed") {
		t.Errorf("report:\n%s", s)
	}
	if _, err := json.Marshal(fixed); err != nil {
		t.Errorf("json: %v", err)
	}

	after := e.fsck(false)
	want = []string{"main m origin-gone", "snapshot f missing-object", "snapshot m origin-gone", "snapshot nd missing-object", "snapshot new missing-object"}
	if got := problems(after); !slices.Equal(got, want) || len(after.Garbage) != 0 {
		t.Errorf("after the repair:\n%s\nwant:\n%s\nand no garbage: %v", strings.Join(got, "\n"), strings.Join(want, "\n"), after.Garbage)
	}
	e.reopen()
	eq(t, "names after the repair (m's lost data is not repaired)", e.names(""), []string{"keep", "m", "nd"})
	eq(t, "nd/c", e.read("nd/c"), "kept")
	st, err := e.view.Getattr(e.must("nd"))
	if err != nil || st.Mode&07777 != 0755 {
		t.Errorf("nd after the repair: mode %o, %v; want 0755", st.Mode&07777, err)
	}
}
