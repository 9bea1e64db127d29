package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentfs/agentfs/ctl"
)

// Sessions: one agentfs run of a command on a project.
//
// A session lives in SESSIONS/ID, SESSIONS being
// ${XDG_STATE_HOME:-~/.local/state}/agentfs/sessions:
//
//	session.json  the record (sessionRecord), replaced atomically
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
// now is what its processes say (sessionRecord.live): a session whose
// daemon died without recording its end counts as ended.
//
// # Reaching a session (the -s flag)
//
// A running session's mount exists only in the session's own mount
// namespace; the CLI reaches it through its daemon's root directory,
// /proc/DAEMON/root/PROJECT/.agentfs.ctl (the kernel resolves the path
// in the daemon's mount namespace, for the daemon's owner and root).
// An ended session has no daemon: the CLI opens its store itself and
// serves the same operations in-process (openOffline). Either way the
// commands get a ctl.Client and do not know the difference
// (dialSession).

// Session states.
const (
	stateStarting  = "starting"
	stateRunning   = "running"
	stateEnded     = "ended"
	stateApplied   = "applied"
	stateDiscarded = "discarded"
)

// sessionRecord is session.json.
type sessionRecord struct {
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
	// PreRun is the id of the snapshot taken before the command ran.
	PreRun string `json:"pre_run_snapshot,omitempty"`
	// Summary is what the command changed, as computed when it ended.
	Summary *changeSummary `json:"summary,omitempty"`
	// Error says why a session ended without its command ending
	// normally (the setup failed, agentfs was killed).
	Error string `json:"error,omitempty"`
}

// changeSummary counts what a session changed: paths created, modified
// (contents, mode, owner, xattrs or type) and deleted, and bytes.
type changeSummary struct {
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

// summarize counts changes (lower to the session's branch).
func summarize(changes []ctl.Change) changeSummary {
	var s changeSummary
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

// total is the number of paths changed.
func (s changeSummary) total() int { return s.Created + s.Modified + s.Deleted }

const (
	sessionRecordName = "session.json"
	sessionStoreName  = "store"
)

// sessionsDir returns the directory of the sessions (not created).
func sessionsDir() (string, error) {
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

// newSessionID returns an id that sorts by time and is unique with
// overwhelming odds: 20261121-140305-a3f9.
func newSessionID(now time.Time) string {
	var b [2]byte
	rand.Read(b[:])
	return now.Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// createSession makes the directory and the record (state starting) of
// a new session of command on project.
func createSession(project, dir string, command []string) (*sessionRecord, error) {
	base, err := sessionsDir()
	if err != nil {
		return nil, err
	}
	if insideAny(base, []string{project}) {
		return nil, fmt.Errorf("the sessions directory %s is inside the project %s, which agentfs never writes to (and which the session's mount covers): set XDG_STATE_HOME to a directory outside the project", base, project)
	}
	if _, err := ownDir(base); err != nil {
		return nil, fmt.Errorf("the sessions directory: %w", err)
	}
	now := time.Now()
	for range 10 {
		id := newSessionID(now)
		sdir := filepath.Join(base, id)
		if err := os.Mkdir(sdir, 0o700); errors.Is(err, os.ErrExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("creating the session directory: %w", err)
		}
		r := &sessionRecord{ID: id, Project: project, Dir: dir, Command: command, Started: now.Round(0),
			Store: filepath.Join(sdir, sessionStoreName), Mountpoint: project, State: stateStarting,
			RunPid: os.Getpid(), RunStart: processStart(os.Getpid())}
		if err := r.save(); err != nil {
			os.RemoveAll(sdir)
			return nil, err
		}
		return r, nil
	}
	return nil, errors.New("creating the session directory: no free session id (10 tries)")
}

// dir is the session's directory.
func (r *sessionRecord) dir() string { return filepath.Dir(r.Store) }

// save writes the record atomically.
func (r *sessionRecord) save() error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("session %s: %w", r.ID, err)
	}
	p := filepath.Join(r.dir(), sessionRecordName)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the record of session %s: %w", r.ID, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("writing the record of session %s: %w", r.ID, err)
	}
	return nil
}

// loadSession reads the record in session directory dir.
func loadSession(dir string) (*sessionRecord, error) {
	b, err := os.ReadFile(filepath.Join(dir, sessionRecordName))
	if err != nil {
		return nil, err
	}
	var r sessionRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the session record %s: %w", filepath.Join(dir, sessionRecordName), err)
	}
	// The record may have been moved with its directory.
	r.Store = filepath.Join(dir, sessionStoreName)
	return &r, nil
}

