package overlay

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// openLower opens a lower path read-only without updating its atime
// (O_NOATIME needs ownership or CAP_FOWNER; without it, plain O_RDONLY).
// A hidden path (hide.go) is refused with ENOENT, and never opened.
func (v *FS) openLower(p string, flags int) (*os.File, error) {
	if v.hiddenBeforeOpen(p, flags) {
		return nil, unix.ENOENT
	}
	rel := lowerRel(p)
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	fd, err := unix.Openat(v.lowerFd, rel, flags|unix.O_NOATIME, 0)
	if err == unix.EPERM {
		fd, err = unix.Openat(v.lowerFd, rel, flags, 0)
	}
	if err != nil {
		return nil, err
	}
	return v.checkOpenLower(p, os.NewFile(uintptr(fd), rel))
}

// copyUpDirLocked gives directory n (and its ancestors) an upper entry.
// v.mu is held exclusively.
func (v *FS) copyUpDirLocked(t *tx, n *Node) error {
	if t.entryOf(n) != nil {
		return nil
	}
	if n.parent != nil {
		if err := v.copyUpDirLocked(t, n.parent); err != nil {
			return err
		}
	}
	_, err := v.copyUpMetaLocked(t, n)
	return err
}

// copyUpMetaLocked gives the lower-only node n an upper entry without
// copying file data: directories, symlinks and special files get an
// object of their own kind, regular files a metacopy object. Its parent
// must be upper already. v.mu is held exclusively.
func (v *FS) copyUpMetaLocked(t *tx, n *Node) (*branch.Entry, error) {
	if e := t.entryOf(n); e != nil {
		return e, nil
	}
	if n.parent != nil {
		if err := v.copyUpDirLocked(t, n.parent); err != nil {
			return nil, err
		}
	}
	e, err := v.metaCopyLocked(t, n.lower, n.ino)
	if err != nil {
		return nil, err
	}
	if p, ok := n.pathLocked(); ok {
		t.put(p, e)
	}
	t.promote(n, e)
	return e, nil
}

// metaCopyLocked makes the upper object of the lower inode at lower
// (shown as st_ino ino) and returns its entry, not yet put anywhere.
func (v *FS) metaCopyLocked(t *tx, lower string, ino uint64) (*branch.Entry, error) {
	var st unix.Stat_t
	rel := lowerRel(lower)
	if !t.deleting {
		if err := v.needFilesLocked(); err != nil {
			return nil, err
		}
	}
	if err := unix.Fstatat(v.lowerFd, rel, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("copy-up %s: %w", rel, err)
	}
	e := &branch.Entry{Type: modeType(st.Mode), Ino: ino}
	var id string
	var err error
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		var f *os.File
		if f, err = v.openLower(lower, unix.O_RDONLY); err != nil {
			return nil, fmt.Errorf("copy-up %s: %w", rel, err)
		}
		id, err = v.objs.CopyUp(f, &st, false)
		f.Close()
		e.Metacopy, e.Origin = true, lower
	case unix.S_IFDIR:
		var f *os.File
		if f, err = v.openLower(lower, unix.O_RDONLY|unix.O_DIRECTORY); err != nil {
			return nil, fmt.Errorf("copy-up %s: %w", rel, err)
		}
		if id, err = v.objs.Mkdir(st.Mode&07777, int(st.Uid), int(st.Gid)); err == nil {
			t.made(id)
			err = v.objs.CopyAttrs(id, &st, f)
		}
		f.Close()
		e.Redirect = redirectFor(lower)
	case unix.S_IFLNK:
		var target string
		if target, err = readlinkat(v.lowerFd, rel); err != nil {
			return nil, fmt.Errorf("copy-up %s: %w", rel, err)
		}
		if id, err = v.objs.Symlink(target, int(st.Uid), int(st.Gid)); err == nil {
			t.made(id)
			err = v.copyAttrsFromPath(id, &st, rel)
		}
	default:
		if id, err = v.objs.Mknod(st.Mode, st.Rdev, int(st.Uid), int(st.Gid)); err == nil {
			t.made(id)
			err = v.copyAttrsFromPath(id, &st, rel)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("copy-up %s: %w", rel, err)
	}
	if e.Type == branch.TypeFile {
		t.made(id)
	}
	e.Object = id
	t.copies = append(t.copies, copyRec{id, st.Ctim})
	return e, nil
}

