package overlay

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/branch"
)

// # Hard-linked lower files in a Diff
//
// When one name of a hard-linked lower file is copied up, the other
// lower names of that inode show the upper copy too (FS.hardlinks), so
// they change without an entry of their own. For every entry that
// differs and carries an Origin, linkedRoots finds the other lower
// names of its inode with one walk of the lower tree (which stops once
// every name is found), and maps each name to the view paths that may
// show it: its own path, and the same path below every renamed
// directory (Redirect) of either view that merges its lower directory.

// linkedRoots returns the view paths that may show a lower name of the
// inodes in origins (lower st_ino → one lower name), in no order.
func linkedRoots(a, b *FS, origins map[uint64]string) ([]string, error) {
	want := map[uint64]int{} // names still to find; -1 when unknown
	for ino, origin := range origins {
		var st unix.Stat_t
		switch err := unix.Fstatat(a.lowerFd, lowerRel(origin), &st, unix.AT_SYMLINK_NOFOLLOW); {
		case err != nil:
			want[ino] = -1 // the name is gone; others may remain
		case sharedLower(&st) && a.mapIno(&st) == ino:
			want[ino] = int(st.Nlink)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	names, err := a.lowerNamesOf(want)
	if err != nil {
		return nil, fmt.Errorf("diff: looking for the names of hard-linked lower files: %w", err)
	}
	out := viewPathsOfLower(names, append(a.redirects(), b.redirects()...))
	return slices.DeleteFunc(out, func(p string) bool { return isBelow(p, internalDir) }), nil
}

// viewPathsOfLower maps lower names to the view paths that may show
// them: each at its own path, and at the same path below every renamed
// directory that merges its directory.
func viewPathsOfLower(names []string, redirects []redirect) []string {
	var out []string
	for _, lp := range names {
		out = append(out, lp)
		for _, r := range redirects {
			if strings.HasPrefix(lp, r.lower+"/") {
				out = append(out, r.path+lp[len(r.lower):])
			}
		}
	}
	return out
}

// lowerNamesOf walks the lower tree for the regular files whose st_ino
// (as the view shows it) is in want, counting want's names down, and
// returns their lower paths. It stops when every count is 0.
func (v *FS) lowerNamesOf(want map[uint64]int) ([]string, error) {
	var out []string
	err := v.eachLowerName(want, func(_ uint64, p string) { out = append(out, p) })
	return out, err
}

// lowerNamesByIno is lowerNamesOf with the names of each st_ino apart.
func (v *FS) lowerNamesByIno(want map[uint64]int) (map[uint64][]string, error) {
	out := map[uint64][]string{}
	err := v.eachLowerName(want, func(ino uint64, p string) { out[ino] = append(out[ino], p) })
	return out, err
}

// eachLowerName is the walk of lowerNamesOf, calling fn with each name
// found (want is counted down).
func (v *FS) eachLowerName(want map[uint64]int, fn func(ino uint64, p string)) error {
	left := 0       // inodes with names still to find (-1: never done)
	nested := false // an inode of a filesystem mounted inside the lower
	for ino, n := range want {
		if n != 0 {
			left++
		}
		nested = nested || ino&(1<<62) != 0
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := v.lowerNames(dir)
		if err != nil {
			return err
		}
		for _, de := range ents {
			if left == 0 {
				return nil
			}
			p := joinPath(dir, de.Name)
			switch de.Mode {
			case unix.S_IFDIR:
				if err := walk(p); err != nil {
					return err
				}
			case unix.S_IFREG, 0:
				if _, ok := want[de.Ino]; !ok && !nested {
					continue
				}
				var st unix.Stat_t
				if unix.Fstatat(v.lowerFd, p, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
					continue
				}
				ino := v.mapIno(&st)
				n, ok := want[ino]
				if !ok {
					continue
				}
				fn(ino, p)
				if n > 0 {
					if want[ino] = n - 1; n == 1 {
						left--
					}
				}
			}
		}
		return nil
	}
	return walk("")
}

// redirect is a directory of a view that merges another lower
// directory than its own path (a renamed directory).
type redirect struct{ path, lower string }

// redirects lists the view's renamed directories.
func (v *FS) redirects() []redirect {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []redirect
	for dir, m := range v.dirs {
		for name, e := range m {
			if e.Type != branch.TypeDir {
				continue
			}
			p := joinPath(dir, name)
			if lp, ok := redirectOf(e); ok && lp != p && lp != "" {
				out = append(out, redirect{p, lp})
			}
		}
	}
	return out
}
