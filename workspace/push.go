package workspace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/agentfs/agentfs/branch"
	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/remote"
)

// # Push
//
// Push sends snapshots to a remote (package remote owns the layout and
// the transfers): each snapshot becomes a document of its changes
// against the project as this machine has it (overlay.Diff from the
// lower view), whose regular files are objects named by the SHA-256 of
// their bytes; what the project holds at each changed path (its base)
// is hashed too, and recorded, not sent. A session's push adds a
// document for each branch's current state and the session's document,
// last. Files hard-linked together in a snapshot are named so in its
// document (Change.Link), so that a pull links them again.
//
// # The hashes
//
// The SHA-256 of each file is asked of the store's content hashes
// first (package contenthash: an object's recorded hash, a project
// file's by its identity and times), so that deciding what the remote
// lacks reads nothing the hash worker (or an earlier push) already
// read; the others are read and hashed (through Options.Hasher when it
// is set), each file once however many documents name it, and what was
// read is recorded for the next time (contenthash.Hasher.Learn). The
// upload hashes again what it actually sends, and refuses an object
// whose bytes are not its name's.
//
// # Locking: pinned, then sent without opMu
//
// Push holds opMu only to pin what it sends: it resolves the
// snapshots, opens views of them, builds the documents, and pins the
// objects they name (pinned: gc spares them, whatever is deleted in
// the meantime). A branch of a store a mount serves, which programs
// may be writing (or switch to and write), is pinned by a snapshot taken for the push (a safety
// snapshot labelled pushPinLabel: its objects then never change, the
// next write clones) and deleted when the push ends (a push killed
// with its daemon leaves it; it is an ordinary snapshot, which
// snapshot delete removes, and which a session's push leaves out). Then opMu is
// released: the hashing and the transfer run beside snapshots,
// restores and every file operation of the mount. At the end, opMu is
// taken again to drop the pin snapshots; the pins go with the push.
// Close cancels a push under way and waits for it to stop reading the
// store.

// pushPinLabel starts the label of the snapshots a push takes of the
// branches a mount serves, to pin them while it sends them (deleted
// after).
const pushPinLabel = "push: pins branch "

// pushSource is one file whose bytes a push hashes and may send: an
// object of the backstore, or a project file.
type pushSource struct {
	object string      // the backstore's id, or "" for a project file
	lower  string      // a project file's path in the project
	view   *overlay.FS // the view to open it through
	path   string      // its path in view
	name   string      // for messages
	sum    remote.Sum
	refs   []objRef // where its sum goes
	upload bool     // some document names it as a file's contents (not only a base)
}

// pushBuild is what a push collects before it sends: the documents and
// the files they name.
type pushBuild struct {
	docs    []remote.Doc
	sources []*pushSource
	byKey   map[string]*pushSource
}

// objRef points at the Object field of a change of a document.
type objRef struct {
	doc    *remote.SnapshotDoc
	change int
	base   bool
}

// pushPlan is what a push pinned under opMu, to send without it.
type pushPlan struct {
	build    *pushBuild
	reply    ctl.PushReply
	branches []remote.BranchAt
	closers  []func()
	pins     []string // objects pinned
	pinSnaps []string // snapshots taken to pin live branches
	ctx      context.Context
	cancel   context.CancelFunc
}

// Push sends what a names to the remote a.Remote.
func (w *Workspace) Push(c ctl.Caller, a ctl.PushArgs) (ctl.PushReply, error) {
	cfg := remote.Config{Name: a.Remote.Name, URL: a.Remote.URL, Endpoint: a.Remote.Endpoint, Region: a.Remote.Region}
	r, err := remote.OpenWith(cfg, remote.Credentials{AccessKey: a.Remote.AccessKey, SecretKey: a.Remote.SecretKey, SessionToken: a.Remote.SessionToken})
	if err != nil {
		return ctl.PushReply{}, errorf(ErrInvalid, "%v", err)
	}
	if a.Session == nil && len(a.Refs) == 0 {
		return ctl.PushReply{}, errorf(ErrInvalid, "nothing to push: name snapshots (agentfs snapshot list shows them) or a session (-s SESSION)")
	}
	host, _ := os.Hostname()
	now := time.Now().UTC()
	var progress *progressTracker
	plan, err := locked(w, func() (*pushPlan, error) {
		var end func()
		progress, end = w.startProgress("push", "objects")
		plan, err := w.planPushLocked(c, a, host, now)
		if err != nil {
			end()
			return nil, err
		}
		plan.reply.Remote, plan.reply.URL = cfg.Name, r.Location().String()
		return plan, nil
	})
	if err != nil {
		return ctl.PushReply{Remote: cfg.Name, URL: r.Location().String(), Snapshots: []string{}}, err
	}
	defer progress.end()
	reply, err := w.sendPush(c, r, a, plan, progress, host, now)
	w.endPush(plan)
	return reply, err
}

