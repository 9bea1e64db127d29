package overlay

import (
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # Bases
//
// The branch remembers what each lower path looked like when the view
// first shadowed it (branch.Base): whenever an operation puts an entry
// at a path that had none (a copy-up, a metacopy, a whiteout, a file or
// directory created, the target of a rename, every entry a directory
// rename moves), the same commit records the lower inode at that path
// (or that there was none). When the path's parent merges another lower
// directory (a renamed directory), the lower name the entry hides there
// is recorded too, unless it has a base already. The base is kept while
// entries come and go at the path, and replaced only when an entry
// appears there again after the path had none; apply refreshes or
// deletes the bases of the paths it writes. Apply uses them to tell a
// lower file that changed since (see apply.go).

// coarseNow is the time on the clock the kernel stamps ctimes with
// (CLOCK_REALTIME_COARSE): a change made after it gets a ctime at
// least as large.
func coarseNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// lowerBase describes lower path p as it is now.
func (v *FS) lowerBase(p string) (*branch.Base, error) {
	b := &branch.Base{Seen: coarseNow()}
	var st unix.Stat_t
	switch err := fstatatLong(v.lowerFd, lowerRel(p), &st); err {
	case nil:
		fillBase(b, &st)
	case unix.ENOENT, unix.ENOTDIR:
	default:
		return nil, fmt.Errorf("lower %s: %w", lowerRel(p), err)
	}
	return b, nil
}

func fillBase(b *branch.Base, st *unix.Stat_t) {
	b.Exists = true
	b.Dev, b.Ino, b.Mode, b.Uid, b.Gid, b.Size = st.Dev, st.Ino, st.Mode, st.Uid, st.Gid, st.Size
	b.Mtime, b.Ctime = st.Mtim.Nano(), st.Ctim.Nano()
}

// recordBase records the base of p, which is getting its first entry
// in t (and of the lower name the entry hides through a renamed
// parent). t.view.mu is held exclusively.
func (t *tx) recordBase(p string) {
	b, err := t.view.lowerBase(p)
	if err != nil {
		t.err = err
		return
	}
	t.b.SetBase(p, b)
	lp, ok := t.view.lowerPositionLocked(p)
	if !ok || lp == p || t.view.indexGet(lp) != nil {
		return
	}
	if _, err := t.view.layer.Base(lp); err == nil {
		return // seen before: the first look counts
	}
	if b, err = t.view.lowerBase(lp); err != nil {
		t.err = err
		return
	}
	t.b.SetBase(lp, b)
}

// inOpaqueDirLocked reports whether p's directory is an opaque
// directory of the branch (made by mkdir, hiding what the lower tree
// has there): p needs no base of its own, its directory's base judges
// it (see "Conflicts" in apply.go), which spares a stat of the lower
// tree and a key per file created in new directories (an untar).
// v.mu is held.
func (v *FS) inOpaqueDirLocked(p string) bool {
	if p == "" {
		return false
	}
	dir, _ := splitPath(p)
	e := v.indexGet(dir)
	return e != nil && e.Type == branch.TypeDir && e.Opaque && e.Redirect == ""
}

// lowerPositionLocked returns the lower path that view path p resolves
// to when it has no entry of its own: its parent's merged lower
// directory plus its name; false when the parent merges none (opaque).
// v.mu is held.
func (v *FS) lowerPositionLocked(p string) (string, bool) {
	if p == "" {
		return "", true
	}
	dir, name := splitPath(p)
	if e := v.indexGet(dir); e != nil {
		if e.Type != branch.TypeDir {
			return "", false
		}
		lp, ok := redirectOf(e)
		if !ok {
			return "", false
		}
		return joinPath(lp, name), true
	}
	lp, ok := v.lowerPositionLocked(dir)
	if !ok {
		return "", false
	}
	return joinPath(lp, name), true
}

// fstatatLong is fstatat(dirfd, rel, AT_SYMLINK_NOFOLLOW) for a path
// that may be longer than PATH_MAX: the directories on the way are
// opened one by one (O_PATH, never following a symlink).
func fstatatLong(dirfd int, rel string, st *unix.Stat_t) error {
	if len(rel) < unix.PathMax {
		return unix.Fstatat(dirfd, rel, st, unix.AT_SYMLINK_NOFOLLOW)
	}
	dir, name := path.Split(rel)
	fd, err := unix.Openat(dirfd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	for _, c := range strings.Split(strings.Trim(dir, "/"), "/") {
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err == unix.ELOOP {
			err = unix.ENOTDIR // a symlink on the way: nothing there
		}
		if err != nil {
			return err
		}
		fd = next
	}
	defer unix.Close(fd)
	return unix.Fstatat(fd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

// SetBases records the bases of paths, replacing those recorded, in one
// commit: a pulled session's, where the project of the machine that
// made the changes differed from this machine's (workspace/pull.go).
func (v *FS) SetBases(bases map[string]*branch.Base) error {
	if v.layer == nil {
		return fmt.Errorf("a snapshot's view has no bases to set")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var b branch.Batch
	for p, base := range bases {
		b.SetBase(p, base)
	}
	if err := v.layer.Commit(&b); err != nil {
		return err
	}
	return v.layer.Settle()
}
