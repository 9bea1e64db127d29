package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/agentfs/agentfs/branch"
)

// # System stores
//
// The store of an agentfs run --system session has the whole system
// (/) as its lower directory, and every view of it leaves out the
// lower paths it hides and shows empty the ones it seals (agentfs's
// own directories, the kernel's filesystems: overlay.Config.Exclude and
// Seal). The store records both (info/system) when it is made, so that
// a command that opens it later (an ended session's diff, restore,
// export, apply) shows the same tree as the daemon did. Apply on such a
// store writes only the paths it is given: never the whole system.

const systemInfoKey = "system"

// systemInfo is the value of info/system.
type systemInfo struct {
	Hide []string `json:"hide"`
	Seal []string `json:"seal"`
}

// loadSystem records the system store's exclusions (Options.System),
// or takes them from a store that recorded them.
func (w *Workspace) loadSystem() error {
	o := &w.opts
	b, err := w.meta.Info(systemInfoKey)
	switch {
	case errors.Is(err, branch.ErrNotFound):
		if !o.System {
			return nil
		}
	case err != nil:
		return fmt.Errorf("the store %s: reading what its views leave out: %w", o.Store, err)
	default:
		var info systemInfo
		if err := json.Unmarshal(b, &info); err != nil {
			return fmt.Errorf("the store %s: what its views leave out (info/system): %w", o.Store, err)
		}
		if !o.System {
			o.System, o.Exclude, o.Seal = true, info.Hide, info.Seal
			return nil
		}
		if slices.Equal(info.Hide, o.Exclude) && slices.Equal(info.Seal, o.Seal) {
			return nil
		}
	}
	if o.ReadOnly {
		return nil
	}
	b, err = json.Marshal(systemInfo{Hide: o.Exclude, Seal: o.Seal})
	if err == nil {
		err = w.meta.SetInfo(systemInfoKey, b)
	}
	if err != nil {
		return fmt.Errorf("the store %s: recording what its views leave out: %w", o.Store, err)
	}
	return nil
}

// System reports whether the store is a system session's (see above).
func (w *Workspace) System() bool { return w.opts.System }
