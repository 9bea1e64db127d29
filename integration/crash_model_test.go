package integration

// The model of TestCrashUnderLoad (crash_test.go): per path, the state
// it has now and every state a crash may leave it in (the last durable
// one and all later ones), and what a tree is seen to hold.

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

func crashSum(b []byte) string { return fmt.Sprintf("%x", sha256.Sum256(b)) }

// crashInode is a regular file of the model.
type crashInode struct {
	id       int64  // unique in the test
	ino      uint64 // st_ino when seen in the mount at the start of the round; 0 for files made in it
	data     []byte // its content: durable, unless uncertain
	sum      string
	pristine bool // a lower file not written yet: writing it copies it up
	// uncertain: a write to it did not finish (the kill came); a crash
	// may leave any content.
	uncertain bool
}

func (i *crashInode) setData(b []byte) { i.data, i.sum, i.uncertain = b, crashSum(b), false }

// crashBinding is what a path names: nothing (kind 0), a directory
// ('d') or a file ('f').
type crashBinding struct {
	kind byte
	ino  *crashInode
}

func (b crashBinding) String() string {
	switch b.kind {
	case 0:
		return "absent"
	case 'd':
		return "a directory"
	}
	if b.ino.uncertain {
		return fmt.Sprintf("file #%d (any content: a write was in flight)", b.ino.id)
	}
	return fmt.Sprintf("file #%d %s", b.ino.id, describeData(b.ino.data))
}

// describeData says what a content is: size, hash and first line.
func describeData(b []byte) string {
	head := b
	if i := strings.IndexByte(string(head), '\n'); i >= 0 {
		head = head[:i]
	}
	if len(head) > 60 {
		head = head[:60]
	}
	return fmt.Sprintf("(%d bytes, sha256 %.12s, %q)", len(b), crashSum(b), head)
}

// crashName is one path of the model.
type crashName struct {
	cur      crashBinding
	possible []crashBinding // cur included
}

func (n *crashName) add(b crashBinding) {
	for _, p := range n.possible {
		if p == b {
			return
		}
	}
	n.possible = append(n.possible, b)
}

func (n *crashName) set(b crashBinding) { n.cur = b; n.add(b) }

// durable: the current state is what a crash leaves.
func (n *crashName) durable() { n.possible = []crashBinding{n.cur} }

// crashObs is a path as seen in a tree.
type crashObs struct {
	kind byte // 'd', 'f', or '?' for anything else
	ino  uint64
	data []byte
	sum  string
}

func (o crashObs) String() string {
	switch o.kind {
	case 'd':
		return "a directory"
	case 'f':
		return "file " + describeData(o.data)
	}
	return "a special file"
}

func (b crashBinding) matches(o crashObs, present bool) bool {
	switch b.kind {
	case 0:
		return !present
	case 'd':
		return present && o.kind == 'd'
	}
	return present && o.kind == 'f' && (b.ino.uncertain || o.sum == b.ino.sum)
}

// crashWant is a path of a snapshot taken with the load paused.
type crashWant struct {
	kind  byte
	inode int64
	sum   string
	desc  string
}

// crashSnap is a snapshot whose create printed an id.
type crashSnap struct {
	id, label string
	round     int
	want      map[string]crashWant // taken with the load paused: its exact tree
	// For a branch: from is the snapshot it was created from; merged,
	// that a merge into it was started (crashLoad.merge); alt, the tree
	// it may hold instead of want (the merge in flight at the kill
	// made, or not); looseLinks, that names one file in the model may
	// be separate files there (a merge takes a file as a copy, and its
	// undo makes each path anew).
	from       string
	merged     bool
	alt        map[string]crashWant
	looseLinks bool
}

// owner is the worker owning path p, or nil.
func (c *crashTest) owner(p string) *crashWorker {
	first, _, _ := strings.Cut(p, "/")
	return c.byRoot[first]
}

func (c *crashTest) newInode() *crashInode { return &crashInode{id: c.nextID.Add(1)} }

// observe records every path below root.
func (c *crashTest) observe(root, what string) map[string]crashObs {
	c.t.Helper()
	out, err := crashWalk(root)
	if err != nil {
		c.t.Fatalf("reading %s: %v", what, err)
	}
	return out
}

// crashWalk records every path below root.
func crashWalk(root string) (map[string]crashObs, error) {
	out := map[string]crashObs{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		o := crashObs{kind: '?', ino: st.Ino}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			o.kind = 'd'
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			o.kind, o.data, o.sum = 'f', b, crashSum(b)
		}
		out[rel] = o
		return nil
	})
	return out, err
}

// rebuild makes the model the observed tree: every state durable.
func (c *crashTest) rebuild(obs map[string]crashObs) {
	c.static = map[string]*crashName{}
	for _, w := range c.workers {
		w.names = map[string]*crashName{}
	}
	inodes := map[uint64]*crashInode{}
	for p, o := range obs {
		b := crashBinding{kind: o.kind}
		if o.kind == 'f' {
			if b.ino = inodes[o.ino]; b.ino == nil {
				b.ino = c.newInode()
				b.ino.ino, b.ino.pristine = o.ino, c.pristine[o.ino]
				b.ino.setData(o.data)
				inodes[o.ino] = b.ino
			}
		}
		n := &crashName{cur: b, possible: []crashBinding{b}}
		if w := c.owner(p); w != nil {
			w.names[p] = n
		} else {
			c.static[p] = n
		}
	}
}

// name is the model of path p, or nil.
func (c *crashTest) name(p string) *crashName {
	if w := c.owner(p); w != nil {
		return w.names[p]
	}
	return c.static[p]
}

// want is the tree the model holds now (the load paused).
func (c *crashTest) want() map[string]crashWant {
	out := map[string]crashWant{}
	add := func(names map[string]*crashName) {
		for p, n := range names {
			switch n.cur.kind {
			case 'd':
				out[p] = crashWant{kind: 'd', desc: "a directory"}
			case 'f':
				w := crashWant{kind: 'f', inode: n.cur.ino.id, desc: n.cur.String()}
				if !n.cur.ino.uncertain {
					w.sum = n.cur.ino.sum
				}
				out[p] = w
			}
		}
	}
	add(c.static)
	for _, w := range c.workers {
		add(w.names)
	}
	return out
}
