// Package session holds agentfs run sessions: one run of a command on
// a project, in a private mount namespace, with its store kept after
// the command ends. It owns the session records (where they live,
// their states, finding and listing them), reaching a session (its
// daemon while it runs, its store in this process once it has ended),
// and the processes of agentfs run (run.go); a system session
// (agentfs run --system, system.go) shows the command the whole system
// as its root directory.
//
// A session lives in SESSIONS/ID, SESSIONS being
// ${XDG_STATE_HOME:-~/.local/state}/agentfs/sessions:
//
//	session.json  the record (Record), replaced atomically
//	store/        the kept store of the session's mount (metadata,
//	              changed files, agentfs.log)
//
// # States
//
//	starting  → running   the daemon is up, the command runs
//	running   → ended     the command exited, the mount is gone
//	ended     → applied   agentfs apply -s took the changes
//	any but running → discarded   agentfs discard -s removed the store
//
// The record says what a session was last seen doing; whether it runs
// now is what its processes say (Record.Live): a session whose
// daemon died without recording its end counts as ended.
//
// # Reaching a session (the -s flag)
//
// A running session's mount exists only in the session's own mount
// namespace; the CLI reaches it through its daemon's root directory,
// /proc/DAEMON/root/PROJECT/.agentfs.ctl (the kernel resolves the path
// in the daemon's mount namespace, for the daemon's owner and root).
// An ended session has no daemon: the CLI opens its store itself and
// serves the same operations in-process (workspace.Open,
// workspace.Local). Either way the commands get a workspace.Client and
// do not know the difference (Dial).
package session

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"strings"
	"time"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/hostpath"
	"github.com/agentfs/agentfs/procfs"
)

// Session states.
const (
	StateStarting  = "starting"
	StateRunning   = "running"
	StateEnded     = "ended"
	StateApplied   = "applied"
	StateDiscarded = "discarded"
)

// Record is session.json.
type Record struct {
	ID      string   `json:"id"`
	Project string   `json:"project"`
	Command []string `json:"command"`
	// Dir is where the command started (the project, or below it).
	Dir     string     `json:"dir"`
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	// ExitCode is the command's exit status (128+N when killed by
	// signal N); nil until it ends, or when it never ended (agentfs
	// itself was killed).
	ExitCode *int   `json:"exit_code,omitempty"`
	Store    string `json:"store"`
	// Mountpoint is where the session's mount shows the project: the
	// project's own path, in the session's mount namespace.
	Mountpoint string `json:"mountpoint"`
	// RunPid is the agentfs run process; DaemonPid the daemon serving
	// the mount. The start times (clock ticks after boot, from
	// /proc/PID/stat) tell them from later processes with the same pid.
	RunPid      int    `json:"run_pid"`
	RunStart    uint64 `json:"run_start,omitempty"`
	DaemonPid   int    `json:"daemon_pid,omitempty"`
	DaemonStart uint64 `json:"daemon_start,omitempty"`
	State       string `json:"state"`
	// UserNamespace: the session runs in a user namespace (agentfs run
	// as a normal user).
	UserNamespace bool `json:"user_namespace"`
	// PreRun is the id of the snapshot taken before the command ran;
	// PostRun the one of its end, when it changed anything after the
	// last snapshot.
	PreRun  string `json:"pre_run_snapshot,omitempty"`
	PostRun string `json:"post_run_snapshot,omitempty"`
	// LogReads: the activity log of the session records reads too
	// (lookups, opens for reading, listings), as agentfs record needs.
	LogReads bool `json:"log_reads,omitempty"`
	// Summary is what the command changed, as computed when it ended.
	Summary *Summary `json:"summary,omitempty"`
	// Error says why a session ended without its command ending
	// normally (the setup failed, agentfs was killed).
	Error string `json:"error,omitempty"`
	// Supervised: the command runs under a supervisor (agentfs run
	// --supervise), which starts it again after each rewind; the
	// Relaunches say when, and from what.
	Supervised bool       `json:"supervised,omitempty"`
	Relaunches []Relaunch `json:"relaunches,omitempty"`
	// Kind is KindProject (agentfs run) or KindSystem (agentfs run
	// --system, system.go); records made before kinds have none and
	// are a project's (KindOf).
	Kind string `json:"kind,omitempty"`
	// System is what a system session's view shows live or leaves out.
	System *SystemView `json:"system,omitempty"`
	// PulledFrom is the remote (NAME s3://BUCKET/PREFIX) the session was
	// pulled from (agentfs pull); empty for a session run here.
	PulledFrom string `json:"pulled_from,omitempty"`
	// Roots is the chain of the Merkle roots of the session's
	// snapshots, in the order taken, recorded when the command ended
	// (see RootLink).
	Roots []RootLink `json:"roots,omitempty"`
}

