package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
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
// last. The objects are hashed through Options.Hasher (by default by
// reading them).
//
// Push holds opMu for its whole run, as every operation on snapshots
// does: the views it reads stay as they are while it reads them.

// pushBuild is what a push collects before it sends: the documents and
// the objects they name.
type pushBuild struct {
	docs    []remote.Doc
	uploads []remote.Object // regular files of the snapshots
	owners  []objRef        // where the sum of uploads[i] goes
	bases   []remote.Object // the project's files at changed paths
	baseOf  []objRef
}

// objRef points at the Object field of a change of a document.
type objRef struct {
	doc    *remote.SnapshotDoc
	change int
	base   bool
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
	return locked(w, func() (ctl.PushReply, error) {
		reply := ctl.PushReply{Remote: cfg.Name, URL: r.Location().String(), Snapshots: []string{}}
		progress, end := w.startProgress("push", "objects")
		defer end()
		lower, err := w.openRefLocked(LowerRef)
		if err != nil {
			return reply, err
		}
		defer lower.close()
		var snaps []branch.Snapshot
		if a.Session != nil {
			if snaps, err = w.meta.Snapshots(); err != nil {
				return reply, storeError(err, "listing snapshots")
			}
		} else {
			for _, ref := range a.Refs {
				s, err := w.resolveSnapshot(ref)
				if err != nil {
					return reply, err
				}
				snaps = append(snaps, s)
			}
		}
		host, _ := os.Hostname()
		now := time.Now().UTC()
		session := ""
		if a.Session != nil {
			session = a.Session.ID
		}
		b := &pushBuild{}
		for _, s := range snaps {
			v, err := w.openRefLocked(s.ID)
			if err != nil {
				return reply, err
			}
			defer v.close()
			doc := &remote.SnapshotDoc{Format: remote.Format, ID: s.ID, Created: s.Created, Branch: s.Branch, Kind: s.Kind,
				Label: s.Label, Session: session, Host: host, Lower: w.opts.Lower, Pushed: now}
			if err := b.add(doc, s.ID, lower.fs, v.fs); err != nil {
				return reply, err
			}
			reply.Snapshots = append(reply.Snapshots, s.ID)
		}
		var branches []remote.BranchAt
		if a.Session != nil {
			list, err := w.branchesLocked(c)
			if err != nil {
				return reply, err
			}
			for _, br := range list.Branches {
				v, err := w.openRefLocked(br.Name)
				if err != nil {
					return reply, err
				}
				defer v.close()
				name := remote.BranchDocName(session, br.Name)
				doc := &remote.SnapshotDoc{Format: remote.Format, ID: name, Created: now, Branch: br.Name, Kind: "branch",
					Session: session, Host: host, Lower: w.opts.Lower, Pushed: now}
				if err := b.add(doc, name, lower.fs, v.fs); err != nil {
					return reply, err
				}
				branches = append(branches, remote.BranchAt{Name: br.Name, Origin: br.Origin, State: name})
				reply.Branches = append(reply.Branches, br.Name)
			}
		}
		ctx := context.Background()
		hash := w.opts.Hasher
		if hash == nil {
			hash = remote.ReadHash
		}
		all := append(append([]remote.Object(nil), b.uploads...), b.bases...)
		sums, err := remote.HashAll(ctx, all, hash, a.Parallel, func(p remote.Progress) {
			progress.set(int64(p.ObjectsDone), int64(p.Objects), 0, 0)
		})
		if err != nil {
			return reply, eioErrorf(err, "push: %v", err)
		}
		ups := make([]remote.Upload, len(b.uploads))
		for i, o := range b.uploads {
			ups[i] = remote.Upload{Sum: sums[i], Object: o}
			b.owners[i].set(sums[i])
		}
		for i := range b.bases {
			b.baseOf[i].set(sums[len(b.uploads)+i])
		}
		var total int64
		counted := map[remote.Sum]bool{}
		for _, d := range b.docs {
			doc := d.Value.(*remote.SnapshotDoc)
			seen := map[string]bool{}
			for _, ch := range doc.Changes {
				if ch.Object != "" && !seen[ch.Object] {
					seen[ch.Object] = true
					doc.Bytes += ch.Size
				}
			}
		}
		for i, u := range ups {
			if !counted[u.Sum] {
				counted[u.Sum] = true
				total += sizeOfChange(b.owners[i])
			}
		}
		docs := b.docs
		if a.Session != nil {
			s := a.Session
			docs = append(docs, remote.Doc{Kind: remote.KindSession, Name: s.ID, Value: remote.SessionDoc{
				Format: remote.Format, ID: s.ID, Project: s.Project, Command: s.Command, Started: s.Started, Ended: s.Ended,
				ExitCode: s.ExitCode, State: s.State, PreRun: s.PreRun, Host: host, Pushed: now,
				Snapshots: reply.Snapshots, Branches: branches, Bytes: total,
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
		w.log.Info("push", "remote", cfg.Name, "url", reply.URL, "snapshots", len(reply.Snapshots), "session", reply.Session,
			"sent", st.Sent, "sent_bytes", st.SentBytes, "skipped", st.Skipped, "err", err, "pid", c.Pid)
		if err != nil {
			return reply, pushError(err)
		}
		return reply, nil
	})
}

// sizeOfChange returns the size of the change an object belongs to.
func sizeOfChange(o objRef) int64 { return o.doc.Changes[o.change].Size }

// set records sum in the change o points at.
func (o objRef) set(sum remote.Sum) {
	ch := &o.doc.Changes[o.change]
	if o.base {
		ch.Base.Object = sum.String()
	} else {
		ch.Object = sum.String()
	}
}

// add fills doc with the changes from the project (lower) to view v,
// and collects the objects they name; name names doc in messages.
func (b *pushBuild) add(doc *remote.SnapshotDoc, name string, lower, v *overlay.FS) error {
	cs, err := changes(lower, v)
	if err != nil {
		return eioErrorf(err, "push: comparing %s with the project: %v", name, err)
	}
	doc.Changes = make([]remote.Change, 0, len(cs))
	for _, c := range cs {
		ch := remote.Change{Path: c.Path, Kind: string(c.Kind)}
		if c.New != nil {
			st, err := v.StatPath(c.Path)
			if err != nil {
				return eioErrorf(err, "push: %s: %s: %v", name, c.Path, err)
			}
			ch.Type, ch.Mode, ch.Uid, ch.Gid, ch.Size, ch.Rdev, ch.Target = c.New.Type, c.New.Mode, c.New.Uid, c.New.Gid, c.New.Size, c.New.Rdev, c.New.Target
			ch.Mtime = st.Mtim.Nano()
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
			b.uploads = append(b.uploads, viewObject(v, name, c.Path))
			b.owners = append(b.owners, objRef{doc: doc, change: i})
		}
		if c.Old != nil && c.Old.Type == "file" {
			b.bases = append(b.bases, viewObject(lower, "the project", c.Path))
			b.baseOf = append(b.baseOf, objRef{doc: doc, change: i, base: true})
		}
	}
	b.docs = append(b.docs, remote.Doc{Kind: remote.KindSnapshot, Name: name, Value: doc})
	return nil
}

// viewObject is the regular file at p in view v as an object to push.
func viewObject(v *overlay.FS, what, p string) remote.Object {
	return remote.Object{Name: fmt.Sprintf("%s: %s", what, p), Open: func() (*os.File, error) {
		f, _, err := v.OpenData(p)
		return f, err
	}}
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
