package remote

import (
	"context"
	"fmt"
	"time"
)

// # Documents
//
// A snapshot's document (snapshots/ID.json) holds its changes against
// the project as the pushing machine had it: every path that differs,
// in path order, with the new side's type and attributes, the SHA-256
// of a regular file's bytes (its object), and what the project held
// there (Base), so that the machine that pulls it can tell whether its
// own checkout has the same files (by content, not by inode).
//
// A session's document (sessions/ID.json) holds the session's record
// and names its snapshots (oldest first) and the state of its branches,
// each a snapshot document of its own (named SESSION.branch.NAME).

// SnapshotDoc is a snapshot's document.
type SnapshotDoc struct {
	Format  int       `json:"format"`
	ID      string    `json:"id"` // the snapshot's id where it was taken
	Created time.Time `json:"created"`
	Branch  string    `json:"branch"`
	Kind    string    `json:"kind"` // manual, auto, safety, pre-run, branch (a branch's state)
	Label   string    `json:"label,omitempty"`
	Session string    `json:"session,omitempty"`
	Host    string    `json:"host,omitempty"`  // the machine that pushed it
	Lower   string    `json:"lower,omitempty"` // the project's path there
	Pushed  time.Time `json:"pushed"`
	// Bytes is the size of the objects the changes name (each once).
	Bytes   int64    `json:"bytes"`
	Changes []Change `json:"changes"`
}

// Change is one path of a snapshot that differs from the project.
type Change struct {
	Path string `json:"path"`
	Kind string `json:"kind"` // created, modified, deleted: as agentfs diff says
	// The new side (absent when deleted).
	Type   string `json:"type,omitempty"` // file, dir, symlink, fifo, socket, char, block
	Mode   uint32 `json:"mode,omitempty"` // permission bits with setuid, setgid and sticky
	Uid    uint32 `json:"uid,omitempty"`
	Gid    uint32 `json:"gid,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Mtime  int64  `json:"mtime_ns,omitempty"`
	Rdev   uint64 `json:"rdev,omitempty"`
	Target string `json:"target,omitempty"` // a symlink's
	Object string `json:"object,omitempty"` // a regular file's: the SHA-256 of its bytes
	// Link, on a regular file hard-linked to another of the document,
	// is the path of the first of them (in path order): the file is
	// that file's other name. Object and the attributes are the same
	// as there, so that a reader that does not know Link makes a
	// separate file of the same contents.
	Link string `json:"link,omitempty"`
	// Xattrs are its extended attributes (user.*, POSIX ACLs; pushed as
	// root, trusted.* and security.capability), values base64.
	Xattrs map[string][]byte `json:"xattrs,omitempty"`
	// Base is what the project held at the path on the pushing
	// machine, nil when nothing.
	Base *Base `json:"base,omitempty"`
}

// Base is a project file as the pushing machine had it.
type Base struct {
	Type   string `json:"type"`
	Size   int64  `json:"size,omitempty"`
	Object string `json:"object,omitempty"` // a regular file's SHA-256
	Target string `json:"target,omitempty"`
}

// SessionDoc is a session's document.
type SessionDoc struct {
	Format    int        `json:"format"`
	ID        string     `json:"id"`
	Project   string     `json:"project"`
	Command   []string   `json:"command,omitempty"`
	Started   time.Time  `json:"started"`
	Ended     time.Time  `json:"ended,omitzero"`
	ExitCode  *int       `json:"exit_code,omitempty"`
	State     string     `json:"state"`
	PreRun    string     `json:"pre_run,omitempty"` // the pre-run snapshot's id
	Host      string     `json:"host,omitempty"`
	Pushed    time.Time  `json:"pushed"`
	Snapshots []string   `json:"snapshots"` // ids, oldest first
	Branches  []BranchAt `json:"branches"`
	Bytes     int64      `json:"bytes"` // the objects of all its snapshots and branches, each once
}

// BranchAt is a session's branch as it was pushed.
type BranchAt struct {
	Name   string `json:"name"`
	Origin string `json:"origin,omitempty"` // the snapshot it was created from
	State  string `json:"state"`            // the snapshot document of its contents
}

// BranchDocName names the snapshot document of a session's branch.
func BranchDocName(session, branch string) string { return session + ".branch." + branch }

// Listing is what a remote holds, as `agentfs remote ls NAME` shows it.
type Listing struct {
	Remote    string        `json:"remote"`
	URL       string        `json:"url"`
	Sessions  []SessionDoc  `json:"sessions"`
	Snapshots []SnapshotDoc `json:"snapshots"` // without their changes
}

// List reads the remote's documents: its sessions and snapshots (the
// snapshots' changes left out).
func (r *Remote) List(ctx context.Context) (Listing, error) {
	l := Listing{Remote: r.cfg.Name, URL: r.loc.String()}
	if err := r.Check(ctx); err != nil {
		return l, err
	}
	if _, err := r.checkMarker(ctx); err != nil {
		return l, err
	}
	names, err := r.ListDocs(ctx, KindSession)
	if err != nil {
		return l, err
	}
	for _, n := range names {
		var d SessionDoc
		if err := r.GetDoc(ctx, KindSession, n, &d); err != nil {
			return l, err
		}
		l.Sessions = append(l.Sessions, d)
	}
	names, err = r.ListDocs(ctx, KindSnapshot)
	if err != nil {
		return l, err
	}
	for _, n := range names {
		var d SnapshotDoc
		if err := r.GetDoc(ctx, KindSnapshot, n, &d); err != nil {
			return l, err
		}
		if d.Format != Format {
			return l, fmt.Errorf("%s of %s has format %d, which this agentfs (format %d) does not read: use a newer agentfs",
				r.loc.DocKey(KindSnapshot, n), r.describe(), d.Format, Format)
		}
		d.Changes = nil
		l.Snapshots = append(l.Snapshots, d)
	}
	return l, nil
}
