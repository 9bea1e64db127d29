package overlay

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// tx collects the entry changes of one namespace operation and commits
// them to the layer in one batch. Objects are created before the commit
// and removed only after it, so a crash leaves at worst unreferenced
// objects (garbage), never an entry that names a missing object.
//
// The in-memory index is updated as the operation goes; if the commit
// fails, it is reloaded from the layer.
type tx struct {
	view    *FS
	b       branch.Batch
	created []string  // objects made by this operation
	doomed  []string  // objects to remove once the commit is durable
	touched []string  // directory objects whose mtime/ctime to update
	bumped  []string  // objects whose ctime to update
	promos  []promo   // nodes that get an upper entry once committed
	unlink  []*Node   // nodes that lose their last name once committed
	copies  []copyRec // objects copied up from lower inodes
	// deleted are the paths whose entries this operation deleted: an
	// entry put there again keeps the path's base (see base.go).
	deleted map[string]bool
	err     error     // a failure of put, reported by commit
	quota0  quotaMark // the usage before (quota.go)
	// deleting: the operation is an unlink or rmdir, which the file
	// limit never refuses (the directories it copies up to hold a
	// whiteout may take the usage past it: quota.go).
	deleting bool
}

// copyRec is an object copied up from a lower inode whose ctime was
// lower.
type copyRec struct {
	id    string
	lower unix.Timespec
}

type promo struct {
	n    *Node
	e    *branch.Entry
	data bool // the node's data moves to e's object: its files follow
}

func (v *FS) newTx() *tx { return &tx{view: v, quota0: v.quotaMark()} }

func (t *tx) put(p string, e *branch.Entry) {
	if e.Object != "" && t.view.layer != nil && slices.Contains(t.created, e.Object) {
		e.Epoch = t.view.layer.Epoch() // a new object belongs to no snapshot
	}
	old := t.view.indexGet(p)
	if old == nil && !t.deleted[p] && t.view.layer != nil && !isBelow(p, internalDir) && !t.view.inOpaqueDirLocked(p) {
		t.recordBase(p)
	}
	if old != nil && old.IsWhiteout() && old.Ino != 0 &&
		(!e.IsWhiteout() || e.Ino != old.Ino) {
		// The lower name this whiteout hid (and counted for the
		// st_nlink of its hard-linked file) stays hidden under e.
		if id, err := t.view.cfg.AllocIno(); err != nil {
			t.err = err
		} else {
			t.view.indexPut(hiddenPath(id), old)
			t.b.Put(hiddenPath(id), old)
		}
	}
	t.view.indexPut(p, e)
	t.b.Put(p, e)
}

func (t *tx) del(p string) {
	if t.deleted == nil {
		t.deleted = map[string]bool{}
	}
	t.deleted[p] = true
	t.view.indexDel(p)
	t.b.Delete(p)
}

// created records an object made by the operation (removed on failure).
func (t *tx) made(id string) { t.created = append(t.created, id) }

// commit persists the batch. On failure the index is rebuilt from the
// layer and the operation's new objects are removed.
func (t *tx) commit() error {
	if t.err != nil {
		return t.fail(t.err)
	}
	if t.view.layer == nil {
		// A read-only view (a snapshot, the lower tree): forget what
		// the operation put in the index.
		return t.fail(unix.EROFS)
	}
	if t.b.Len() > 0 {
		if err := t.view.layer.Commit(&t.b); err != nil {
			t.view.log.Error("committing metadata", "err", err)
			if lerr := t.view.loadLocked(); lerr != nil {
				t.view.log.Error("reloading index", "err", lerr)
			}
			t.abort()
			return fmt.Errorf("commit: %w", unix.EIO)
		}
	}
	t.view.rearmQuota(t.quota0)
	for _, p := range t.promos {
		t.view.promoteLocked(p.n, p.e)
		if p.data {
			p.n.dataGen.Add(1)
		}
	}
	for _, n := range t.unlink {
		n.unlinked, n.parent = true, nil
	}
	for _, c := range t.copies {
		t.view.keepCtime(c)
	}
	now := unix.NsecToTimespec(time.Now().UnixNano())
	for _, id := range t.touched {
		loc := t.view.objs.Loc(id)
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, now}
		if err := unix.UtimesNanoAt(loc.Dirfd, loc.Name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.view.log.Warn("touching directory", "object", id, "err", err)
		}
	}
	for _, id := range t.bumped {
		if err := t.view.bumpCtime(id); err != nil {
			t.view.log.Warn("updating ctime", "object", id, "err", err)
		}
	}
	if len(t.doomed) > 0 {
		if err := t.view.settle(); err != nil {
			t.view.log.Warn("objects left for gc: the commit that freed them is not written", "err", err)
			t.doomed = nil
		}
	}
	for _, id := range t.doomed {
		t.view.forgetCtime(id)
		if err := t.view.objs.Recycle(id); err != nil {
			t.view.log.Warn("removing object", "object", id, "err", err)
		}
	}
	return nil
}

