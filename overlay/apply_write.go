package overlay

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/backstore"
	"github.com/agentfs/agentfs/branch"
)

// Writing an Apply into the lower tree (see "How each change is
// written" in apply.go). Every call is relative to a directory fd that
// was resolved below the view's lower fd without following symlinks.

// errViewChanged is a change whose path the view no longer shows as
// planned (changed while the apply ran): it is skipped.
var errViewChanged = errors.New("changed in the view while apply ran")

// write carries out the plan: writes and creations in path order, the
// names of the files written that must join them (relinkNames),
// removals deepest first, then directory attributes and times, then
// fsync of the directories written in.
func (a *applier) write() error {
	if err := a.capture(); err != nil {
		return err
	}
	defer a.closeSources()
	for _, it := range a.items {
		if it.state == stateApply && it.lexists {
			a.watchLower(it.Path, &it.lower)
		}
	}
	var err error
	for i, it := range a.items {
		if it.state != stateApply || it.New == nil {
			continue
		}
		werr := a.writeChange(i, it)
		switch {
		case errors.Is(werr, errViewChanged):
			it.state, it.reason = stateSkipped, werr.Error()
			continue
		case werr != nil:
			it.state, it.reason = stateFailed, werr.Error()
			err = fmt.Errorf("apply: %s: %w", displayPath(it.Path), werr)
		default:
			it.state = stateDone
			a.step(it)
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = a.relinkNames()
	}
	for i := len(a.items) - 1; i >= 0 && err == nil; i-- {
		it := a.items[i]
		if it.state != stateApply || it.Kind != Deleted {
			continue
		}
		err = a.removeChange(it)
	}
	for _, it := range a.items {
		if it.state == stateApply {
			it.state, it.reason = stateFailed, "not applied: the apply stopped at an error"
		}
	}
	// What was written gets its directories finished, also after an
	// error.
	err = errors.Join(err, a.finishDirs(), a.syncDirs())
	return err
}

// step counts a change written.
func (a *applier) step(it *planned) {
	a.progress.Done++
	a.progress.Bytes += it.bytes
	if a.o.Progress != nil {
		a.o.Progress(a.progress)
	}
}

// removeChange removes the lower file or directory of a Deleted change
// (its contents are gone already: deepest first). A directory that
// still holds names (they appeared from outside meanwhile) is skipped.
func (a *applier) removeChange(it *planned) error {
	err := a.removeLower(it.Path, it.Old.Type == "dir")
	switch {
	case err == nil:
		it.state = stateDone
		a.step(it)
		return nil
	case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST):
		it.state, it.reason = stateSkipped, "names appeared in it in the project while apply ran"
		return nil
	}
	it.state, it.reason = stateFailed, err.Error()
	return fmt.Errorf("apply: removing %s: %w", displayPath(it.Path), err)
}

// removeLower removes lower path p (a directory with rmdir).
func (a *applier) removeLower(p string, dir bool) error {
	dirfd, name, err := a.parentFd(p)
	if err != nil {
		return err
	}
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
		a.forgetDirs(p)
	}
	err = unix.Unlinkat(dirfd, name, flags)
	if err == unix.ENOENT {
		err = nil // gone already
	}
	if err == nil {
		if dir {
			// Gone with its names: nothing there to fsync (a file or
			// symlink may take its name, and its old path lead
			// through it).
			maps.DeleteFunc(a.touched, func(q string, _ bool) bool { return isBelow(q, p) })
		}
		a.touched[parentOf(p)] = true
	}
	return err
}

// writeChange writes change it (item i) at its lower path.
func (a *applier) writeChange(i int, it *planned) error {
	src := a.sources[it.Path]
	if src == nil {
		return errViewChanged
	}
	if it.Path == "" {
		return nil // the root's mode and times: finishDirs
	}
	if it.Kind == TypeChanged {
		if err := a.removeForTypeChange(i, it); err != nil {
			return err
		}
	}
	dirfd, name, err := a.parentFd(it.Path)
	if err != nil {
		return err
	}
	switch {
	case src.mode == unix.S_IFDIR:
		if it.Kind == Created || it.Kind == TypeChanged {
			if err := unix.Mkdirat(dirfd, name, 0o700); err != nil {
				return err
			}
			a.touched[parentOf(it.Path)] = true
		}
		return nil // attributes: finishDirs
	case it.Kind == ModeChanged && a.changesInPlace(it, src):
		if err := a.setAttrs(attrTarget{dirfd: dirfd, name: name, fd: -1}, src); err != nil {
			return err
		}
		if src.mode == unix.S_IFREG && src.st.Nlink > 1 && a.linked[src.st.Ino] == "" {
			a.linkTo(it.Path, src) // its other names join it
		}
		return nil
	}
	if err := a.writeNew(dirfd, name, it, src); err != nil {
		return err
	}
	a.touched[parentOf(it.Path)] = true
	return nil
}