// RootLink is one snapshot in the session record's chain of roots:
// its Merkle root (docs/store-format.md, "Content hashes") and Chain,
// the SHA-256 of the previous link's Chain (32 zero bytes for the
// first) followed by this Root, both as 32 bytes: the last Chain
// commits to every root before it, in order.
type RootLink struct {
	Snapshot string `json:"snapshot"`
	Kind     string `json:"kind"`
	Root     string `json:"root"`
	Chain    string `json:"chain"`
}

// Session kinds.
const (
	KindProject = "project"
	KindSystem  = "system"
)

// KindOf is the session's kind.
func (r *Record) KindOf() string {
	if r.Kind == "" {
		return KindProject
	}
	return r.Kind
}

// Relaunch is one start of a supervised command after a rewind.
type Relaunch struct {
	Time time.Time `json:"time"`
	// Snapshot is what the branch was restored to; Safety the snapshot
	// of the state before (empty when the restore failed: Error).
	Snapshot string `json:"snapshot"`
	Safety   string `json:"safety,omitempty"`
	// ExitCode is the stopped command's (128+N for signal N).
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
}

// Summary counts what a session changed: paths created, modified
// (contents, mode, owner, xattrs or type) and deleted, and bytes.
type Summary struct {
	Created  int `json:"created"`
	Modified int `json:"modified"`
	Deleted  int `json:"deleted"`
	// CreatedBytes: the size of the files created; ModifiedBytes: the
	// size now of the files modified; DeletedBytes: the size the files
	// deleted had; Delta: the change in total size.
	CreatedBytes  int64 `json:"created_bytes"`
	ModifiedBytes int64 `json:"modified_bytes"`
	DeletedBytes  int64 `json:"deleted_bytes"`
	Delta         int64 `json:"delta_bytes"`
}

// Summarize counts changes (lower to the session's branch).
func Summarize(changes []ctl.Change) Summary {
	var s Summary
	for _, c := range changes {
		s.Delta += c.SizeDelta
		switch c.Kind {
		case ctl.Created:
			s.Created++
			s.CreatedBytes += c.New.Size
		case ctl.Deleted:
			s.Deleted++
			s.DeletedBytes += c.Old.Size
		default:
			s.Modified++
			if c.New != nil {
				s.ModifiedBytes += c.New.Size
			}
		}
	}
	return s
}

// Total is the number of paths changed.
func (s Summary) Total() int { return s.Created + s.Modified + s.Deleted }

const (
	RecordName       = "session.json"
	sessionStoreName = "store"
)

// BaseDir returns the directory of the sessions (not created).
func BaseDir() (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" || !filepath.IsAbs(base) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the state directory for sessions: %w: set XDG_STATE_HOME or HOME", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "agentfs", "sessions"), nil
}

