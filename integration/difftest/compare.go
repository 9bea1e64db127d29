package difftest

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Profile names the differences from the reference that one root may
// show. See the package documentation for the table of allowances.
type Profile struct {
	Name  string
	Allow map[string]bool
}

// Allowance IDs (see the table in doc.go).
const (
	// AllowRenameDirEXDEV: rename(2) of a lower or merged directory
	// fails with EXDEV where the reference renames it.
	AllowRenameDirEXDEV = "rename-dir-exdev"
	// AllowDinoHardlink: readdir's d_ino of a non-directory may differ
	// from its st_ino (overlayfs, for files that were hard-linked).
	AllowDinoHardlink = "dino-hardlink"
	// AllowFifoMtime: writing to a fifo leaves its mtime unchanged.
	AllowFifoMtime = "fifo-mtime"
	// AllowUnlinkedNlink: fstat of an open file that was unlinked
	// reports st_nlink 1 instead of 0.
	AllowUnlinkedNlink = "unlinked-nlink"
	// AllowFailedRenameMtime: a rename that fails may still change the
	// mtime of a parent directory.
	AllowFailedRenameMtime = "failed-rename-mtime"
	// AllowDirNlinkOne: a directory reports st_nlink 1 ("unknown", as
	// find(1) understands it) instead of 2 + subdirectories.
	AllowDirNlinkOne = "dir-nlink-1"
)

func (p *Profile) allows(id string) bool { return p != nil && p.Allow[id] }

// Diff is one difference between a root and the reference.
type Diff struct {
	// Sig classifies the difference for the shrinker, which keeps
	// only reductions that still show a difference of the same Sig.
	Sig  string
	Text string
}

func (d Diff) String() string { return d.Text }

// compareResults reports whether got (on a root with profile p) matches
// the reference result ref of op. allowed names the allowance that
// made a difference acceptable.
func compareResults(op *Op, ref, got Result, p *Profile) (ok bool, allowed string) {
	if got.Errno == unix.EXDEV && ref.Errno != unix.EXDEV && op.Kind == OpRename && p.allows(AllowRenameDirEXDEV) {
		// overlayfs refuses before it checks anything else; where the
		// reference renamed, the caller re-syncs the root.
		return true, AllowRenameDirEXDEV
	}
	if ref.Errno != got.Errno || ref.N != got.N || ref.Data != got.Data {
		return false, ""
	}
	if (ref.Stat == nil) != (got.Stat == nil) {
		return false, ""
	}
	if ref.Stat != nil {
		if d := compareStat(ref.Stat, got.Stat, p); len(d) > 0 {
			if d[0] == allowedNlink {
				return true, "nlink"
			}
			return false, ""
		}
	}
	return true, ""
}

// allowedNlink is what compareStat returns when the only difference is
// an nlink the profile allows.
const allowedNlink = "allowed nlink"

// compareStat describes the differing fields; when the only one is an
// nlink the profile allows, it returns allowedNlink alone.
func compareStat(ref, got *StatInfo, p *Profile) []string {
	var diffs []string
	isDir := ref.Mode&unix.S_IFMT == unix.S_IFDIR
	if ref.Mode != got.Mode {
		diffs = append(diffs, fmt.Sprintf("mode %s, want %s", modeString(got.Mode), modeString(ref.Mode)))
	}
	if !isDir && ref.Size != got.Size {
		diffs = append(diffs, fmt.Sprintf("size %d, want %d", got.Size, ref.Size))
	}
	if ref.Uid != got.Uid || ref.Gid != got.Gid {
		diffs = append(diffs, fmt.Sprintf("owner %d:%d, want %d:%d", got.Uid, got.Gid, ref.Uid, ref.Gid))
	}
	if ref.Rdev != got.Rdev {
		diffs = append(diffs, fmt.Sprintf("rdev %#x, want %#x", got.Rdev, ref.Rdev))
	}
	fifoStale := ref.Mode&unix.S_IFMT == unix.S_IFIFO && !isExplicit(ref.Mtime) && isExplicit(got.Mtime)
	if !sameTime(ref.Mtime, got.Mtime) && (!fifoStale || !p.allows(AllowFifoMtime)) {
		diffs = append(diffs, fmt.Sprintf("mtime %s, want %s", timeString(got.Mtime), timeString(ref.Mtime)))
	}
	nlinkAllowed := false
	if ref.Nlink != got.Nlink {
		switch {
		case isDir && got.Nlink == 1 && p.allows(AllowDirNlinkOne):
			nlinkAllowed = true
		case !isDir && ref.Nlink == 0 && got.Nlink == 1 && p.allows(AllowUnlinkedNlink):
			nlinkAllowed = true
		default:
			diffs = append(diffs, fmt.Sprintf("nlink %d, want %d", got.Nlink, ref.Nlink))
		}
	}
	if len(diffs) == 0 && nlinkAllowed {
		return []string{allowedNlink}
	}
	return diffs
}