// planPushLocked resolves and pins what a push sends and builds its
// documents (see Locking above). opMu is held.
func (w *Workspace) planPushLocked(c ctl.Caller, a ctl.PushArgs, host string, now time.Time) (_ *pushPlan, err error) {
	plan := &pushPlan{build: &pushBuild{byKey: map[string]*pushSource{}}, reply: ctl.PushReply{Snapshots: []string{}}}
	defer func() {
		if err != nil {
			w.unpinLocked(plan)
		}
	}()
	lower, err := w.openRefLocked(LowerRef)
	if err != nil {
		return nil, err
	}
	plan.closers = append(plan.closers, lower.close)
	var snaps []branch.Snapshot
	if a.Session != nil {
		all, err := w.meta.Snapshots()
		if err != nil {
			return nil, storeError(err, "listing snapshots")
		}
		for _, s := range all {
			if s.Kind != branch.KindSafety || !strings.HasPrefix(s.Label, pushPinLabel) { // not another push's pins
				snaps = append(snaps, s)
			}
		}
	} else {
		for _, ref := range a.Refs {
			s, err := w.resolveSnapshot(ref)
			if err != nil {
				return nil, err
			}
			snaps = append(snaps, s)
		}
	}
	session := ""
	if a.Session != nil {
		session = a.Session.ID
	}
	b := plan.build
	for _, s := range snaps {
		v, err := w.openRefLocked(s.ID)
		if err != nil {
			return nil, err
		}
		plan.closers = append(plan.closers, v.close)
		doc := &remote.SnapshotDoc{Format: remote.Format, ID: s.ID, Created: s.Created, Branch: s.Branch, Kind: s.Kind,
			Label: s.Label, Session: session, Host: host, Lower: w.opts.Lower, Pushed: now}
		if err := b.add(doc, s.ID, lower.fs, v.fs); err != nil {
			return nil, err
		}
		plan.reply.Snapshots = append(plan.reply.Snapshots, s.ID)
	}
	if a.Session != nil {
		list, err := w.branchesLocked(c)
		if err != nil {
			return nil, err
		}
		for _, br := range list.Branches {
			v, err := w.pinnedBranchLocked(plan, br.Name)
			if err != nil {
				return nil, err
			}
			name := remote.BranchDocName(session, br.Name)
			doc := &remote.SnapshotDoc{Format: remote.Format, ID: name, Created: now, Branch: br.Name, Kind: "branch",
				Session: session, Host: host, Lower: w.opts.Lower, Pushed: now}
			if err := b.add(doc, name, lower.fs, v); err != nil {
				return nil, err
			}
			plan.branches = append(plan.branches, remote.BranchAt{Name: br.Name, Origin: br.Origin, State: name})
			plan.reply.Branches = append(plan.reply.Branches, br.Name)
		}
	}
	w.pinLocked(plan)
	return plan, nil
}

