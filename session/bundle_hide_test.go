package session

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/hide"
	"github.com/agentfs/agentfs/record"
	"github.com/agentfs/agentfs/workspace"
)

// TestWriteBundleHides: the paths the session's mount hid (the patterns
// its store recorded) are not in its record: neither the hidden project
// file nor the agent's own file there, nor what is in a hidden
// directory.
func TestWriteBundleHides(t *testing.T) {
	r := newTestSession(t)
	for p, content := range map[string]string{".env": "SECRET env", "secrets/token": "SECRET token"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(r.Project, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r.Project, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The store, as its daemon would have made it with --hide.
	rules, err := hide.New([]hide.Pattern{{Pattern: ".env", From: hide.FromFlag}, {Pattern: "secrets/", From: hide.FromFlag}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := workspace.Open(workspace.Options{Store: r.Store, Lower: r.Project, Session: true, Version: "test", Hide: rules})
	if err != nil {
		t.Fatal(err)
	}
	info, err := w.CreateSnapshot(ctl.Caller{}, ctl.SnapshotCreateArgs{Label: "agent", Kind: branch.KindPreRun})
	if cerr := w.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	r.PreRun, r.LogReads = info.ID, true
	log := `{"time":"2026-11-28T05:00:00Z","uid":0,"op":"lookup","path":"a.txt"}
{"time":"2026-11-28T05:00:00Z","uid":0,"op":"open","path":"a.txt"}
{"time":"2026-11-28T05:00:00Z","uid":0,"op":"lookup","path":".env"}
{"time":"2026-11-28T05:00:00Z","uid":0,"op":"lookup","path":"secrets/token"}
`
	if err := os.WriteFile(filepath.Join(r.Store, "activity.log"), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "rec")
	if _, err := r.WriteBundle(to, "test"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(to, record.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "a.txt") {
		t.Errorf("the manifest lacks a.txt:\n%s", b)
	}
	for _, hidden := range []string{".env", "secrets", "SECRET"} {
		if strings.Contains(string(b), hidden) {
			t.Errorf("the manifest names hidden %q:\n%s", hidden, b)
		}
	}
	blobs, err := os.ReadFile(filepath.Join(to, "blobs.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(blobs), "SECRET") {
		t.Errorf("blobs.parquet holds a hidden file's contents")
	}
}
