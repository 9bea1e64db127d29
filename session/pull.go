package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentfs/agentfs/daemon"
	"github.com/agentfs/agentfs/hostpath"
	"github.com/agentfs/agentfs/remote"
	"github.com/agentfs/agentfs/workspace"
)

// # Pulled sessions
//
// agentfs pull makes a session pushed from another machine one of this
// machine's, under the id it had there: SESSIONS/ID holds, while it is
// pulled, the objects fetched so far (pull-objects/) and the store
// being built (store.pulling/); once the store is complete it is renamed
// to store/, the record is written, and the objects are removed. A
// session directory without a record is not listed (List skips it), so
// a pull that was interrupted leaves no half-built session behind; the
// next pull of the same id resumes with the objects it has.

// PullDirs are the directories of a session being pulled.
type PullDirs struct {
	Dir      string // SESSIONS/ID
	Building string // the store being built
	Objects  string // the fetched objects
}

// PreparePull makes the directory of session id, pulled into project
// (which it must not be inside), or finds the one an interrupted pull
// left; a session of that id that exists already is an error.
func PreparePull(id, project string) (PullDirs, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return PullDirs{}, fmt.Errorf("%q cannot be a session id", id)
	}
	base, err := BaseDir()
	if err != nil {
		return PullDirs{}, err
	}
	if hostpath.InsideAny(base, []string{project}) {
		return PullDirs{}, fmt.Errorf("the sessions directory %s is inside the project %s, which agentfs never writes to: set XDG_STATE_HOME to a directory outside the project", base, project)
	}
	if _, err := daemon.OwnDir(base); err != nil {
		return PullDirs{}, fmt.Errorf("the sessions directory: %w", err)
	}
	d := PullDirs{Dir: filepath.Join(base, id)}
	d.Building, d.Objects = filepath.Join(d.Dir, "store.pulling"), filepath.Join(d.Dir, "pull-objects")
	if _, err := os.Stat(filepath.Join(d.Dir, RecordName)); err == nil {
		return PullDirs{}, fmt.Errorf("session %s exists here already: agentfs discard -s %s removes its changes (agentfs sessions lists it)", id, id)
	}
	if err := os.Mkdir(d.Dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return PullDirs{}, fmt.Errorf("creating the session directory: %w", err)
	}
	// A store an interrupted pull was building is built again.
	if err := os.RemoveAll(d.Building); err != nil {
		return PullDirs{}, err
	}
	return d, nil
}

// FinishPull puts the built store in place and writes r, the record of
// the pulled session (its Store is set here), then removes the fetched
// objects.
func FinishPull(d PullDirs, r *Record) error {
	r.Store = filepath.Join(d.Dir, sessionStoreName)
	if err := os.Rename(d.Building, r.Store); err != nil {
		return fmt.Errorf("session %s: putting its store in place: %w", r.ID, err)
	}
	if err := r.Save(); err != nil {
		return err
	}
	return os.RemoveAll(d.Objects)
}

// PullArgs is what Pull needs: the remote (opened, and the name it has
// here), the session's id there, this machine's checkout, and how to
// transfer.
type PullArgs struct {
	Remote     *remote.Remote
	RemoteName string
	Session    string
	Project    string // absolute
	Parallel   int
	Progress   func(remote.Progress)
	Version    string
}

// Pull makes session a.Session of the remote one of this machine's,
// over a.Project: it prepares (or resumes) its directory, builds its
// store from the remote (workspace.Pull, logged to SESSIONS/ID/pull.log),
// then writes its record, which makes it listed.
func Pull(ctx context.Context, a PullArgs) (workspace.PullResult, error) {
	dirs, err := PreparePull(a.Session, a.Project)
	if err != nil {
		return workspace.PullResult{}, err
	}
	if err := os.MkdirAll(dirs.Building, 0o700); err != nil {
		return workspace.PullResult{}, err
	}
	logf, err := os.OpenFile(filepath.Join(dirs.Dir, "pull.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return workspace.PullResult{}, err
	}
	defer func() { _ = logf.Close() }()
	res, err := workspace.Pull(ctx, workspace.PullOptions{Remote: a.Remote, Session: a.Session, Store: dirs.Building, Project: a.Project,
		Objects: dirs.Objects, Parallel: a.Parallel, Progress: a.Progress, Version: a.Version,
		Logger: slog.New(slog.NewTextHandler(logf, nil)).With("pull", a.Session)})
	if err != nil {
		return res, err
	}
	rec := &Record{ID: a.Session, Project: a.Project, Dir: a.Project, Command: res.Doc.Command, Started: res.Doc.Started,
		ExitCode: res.Doc.ExitCode, Mountpoint: a.Project, State: StateEnded, PreRun: res.Snapshots[res.Doc.PreRun],
		PulledFrom: a.RemoteName + " " + a.Remote.Location().String()}
	if !res.Doc.Ended.IsZero() {
		ended := res.Doc.Ended
		rec.Ended = &ended
	}
	return res, FinishPull(dirs, rec)
}