// pinnedBranchLocked returns a view of branch name that stays as it is
// while the push sends it: the branch itself when nothing else writes
// it (no mount serves the store: the push is its process's only
// operation), else a snapshot of it taken for the push. opMu is held.
func (w *Workspace) pinnedBranchLocked(plan *pushPlan, name string) (*overlay.FS, error) {
	if w.attached() == nil {
		v, err := w.openRefLocked(name)
		if err != nil {
			return nil, err
		}
		plan.closers = append(plan.closers, v.close)
		return v.fs, nil
	}
	// Served or not, a branch of a mount may be switched to and
	// written while the push sends it.
	l, err := w.meta.Layer(name)
	if err != nil {
		return nil, storeError(err, fmt.Sprintf("push: opening branch %q", name))
	}
	live, err := w.viewOf(l)
	if err != nil {
		return nil, err
	}
	snap, err := live.Snapshot(pushPinLabel+name+" while it is sent (deleted when the push ends)", branch.KindSafety)
	if err != nil {
		if snap.ID != "" {
			plan.pinSnaps = append(plan.pinSnaps, snap.ID)
		}
		return nil, storeError(err, "push: pinning branch "+name)
	}
	plan.pinSnaps = append(plan.pinSnaps, snap.ID)
	v, err := w.readView(nil, w.meta.SnapshotView(snap))
	if err != nil {
		return nil, storeError(err, "push: opening branch "+name+" as pinned")
	}
	plan.closers = append(plan.closers, w.closer(v, "branch "+name+" as pinned"))
	return v, nil
}

// pinLocked pins the objects plan sends and registers the push with
// Close. opMu is held.
func (w *Workspace) pinLocked(plan *pushPlan) {
	for _, src := range plan.build.sources {
		if src.object != "" {
			plan.pins = append(plan.pins, src.object)
		}
	}
	w.pinMu.Lock()
	if w.pinned == nil {
		w.pinned = map[string]int{}
	}
	for _, id := range plan.pins {
		w.pinned[id]++
	}
	plan.ctx, plan.cancel = context.WithCancel(context.Background())
	if w.pushes == nil {
		w.pushes = map[*pushPlan]bool{}
	}
	w.pushes[plan] = true
	w.pushWG.Add(1)
	w.pinMu.Unlock()
}

// unpinLocked releases what a plan that will not be sent holds: its
// views and the snapshots it took. opMu is held.
func (w *Workspace) unpinLocked(plan *pushPlan) {
	for _, close := range plan.closers {
		close()
	}
	plan.closers = nil
	for _, id := range plan.pinSnaps {
		w.dropSnapshotLocked(id, "pinning a branch for a push")
	}
	plan.pinSnaps = nil
}

// endPush releases a push that was sent (or failed sending): its
// views, its pins (gc may take the objects again), its registration
// with Close, and, under opMu, the snapshots it took to pin branches
// (left if the store was closed meanwhile).
func (w *Workspace) endPush(plan *pushPlan) {
	for _, close := range plan.closers {
		close()
	}
	plan.closers = nil
	w.pinMu.Lock()
	for _, id := range plan.pins {
		if w.pinned[id]--; w.pinned[id] <= 0 {
			delete(w.pinned, id)
		}
	}
	delete(w.pushes, plan)
	w.pinMu.Unlock()
	plan.cancel()
	w.pushWG.Done()
	if len(plan.pinSnaps) == 0 {
		return
	}
	_, err := locked(w, func() (struct{}, error) { w.unpinLocked(plan); return struct{}{}, nil })
	if err != nil {
		w.log.Warn("push: the snapshots that pinned branches are left", "ids", plan.pinSnaps, "err", err)
	}
}

// stopPushesLocked cancels the pushes sending and waits until they no
// longer read the store (Close). opMu is held.
func (w *Workspace) stopPushesLocked() {
	w.pinMu.Lock()
	for p := range w.pushes {
		p.cancel()
	}
	w.pinMu.Unlock()
	w.pushWG.Wait()
}

// referencedObjects is the Referenced of a collection: what the
// store's entries name, and the objects pushes pinned. opMu is held
// (a push pins under it).
func (w *Workspace) referencedObjects(yield func(id string) error) error {
	w.pinMu.Lock()
	pinned := slices.Collect(maps.Keys(w.pinned))
	w.pinMu.Unlock()
	for _, id := range pinned {
		if err := yield(id); err != nil {
			return err
		}
	}
	return w.meta.ReferencedObjects(yield)
}

