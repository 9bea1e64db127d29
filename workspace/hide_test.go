package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/hide"
)

// TestHideRecorded: a mount's hide rules are recorded in its store;
// a later open without rules (a command on an ended session) uses them
// in every view, status lists them, and the next mount's replace them.
func TestHideRecorded(t *testing.T) {
	lower, store := t.TempDir(), t.TempDir()
	for name, content := range map[string]string{".env": "secret", "a.txt": "a"} {
		if err := os.WriteFile(filepath.Join(lower, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ps := []hide.Pattern{{Pattern: ".env", From: hide.FromUser}, {Pattern: "*.pem", From: hide.FromFlag}}
	rules, err := hide.New(ps)
	if err != nil {
		t.Fatal(err)
	}
	open := func(r *hide.Rules) *Workspace {
		t.Helper()
		w, err := Open(Options{Store: store, Lower: lower, Version: "test", Hide: r})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := open(rules)
	v := w.View()
	if _, _, err := v.Lookup(v.Root(), ".env"); !errors.Is(err, unix.ENOENT) {
		t.Errorf("lookup .env in the mount's view: %v, want ENOENT", err)
	}
	writeFile(t, v, ".env", "own")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	w = open(nil) // as agentfs diff -s of an ended session does
	var got []hide.Pattern
	for _, p := range w.Status().Hide {
		got = append(got, hide.Pattern{Pattern: p.Pattern, From: p.From})
	}
	if !slices.Equal(got, ps) {
		t.Errorf("status hide after reopening = %v, want the recorded %v", got, ps)
	}
	rep, err := w.Diff(self, ctl.DiffArgs{})
	if err != nil || len(rep.Changes) != 1 || rep.Changes[0].Path != ".env" || !rep.Changes[0].Hidden {
		t.Errorf("Diff after reopening = %+v, %v; want .env created and marked hidden", rep.Changes, err)
	}
	to := filepath.Join(t.TempDir(), "x")
	if _, err := w.Export(self, ctl.ExportArgs{Ref: LowerRef, To: to}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(to, ".env")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("export of the project after reopening holds .env: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	w = open(&hide.Rules{}) // a mount without patterns
	if len(w.Status().Hide) != 0 {
		t.Errorf("status hide of a mount without patterns = %v, want none", w.Status().Hide)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