// abort removes the objects the operation made; the index must already
// be consistent with the layer.
func (t *tx) abort() {
	for _, id := range t.created {
		if err := t.view.objs.Remove(id); err != nil {
			t.view.log.Warn("removing object", "object", id, "err", err)
		}
	}
}

// fail aborts after an error in the middle of an operation: the index is
// reloaded (it may hold changes that were never committed).
func (t *tx) fail(err error) error {
	if t.b.Len() > 0 {
		if lerr := t.view.loadLocked(); lerr != nil {
			t.view.log.Error("reloading index", "err", lerr)
		}
	}
	t.abort()
	return err
}

// promote gives n the upper entry e once the commit succeeds.
func (t *tx) promote(n *Node, e *branch.Entry) {
	t.promos = append(t.promos, promo{n: n, e: e})
}

// moveData gives n the upper entry e, whose object holds a copy of n's
// data, once the commit succeeds: n's read-only files follow it there.
func (t *tx) moveData(n *Node, e *branch.Entry) {
	t.promos = append(t.promos, promo{n: n, e: e, data: true})
}

// objectOf returns n's object, including one this operation gave it.
func (t *tx) objectOf(n *Node) string {
	for i := len(t.promos) - 1; i >= 0; i-- {
		if t.promos[i].n == n {
			return t.promos[i].e.Object
		}
	}
	return n.object
}

// entryOf returns n's upper entry, including one this operation gave it.
func (t *tx) entryOf(n *Node) *branch.Entry {
	for i := len(t.promos) - 1; i >= 0; i-- {
		if t.promos[i].n == n {
			return t.promos[i].e
		}
	}
	return n.entry
}

// touch marks dir's object for an mtime/ctime update at commit,
// thawing it first if a snapshot shares it (on failure the times are
// left alone: the snapshot matters more).
func (t *tx) touch(dir *Node) {
	e, err := t.view.thawLocked(t, dir)
	if err != nil {
		t.view.log.Warn("directory times not updated", "err", err)
		return
	}
	if e != nil && e.Object != "" {
		t.touched = append(t.touched, e.Object)
	} else if id := t.objectOf(dir); id != "" {
		t.touched = append(t.touched, id)
	}
}

// bump marks n's object for a ctime update at commit.
func (t *tx) bump(n *Node) {
	if n == nil || t.view.frozenLocked(t.entryOf(n)) {
		return // no data copy for a ctime (see thaw.go)
	}
	if id := t.objectOf(n); id != "" {
		t.bumped = append(t.bumped, id)
	}
}

// bumpCtime sets an object's ctime to now and changes nothing else:
// chmod to its own mode (chown(-1, -1) would also clear setuid and
// setgid bits); symlinks, which have no mode to set, get chown(-1, -1).
func (v *FS) bumpCtime(id string) error {
	if v.objs.TouchDeferred(id) {
		return nil // not made yet: its record's ctime (backstore/deferred.go)
	}
	loc := v.objs.Loc(id)
	st, err := v.objs.Lstat(id)
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return unix.Fchownat(loc.Dirfd, loc.Name, -1, -1, unix.AT_SYMLINK_NOFOLLOW)
	}
	return unix.Fchmodat(loc.Dirfd, loc.Name, st.Mode&07777, 0)
}