// sendPush hashes what the plan names that is not known, and sends
// it, without opMu.
func (w *Workspace) sendPush(c ctl.Caller, r *remote.Remote, a ctl.PushArgs, plan *pushPlan, progress *progressTracker, host string, now time.Time) (ctl.PushReply, error) {
	ctx := plan.ctx
	b := plan.build
	reply := plan.reply
	start := time.Now()
	if err := w.hashSources(ctx, b.sources, a.Parallel, &reply, progress); err != nil {
		if ctx.Err() != nil {
			return reply, errorf(ErrClosed, "push: the store %s was closed", w.opts.Store)
		}
		return reply, eioErrorf(err, "push: %v", err)
	}
	hashing := time.Since(start)
	var ups []remote.Upload
	for _, src := range b.sources {
		for _, ref := range src.refs {
			ref.set(src.sum)
		}
		if src.upload {
			ups = append(ups, remote.Upload{Sum: src.sum, Object: src.toObject()})
		}
	}
	var total int64
	counted := map[string]bool{}
	for _, d := range b.docs {
		doc := d.Value.(*remote.SnapshotDoc)
		seen := map[string]bool{}
		for _, ch := range doc.Changes {
			if ch.Object != "" && !seen[ch.Object] {
				seen[ch.Object] = true
				doc.Bytes += ch.Size
			}
			if ch.Object != "" && !counted[ch.Object] {
				counted[ch.Object] = true
				total += ch.Size
			}
		}
	}
	docs := b.docs
	if a.Session != nil {
		s := a.Session
		docs = append(docs, remote.Doc{Kind: remote.KindSession, Name: s.ID, Value: remote.SessionDoc{
			Format: remote.Format, ID: s.ID, Project: s.Project, Command: s.Command, Started: s.Started, Ended: s.Ended,
			ExitCode: s.ExitCode, State: s.State, PreRun: s.PreRun, Host: host, Pushed: now,
			Snapshots: reply.Snapshots, Branches: plan.branches, Bytes: total,
		}})
		reply.Session = s.ID
	}
	st, err := r.Push(ctx, ups, docs, a.Parallel, func(p remote.Progress) {
		switch p.Phase {
		case remote.PhaseChecking:
			progress.set(0, int64(p.Objects), 0, 0)
		case remote.PhaseUploading:
			progress.set(int64(p.Skipped+p.ObjectsDone), int64(p.Skipped+p.Objects), p.SkippedBytes+p.BytesDone, p.SkippedBytes+p.Bytes)
		}
	})
	reply.Objects, reply.Sent, reply.SentBytes, reply.Skipped, reply.SkippedBytes = st.Objects, st.Sent, st.SentBytes, st.Skipped, st.SkippedBytes
	reply.PartsSent, reply.PartsKept = st.Parts.Sent, st.Parts.Kept
	w.log.Info("push", "remote", reply.Remote, "url", reply.URL, "snapshots", len(reply.Snapshots), "session", reply.Session,
		"known", reply.Known, "hashed", reply.Hashed, "hashed_bytes", reply.HashedBytes, "hashing", hashing,
		"sent", st.Sent, "sent_bytes", st.SentBytes, "skipped", st.Skipped, "parts_kept", st.Parts.Kept, "err", err, "pid", c.Pid)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return reply, errorf(ErrClosed, "push: the store %s was closed; push again to resume", w.opts.Store)
		}
		return reply, pushError(err)
	}
	return reply, nil
}

// toObject is src as an object to send: opened through its view.
func (src *pushSource) toObject() remote.Object {
	v, p := src.view, src.path
	return remote.Object{Name: src.name, Open: func() (*os.File, error) {
		f, _, err := v.OpenData(p)
		return f, err
	}}
}

// set records sum in the change o points at.
func (o objRef) set(sum remote.Sum) {
	ch := &o.doc.Changes[o.change]
	if o.base {
		ch.Base.Object = sum.String()
	} else {
		ch.Object = sum.String()
	}
}

