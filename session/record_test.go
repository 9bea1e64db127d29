package session

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/procfs"
	"github.com/agentfs/agentfs/workspace"
)

// newTestSession makes an ended session of a new project in a state
// directory of the test's own.
func newTestSession(t *testing.T) *Record {
	t.Helper()
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Create(project, project, []string{"agent", "--flag", "it's"})
	if err != nil {
		t.Fatal(err)
	}
	r.State = StateEnded
	r.RunPid, r.RunStart = 0, 0
	if err := r.Save(); err != nil {
		t.Fatal(err)
	}
	// The store, as its daemon would have made it.
	if err := os.MkdirAll(r.Store, 0o700); err != nil {
		t.Fatal(err)
	}
	c, err := r.openOffline("test")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSessionIDs(t *testing.T) {
	id := newID(time.Date(2026, 11, 21, 14, 3, 5, 0, time.UTC))
	if !regexp.MustCompile(`^20261121-140305-[0-9a-f]{4}$`).MatchString(id) {
		t.Errorf("session id %q, want 20261121-140305-XXXX", id)
	}
}

// TestFindSession: an id, its start, its last part; ambiguous and
// unknown ones are refused with the fix.
func TestFindSession(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	project := t.TempDir()
	var ids []string
	for range 2 {
		r, err := Create(project, project, []string{"true"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	for _, id := range ids {
		for _, ref := range []string{id, id[strings.LastIndexByte(id, '-')+1:]} {
			if r, err := Find(ref); err != nil || r.ID != id {
				t.Errorf("Find(%q) = %v, %v; want %s", ref, r, err, id)
			}
		}
	}
	if _, err := Find(ids[0][:8]); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("findSession of a shared prefix: %v, want ambiguous", err)
	}
	for _, ref := range []string{"nosuch", "", "..", "a/b"} {
		if _, err := Find(ref); err == nil || !strings.Contains(err.Error(), "agentfs sessions") {
			t.Errorf("Find(%q): %v, want a refusal naming agentfs sessions", ref, err)
		}
	}
}

// TestCreateSessionInsideProject: a state directory inside the project
// is refused (the session's mount would cover its own store).
func TestCreateSessionInsideProject(t *testing.T) {
	project := t.TempDir()
	t.Setenv("XDG_STATE_HOME", filepath.Join(project, ".state"))
	if _, err := Create(project, project, []string{"true"}); err == nil || !strings.Contains(err.Error(), "set XDG_STATE_HOME") {
		t.Errorf("createSession with the state inside the project: %v", err)
	}
	if _, err := os.Stat(filepath.Join(project, ".state")); !os.IsNotExist(err) {
		t.Errorf("the refused session wrote into the project: %v", err)
	}
}

// TestOfflineSession: the store of an ended session serves the
// daemon's operations in-process, the same as through a mount; unmount
// is refused (nothing is mounted); the store is locked while open.
func TestOfflineSession(t *testing.T) {
	r := newTestSession(t)
	c, err := r.Dial("test")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.CreateSnapshot(ctl.SnapshotCreateArgs{Label: "pre", Kind: "pre-run"})
	if err != nil || info.Kind != "pre-run" {
		t.Fatalf("snapshot create (pre-run) offline: %+v, %v", info, err)
	}
	if _, err := c.CreateSnapshot(ctl.SnapshotCreateArgs{Kind: "safety"}); !errors.Is(err, syscall.EINVAL) || !errors.Is(err, workspace.ErrInvalid) {
		t.Errorf("snapshot create of kind safety: %v, want EINVAL (ErrInvalid)", err)
	}
	if st, err := c.Status(); err != nil || !st.Offline || st.Pid != 0 || st.Lower != r.Project || !st.Session || st.Version != "test" {
		t.Errorf("status offline: %+v, %v", st, err)
	}
	if rep, err := c.Diff(ctl.DiffArgs{}); err != nil || len(rep.Changes) != 0 {
		t.Errorf("diff of an unchanged session: %+v, %v", rep, err)
	}
	if _, err := c.Unmount(); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "nothing is mounted") {
		t.Errorf("unmount offline: %v, want EINVAL, nothing is mounted", err)
	}
	if _, err := c.Bind(ctl.BindArgs{Branch: "main"}); !errors.Is(err, workspace.ErrNotMounted) {
		t.Errorf("bind offline: %v, want ErrNotMounted", err)
	}
	if _, err := r.Dial("test"); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second offline open while the first holds the store: %v, want in use", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c, err = r.Dial("test")
	if err != nil {
		t.Fatalf("opening again after close: %v", err)
	}
	if list, err := c.Snapshots(); err != nil || len(list.Snapshots) != 1 || list.Snapshots[0].ID != info.ID {
		t.Errorf("the snapshot taken offline, listed again: %+v, %v", list, err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

// TestSessionLiveState: a session recorded as running whose processes
// are gone has ended.
func TestSessionLiveState(t *testing.T) {
	r := newTestSession(t)
	r.State = StateRunning
	r.DaemonPid, r.DaemonStart = os.Getpid(), procfs.StartTime(os.Getpid())
	if got := r.Live(); got != StateRunning {
		t.Errorf("live() with the daemon alive = %s, want running", got)
	}
	r.DaemonStart++ // another process with the same pid
	if got := r.Live(); got != StateEnded {
		t.Errorf("live() with the daemon gone = %s, want ended", got)
	}
	if procfs.StartTime(os.Getpid()) == 0 {
		t.Errorf("processStart of this process = 0")
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]ctl.Change{
		{Path: "new", Kind: ctl.Created, New: &ctl.FileInfo{Type: "file", Size: 10}, SizeDelta: 10},
		{Path: "dir", Kind: ctl.Created, New: &ctl.FileInfo{Type: "dir"}},
		{Path: "gone", Kind: ctl.Deleted, Old: &ctl.FileInfo{Type: "file", Size: 7}, SizeDelta: -7},
		{Path: "m", Kind: ctl.Modified, Old: &ctl.FileInfo{Size: 3}, New: &ctl.FileInfo{Size: 5}, SizeDelta: 2},
		{Path: "p", Kind: ctl.ModeChanged, Old: &ctl.FileInfo{Size: 4}, New: &ctl.FileInfo{Size: 4}},
	})
	want := Summary{Created: 2, Modified: 2, Deleted: 1, CreatedBytes: 10, ModifiedBytes: 9, DeletedBytes: 7, Delta: 5}
	if s != want {
		t.Errorf("summarize = %+v, want %+v", s, want)
	}
}

func TestShellQuote(t *testing.T) {
	if got, want := ShellQuote([]string{"claude", "--resume", "it's", "a b", ""}), `claude --resume 'it'\''s' 'a b' ''`; got != want {
		t.Errorf("shellQuote = %s, want %s", got, want)
	}
}
