package workspace

import (
	"errors"
	"fmt"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/hide"
)

// # Hidden project paths
//
// A store keeps the hide rules of its mount (store info key "hide",
// hide.Rules.Marshal): a mount records its own (Options.Hide) when it
// opens the store, replacing what an earlier mount recorded, and every
// other open (a command on an ended session) reads them back, so that
// diff, apply and export see what the mount showed. Every view of the
// store gets the rules and the project's hidden inodes (hide.Scan, made
// once at the open).

// hideInfoKey is the store info key of the hide rules.
const hideInfoKey = "hide"

// openHide fixes the store's hide rules: the mount's, recorded, or the
// recorded ones; then scans the project for its hidden inodes.
func (w *Workspace) openHide() error {
	rules := w.opts.Hide
	if rules != nil && !w.opts.ReadOnly {
		if err := w.meta.SetInfo(hideInfoKey, rules.Marshal()); err != nil {
			return fmt.Errorf("recording its hide patterns: %w", err)
		}
	}
	if rules == nil {
		b, err := w.meta.Info(hideInfoKey)
		switch {
		case errors.Is(err, branch.ErrNotFound):
			rules = &hide.Rules{}
		case err != nil:
			return fmt.Errorf("reading its hide patterns: %w", err)
		default:
			if rules, err = hide.Unmarshal(b); err != nil {
				return err
			}
		}
	}
	w.hide = rules
	hidden, err := hide.Scan(rules, w.opts.LowerDir)
	if err != nil {
		return err
	}
	w.hidden = hidden
	if !rules.Empty() {
		w.log.Info("hide patterns", "patterns", len(rules.Patterns()), "hidden files", hidden.Len())
	}
	return nil
}

// HidePatterns returns the store's hide patterns (for status).
func (w *Workspace) HidePatterns() []hide.Pattern { return w.hide.Patterns() }

// HideRules returns the store's hide rules and the project's hidden
// inodes, for what reads the project other than through a view of the
// store (a record, a push): a project path p is left out when
// rules.Hidden(p, isDir), or when it is a regular file with more than
// one link and inodes.Hides(dev, ino). Every view of the store (View,
// and those Diff and Export open) hides them already.
func (w *Workspace) HideRules() (*hide.Rules, *hide.Inodes) { return w.hide, w.hidden }
