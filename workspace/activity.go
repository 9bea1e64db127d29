package workspace

import (
	"errors"
	"os"
	"strings"

	"github.com/agentfs/agentfs/activity"
	"github.com/agentfs/agentfs/ctl"
)

// DefaultActivityLimit is the most entries Activity answers unless asked
// for another limit; MaxActivityLimit the most it answers at all.
const (
	DefaultActivityLimit = 1000
	MaxActivityLimit     = 100000
)

// Activity answers the entries of the store's activity log that a
// selects, oldest first: the newest a.Limit of those at or after
// a.Since, of operation a.Op, with a path at or below a.PathPrefix. It
// reads the log files (a daemon writes them; what it has queued but not
// written yet is not in them) and takes no lock of the operations.
func (w *Workspace) Activity(a ctl.ActivityArgs) (ctl.ActivityReply, error) {
	limit := a.Limit
	switch {
	case limit < 0 || limit > MaxActivityLimit:
		return ctl.ActivityReply{}, errorf(ErrInvalid, "a limit of %d entries: give 1 to %d (0 for %d)", limit, MaxActivityLimit, DefaultActivityLimit)
	case limit == 0:
		limit = DefaultActivityLimit
	}
	prefix := strings.Trim(a.PathPrefix, "/")
	reply := ctl.ActivityReply{Entries: []ctl.ActivityEntry{}}
	var kept []ctl.ActivityEntry
	err := activity.ReadSelected(w.opts.Store, activity.Activity, activity.Selection{Since: a.Since}, func(l activity.Line) error {
		e := l.Entry
		if a.Op != "" && e.Op != a.Op || prefix != "" && !below(e.Path, prefix) && !below(e.Path2, prefix) {
			return nil
		}
		if len(kept) == limit {
			kept = kept[1:]
			reply.Truncated = true
		}
		kept = append(kept, ctl.ActivityEntry{Time: e.Time, Pid: e.Pid, Uid: e.Uid, Command: e.Command, Branch: e.Branch,
			Op: e.Op, Path: e.Path, Path2: e.Path2, Attrs: e.Attrs, Count: e.Count, Detail: e.Detail})
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return reply, nil // nothing logged yet
	}
	if err != nil {
		return ctl.ActivityReply{}, ioErrorf(err, "reading the activity log: %v", err)
	}
	reply.Entries = append(reply.Entries, kept...)
	return reply, nil
}

// below reports whether path p is dir or inside it (both relative to
// the mount root, without leading slashes).
func below(p, dir string) bool {
	p = strings.TrimPrefix(p, "/")
	return p == dir || strings.HasPrefix(p, dir+"/")
}
