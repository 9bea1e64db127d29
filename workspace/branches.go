package workspace

import (
	"errors"
	"fmt"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
)

// CreateBranch creates branch a.Name from the snapshot a.From names or,
// without From, from a snapshot of the caller's branch taken for it
// (kind auto; deleted again if the branch cannot be created).
func (w *Workspace) CreateBranch(c ctl.Caller, a ctl.BranchCreateArgs) (ctl.BranchInfo, error) {
	return locked(w, func() (ctl.BranchInfo, error) {
		if err := w.writable("creating a branch"); err != nil {
			return ctl.BranchInfo{}, err
		}
		if _, err := w.meta.Layer(a.Name); err == nil {
			return ctl.BranchInfo{}, errorf(ErrExists, "branch %q exists already: choose another name (agentfs branch list shows them)", a.Name)
		}
		// CreateLayer checks the name before it looks at the snapshot:
		// a zero snapshot tells a bad name without taking one for
		// nothing.
		if _, err := w.meta.CreateLayer(a.Name, branch.Snapshot{}); errors.Is(err, branch.ErrInvalidName) {
			return ctl.BranchInfo{}, invalidName(err, "branch")
		}
		var from branch.Snapshot
		taken := false
		if a.From != "" {
			var err error
			if from, err = w.resolveSnapshot(a.From); err != nil {
				return ctl.BranchInfo{}, err
			}
		} else {
			var err error
			v := w.callerView(c)
			if from, err = v.Snapshot("start of branch "+a.Name, branch.KindAuto); err != nil {
				w.dropSnapshotLocked(from.ID, "branch "+a.Name)
				return ctl.BranchInfo{}, storeError(err, fmt.Sprintf("taking a snapshot of branch %q for branch %q", v.Layer().Name(), a.Name))
			}
			taken = true
			w.hashes.Kick()
		}
		l, err := w.meta.CreateLayer(a.Name, from)
		if err != nil {
			if taken {
				w.dropSnapshotLocked(from.ID, "branch "+a.Name)
			}
			if errors.Is(err, branch.ErrInvalidName) {
				return ctl.BranchInfo{}, invalidName(err, "branch")
			}
			return ctl.BranchInfo{}, storeError(err, fmt.Sprintf("creating branch %q", a.Name))
		}
		w.log.Info("branch created", "branch", a.Name, "from", from.ID, "pid", c.Pid)
		return w.branchInfoLocked(c, l.Name())
	})
}

// Branches describes every branch, sorted by name; Current marks the
// one caller c sees.
func (w *Workspace) Branches(c ctl.Caller) (ctl.BranchList, error) {
	return locked(w, func() (ctl.BranchList, error) { return w.branchesLocked(c) })
}

func (w *Workspace) branchesLocked(c ctl.Caller) (ctl.BranchList, error) {
	infos, err := w.meta.LayerInfos()
	if err != nil {
		return ctl.BranchList{}, storeError(err, "listing branches")
	}
	def, mine := w.current.Load().Name(), w.callerView(c).Layer().Name()
	bound := map[string]int{}
	for _, b := range w.bindings() {
		bound[b.Branch]++
	}
	list := ctl.BranchList{Branches: []ctl.BranchInfo{}}
	for _, li := range infos {
		list.Branches = append(list.Branches, ctl.BranchInfo{Name: li.Name, Origin: li.Origin, Created: li.Created,
			Current: li.Name == mine, Default: li.Name == def, Bound: bound[li.Name]})
	}
	return list, nil
}

// branchInfoLocked describes branch name, as caller c sees it.
func (w *Workspace) branchInfoLocked(c ctl.Caller, name string) (ctl.BranchInfo, error) {
	list, err := w.branchesLocked(c)
	if err != nil {
		return ctl.BranchInfo{}, err
	}
	for _, b := range list.Branches {
		if b.Name == name {
			return b, nil
		}
	}
	return ctl.BranchInfo{}, errorf(ErrNotFound, "no branch %q: agentfs branch list shows them", name)
}

// DeleteBranch deletes a branch the mount does not show; main stays.
// Its snapshots stay; its objects go at the next gc. Processes still
// bound to it get ENOENT from then on, never another branch's files.
func (w *Workspace) DeleteBranch(c ctl.Caller, name string) (ctl.BranchInfo, error) {
	return locked(w, func() (ctl.BranchInfo, error) {
		if err := w.writable("deleting a branch"); err != nil {
			return ctl.BranchInfo{}, err
		}
		info, err := w.branchInfoLocked(c, name)
		if err != nil {
			return ctl.BranchInfo{}, err
		}
		switch {
		case name == "main":
			return ctl.BranchInfo{}, errorf(ErrBusy, "branch main cannot be deleted: it is where every store starts")
		case info.Default:
			return ctl.BranchInfo{}, errorf(ErrBusy, "branch %q is the one the mount shows: switch to another first (agentfs branch switch main)", name)
		}
		if v := w.views[name]; v != nil {
			if w.attached() != nil {
				w.attached().Retire(v)
			}
			delete(w.views, name)
			w.retired = append(w.retired, v)
		}
		if err := w.meta.DeleteLayer(name); err != nil {
			return ctl.BranchInfo{}, storeError(err, fmt.Sprintf("deleting branch %q", name))
		}
		w.log.Info("branch deleted", "branch", name, "bound processes", info.Bound, "pid", c.Pid)
		info.Current = false
		return info, nil
	})
}

// SwitchBranch makes the mount show branch name to every unbound
// process at once, and records it so that a kept store resumes it.
// Paths from the root show the branch at once; a process whose working
// directory is below the root keeps the directory of the branch it was
// in, as after a chroot, until it changes directory through the root.
func (w *Workspace) SwitchBranch(c ctl.Caller, name string) (ctl.BranchInfo, error) {
	return locked(w, func() (ctl.BranchInfo, error) {
		if err := w.writable("switching branches"); err != nil {
			return ctl.BranchInfo{}, err
		}
		l, err := w.meta.Layer(name)
		if errors.Is(err, branch.ErrNotFound) {
			return ctl.BranchInfo{}, errorf(ErrNotFound, "no branch %q: agentfs branch list shows them; agentfs branch create %s makes it", name, name)
		}
		if err != nil {
			return ctl.BranchInfo{}, storeError(err, fmt.Sprintf("opening branch %q", name))
		}
		if l == w.current.Load() {
			return w.branchInfoLocked(c, name)
		}
		if n := w.namespacedUsersLocked(name); n > 0 {
			return ctl.BranchInfo{}, errorf(ErrBusy, "branch %q is in use by %d process(es) started with agentfs exec -b in mount namespaces of their own: the mount cannot show it to everyone at the same time; wait until they end", name, n)
		}
		v, err := w.viewOf(l)
		if err != nil {
			return ctl.BranchInfo{}, err
		}
		if err := w.meta.SetInfo(currentBranchKey, []byte(name)); err != nil {
			return ctl.BranchInfo{}, storeError(err, fmt.Sprintf("switching to branch %q", name))
		}
		old := w.current.Swap(l)
		w.view = v
		w.shown.Store(v)
		if w.attached() != nil {
			w.attached().Show(v)
		}
		w.log.Info("branch switched", "from", old.Name(), "to", name, "pid", c.Pid)
		return w.branchInfoLocked(c, name)
	})
}