// source returns the source of the file at p in view v (one per object,
// or per project file), adding it to b.
func (b *pushBuild) source(v, lower *overlay.FS, what, p string) (*pushSource, error) {
	obj, lp, err := v.DataOfPath(p)
	if err != nil {
		return nil, eioErrorf(err, "push: %s: %s: %v", what, p, err)
	}
	key := "o:" + obj
	src := &pushSource{object: obj, view: v, path: p, name: fmt.Sprintf("%s: %s", what, p)}
	if obj == "" {
		// The project's file: through the project's view, which
		// shows it at its own path.
		key = "l:" + lp
		src = &pushSource{lower: lp, view: lower, path: lp, name: fmt.Sprintf("the project: %s", lp)}
	}
	if old := b.byKey[key]; old != nil {
		return old, nil
	}
	b.byKey[key] = src
	b.sources = append(b.sources, src)
	return src, nil
}

// add fills doc with the changes from the project (lower) to view v,
// and collects the files they name; name names doc in messages.
func (b *pushBuild) add(doc *remote.SnapshotDoc, name string, lower, v *overlay.FS) error {
	cs, err := changes(lower, v)
	if err != nil {
		return eioErrorf(err, "push: comparing %s with the project: %v", name, err)
	}
	doc.Changes = make([]remote.Change, 0, len(cs))
	var links []linkedFile
	for _, c := range cs {
		if err := b.change(doc, name, lower, v, c, &links); err != nil {
			return err
		}
	}
	if err := b.linkFiles(doc, name, lower, v, links); err != nil {
		return err
	}
	b.docs = append(b.docs, remote.Doc{Kind: remote.KindSnapshot, Name: name, Value: doc})
	return nil
}

// change adds change c of view v to doc, and collects the files it
// names; a file of several names is added to links.
func (b *pushBuild) change(doc *remote.SnapshotDoc, name string, lower, v *overlay.FS, c overlay.Change, links *[]linkedFile) error {
	ch := remote.Change{Path: c.Path, Kind: string(c.Kind)}
	nlink := uint64(0)
	var id [2]uint64
	if c.New != nil {
		st, err := v.StatPath(c.Path)
		if err != nil {
			return eioErrorf(err, "push: %s: %s: %v", name, c.Path, err)
		}
		ch.Type, ch.Mode, ch.Uid, ch.Gid, ch.Size, ch.Rdev, ch.Target = c.New.Type, c.New.Mode, c.New.Uid, c.New.Gid, c.New.Size, c.New.Rdev, c.New.Target
		ch.Mtime = st.Mtim.Nano()
		nlink, id = uint64(st.Nlink), [2]uint64{st.Dev, st.Ino}
		if c.New.Type != "symlink" {
			xs, err := v.Xattrs(c.Path)
			if err != nil {
				return eioErrorf(err, "push: %s: %s: its xattrs: %v", name, c.Path, err)
			}
			for k, val := range xs {
				if ch.Xattrs == nil {
					ch.Xattrs = map[string][]byte{}
				}
				ch.Xattrs[k] = []byte(val)
			}
		}
	}
	if c.Old != nil {
		ch.Base = &remote.Base{Type: c.Old.Type, Size: c.Old.Size, Target: c.Old.Target}
	}
	doc.Changes = append(doc.Changes, ch)
	i := len(doc.Changes) - 1
	if c.New != nil && c.New.Type == "file" {
		src, err := b.source(v, lower, name, c.Path)
		if err != nil {
			return err
		}
		src.upload = true
		src.refs = append(src.refs, objRef{doc: doc, change: i})
		if nlink > 1 {
			*links = append(*links, linkedFile{change: i, id: id, nlink: nlink})
		}
	}
	if c.Old != nil && c.Old.Type == "file" {
		src, err := b.source(lower, lower, "the project", c.Path)
		if err != nil {
			return err
		}
		src.refs = append(src.refs, objRef{doc: doc, change: i, base: true})
	}
	return nil
}

// pushError classifies an error of the remote for the protocol.
func pushError(err error) error {
	k := ErrIO
	switch {
	case errors.Is(err, remote.ErrCredentials), errors.Is(err, remote.ErrNoCredentials):
		k = ErrPermission
	case errors.Is(err, remote.ErrNoBucket), errors.Is(err, remote.ErrNotFound):
		k = ErrNotFound
	}
	return &Error{Kind: k, Msg: err.Error(), Err: err}
}