// removeForTypeChange removes the lower file that a change of type
// replaces, when a rename cannot: a directory (after the removals
// planned below it, deepest first), or anything a directory replaces.
func (a *applier) removeForTypeChange(i int, it *planned) error {
	oldDir, newDir := it.Old.Type == "dir", it.New.Type == "dir"
	if !oldDir && !newDir {
		return nil // the new file is renamed over the old
	}
	if oldDir {
		end := i + 1
		for end < len(a.items) && isBelow(a.items[end].Path, it.Path) {
			end++
		}
		for j := end - 1; j > i; j-- {
			if below := a.items[j]; below.state == stateApply && below.Kind == Deleted {
				if err := a.removeChange(below); err != nil {
					return err
				}
				if below.state == stateSkipped {
					return fmt.Errorf("%s: %s", displayPath(below.Path), below.reason)
				}
			}
		}
	}
	err := a.removeLower(it.Path, oldDir)
	if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("the directory it replaces holds names that apply did not plan to remove (they appeared in the project while it ran)")
	}
	return err
}

// writeNew makes the non-directory file src under a temporary name in
// dirfd and renames it to name.
func (a *applier) writeNew(dirfd int, name string, it *planned, src *source) error {
	if src.mode == unix.S_IFREG {
		return a.writeRegular(dirfd, name, it, src)
	}
	tmp, err := a.makeTemp(dirfd, func(tmp string) error {
		if src.mode == unix.S_IFLNK {
			return unix.Symlinkat(src.target, dirfd, tmp)
		}
		// fifos, sockets, device nodes
		return unix.Mknodat(dirfd, tmp, src.mode|0o600, int(src.st.Rdev))
	})
	if err != nil {
		return err
	}
	return a.finishTemp(dirfd, tmp, name, func() error {
		return a.setAttrs(attrTarget{dirfd: dirfd, name: tmp, fd: -1}, src)
	})
}

// writeRegular writes a regular file: a link to a name already written
// when the view has them as one file, or to a name of that file that
// the lower tree holds already (residentName), a link to the lower file
// its data still is when the apply removes that file's old name (a
// rename), else a copy of its data.
func (a *applier) writeRegular(dirfd int, name string, it *planned, src *source) error {
	st := &src.st
	if st.Nlink > 1 {
		if first, ok := a.linked[st.Ino]; ok {
			return a.linkOver(first, dirfd, name, nil)
		}
		if q := a.residentName(it, src); q != "" {
			a.linkTo(q, src)
			a.resident[q] = true
			return a.linkOver(q, dirfd, name, func(tmp string) error {
				return a.setAttrs(attrTarget{dirfd: dirfd, name: tmp, fd: -1}, src)
			})
		}
	}
	defer func() {
		if st.Nlink > 1 {
			a.linkTo(it.Path, src)
		}
	}()
	if src.object == "" && src.lower != it.Path && src.data == nil && a.canLinkLower(src.lower) {
		a.used[src.lower] = true
		return a.linkOver(src.lower, dirfd, name, func(tmp string) error {
			return a.setAttrs(attrTarget{dirfd: dirfd, name: tmp, fd: -1}, src)
		})
	}
	in, err := a.openSource(src)
	if err != nil {
		return err
	}
	if in != src.data {
		defer in.Close()
	}
	fd, tmp, err := a.tmpFile(dirfd)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(fd), name)
	defer dst.Close()
	fail := func(err error) error {
		if tmp != "" {
			a.removeTemp(dirfd, tmp, name)
		}
		return err
	}
	if err := backstore.CopyFileData(dst, in, st.Size); err != nil {
		return fail(err)
	}
	if err := a.setAttrs(attrTarget{fd: fd}, src); err != nil {
		return fail(err)
	}
	if err := unix.Fsync(fd); err != nil {
		return fail(err)
	}
	if tmp == "" {
		// An O_TMPFILE: give it a temporary name to rename.
		if tmp, err = a.makeTemp(dirfd, func(tmp string) error {
			return unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), dirfd, tmp, unix.AT_SYMLINK_FOLLOW)
		}); err != nil {
			return err
		}
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return fail(err)
	}
	it.bytes = st.Size
	return nil
}