// listSessions returns every session, oldest first. Directories
// without a readable record are skipped.
func listSessions() ([]*sessionRecord, error) {
	base, err := sessionsDir()
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
	var out []*sessionRecord
	for _, n := range names {
		if !n.IsDir() {
			continue
		}
		if r, err := loadSession(filepath.Join(base, n.Name())); err == nil {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *sessionRecord) int {
		if c := a.Started.Compare(b.Started); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// findSession returns the session ref names: its id, or an unambiguous
// start or end of it (the random part: "a3f9").
func findSession(ref string) (*sessionRecord, error) {
	if ref == "" || strings.ContainsAny(ref, "/\x00") || ref == "." || ref == ".." {
		return nil, fmt.Errorf("%q is not a session id: agentfs sessions lists them", ref)
	}
	all, err := listSessions()
	if err != nil {
		return nil, err
	}
	var matches []*sessionRecord
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

// processStart returns the start time of process pid (clock ticks
// after boot, field 22 of /proc/PID/stat), or 0 when it is gone.
func processStart(pid int) uint64 {
	f := procStatFields(pid)
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// procStatFields returns the fields of /proc/PID/stat after the
// command name: [0] is field 3 (the state), [1] the parent pid, ...;
// nil when the process is gone.
func procStatFields(pid int) []string {
	if pid <= 0 {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// "pid (comm) state ppid ...": the name may hold anything; the
	// fields follow the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// sameProcess reports whether pid is alive and is the process that
// started at start.
func sameProcess(pid int, start uint64) bool {
	return pid > 0 && alive(pid) && (start == 0 || processStart(pid) == start)
}

// daemonAlive reports whether the session's daemon still runs.
func (r *sessionRecord) daemonAlive() bool { return sameProcess(r.DaemonPid, r.DaemonStart) }

// runAlive reports whether the agentfs run of the session still runs.
func (r *sessionRecord) runAlive() bool { return sameProcess(r.RunPid, r.RunStart) }

// live returns the session's state as its processes show it: a
// session recorded as starting or running whose processes are gone has
// ended (without an exit code).
func (r *sessionRecord) live() string {
	switch r.State {
	case stateStarting:
		if r.daemonAlive() {
			return stateRunning
		}
		if r.runAlive() {
			return stateStarting
		}
		return stateEnded
	case stateRunning:
		if r.daemonAlive() || r.runAlive() {
			return stateRunning
		}
		return stateEnded
	}
	return r.State
}

// hasStore reports whether the session still has its store.
func (r *sessionRecord) hasStore() bool {
	_, err := os.Stat(filepath.Join(r.Store, "meta"))
	return err == nil
}

// commandString is the command as one line, for listings and labels.
func (r *sessionRecord) commandString() string { return shellQuote(r.Command) }

// shellQuote joins args as a shell would need them typed.
func shellQuote(args []string) string {
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

// dialSession connects to session ref: to its daemon while it runs,
// else to its store opened in this process (openOffline). The client
// serves the same operations either way.
func dialSession(ref string) (*ctl.Client, *sessionRecord, error) {
	r, err := findSession(ref)
	if err != nil {
		return nil, nil, err
	}
	c, err := r.dial()
	return c, r, err
}

// dial connects to the session (see dialSession).
func (r *sessionRecord) dial() (*ctl.Client, error) {
	switch st := r.live(); {
	case st == stateDiscarded || !r.hasStore():
		return nil, fmt.Errorf("session %s was discarded: its store is gone (agentfs sessions lists the sessions that have one)", r.ID)
	case st == stateStarting:
		return nil, fmt.Errorf("session %s is starting: try again in a moment", r.ID)
	}
	if r.daemonAlive() {
		root := filepath.Join("/proc", strconv.Itoa(r.DaemonPid), "root", r.Mountpoint)
		c, err := ctl.Dial(root)
		if err == nil {
			return c, nil
		}
		// The daemon may be unmounting (the command ended): its store
		// is ours once it has exited.
		proc := watchProcess(r.DaemonPid)
		gone := proc.wait(busyWait + detachGrace + abortWait)
		proc.close()
		if !gone || r.daemonAlive() {
			return nil, fmt.Errorf("session %s: reaching its daemon (pid %d) through %s: %w", r.ID, r.DaemonPid, root, err)
		}
	}
	return openOffline(r)
}
