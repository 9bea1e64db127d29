package daemon

import (
	"errors"
	"fmt"
	"slices"

	"github.com/agentfs/agentfs/hostpath"
)

// # The mount of a system session
//
// agentfs run --system shows the whole system: the daemon's lower is
// /, in the session's private mount namespace, and its mountpoint a
// directory of the session's own, where the session process then makes
// the command's root (session/system.go). The view must not show
// itself, nor the store it writes: the mountpoint and the store are
// inside paths the view hides (Plan.Exclude), which the session lists
// with agentfs's other directories.

// checkSystemPlan checks the plan of a system session's mount.
func checkSystemPlan(p *Plan) error {
	switch {
	case !p.Session:
		return errors.New("--system-mount is agentfs run --system's own: use agentfs run --system")
	case p.Lower != "/":
		return fmt.Errorf("internal: a system session's lower directory is /, not %s", p.Lower)
	case !hostpath.InsideAny(p.Mountpoint, append(slices.Clone(p.Exclude), p.Seal...)):
		return fmt.Errorf("internal: a system session's mountpoint %s must be inside a path its view hides", p.Mountpoint)
	case inOuterMountNamespace():
		return errors.New("--system-mount is agentfs run --system's own: it mounts in a private mount namespace; use agentfs run --system")
	}
	return nil
}

// checkSystemStore checks that a system session's store is inside a
// path its view hides (it is inside the lower, /, as everything is).
func checkSystemStore(p *Plan) error {
	if p.Store != "" && !hostpath.InsideAny(p.Store, append(slices.Clone(p.Exclude), p.Seal...)) {
		return fmt.Errorf("internal: a system session's store %s must be inside a path its view hides", p.Store)
	}
	return nil
}