// copyAttrsFromPath copies attributes and xattrs from a lower inode that
// cannot be opened for reading (symlinks, devices, fifos).
func (v *FS) copyAttrsFromPath(id string, st *unix.Stat_t, rel string) error {
	fd, err := unix.Openat(v.lowerFd, rel, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	return v.objs.CopyAttrs(id, st, f)
}

// copyUpData makes n's data upper: a lower-only or metacopy regular file
// gets an object holding its data (none when withData is false: the
// O_TRUNC case). The data copy runs without v.mu, under n.copyMu, so a
// large copy-up stalls only the callers that need this node.
func (v *FS) copyUpData(n *Node, withData bool) error {
	if n.mode != unix.S_IFREG {
		return v.copyUpMeta(n)
	}
	n.copyMu.Lock()
	defer n.copyMu.Unlock()

	v.mu.RLock()
	if stale, err := v.changeStaleLocked(n); stale {
		v.mu.RUnlock()
		return err
	}
	done := n.object != "" && (n.entry == nil || !n.entry.Metacopy)
	lower := n.lower
	var err error
	if !done && n.object == "" {
		// A new object: refused before anything is copied (and checked
		// again when it is counted in).
		err = v.needFilesLocked()
	}
	v.mu.RUnlock()
	if done {
		return v.thaw(n)
	}
	if err != nil {
		return err
	}
	f, err := v.openLower(lower, unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("copy-up %s: %w", lowerRel(lower), err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("copy-up %s: %w", lowerRel(lower), err)
	}
	var reserved int64
	if withData {
		if err := v.reserveBytes(st.Size); err != nil {
			return err
		}
		reserved = st.Size
	}
	id, err := v.objs.CopyUp(f, &st, withData)
	if err != nil {
		v.unreserveBytes(reserved)
		return fmt.Errorf("copy-up %s: %w", lowerRel(lower), err)
	}
	if withData && st.Size > 0 {
		// The copy's data reaches the disk before the entry that names
		// it can: after a crash the file is the copy or the lower file,
		// never an empty copy (overlayfs does the same).
		if err := v.objs.SyncData(id); err != nil {
			v.unreserveBytes(reserved)
			if rerr := v.objs.Remove(id); rerr != nil {
				v.log.Warn("removing object", "object", id, "err", rerr)
			}
			return fmt.Errorf("copy-up %s: %w", lowerRel(lower), err)
		}
	}

	return v.publishCopyUp(n, id, lower, &st, reserved)
}

// publishCopyUp makes the new data object id the upper inode of n and
// of every name that shares it, and gives back the bytes reserved for
// the copy (once its entry counts them, or it failed).
func (v *FS) publishCopyUp(n *Node, id, lower string, st *unix.Stat_t, reserved int64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	defer v.unreserveBytes(reserved) // before the unlock: never counted twice, nor not at all
	t := v.newTx()
	t.made(id)
	old := n.object
	if old == "" {
		if err := v.needFilesLocked(); err != nil {
			return t.fail(err)
		}
	}
	if old != "" {
		// A metacopy object carries attributes changed since (chmod,
		// utimens, xattrs): they win over the lower file's.
		if err := v.copyAttrsFromObject(id, old); err != nil {
			return t.fail(err)
		}
	}
	e := &branch.Entry{Type: branch.TypeFile, Ino: n.ino, Object: id}
	if st.Nlink > 1 {
		e.Origin = lower // keeps the other lower names joined (hardlinks)
	}
	if old != "" {
		// Every name of the metacopy object now names the data copy.
		for _, p := range v.pathsOfLocked(old) {
			t.put(p, e)
		}
		if v.links[old] == 0 && !n.unlinked && !v.frozenLocked(n.entry) {
			t.doomed = append(t.doomed, old)
		}
	} else if p, ok := n.pathLocked(); ok {
		if n.parent != nil {
			if err := v.copyUpDirLocked(t, n.parent); err != nil {
				return t.fail(err)
			}
		}
		t.put(p, e)
	}
	t.promote(n, e)
	t.copies = append(t.copies, copyRec{id, st.Ctim})
	if err := t.commit(); err != nil {
		return err
	}
	n.dataGen.Add(1)
	return nil
}

// pathsOfLocked returns every path whose entry names object obj.
func (v *FS) pathsOfLocked(obj string) []string {
	var out []string
	if v.rootEntry != nil && v.rootEntry.Object == obj {
		out = append(out, "")
	}
	for dir, m := range v.dirs {
		for name, e := range m {
			if e.Object == obj {
				out = append(out, joinPath(dir, name))
			}
		}
	}
	return out
}

// copyUpMeta gives n an upper entry without copying data.
func (v *FS) copyUpMeta(n *Node) error {
	n.copyMu.Lock()
	defer n.copyMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if stale, err := v.changeStaleLocked(n); stale {
		return err
	}
	t := v.newTx()
	if n.object != "" {
		if !v.frozenLocked(n.entry) {
			return nil
		}
		if _, err := v.thawLocked(t, n); err != nil {
			return t.fail(err)
		}
		return t.commit()
	}
	if _, err := v.copyUpMetaLocked(t, n); err != nil {
		return t.fail(err)
	}
	return t.commit()
}

// copyAttrsFromObject gives object dst the mode, owner, times and
// exactly the xattrs of object src.
func (v *FS) copyAttrsFromObject(dst, src string) error {
	st, err := v.objs.Lstat(src)
	if err != nil {
		return err
	}
	f, err := v.objs.Open(src, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	return v.objs.ReplaceAttrs(dst, &st, f)
}

func readlinkat(dirfd int, p string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, p, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
