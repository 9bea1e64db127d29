package session

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/procfs"
	"github.com/agentfs/agentfs/record"
)

// TestWriteBundle: the record of an ended session comes from its
// pre-run snapshot, its end and its activity log; a session without
// reads logged, a running one, and a directory in the project or not
// empty are refused, and nothing is written.
func TestWriteBundle(t *testing.T) {
	r := newTestSession(t)
	c, err := r.openOffline("test")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.CreateSnapshot(ctl.SnapshotCreateArgs{Label: "agent", Kind: branch.KindPreRun})
	if cerr := c.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	code := 3
	r.PreRun, r.ExitCode = info.ID, &code
	log := `{"time":"2026-11-28T05:00:00Z","uid":0,"op":"lookup","path":"a.txt"}
{"time":"2026-11-28T05:00:00Z","uid":0,"op":"open","path":"a.txt"}
{"time":"2026-11-28T05:00:00Z","uid":0,"branch":"other","op":"open","path":"elsewhere.txt"}
{"time":"2026-11-28T05:00:00Z","uid":0,"op":"lookup","path":"nothing.txt"}
{"time":"2026-11-28T05:00:01Z","uid":0,"op":"dropped","count":2}
`
	if err := os.WriteFile(filepath.Join(r.Store, "activity.log"), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "rec")
	refused := func(what, want string) {
		t.Helper()
		_, err := r.WriteBundle(to, "test")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", what, err, want)
		}
		if _, err := os.Stat(to); err == nil {
			t.Errorf("%s: %s was made", what, to)
		}
	}
	refused("reads not logged", "ran without reads logged")
	r.LogReads = true
	r.State, r.RunPid, r.RunStart = StateRunning, os.Getpid(), procfs.StartTime(os.Getpid())
	refused("a running session", "still running")
	r.State, r.RunPid, r.RunStart = StateApplied, 0, 0
	refused("an applied session", "was applied")
	r.State = StateEnded
	if _, err := r.WriteBundle(filepath.Join(r.Project, "rec"), "test"); err == nil || !strings.Contains(err.Error(), "inside the project") {
		t.Errorf("a record in the project: %v", err)
	}

	res, err := r.WriteBundle(to, "test")
	if err != nil {
		t.Fatal(err)
	}
	if res.Dropped != 2 || res.Files != 2 || res.Blobs != 2 {
		t.Errorf("result %+v, want 2 dropped, 2 paths, 2 blobs", res)
	}
	b, err := os.ReadFile(filepath.Join(to, record.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m record.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Command, r.Command) || m.ExitStatus != 3 || m.StartCwd != r.Dir || m.Uid != uint32(os.Getuid()) {
		t.Errorf("manifest %+v", m)
	}
	if len(m.Files) != 2 || m.Files[0].Path != filepath.Join(r.Project, "a.txt") || !slices.Equal(m.Files[0].Operations, []string{"read", "existence"}) ||
		m.Files[0].Before.Blob == "" || m.Files[0].After.Blob == "" ||
		m.Files[1].Path != filepath.Join(r.Project, "nothing.txt") || m.Files[1].Before.Exists || m.Files[1].After.Exists {
		t.Errorf("files %+v", m.Files)
	}
	// Once written, never over.
	if _, err := r.WriteBundle(to, "test"); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a second record into %s: %v", to, err)
	}
}