// newID returns an id that sorts by time and is unique with
// overwhelming odds: 20261121-140305-a3f9.
func newID(now time.Time) string {
	var b [2]byte
	rand.Read(b[:])
	return now.Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// Create makes the directory and the record (state starting) of
// a new session of command on project.
func Create(project, dir string, command []string) (*Record, error) {
	return create(project, dir, command, false)
}

// create is Create; a system session's project is / (its sessions
// directory is inside, and hidden from its view).
func create(project, dir string, command []string, system bool) (*Record, error) {
	base, err := BaseDir()
	if err != nil {
		return nil, err
	}
	if !system && hostpath.InsideAny(base, []string{project}) {
		return nil, fmt.Errorf("the sessions directory %s is inside the project %s, which agentfs never writes to (and which the session's mount covers): set XDG_STATE_HOME to a directory outside the project", base, project)
	}
	if _, err := daemon.OwnDir(base); err != nil {
		return nil, fmt.Errorf("the sessions directory: %w", err)
	}
	now := time.Now()
	for range 10 {
		id := newID(now)
		sdir := filepath.Join(base, id)
		if err := os.Mkdir(sdir, 0o700); errors.Is(err, os.ErrExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("creating the session directory: %w", err)
		}
		r := &Record{ID: id, Project: project, Dir: dir, Command: command, Started: now.Round(0),
			Store: filepath.Join(sdir, sessionStoreName), Mountpoint: project, State: StateStarting, Kind: KindProject,
			RunPid: os.Getpid(), RunStart: procfs.StartTime(os.Getpid())}
		if system {
			r.Kind, r.Mountpoint = KindSystem, filepath.Join(sdir, systemRootName)
			if err := os.Mkdir(r.Mountpoint, 0o700); err != nil {
				r.remove()
				return nil, fmt.Errorf("creating the session's root directory: %w", err)
			}
		}
		if err := r.Save(); err != nil {
			r.remove() // the session never started
			return nil, err
		}
		return r, nil
	}
	return nil, errors.New("creating the session directory: no free session id (10 tries)")
}

// SessionDir is the session's directory.
func (r *Record) SessionDir() string { return filepath.Dir(r.Store) }

// Save writes the record atomically.
func (r *Record) Save() error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("session %s: %w", r.ID, err)
	}
	p := filepath.Join(r.SessionDir(), RecordName)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the record of session %s: %w", r.ID, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("writing the record of session %s: %w", r.ID, err)
	}
	return nil
}

// Load reads the record in session directory dir.
func Load(dir string) (*Record, error) {
	b, err := os.ReadFile(filepath.Join(dir, RecordName))
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the session record %s: %w", filepath.Join(dir, RecordName), err)
	}
	// The record may have been moved with its directory.
	r.Store = filepath.Join(dir, sessionStoreName)
	return &r, nil
}

// List returns every session, oldest first. Directories
// without a readable record are skipped.
func List() ([]*Record, error) {
	base, err := BaseDir()
	if err != nil {
		return nil, err
	}
	names, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing sessions: %w", err)
	}
	var out []*Record
	for _, n := range names {
		if !n.IsDir() {
			continue
		}
		if r, err := Load(filepath.Join(base, n.Name())); err == nil {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *Record) int {
		if c := a.Started.Compare(b.Started); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Find returns the session ref names: its id, or an unambiguous
// start or end of it (the random part: "a3f9").
func Find(ref string) (*Record, error) {
	if ref == "" || strings.ContainsAny(ref, "/\x00") || ref == "." || ref == ".." {
		return nil, fmt.Errorf("%q is not a session id: agentfs sessions lists them", ref)
	}
	all, err := List()
	if err != nil {
		return nil, err
	}
	var matches []*Record
	for _, r := range all {
		if r.ID == ref {
			return r, nil
		}
		if strings.HasPrefix(r.ID, ref) || strings.HasSuffix(r.ID, "-"+ref) {
			matches = append(matches, r)
		}
	}
	switch len(matches) {
	case 0:
		return nil, fmt.Errorf("no session %q: agentfs sessions lists them (agentfs sessions --all with the discarded ones)", ref)
	case 1:
		return matches[0], nil
	}
	var ids []string
	for _, r := range matches {
		ids = append(ids, r.ID)
	}
	return nil, fmt.Errorf("the session id %q is ambiguous: it matches %s: give more of it", ref, strings.Join(ids, ", "))
}

// DaemonAlive reports whether the session's daemon still runs.
func (r *Record) DaemonAlive() bool { return procfs.SameProcess(r.DaemonPid, r.DaemonStart) }

// RunAlive reports whether the agentfs run of the session still runs.
func (r *Record) RunAlive() bool { return procfs.SameProcess(r.RunPid, r.RunStart) }

// Live returns the session's state as its processes show it: a
// session recorded as starting or running whose processes are gone has
// ended (without an exit code).
func (r *Record) Live() string {
	switch r.State {
	case StateStarting:
		if r.DaemonAlive() {
			return StateRunning
		}
		if r.RunAlive() {
			return StateStarting
		}
		return StateEnded
	case StateRunning:
		if r.DaemonAlive() || r.RunAlive() {
			return StateRunning
		}
		return StateEnded
	}
	return r.State
}

// HasStore reports whether the session still has its store.
func (r *Record) HasStore() bool {
	_, err := os.Stat(filepath.Join(r.Store, "meta"))
	return err == nil
}

// CommandString is the command as one line, for listings and labels.
func (r *Record) CommandString() string { return ShellQuote(r.Command) }

// ShellQuote joins args as a shell would need them typed.
func ShellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
