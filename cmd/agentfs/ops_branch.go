package main

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
)

// handleBranches registers the branch operations.
func (d *daemon) handleBranches(s *ctl.Server) {
	s.Handle(ctl.OpBranchCreate, serialized(d, ctl.OpBranchCreate, d.branchCreate))
	s.Handle(ctl.OpBranchList, serialized(d, ctl.OpBranchList, d.branchList))
	s.Handle(ctl.OpBranchDelete, serialized(d, ctl.OpBranchDelete, d.branchDelete))
	s.Handle(ctl.OpBranchSwitch, serialized(d, ctl.OpBranchSwitch, d.branchSwitch))
}

// branchCreate creates a branch from a snapshot: args.From, or one of
// the current branch taken for it (kind auto), which is deleted again
// if the branch cannot be created.
func (d *daemon) branchCreate(c ctl.Caller, args ctl.BranchCreateArgs) (any, error) {
	if _, err := d.meta.Layer(args.Name); err == nil {
		return nil, ctl.Errorf(syscall.EEXIST, "branch %q exists already: choose another name (agentfs branch list shows them)", args.Name)
	}
	// CreateLayer checks the name before it looks at the snapshot: a
	// zero snapshot tells a bad name without taking one for nothing.
	if _, err := d.meta.CreateLayer(args.Name, branch.Snapshot{}); errors.Is(err, branch.ErrInvalidName) {
		return nil, invalidName(err, "branch")
	}
	var from branch.Snapshot
	taken := false
	if args.From != "" {
		var err error
		if from, err = d.resolveSnapshot(args.From); err != nil {
			return nil, err
		}
	} else {
		var err error
		v := d.callerView(c)
		if from, err = v.Snapshot("start of branch "+args.Name, branch.KindAuto); err != nil {
			if from.ID != "" {
				d.meta.DeleteSnapshot(from.ID)
			}
			return nil, storeError(err, fmt.Sprintf("taking a snapshot of branch %q for branch %q", v.Layer().Name(), args.Name))
		}
		taken = true
	}
	l, err := d.meta.CreateLayer(args.Name, from)
	if err != nil {
		if taken {
			if derr := d.meta.DeleteSnapshot(from.ID); derr != nil {
				d.log.Warn("deleting the snapshot taken for a branch that could not be created", "id", from.ID, "err", derr)
			}
		}
		if errors.Is(err, branch.ErrInvalidName) {
			return nil, invalidName(err, "branch")
		}
		return nil, storeError(err, fmt.Sprintf("creating branch %q", args.Name))
	}
	d.log.Info("branch created", "branch", args.Name, "from", from.ID, "pid", c.Pid)
	return d.branchInfo(c, l.Name())
}

// branchInfo describes the branch name, as caller c sees it.
func (d *daemon) branchInfo(c ctl.Caller, name string) (ctl.BranchInfo, error) {
	list, err := d.branches(c)
	if err != nil {
		return ctl.BranchInfo{}, err
	}
	for _, b := range list.Branches {
		if b.Name == name {
			return b, nil
		}
	}
	return ctl.BranchInfo{}, ctl.Errorf(syscall.ENOENT, "no branch %q: agentfs branch list shows them", name)
}

// branches describes every branch, sorted by name; Current marks the
// one caller c sees.
func (d *daemon) branches(c ctl.Caller) (ctl.BranchList, error) {
	infos, err := d.meta.LayerInfos()
	if err != nil {
		return ctl.BranchList{}, storeError(err, "listing branches")
	}
	def, mine := d.current.Load().Name(), d.callerView(c).Layer().Name()
	bound := map[string]int{}
	for _, b := range d.bindings() {
		bound[b.Branch]++
	}
	list := ctl.BranchList{Branches: []ctl.BranchInfo{}}
	for _, li := range infos {
		list.Branches = append(list.Branches, ctl.BranchInfo{Name: li.Name, Origin: li.Origin, Created: li.Created,
			Current: li.Name == mine, Default: li.Name == def, Bound: bound[li.Name]})
	}
	return list, nil
}

func (d *daemon) branchList(c ctl.Caller, _ noArgs) (any, error) { return d.branches(c) }

// branchDelete deletes a branch that the mount does not show; main
// stays. Its snapshots stay; its objects go at the next gc. Processes
// still bound to it get ENOENT from then on, never another branch's
// files (fs.Server.Retire).
func (d *daemon) branchDelete(c ctl.Caller, args ctl.BranchArgs) (any, error) {
	info, err := d.branchInfo(c, args.Name)
	if err != nil {
		return nil, err
	}
	switch {
	case args.Name == "main":
		return nil, ctl.Errorf(syscall.EBUSY, "branch main cannot be deleted: it is where every store starts")
	case info.Default:
		return nil, ctl.Errorf(syscall.EBUSY, "branch %q is the one the mount shows: switch to another first (agentfs branch switch main)", args.Name)
	}
	if v := d.views[args.Name]; v != nil {
		if srv := d.srv.Load(); srv != nil {
			srv.Retire(v)
		}
		if bm := d.branchMounts[args.Name]; bm != nil {
			bm.srv.Retire(v)
		}
		delete(d.views, args.Name)
		d.retired = append(d.retired, v)
	}
	if err := d.meta.DeleteLayer(args.Name); err != nil {
		return nil, storeError(err, fmt.Sprintf("deleting branch %q", args.Name))
	}
	d.log.Info("branch deleted", "branch", args.Name, "bound processes", info.Bound, "pid", c.Pid)
	info.Current = false
	return info, nil
}

// branchSwitch makes the mount show another branch to every unbound
// process at once, and records it so that a kept store resumes it.
// Paths from the root show the branch at once; a process whose working
// directory is below the root keeps the directory of the branch it was
// in, as after a chroot, until it changes directory through the root.
func (d *daemon) branchSwitch(c ctl.Caller, args ctl.BranchArgs) (any, error) {
	l, err := d.meta.Layer(args.Name)
	if errors.Is(err, branch.ErrNotFound) {
		return nil, ctl.Errorf(syscall.ENOENT, "no branch %q: agentfs branch list shows them; agentfs branch create %s makes it", args.Name, args.Name)
	}
	if err != nil {
		return nil, storeError(err, fmt.Sprintf("opening branch %q", args.Name))
	}
	if l == d.current.Load() {
		return d.branchInfo(c, args.Name)
	}
	if n := d.namespacedUsers(args.Name); n > 0 {
		return nil, ctl.Errorf(syscall.EBUSY, "branch %q is in use by %d process(es) started with agentfs exec -b in mount namespaces of their own: the mount cannot show it to everyone at the same time; wait until they end", args.Name, n)
	}
	v, err := d.viewOf(l)
	if err != nil {
		return nil, err
	}
	if err := d.meta.SetInfo(currentBranchKey, []byte(args.Name)); err != nil {
		return nil, storeError(err, fmt.Sprintf("switching to branch %q", args.Name))
	}
	old := d.current.Swap(l)
	d.view = v
	if srv := d.srv.Load(); srv != nil {
		srv.SetDefault(v)
	}
	d.log.Info("branch switched", "from", old.Name(), "to", args.Name, "pid", c.Pid)
	return d.branchInfo(c, args.Name)
}
