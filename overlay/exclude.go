package overlay

import (
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// # Lower paths a view leaves out
//
// A view whose lower directory is a whole system (agentfs run --system,
// lower /) must not show some of it: agentfs's own directories (the
// store of the session, the sessions, private stores, the mount
// registry), which a view of them would show changing under it, or
// serve back to itself; and the kernel's filesystems (/proc, /sys,
// /dev, /run), which the session shows live, mounted over the view,
// and which no walk of the view (diff, export, the hard-link search)
// may enter. Config says which, by lower path:
//
//   - Hide: the path does not exist in the lower tree, as far as the
//     view can tell: a lookup finds nothing, a listing of its parent
//     leaves it out (d_ino and all), and nothing below it is reached.
//   - Seal: the directory exists (its own attributes are the lower
//     directory's) but the view shows none of its lower entries: a
//     walk stops there, and a mount over it in the command's namespace
//     shows what the kernel has.
//
// Both apply to the lower path, whatever view path shows it (a renamed
// directory shows its lower directory's entries under another name:
// still none of a sealed one). What the branch itself holds at such a
// path (a directory the command made) is shown as always. A plain
// project mount has neither: lookups then pay one nil map test.

// exclusions are a view's hidden and sealed lower paths (clean,
// relative to the lower root, "" never).
type exclusions struct {
	hide, seal map[string]bool
	// below is true when some path has more than one component: a
	// listing of a directory other than the root may then hide names.
	below bool
}

// newExclusions builds the sets from the Config's lists; a path given
// absolute ("/proc") is taken relative to the lower root.
func newExclusions(hide, seal []string) exclusions {
	var x exclusions
	add := func(m *map[string]bool, ps []string) {
		for _, p := range ps {
			c := strings.TrimPrefix(path.Clean("/"+p), "/")
			if c == "" || c == internalDir {
				continue
			}
			if *m == nil {
				*m = map[string]bool{}
			}
			(*m)[c] = true
			x.below = x.below || strings.Contains(c, "/")
		}
	}
	add(&x.hide, hide)
	add(&x.seal, seal)
	return x
}

// hidden reports whether lower path lp is left out of the view.
func (x *exclusions) hidden(lp string) bool {
	return x.hide != nil && x.hide[lp]
}

// sealed reports whether the view shows lower directory lp empty.
func (x *exclusions) sealed(lp string) bool {
	return x.seal != nil && x.seal[lp]
}

// filter drops the hidden names from a listing of lower directory lp.
func (x *exclusions) filter(lp string, names []DirEntry) []DirEntry {
	if x.hide == nil || (lp != "" && !x.below) {
		return names
	}
	out := names[:0]
	for _, de := range names {
		if !x.hide[joinPath(lp, de.Name)] {
			out = append(out, de)
		}
	}
	return out
}

// Hidden returns the lower paths the view leaves out, and Sealed those
// it shows empty (Config.Hide, Config.Seal), cleaned.
func (v *FS) Hidden() []string { return keysOf(v.excl.hide) }

// Sealed: see Hidden.
func (v *FS) Sealed() []string { return keysOf(v.excl.seal) }

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// lowerChildStat stats lower path lp, a child of lower directory dir,
// without following a symlink: ENOENT when the view leaves it out.
func (v *FS) lowerChildStat(dir, lp string, st *unix.Stat_t) error {
	if v.excl.hidden(lp) || v.excl.sealed(dir) {
		return unix.ENOENT
	}
	return unix.Fstatat(v.lowerFd, lp, st, unix.AT_SYMLINK_NOFOLLOW)
}

// excludedSubdirs counts the subdirectories of lower directory lp
// (whose attributes are st) that its st_nlink counts but the view does
// not show: all of a sealed one's, the hidden ones.
func (v *FS) excludedSubdirs(lp string, st *unix.Stat_t) int {
	if v.excl.sealed(lp) {
		return max(int(st.Nlink)-2, 0)
	}
	if v.excl.hide == nil {
		return 0
	}
	n := 0
	for h := range v.excl.hide {
		if path.Dir("/"+h) != "/"+lp {
			continue
		}
		var cst unix.Stat_t
		if unix.Fstatat(v.lowerFd, h, &cst, unix.AT_SYMLINK_NOFOLLOW) == nil && cst.Mode&unix.S_IFMT == unix.S_IFDIR {
			n++
		}
	}
	return n
}

// KeepsMount reports whether n is a sealed directory that still shows
// its lower directory: the kernel may have a filesystem mounted over
// it (agentfs run --system binds /proc, /dev, ... there), and
// invalidating its name would detach that mount, so neither a Reload
// nor a change seen in the lower directory cuts it loose.
func (v *FS) KeepsMount(n *Node) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	v.nodesMu.Lock()
	defer v.nodesMu.Unlock()
	return v.keepsMountLocked(n)
}

// KeepsMountName reports whether name in the root shows a sealed
// directory that still shows its lower one (see KeepsMount), whether
// the kernel holds its node or not.
func (v *FS) KeepsMountName(name string) bool {
	if v.excl.seal == nil || !v.excl.sealed(name) {
		return false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.indexGet(name) == nil && (v.rootEntry == nil || !v.rootEntry.Opaque)
}

// keepsMountLocked is KeepsMount with v.mu and v.nodesMu held; the
// branch's entries are the ones loaded (after a Reload, the new ones).
func (v *FS) keepsMountLocked(n *Node) bool {
	if v.excl.seal == nil || n.mode != unix.S_IFDIR || n.entry != nil || !n.hasLower || n.unlinked || n.parent != v.root {
		return false
	}
	p := n.name
	if n.lower != p || !v.excl.sealed(p) || v.indexGet(p) != nil {
		return false
	}
	return v.rootEntry == nil || !v.rootEntry.Opaque
}
