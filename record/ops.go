package record

import (
	"path"
	"strings"
)

// Event is one entry of the activity log: its operation (the log's op
// names: create, open, lookup, rename, ...) and paths, relative to the
// project ("." for its root).
type Event struct {
	Op    string
	Path  string
	Path2 string
}

// opSet is the operations seen on one path.
type opSet map[string]bool

// list returns the operations in the format's order.
func (s opSet) list() []string {
	out := []string{}
	for _, op := range opOrder {
		if s[op] {
			out = append(out, op)
		}
	}
	return out
}

// lookupOp marks an operation decided once the path's states are known:
// a lookup is a directory traversal when the path is a directory, an
// existence check otherwise.
const lookupOp = "lookup"

// opsOf maps one activity log entry to the format's operations on its
// paths (two for a rename, a link, a copy), or none (a close, agentfs's
// own entries):
//
//	open (for reading)                          read of Path
//	lookup                                      existence of Path (directory when it is one)
//	readdir                                     directory of Path
//	create mknod mkdir symlink write truncate
//	fallocate setattr setxattr removexattr      write of Path
//	link                                        existence of Path, write of Path2
//	copy_file_range                             read of Path, write of Path2
//	rename                                      delete of Path, write of Path2
//	unlink rmdir                                delete of Path
func opsOf(e Event) (p1, op1, p2, op2 string) {
	switch e.Op {
	case "open":
		return e.Path, OpRead, "", ""
	case "lookup":
		return e.Path, lookupOp, "", ""
	case "readdir":
		return e.Path, OpDirectory, "", ""
	case "create", "mknod", "mkdir", "symlink", "write", "truncate", "fallocate", "setattr", "setxattr", "removexattr":
		return e.Path, OpWrite, "", ""
	case "link":
		return e.Path, OpExistence, e.Path2, OpWrite
	case "copy_file_range":
		return e.Path, OpRead, e.Path2, OpWrite
	case "rename":
		return e.Path, OpDelete, e.Path2, OpWrite
	case "unlink", "rmdir":
		return e.Path, OpDelete, "", ""
	}
	return "", "", "", ""
}

// observed is what the log and the diff say of one path.
type observed struct {
	ops     opSet
	changed bool // the diff says it differs
}

// observe gathers the paths the events name and the paths that changed,
// with their operations, keeping those keep accepts (paths relative to
// the project, "" for its root). A changed path the log has no write or
// delete of (below a renamed directory, or an entry dropped) gets one.
func observe(in Input, keep func(p string) bool) map[string]*observed {
	seen := map[string]*observed{}
	add := func(raw, op string) *observed {
		p, ok := cleanRel(raw)
		if !ok || op == "" || !keep(p) {
			return nil
		}
		ob := seen[p]
		if ob == nil {
			ob = &observed{ops: opSet{}}
			seen[p] = ob
		}
		ob.ops[op] = true
		return ob
	}
	for _, e := range in.Events {
		p1, op1, p2, op2 := opsOf(e)
		add(p1, op1)
		add(p2, op2)
	}
	for _, c := range in.Changed {
		op := OpWrite
		if c.Deleted {
			op = OpDelete
		}
		p, ok := cleanRel(c.Path)
		if !ok {
			continue
		}
		if ob := seen[p]; ob != nil && (ob.ops[OpWrite] || ob.ops[OpDelete]) {
			ob.changed = true
		} else if ob := add(c.Path, op); ob != nil {
			ob.changed = true
		}
	}
	return seen
}

// cleanRel turns a log's path into a clean relative one ("" for the
// root); ok is false for what is no path of the tree (a file unlinked
// while open, "(deleted)").
func cleanRel(p string) (string, bool) {
	if p == "" || strings.HasPrefix(p, "(") || strings.HasPrefix(p, "/") {
		return "", false
	}
	p = path.Clean(p)
	if p == "." {
		return "", true
	}
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	return p, true
}

// inGitDir reports whether relative path p is a .git directory or
// inside one: never recorded.
func inGitDir(p string) bool {
	for _, n := range strings.Split(p, "/") {
		if n == ".git" {
			return true
		}
	}
	return false
}
