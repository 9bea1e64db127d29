package overlay

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/hide"
)

// # Hidden project paths
//
// A view given hide rules (Config.Hide) shows none of the lower files
// they hide (see package hide): this file is where a lower name is
// judged, at the three places lower names become visible:
//
//   - resolveLocked (every lookup, create, rename and remove) treats a
//     hidden lower name as absent: ENOENT, no node, no whiteout when a
//     program's own file there is removed;
//   - lowerNames (readdir, the emptiness of a directory for rmdir,
//     the search for hard links) leaves hidden names out, and
//     lowerSubdirsOf leaves hidden directories out of a directory's
//     st_nlink;
//   - openLower refuses (ENOENT) to open a hidden path or a hidden
//     inode: whatever path leads there, the view never opens a hidden
//     lower file.
//
// A lower name is hidden when its lower path (not its path in the
// view: a renamed directory keeps its lower path) matches the rules,
// or when it is a regular file with more than one link whose inode a
// hidden path names (Config.HiddenInodes). A program's own file at a
// hidden path is an ordinary upper entry: the rules judge lower names
// only. Snapshot and lower views of a store get the same rules, so
// that Diff, Export and Apply see what the mount showed.

// hidesLower reports whether the lower file at lower path lp, with
// attributes st, is hidden; a hidden regular file's inode is recorded
// (so that its other names are hidden too).
func (v *FS) hidesLower(lp string, st *unix.Stat_t) bool {
	rules := v.cfg.Hide
	if rules.Empty() {
		return false
	}
	typ := st.Mode & unix.S_IFMT
	if rules.Hidden(lp, typ == unix.S_IFDIR) {
		if typ == unix.S_IFREG {
			v.cfg.HiddenInodes.Saw(st.Dev, st.Ino)
		}
		return true
	}
	return typ == unix.S_IFREG && st.Nlink > 1 && v.cfg.HiddenInodes.Hides(st.Dev, st.Ino)
}

// HideRules returns the rules the view hides lower paths by (nil for
// none).
func (v *FS) HideRules() *hide.Rules { return v.cfg.Hide }

// unhiddenNames drops the hidden names from a listing of lower
// directory lp.
func (v *FS) unhiddenNames(lp string, names []DirEntry) []DirEntry {
	if v.cfg.Hide.Empty() {
		return names
	}
	out := names[:0]
	for _, de := range names {
		p := joinPath(lp, de.Name)
		// A regular file whose inode number no hidden file has (d_ino
		// is st_ino), and any other type, is judged by its path alone;
		// an unknown type, or a regular file that may be another name
		// of a hidden one, by its stat.
		if de.Mode != 0 && (de.Mode != unix.S_IFREG || !v.cfg.HiddenInodes.HidesIno(de.Ino)) {
			if v.cfg.Hide.Hidden(p, de.Mode == unix.S_IFDIR) {
				if de.Mode == unix.S_IFREG {
					v.hiddenSeen(p)
				}
				continue
			}
			out = append(out, de)
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(v.lowerFd, lowerRel(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone meanwhile
		}
		if v.hidesLower(p, &st) {
			continue
		}
		out = append(out, de)
	}
	return out
}

// hiddenSeen records the inode of hidden regular file p (a listing
// meets it): its other names are hidden from now on.
func (v *FS) hiddenSeen(p string) {
	var st unix.Stat_t
	if unix.Fstatat(v.lowerFd, lowerRel(p), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		v.cfg.HiddenInodes.Saw(st.Dev, st.Ino)
	}
}

// hiddenBeforeOpen is openLower's guard before it opens lower path p
// with flags: whether p is hidden (by its path, or as a hidden inode).
func (v *FS) hiddenBeforeOpen(p string, flags int) bool {
	if v.cfg.Hide.Empty() {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstatat(v.lowerFd, lowerRel(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return v.cfg.Hide.Hidden(p, flags&unix.O_DIRECTORY != 0)
	}
	return v.hidesLower(p, &st)
}

// checkOpenLower is openLower's guard after the open, against a path
// replaced meanwhile: it refuses (and closes) an open lower file f of
// path p that is hidden.
func (v *FS) checkOpenLower(p string, f *os.File) (*os.File, error) {
	if v.cfg.Hide.Empty() {
		return f, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if v.hidesLower(p, &st) {
		f.Close()
		return nil, unix.ENOENT
	}
	return f, nil
}