// sameTime compares times the way the roots can agree on them: times
// set explicitly (before ExplicitTimeLimit) exactly, times the
// filesystem set ("now") only as being such.
func sameTime(ref, got int64) bool {
	if isExplicit(ref) || isExplicit(got) {
		return ref == got
	}
	return true
}

// CompareSnapshots lists the differences of got (taken on a root with
// profile p, named name) from the reference snapshot ref.
func CompareSnapshots(ref, got *Snapshot, p *Profile, name string) []Diff {
	var diffs []Diff
	add := func(sig, format string, args ...any) {
		diffs = append(diffs, Diff{Sig: "tree:" + sig, Text: shortName(fmt.Sprintf(format, args...))})
	}
	for _, prob := range got.Problems {
		add("consistency", "%s: %s", name, prob)
	}
	refGroups, gotGroups := ref.linkGroups(), got.linkGroups()
	for _, path := range sortedKeys(ref.Nodes) {
		r := ref.Nodes[path]
		g, ok := got.Nodes[path]
		if !ok {
			add("missing", "%q: missing on %s (reference: %s)", path, name, modeString(r.Stat.Mode))
			continue
		}
		if path != "" && g.DIno != g.Ino {
			if g.Stat.Mode&unix.S_IFMT == unix.S_IFDIR || !p.allows(AllowDinoHardlink) {
				add("consistency", "%s: %q: d_ino %d, st_ino %d", name, path, g.DIno, g.Ino)
			}
		}
		for _, d := range compareStat(&r.Stat, &g.Stat, p) {
			if d != allowedNlink {
				field, _, _ := strings.Cut(d, " ")
				add("stat:"+field, "%q: %s on %s", path, d, name)
			}
		}
		if r.Content != g.Content {
			add("content", "%q: content on %s differs: %s", path, name, contentDiff(r.Content, g.Content))
		}
		if r.Target != g.Target {
			add("symlink", "%q: symlink target %q on %s, want %q", path, g.Target, name, r.Target)
		}
		for _, x := range sortedKeys(r.Xattrs) {
			if v, ok := g.Xattrs[x]; !ok {
				add("xattr", "%q: xattr %s missing on %s", path, x, name)
			} else if v != r.Xattrs[x] {
				add("xattr", "%q: xattr %s = %q on %s, want %q", path, x, abbrev(v), name, abbrev(r.Xattrs[x]))
			}
		}
		for _, x := range sortedKeys(g.Xattrs) {
			if _, ok := r.Xattrs[x]; !ok {
				add("xattr", "%q: extra xattr %s on %s", path, x, name)
			}
		}
		if refGroups[path] != gotGroups[path] {
			add("links", "%q: shares its inode with %s on %s, want %s", path, gotGroups[path], name, refGroups[path])
		}
	}
	for _, path := range sortedKeys(got.Nodes) {
		if _, ok := ref.Nodes[path]; !ok {
			add("extra", "%q: exists on %s (%s), not in the reference", path, name, modeString(got.Nodes[path].Stat.Mode))
		}
	}
	return diffs
}

func contentDiff(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	return fmt.Sprintf("size %d, want %d; first difference at byte %d", len(got), len(want), i)
}