// residentName returns another name of the view's file src (written at
// it.Path, with other names in the view) that the lower tree holds
// already and the apply does not write: a name unchanged, or changed
// only in mode, owner or xattrs (set in place), whose lower file has
// the view's data. The names of one file in the view are the entries
// of its object (src.entry's: it.Path may be a lower name showing the
// object without an entry of its own) and the lower files they came
// from; each candidate is
// looked up in the view, which must show it as the same file. Linking
// to it keeps them one file in the lower tree (writing a copy would
// make two), and its attributes become the view's. "" when there is
// none.
func (a *applier) residentName(it *planned, src *source) string {
	e := src.entry
	if e == nil && src.lower != "" {
		// A lower-only file: its lower names, where the view shows them.
		return a.firstResident(it, "", src, a.viewNamesOfLower(src.lower))
	}
	if e == nil || e.Type != branch.TypeFile || e.Object == "" {
		return ""
	}
	var names []string
	for p, s := range a.seen {
		if s.entry.Type != branch.TypeFile || s.entry.Object != e.Object {
			continue
		}
		names = append(names, p)
		if s.entry.Origin != "" {
			names = append(names, s.entry.Origin)
		}
	}
	if e.Origin != "" {
		// The lower names of a copied-up hard-linked lower file that
		// the apply changes in place.
		for _, other := range a.items {
			if other.lexists && sharedLower(&other.lower) && a.v.mapIno(&other.lower) == e.Ino {
				names = append(names, other.Path)
			}
		}
	}
	if q := a.firstResident(it, e.Object, src, names); q != "" || e.Origin == "" {
		return q
	}
	// Last, every lower name of the copied-up file's lower inode (a
	// walk of the lower tree, as Diff makes for such files).
	fd, ok := a.origins[e.Origin]
	var held unix.Stat_t
	if !ok || unix.Fstat(fd, &held) != nil || held.Nlink == 0 {
		return ""
	}
	names, err := a.v.lowerNamesOf(map[uint64]int{e.Ino: int(held.Nlink)})
	if err != nil {
		return ""
	}
	return a.firstResident(it, e.Object, src, names)
}

// firstResident returns the first of names (in path order) that
// residentName may link to: src's file in the view (of object, or a
// lower-only file when ""), whose lower inode has no name that is
// another file in the view (its attributes become the view's).
func (a *applier) firstResident(it *planned, object string, src *source, names []string) string {
	slices.SortFunc(names, comparePaths)
	for _, q := range slices.Compact(names) {
		if q == it.Path || isInternal(q) {
			continue
		}
		lst, ok := a.residentLower(q)
		if !ok {
			continue
		}
		if s, ok := a.seen[q]; ok && (object == "" || s.entry.Object != object) {
			continue // another file, or a whiteout, at that name now
		}
		if st, ok := a.viewFile(q); ok && st.Ino == src.st.Ino && !a.sharedWithOtherFile(&lst, src.st.Ino) {
			return q
		}
	}
	return ""
}

// residentLower reports whether the lower file at q stays as it is
// through the apply, but for attributes set in place: neither it nor a
// directory above it is written or removed, and it is a regular file
// (st).
func (a *applier) residentLower(q string) (unix.Stat_t, bool) {
	var st unix.Stat_t
	if it := a.byPath[q]; it != nil && (it.Kind != ModeChanged || it.state == stateConflict) {
		return st, false
	}
	for _, d := range ancestors(q) {
		if it := a.byPath[d]; it != nil && it.state == stateApply && (it.Kind == TypeChanged || it.Kind == Deleted) {
			return st, false
		}
	}
	ok := unix.Fstatat(a.v.lowerFd, lowerRel(q), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
	return st, ok
}

// canLinkLower reports whether the lower file at lp may become the new
// name of a renamed file: the apply removes lp (and no directory above
// it first), nothing else links it, and it was not used already.
func (a *applier) canLinkLower(lp string) bool {
	it := a.byPath[lp]
	if lp == "" || it == nil || it.Kind != Deleted || it.state != stateApply || a.used[lp] {
		return false
	}
	for _, d := range ancestors(lp) {
		if anc := a.byPath[d]; anc != nil && anc.Kind == TypeChanged {
			return false
		}
	}
	var st unix.Stat_t
	return unix.Fstatat(a.v.lowerFd, lp, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1
}

// linkOver makes name in dirfd a hard link of lower path from: linked
// under a temporary name, given its attributes (attrs, when not nil),
// and renamed.
func (a *applier) linkOver(from string, dirfd int, name string, attrs func(tmp string) error) error {
	fromDir, fromName, err := a.parentFd(from)
	if err != nil {
		return err
	}
	tmp, err := a.makeTemp(dirfd, func(tmp string) error {
		return unix.Linkat(fromDir, fromName, dirfd, tmp, 0)
	})
	if err != nil {
		return err
	}
	return a.finishTemp(dirfd, tmp, name, func() error {
		if attrs == nil {
			return nil
		}
		return attrs(tmp)
	})
}

// finishTemp runs attrs on the temporary name, then renames it to name;
// on failure the temporary name is removed.
func (a *applier) finishTemp(dirfd int, tmp, name string, attrs func() error) error {
	err := attrs()
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if err != nil {
		a.removeTemp(dirfd, tmp, name)
	}
	return err
}

// removeTemp removes the temporary name tmp (for name) in dirfd after a
// failure, which is what the caller reports. A name it cannot remove
// stays in the project: it is logged, for the user to remove.
func (a *applier) removeTemp(dirfd int, tmp, name string) {
	if err := unix.Unlinkat(dirfd, tmp, 0); err != nil && err != unix.ENOENT {
		a.v.log.Warn("apply: temporary name left in the project", "temporary", tmp, "for", name, "err", err)
	}
}

// tempPrefix starts the temporary names an apply makes in the lower
// tree (for a moment: each is renamed at once).
const tempPrefix = ".agentfs-apply."

// makeTemp calls mk with fresh temporary names until one does not
// exist, and returns it.
func (a *applier) makeTemp(dirfd int, mk func(tmp string) error) (string, error) {
	for range 100 {
		tmp := fmt.Sprintf("%s%d.%016x", tempPrefix, os.Getpid(), rand.Uint64())
		err := mk(tmp)
		if err == unix.EEXIST {
			continue
		}
		return tmp, err
	}
	return "", fmt.Errorf("no free temporary name: %w", unix.EEXIST)
}

// tmpFile opens a new regular file in dirfd for writing: an unnamed one
// (O_TMPFILE, tmp "") where the filesystem can, else under a temporary
// name.
func (a *applier) tmpFile(dirfd int) (fd int, tmp string, err error) {
	fd, err = unix.Openat(dirfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return fd, "", nil
	}
	tmp, err = a.makeTemp(dirfd, func(tmp string) error {
		var err error
		fd, err = unix.Openat(dirfd, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		return err
	})
	return fd, tmp, err
}

// attrTarget names a lower file whose attributes apply sets: an open
// fd, or name in directory dirfd (not followed if a symlink).
type attrTarget struct {
	dirfd int
	name  string
	fd    int // >= 0: use it
}

// xattr operations on the target: through the fd (a magic
// /proc/self/fd link would itself be the l*xattr calls' target), or on
// name in dirfd (not followed).
func (t attrTarget) list(b []byte) (int, error) {
	if t.fd >= 0 {
		return unix.Flistxattr(t.fd, b)
	}
	return listxattrAt(t.dirfd, t.name, b)
}

func (t attrTarget) set(name string, val []byte) error {
	if t.fd >= 0 {
		return unix.Fsetxattr(t.fd, name, val, 0)
	}
	return setxattrAt(t.dirfd, t.name, name, val, 0)
}

func (t attrTarget) remove(name string) error {
	if t.fd >= 0 {
		return unix.Fremovexattr(t.fd, name)
	}
	return removexattrAt(t.dirfd, t.name, name)
}

// setAttrs gives the target src's owner (as root), xattrs (those an
// export keeps), mode and times, in that order: chown clears setid
// bits, and every change moves the ctime, not the times set last.
func (a *applier) setAttrs(t attrTarget, src *source) error {
	st := &src.st
	if a.asRoot {
		var err error
		if t.fd >= 0 {
			err = unix.Fchown(t.fd, int(st.Uid), int(st.Gid))
		} else {
			err = unix.Fchownat(t.dirfd, t.name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := a.syncXattrs(t, src.xattrs); err != nil {
		return err
	}
	if src.mode != unix.S_IFLNK {
		var err error
		if t.fd >= 0 {
			err = unix.Fchmod(t.fd, st.Mode&0o7777)
		} else {
			err = unix.Fchmodat(t.dirfd, t.name, st.Mode&0o7777, 0)
		}
		if err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	var err error
	if t.fd >= 0 {
		err = unix.UtimesNanoAt(t.fd, "", ts, unix.AT_EMPTY_PATH)
	} else {
		err = unix.UtimesNanoAt(t.dirfd, t.name, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("times: %w", err)
	}
	return nil
}

// syncXattrs makes the target's xattrs (of the kinds apply writes: as
// Export, user.* and POSIX ACLs, and as root trusted.* and file
// capabilities) exactly want.
func (a *applier) syncXattrs(t attrTarget, want map[string]string) error {
	names, err := readSized(t.list)
	if errors.Is(err, unix.EOPNOTSUPP) {
		if len(want) > 0 {
			return fmt.Errorf("xattrs: the project's filesystem has none: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("xattrs: %w", err)
	}
	for _, name := range strings.Split(string(names), "\x00") {
		if name == "" || !keptXattr(name, a.asRoot) {
			continue
		}
		if _, ok := want[name]; !ok {
			if err := t.remove(name); err != nil && err != unix.ENODATA {
				return fmt.Errorf("removing xattr %s: %w", name, err)
			}
		}
	}
	for name, val := range want {
		if !keptXattr(name, a.asRoot) {
			continue
		}
		if err := t.set(name, []byte(val)); err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}

// finishDirs sets the attributes of the directories the apply made or
// changed (deepest first, after their contents), and the times of
// those it changed names in, to the view's.
func (a *applier) finishDirs() error {
	todo := map[string]bool{}
	for p := range a.touched {
		todo[p] = false
	}
	for _, it := range a.items {
		if it.state == stateDone && it.New != nil && it.New.Type == "dir" {
			todo[it.Path] = true
		}
	}
	paths := make([]string, 0, len(todo))
	for p := range todo {
		paths = append(paths, p)
	}
	slices.SortFunc(paths, comparePaths)
	var errs []error
	for i := len(paths) - 1; i >= 0; i-- {
		p := paths[i]
		if err := a.finishDir(p, todo[p]); err != nil {
			errs = append(errs, fmt.Errorf("apply: directory %s: %w", displayPath(p), err))
		}
	}
	return errors.Join(errs...)
}

// finishDir gives lower directory p the view's times, and its mode,
// owner and xattrs too when all.
func (a *applier) finishDir(p string, all bool) error {
	src := a.sources[p]
	if src == nil || src.mode != unix.S_IFDIR {
		return nil // not a directory in the view: nothing to match
	}
	fd, err := a.openDir(p, unix.O_RDONLY)
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return nil // removed by the apply (a skipped change left it)
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if all {
		return a.setAttrs(attrTarget{fd: fd}, src)
	}
	return unix.UtimesNanoAt(fd, "", []unix.Timespec{src.st.Atim, src.st.Mtim}, unix.AT_EMPTY_PATH)
}

// syncDirs fsyncs every directory the apply changed names in, so that
// the renames and removals survive a power loss.
func (a *applier) syncDirs() error {
	var errs []error
	for p := range a.touched {
		fd, err := a.openDir(p, unix.O_RDONLY)
		if err == unix.ENOENT || err == unix.ENOTDIR {
			continue
		}
		if err == nil {
			err = unix.Fsync(fd)
			unix.Close(fd)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("apply: syncing directory %s: %w", displayPath(p), err))
		}
	}
	return errors.Join(errs...)
}

// parentFd returns an fd of the lower directory holding p and p's name.
func (a *applier) parentFd(p string) (int, string, error) {
	dir, name := splitPath(p)
	if fd, ok := a.dirs[dir]; ok {
		return fd, name, nil
	}
	fd, err := a.openDir(dir, unix.O_PATH)
	if err != nil {
		return -1, "", fmt.Errorf("directory %s: %w", displayPath(dir), err)
	}
	a.dirs[dir] = fd
	return fd, name, nil
}

// openDir opens lower directory p below the lower fd without following
// any symlink (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS; one name at
// a time with O_NOFOLLOW where openat2 is missing).
func (a *applier) openDir(p string, flags int) (int, error) {
	flags |= unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW
	how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(a.v.lowerFd, lowerRel(p), &how)
	if err != unix.ENOSYS {
		return fd, err
	}
	cur, err := unix.Dup(a.v.lowerFd)
	if err != nil {
		return -1, err
	}
	names := pathNames(p)
	for i, name := range names {
		f := unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW
		if i == len(names)-1 {
			f = flags
		}
		next, err := unix.Openat(cur, name, f, 0)
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	if len(names) == 0 {
		next, err := unix.Openat(cur, ".", flags, 0)
		unix.Close(cur)
		return next, err
	}
	return cur, nil
}

// forgetDirs closes the fds of lower directory p and below (about to
// be removed).
func (a *applier) forgetDirs(p string) {
	for d, fd := range a.dirs {
		if isBelow(d, p) {
			unix.Close(fd)
			delete(a.dirs, d)
		}
	}
}

// closeDirs closes every directory fd.
func (a *applier) closeDirs() {
	for d, fd := range a.dirs {
		unix.Close(fd)
		delete(a.dirs, d)
	}
}

// source is what the view shows at a path that the apply writes, read
// before anything is written: writing the lower tree can change what
// the view shows (the other names of a hard-linked lower file, the
// contents of a renamed directory), never what the apply writes.
type source struct {
	mode   uint32 // S_IFMT
	st     unix.Stat_t
	xattrs map[string]string
	target string // symlinks
	// Regular files: the object holding the data, or else the lower
	// file it is; data is that lower file opened in advance when the
	// apply changes it before it is read.
	object string
	lower  string
	data   *os.File
	// entry is the upper entry the view shows there (nil for a lower
	// file): a path's own, or, for another lower name of a copied-up
	// hard-linked lower file, the copy's.
	entry *branch.Entry
}

// capture reads the source of every change to write, and of the
// directory of every change (for its times).
func (a *applier) capture() error {
	a.sources = map[string]*source{}
	cur := a.v.newCursor()
	defer cur.close()
	want := map[string]bool{}
	var order []string
	add := func(p string) {
		if !want[p] {
			want[p] = true
			order = append(order, p)
		}
	}
	for _, it := range a.items {
		if it.state != stateApply {
			continue
		}
		if it.New != nil {
			add(it.Path)
		}
		if it.Path != "" {
			add(parentOf(it.Path))
		}
	}
	slices.SortFunc(order, comparePaths)
	for _, p := range order {
		n, st, err := cur.lookup(p)
		if err != nil {
			return fmt.Errorf("apply: reading %s: %w", displayPath(p), err)
		}
		if n == nil {
			continue
		}
		src, err := a.readSource(n, st)
		a.v.release(n)
		if err != nil {
			return fmt.Errorf("apply: reading %s: %w", displayPath(p), err)
		}
		if it := a.byPath[p]; it != nil && it.New != nil && modeType(src.mode).String() != it.New.Type {
			continue // changed since the plan: skipped
		}
		a.sources[p] = src
	}
	a.findLowerLinks()
	a.captureViewNames()
	return nil
}

// readSource reads what the apply needs of node n (attributes st).
func (a *applier) readSource(n *Node, st unix.Stat_t) (*source, error) {
	a.v.mu.RLock()
	src := &source{mode: n.mode, st: st, entry: n.entry}
	a.v.mu.RUnlock()
	var err error
	if src.xattrs, err = a.v.xattrs(n); err != nil {
		return nil, err
	}
	switch n.mode {
	case unix.S_IFLNK:
		if src.target, err = a.v.Readlink(n); err != nil {
			return nil, err
		}
	case unix.S_IFREG:
		src.object, src.lower = a.v.dataOf(n)
		if src.object == "" && a.changesLower(src.lower) && !a.canLinkLower(src.lower) {
			if src.data, err = a.v.openLower(src.lower, unix.O_RDONLY); err != nil {
				return nil, err
			}
		}
	}
	return src, nil
}

// changesLower reports whether the apply writes or removes lower path
// p, or a directory above it.
func (a *applier) changesLower(p string) bool {
	if it := a.byPath[p]; it != nil && it.state == stateApply {
		return true
	}
	for _, d := range ancestors(p) {
		if it := a.byPath[d]; it != nil && it.state == stateApply && it.Kind == TypeChanged {
			return true
		}
	}
	return false
}

// openSource opens a regular file's data.
func (a *applier) openSource(src *source) (*os.File, error) {
	switch {
	case src.data != nil:
		return src.data, nil
	case src.object != "":
		return a.v.objs.OpenRead(src.object)
	}
	return a.v.openLower(src.lower, unix.O_RDONLY)
}

// closeSources closes the files opened in advance.
func (a *applier) closeSources() {
	for _, src := range a.sources {
		if src.data != nil {
			src.data.Close()
		}
	}
}
